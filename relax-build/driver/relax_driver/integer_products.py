"""Integer matrix products and convolutions of 8-bit values computed on relax-runtime's
float32 kernels.

ONNX's integer operators (ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul and
onnxruntime's quantizer's contrib operators) import as a `matmul` or `conv2d` of int32
operands, each an 8-bit tensor widened, less its zero point. TVM has no fast integer
kernel for them: they ran as its untuned loops (ddddocr's quantized OCR model, 21
ConvIntegers and a MatMulInteger, took 183 ms a call against onnxruntime's 3.3 ms), and
relax-runtime has no int8 kernels yet. `in_float32` computes each such product on
float32 copies of its operands instead, rounded back to int32: the offload then runs it
on the float32 kernels.

A float32 holds every integer up to 2^24 exactly. Products of 8-bit values (less their
zero points, of their own type as ONNX requires: at most 255 in magnitude) are at most 65,025, so a sum of up to 258 of
them is exact whatever the values; a longer one is exact while its partial sums stay
under 2^24 (dynamically quantized activations use most of their 8 bits, weights of a
layer rarely all their extremes), and otherwise rounded as float32 rounds, to within
6e-8 of its value: far inside the quantization's own error, which the scales then
multiply. A Winograd form of a 3x3 convolution adds float32 rounding of that order too;
the rounding back to int32 removes it while it stays under half a unit.

A constant operand (a layer's 8-bit weights less their zero point) is computed here, in
numpy, to a float32 constant: the kernels' offload then takes it as a weight, and for a
CPU that multiplies bf16 faster than float32 runs a dense layer of such products (and a
blocked convolution) on the bf16 kernels, which
hold these operands exactly (offload.py's `bf16_constant_weights` and `exact_bf16_convolutions`).

Only products whose operands are 8-bit values (widened, shifted by 8-bit zero points,
reshaped) are rewritten: a MatMul of int32 inputs that could hold any value stays exact
in TVM's integer loops.
"""

import functools

import numpy as np
import tvm
from tvm import relax

from .bindings import bindings_of, bound_value, functions_rewritten, op_name, unused_removed

NARROW = ("int8", "uint8")
# Ops that keep the values of their first operand (widened or moved).
KEEPS_VALUES = ("relax.astype", "relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.permute_dims",
                "relax.broadcast_to", "relax.flatten", "relax.layout_transform")
PRODUCTS = ("relax.matmul", "relax.nn.conv2d", "relax.nn.conv1d")
# How far back through bindings an operand is followed.
MAX_DEPTH = 8


def dtype_of(expr):
    ty = getattr(expr, "ty", None)
    return str(ty.dtype) if isinstance(ty, relax.TensorType) else None


def narrow(expr, bound, depth=0):
    """Whether `expr` holds 8-bit values: an 8-bit tensor, one widened, reshaped or moved,
    a difference of two, or an integer constant within [-255, 255]. `bound(var)` gives
    the value a variable is bound to, or None."""
    if depth > MAX_DEPTH:
        return False
    if dtype_of(expr) in NARROW:
        return True
    if isinstance(expr, tvm.ir.Constant):
        values = expr.value.numpy()
        return values.dtype.kind in "iu" and (values.size == 0 or int(np.abs(values.astype(np.int64)).max()) <= 255)
    if isinstance(expr, relax.Var):
        value = bound(expr)
        return value is not None and narrow(value, bound, depth + 1)
    if not isinstance(expr, relax.Call) or not isinstance(expr.op, tvm.ir.Op):
        return False
    name = expr.op.name
    if name in KEEPS_VALUES:
        return narrow(expr.args[0], bound, depth + 1)
    if name == "relax.subtract":
        # Both 8-bit of one signedness (a value less its zero point): at most 255 in
        # magnitude.
        return all(narrow(arg, bound, depth + 1) for arg in expr.args)
    return False


def float_copy_of_narrow(expr, bound):
    """Whether `expr` is a float32 copy of 8-bit values (`astype(narrow, "float32")`, as
    `in_float32` makes a product's operands): integers of at most 255 in magnitude, which
    bf16 holds exactly."""
    if isinstance(expr, relax.Var):
        value = bound(expr)
        return value is not None and float_copy_of_narrow(value, bound)
    if op_name(expr) in ("relax.layout_transform", "relax.reshape", "relax.permute_dims"):
        # Moved (a channel-blocked layout pads with zeros).
        return float_copy_of_narrow(expr.args[0], bound)
    if rounded_within(expr, bound, 255):
        return True
    return (
        isinstance(expr, relax.Call)
        and isinstance(expr.op, tvm.ir.Op)
        and expr.op.name == "relax.astype"
        and dtype_of(expr) == "float32"
        and narrow(expr.args[0], bound)
    )


