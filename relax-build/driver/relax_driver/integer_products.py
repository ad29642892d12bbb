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

Only products whose operands are 8-bit values (widened, shifted by 8-bit zero points,
reshaped) are rewritten: a MatMul of int32 inputs that could hold any value stays exact
in TVM's integer loops.
"""

import numpy as np
import tvm
from tvm import relax

NARROW = ("int8", "uint8")
# Ops that keep the values of their first operand (widened or moved).
KEEPS_VALUES = ("relax.astype", "relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.permute_dims",
                "relax.broadcast_to", "relax.flatten")
PRODUCTS = ("relax.matmul", "relax.nn.conv2d", "relax.nn.conv1d")
# How far back through bindings an operand is followed.
MAX_DEPTH = 8


def dtype_of(expr):
    ty = getattr(expr, "ty", None)
    return str(ty.dtype) if isinstance(ty, relax.TensorType) else None


@relax.expr_functor.mutator
class FloatProducts(relax.PyExprMutator):
    """Rewrites the products of `in_float32` in one function."""

    def narrow(self, expr, depth=0):
        """Whether `expr` holds 8-bit values: an 8-bit tensor, one widened, reshaped or
        moved, a difference of two, or an integer constant within [-255, 255]."""
        if depth > MAX_DEPTH:
            return False
        if dtype_of(expr) in NARROW:
            return True
        if isinstance(expr, tvm.ir.Constant):
            values = expr.value.numpy()
            return values.dtype.kind in "iu" and (values.size == 0 or int(np.abs(values.astype(np.int64)).max()) <= 255)
        if isinstance(expr, relax.Var):
            bound = self.lookup_binding(expr)
            return bound is not None and self.narrow(bound, depth + 1)
        if not isinstance(expr, relax.Call) or not isinstance(expr.op, tvm.ir.Op):
            return False
        name = expr.op.name
        if name in KEEPS_VALUES:
            return self.narrow(expr.args[0], depth + 1)
        if name == "relax.subtract":
            # Both 8-bit of one signedness (a value less its zero point): at most 255
            # in magnitude.
            return all(self.narrow(arg, depth + 1) for arg in expr.args)
        return False

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in PRODUCTS:
            return call
        if dtype_of(call) != "int32" or not all(self.narrow(arg) for arg in call.args[:2]):
            return call
        a, b = (relax.op.astype(arg, "float32") for arg in call.args[:2])
        attrs = call.attrs
        if call.op.name == "relax.matmul":
            product = relax.op.matmul(a, b, out_dtype="float32")
        else:
            convolution = relax.op.nn.conv2d if call.op.name == "relax.nn.conv2d" else relax.op.nn.conv1d
            product = convolution(
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
        return relax.op.astype(relax.op.round(product), "int32")


def in_float32(ir_module):
    """`ir_module` with each int32 `matmul` or convolution of 8-bit values (see the
    module's doc) computed in float32 and rounded back to int32."""
    functions = {}
    changed = False
    for global_var, function in ir_module.functions.items():
        if isinstance(function, relax.Function):
            rewritten = FloatProducts().visit_expr(function)
            changed = changed or not rewritten.same_as(function)
            functions[global_var] = rewritten
        else:
            functions[global_var] = function
    if not changed:
        return ir_module
    return relax.transform.Normalize()(tvm.IRModule(functions, attrs=ir_module.attrs))