def rounded_within(expr, bound, limit):
    """Whether `expr` is `clip(round(x), low, high)` in float32 (or `minimum(maximum(...))`,
    as the channel-blocked layout leaves it), with integer bounds of at most `limit` in
    magnitude: 8-bit values less their zero point, as `less_zero_point` writes them."""
    if dtype_of(expr) != "float32":
        return False

    def value(expr):
        return bound(expr) if isinstance(expr, relax.Var) else expr

    def integer_bound(expr):
        if isinstance(expr, tvm.ir.Constant):
            data = expr.value.numpy()
            number = float(data.reshape(-1)[0]) if data.size == 1 else None
        else:
            number = getattr(getattr(expr, "value", None), "value", None)
        return isinstance(number, (int, float)) and float(number).is_integer() and abs(number) <= limit

    if op_name(expr) == "relax.clip":
        rounded, bounds = expr.args[0], expr.args[1:3]
    elif op_name(expr) == "relax.minimum" and op_name(value(expr.args[0])) == "relax.maximum":
        lower = value(expr.args[0])
        rounded, bounds = lower.args[0], [lower.args[1], expr.args[1]]
    else:
        return False
    return op_name(value(rounded)) == "relax.round" and all(integer_bound(b) for b in bounds)


def less_zero_point(data, zero, original, visit):
    """`data` (8-bit values) less their zero point `zero`, in float32. When `data` is the
    `quantize` of `x` by one scale and that zero point (`original(var)` gives a variable's
    binding before the rewrite, `visit` the rewritten `x`), that is `clip(round(x / s),
    low - zero, high - zero)` (the 8-bit type's bounds): the same integers, exactly,
    without the round trip through 8 bits, and what a convolution kernel's epilogue
    computes (offload.py folds it into the layer that computes `x`)."""
    value = original(data) if isinstance(data, relax.Var) else None
    if op_name(value) == "relax.quantize" and dtype_of(value) == dtype_of(data) and len(value.args) >= 3:
        scale, zero_point = (constant_value(arg, original) for arg in value.args[1:3])
        x = value.args[0]
        if (
            scale is not None
            and zero_point is not None
            and scale.size == 1
            and zero_point.size == 1
            and scale.dtype == np.float32
            and int(zero_point.reshape(-1)[0]) == zero
            and dtype_of(x) == "float32"
        ):
            low, high = np.iinfo(dtype_of(data)).min, np.iinfo(dtype_of(data)).max
            divided = relax.op.divide(visit(x), relax.const(np.float32(scale.reshape(-1)[0])))
            return relax.op.clip(relax.op.round(divided), int(low) - zero, int(high) - zero)
    shifted = relax.op.subtract(relax.op.astype(data, "int32"), relax.const(np.int32(zero)))
    return relax.op.astype(shifted, "float32")


def constant_value(expr, bound, depth=0):
    """The value (numpy) of `expr` where it is computed from constants by the ops that
    narrow values pass through (widened, less a zero point, reshaped or moved), else
    None. TVM's FoldConstant leaves such a chain be: it folds no op whose result is larger
    than its operands, and a widened weight is 4 times its 8-bit self."""
    if depth > MAX_DEPTH or dtype_of(expr) is None:
        return None
    if isinstance(expr, tvm.ir.Constant):
        return expr.value.numpy()
    if isinstance(expr, relax.Var):
        value = bound(expr)
        return None if value is None else constant_value(value, bound, depth)
    if not isinstance(expr, relax.Call) or not isinstance(expr.op, tvm.ir.Op):
        return None
    tensors = [arg for arg in expr.args if dtype_of(arg) is not None]
    operands = [constant_value(arg, bound, depth + 1) for arg in tensors]
    if not operands or any(operand is None for operand in operands):
        return None
    name, attrs = expr.op.name, expr.attrs
    if name == "relax.astype":
        return operands[0].astype(str(attrs.dtype))
    if name == "relax.subtract" and len(operands) == 2:
        return (operands[0] - operands[1]).astype(dtype_of(expr))
    if name == "relax.permute_dims":
        axes = None if attrs.axes is None else [int(axis) for axis in attrs.axes]
        return np.transpose(operands[0], axes)
    if name == "relax.reshape":
        dims = getattr(expr.ty, "shape", None)
        static = [int(d) for d in dims] if dims is not None and all(isinstance(d, tvm.tirx.IntImm) for d in dims) else None
        return None if static is None else operands[0].reshape(static)
    return None


@relax.expr_functor.mutator
class FloatProducts(relax.PyExprMutator):
    """Rewrites the products of `in_float32` in one function."""

    def __init__(self, bindings):
        super().__init__()
        self.bound = functools.partial(bound_value, self, bindings)
        self.original = bindings.get

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in PRODUCTS:
            return call
        if dtype_of(call) == "float32":
            rewritten = self.dequantized_product(call)
            return call if rewritten is None else rewritten
        if dtype_of(call) != "int32" or not all(narrow(arg, self.bound) for arg in call.args[:2]):
            return call
        # A constant operand (a layer's 8-bit weights less their zero point) becomes a
        # float32 constant, which the kernels' offload takes as a weight.
        a, b = (
            relax.op.astype(arg, "float32") if (value := constant_value(arg, self.bound)) is None
            else relax.const(value.astype("float32"))
            for arg in call.args[:2]
        )
        return relax.op.astype(relax.op.round(same_product(call, a, b)), "int32")

    def dequantized_product(self, call):
        """A float32 product of a dequantized activation (one scale) by a dequantized
        constant weight (a scale per output channel or one), as the QDQ format writes a
        quantized layer, computed on the 8-bit values less their zero points and scaled
        after: `conv(s_x (x - zx), s_w (w - zw)) = s_x s_w conv(x - zx, w - zw)`, as
        onnxruntime's integer kernels compute it. The weight's integers become a float32
        constant here; or None."""
        activation = self.dequantized(call.args[0])
        if activation is None or activation[1].size != 1:
            return None
        weight = self.dequantized(call.args[1], constant=True)
        if weight is None:
            return None
        integers, weight_scales = weight
        if call.op.name == "relax.matmul":
            # One scale per column of a [K, N] weight.
            if integers.ndim != 2 or not np.all(weight_scales == weight_scales[:1]):
                return None
            scales, shape = weight_scales[0], [integers.shape[1]]
        else:
            # One scale per filter of an OIHW kernel.
            filters = integers.shape[0]
            if not np.all(weight_scales == weight_scales.reshape(filters, -1)[:, :1].reshape(-1, *[1] * (integers.ndim - 1))):
                return None
            scales = weight_scales.reshape(filters, -1)[:, 0]
            shape = [1, filters] + [1] * (integers.ndim - 2)
        x, activation_scale = activation
        product = same_product(call, x, relax.const(integers.astype("float32")))
        combined = (scales.astype(np.float64) * float(activation_scale.reshape(-1)[0])).astype("float32")
        return relax.op.multiply(product, relax.const(combined.reshape(shape)))

    def dequantized(self, expr, constant=False):
        """For `expr` a `dequantize` of 8-bit values by constant scales and zero points (and
        for `constant`, of constant values, through a `permute_dims` too): (the values less
        their zero point, as a float32 expression (`less_zero_point`) or for `constant` a
        numpy int32 array; the
        scales, broadcast to the values' shape for `constant`, else as given); or None."""
        value = self.bound(expr) if isinstance(expr, relax.Var) else expr
        permuted, axes = False, None
        if constant and op_name(value) == "relax.permute_dims":
            permuted = True
            axes = None if value.attrs.axes is None else [int(axis) for axis in value.attrs.axes]
            inner = value.args[0]
            value = self.bound(inner) if isinstance(inner, relax.Var) else inner
        if op_name(value) != "relax.dequantize" or dtype_of(value) != "float32":
            return None
        data, scale, zero_point = value.args[:3]
        if dtype_of(data) not in NARROW:
            return None
        scale = constant_value(scale, self.bound)
        zero_point = constant_value(zero_point, self.bound) if len(value.args) > 2 else None
        if scale is None or zero_point is None or scale.dtype != np.float32 or zero_point.dtype.kind not in "iu":
            return None
        if not constant:
            if zero_point.size != 1:
                return None
            zero = int(zero_point.reshape(-1)[0])
            return less_zero_point(data, zero, self.original, self.visit_expr), scale
        values = constant_value(data, self.bound)
        if values is None:
            return None
        axis = int(value.attrs.axis)
        rank = values.ndim
        axis = axis + rank if axis < 0 else axis

        def along_axis(parameter):
            if parameter.size == 1:
                return np.broadcast_to(parameter.reshape([1] * rank), values.shape)
            shape = [1] * rank
            shape[axis] = parameter.size
            return np.broadcast_to(parameter.reshape(shape), values.shape)

        integers = values.astype(np.int32) - along_axis(zero_point).astype(np.int32)
        scales = along_axis(scale)
        if permuted:
            integers, scales = np.transpose(integers, axes), np.transpose(scales, axes)
        return np.ascontiguousarray(integers), np.ascontiguousarray(scales)


def same_product(call, a, b):
    """`call` (a matmul or convolution) of `a` and `b` instead, in float32."""
    attrs = call.attrs
    if call.op.name == "relax.matmul":
        return relax.op.matmul(a, b, out_dtype="float32")
    convolution = relax.op.nn.conv2d if call.op.name == "relax.nn.conv2d" else relax.op.nn.conv1d
    return convolution(
        a,
        b,
        strides=attrs.strides,
        padding=attrs.padding,
        dilation=attrs.dilation,
        groups=int(attrs.groups),
        data_layout=attrs.data_layout,
        kernel_layout=attrs.kernel_layout,
        out_layout=attrs.out_layout,
        out_dtype="float32",
    )


@relax.expr_functor.mutator
class ElementwiseQuantization(relax.PyExprMutator):
    """`quantize` and `dequantize` by one scale and zero point (per tensor, constants)
    written as the elementwise ops TVM's own lowering computes, so that the channel-blocked
    layout (blocked_layout.py: TVM's ConvertLayout, which does not know the quantization
    ops and would move every one back and forth) goes through them:
    `clip(round(x / s) + z, lo, hi)` cast to the 8-bit type, and `(q - z) * s`."""

    def __init__(self, bindings):
        super().__init__()
        self.bound = functools.partial(bound_value, self, bindings)
        self.original = bindings.get

    def visit_call_(self, call):
        call = super().visit_call_(call)
        name = op_name(call)
        if name not in ("relax.quantize", "relax.dequantize") or len(call.args) < 3:
            return call
        scale, zero_point = (constant_value(arg, self.bound) for arg in call.args[1:3])
        if scale is None or zero_point is None or scale.size != 1 or zero_point.size != 1:
            return call
        if scale.dtype != np.float32 or zero_point.dtype.kind not in "iu":
            return call
        data = call.args[0]
        scale = relax.const(np.float32(scale.reshape(-1)[0]))
        zero = zero_point.reshape(-1)[0]
        if name == "relax.quantize":
            out_dtype = dtype_of(call)
            if out_dtype not in NARROW or dtype_of(data) != "float32":
                return call
            low, high = np.iinfo(out_dtype).min, np.iinfo(out_dtype).max
            shifted = relax.op.add(relax.op.round(relax.op.divide(data, scale)), relax.const(np.float32(zero)))
            return relax.op.astype(relax.op.clip(shifted, int(low), int(high)), out_dtype)
        if dtype_of(call) != "float32" or dtype_of(data) not in NARROW:
            return call
        return relax.op.multiply(less_zero_point(data, int(zero), self.original, self.visit_expr), scale)


def in_float32(ir_module):
    """`ir_module` with each int32 `matmul` or convolution of 8-bit values (see the
    module's doc) computed in float32 and rounded back to int32, each QDQ layer's product
    on its 8-bit values, and per-tensor quantization as elementwise ops."""

    def rewrite(function):
        rewritten = FloatProducts(bindings_of(function)).visit_expr(function)
        rewritten = ElementwiseQuantization(bindings_of(rewritten)).visit_expr(rewritten)
        # The dequantized weights the products no longer read go.
        return unused_removed(function, rewritten)

    rewritten = functions_rewritten(ir_module, rewrite)
    return ir_module if rewritten is ir_module else relax.transform.Normalize()(rewritten)
