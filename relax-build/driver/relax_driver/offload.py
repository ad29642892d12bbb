"""Offloading matmuls, convolutions, softmax and layer norm to relax-runtime's kernels.

Before TVM lowers a model, the float32 matrix multiplications, 2-D convolutions, softmax
(along the last axis, with an additive mask before it), layer norms (along the last
axis), sums, means, maxima or minima over trailing axes and nearest or bilinear resizes (NCHW or
blocked) of every Relax function are rewritten into
`R.call_dps_packed("relax_runtime.<kernel>", ...)`, together with what follows them when nothing else uses the intermediate value: a
bias add, a batch norm, a constant scale, an activation. relax-runtime registers those
functions when it loads TVM's runtime (its `kernels` module documents each kernel's
arguments); they run on the `gemm` crate, with symbolic shapes, on TVM's thread pool.
Whatever is not rewritten (other dtypes, layouts, ranks) stays with TVM.

The rewrite walks each dataflow block's bindings in order, looking through the variables
it binds: `y = matmul(x, t)` with `t = permute_dims(w)` becomes a dense kernel call, and a
following `z = add(y, bias)` (when `y` has no other use) folds the bias into that call.
An add of a tensor of the output's own shape (a residual connection) folds too, into the
kernel's `_add` variant, which takes that tensor as its last input, and so does an
activation after it: ReLU, GELU, and ReLU6, also as `max(y, 0)` then `min(that, 6)` or
`clip(y, 0, 6)` (ONNX's importer writes Clip as call_tirs of max and min PrimFuncs
against 0-d bounds), SiLU (`y * sigmoid(y)`), hard-swish (`y * (clip(y + 3, 0, 6) /
6)`, as TVM imports ONNX's HardSwish and PyTorch's) and hard-sigmoid (`clip(a * y + 0.5,
0, 1)` with ONNX's default `a` of 0.2 or PyTorch's 1/6: a squeeze-excitation's gate).
Bindings left unused are removed afterwards.

A weight (a parameter bound at load time) used only as a dense layer's weight (`[in,
out]`, or `[out, in]` taken transposed, as `nn.Linear` stores it) is taken packed in
column panels, `[ceil(out / 64), in, 64]`: the signature marks it `"layout": "panels"`
(or `"transposed_panels"`) with its `"columns"`, relax-runtime packs it once, when it
loads the weights, and the dense kernel streams the panels without packing them on
every call.

With `precision = "bf16"` (the request's `"precision"`), such a weight is taken packed in
panels of bf16 pairs instead, `[ceil(out / 64), ceil(in / 2), 64]` (`"layout":
"bf16_panels"` or `"bf16_transposed_panels"`), and its calls go to the bf16 dense kernels
(`relax_runtime.dense_bf16`, `_bias`, `_add`, `_bias_add`: the same arguments), which
round `x` to bf16 and sum in float32. A constant weight (a small model's embedded
initializers) is packed so here, once. A dense layer whose weight is computed, or a
parameter used otherwise too, stays float32, as does everything else.

Whatever the precision, for a CPU that multiplies bf16 faster than float32 (the
request's `"fast_bf16"`: AMX-BF16's tiles, or AVX512-BF16 on AMD's cores), a dense layer computing integer products of 8-bit values
(integer_products.py: a quantized model's `MatMulInteger`, say) with a constant weight
goes to the bf16 kernels too: bf16 holds both operands exactly, so the result is the
float32 one, from half the weight bytes (see `bf16_constant_weights`); so does a blocked
convolution of such values (a QDQ model's layer, see `exact_bf16_convolutions`). Such a
layer's scales per filter, its bias, a ReLU and the quantization of its output (`min(max(
round(y / s), low), high)`, integer_products.py's `less_zero_point`) fold into the
convolution as `conv2d_bn`'s scale and shift (mean 0, variance 1) and the quantizing
epilogue (`quantize_code`), so that no elementwise pass over the output is left: a fifth
of a QDQ ResNet-50's time.

Likewise a weight used only as the kernel of 3x3 convolutions with stride 1 (no dilation,
one group) that a Winograd variant computes best (see `winograd_tile`) is taken as its
Winograd transform: `[36, in, out]` for F(4x4, 3x3) (`"layout": "winograd4"`, 4 times
fewer multiply-adds) or `[16, in, out]` for F(2x2, 3x3) (`"layout": "winograd"`, 2.25
times fewer), computed by relax-runtime when it loads the weights. And a weight used only
as the kernel of convolutions onto small planes (one group, see `takes_filter_panels`) is
taken packed in filter panels, `[ceil(out / 64), in, kh, kw, 64]` (`"layout":
"filter_panels"`, with its `"columns"`: the filters).

A convolution on channel-blocked tensors (`[N, C/16, H, W, 16]`, which blocked_layout.py
gives CNNs before this rewrite) takes its kernel in filter panels too: a weight packed at
load, a constant packed here; its bias comes through ConvertLayout's transform of the
`[1, O, 1, 1]` bias. A depthwise one takes its OIHW kernel (`[C, 1, KH, KW]`) as it
is. A weight used only as the kernel of blocked 3x3 convolutions with stride 1 that a
Winograd variant computes best (see `blocked_winograd_tile`) is taken as that transform
instead, in panels of 64 filters: `[36, ceil(out / 64), in, 64]` for
F(4x4, 3x3) (`"layout": "blocked_winograd4"`) or `[16, ceil(out / 64), in, 64]` for
F(2x2, 3x3) (`"layout": "blocked_winograd"`), with its `"columns"`: the filters.

With `precision = "bf16"`, the kernel of a blocked convolution that the direct blocked
kernel computes (not one Winograd computes faster) is taken in filter panels of bf16
pairs, `[ceil(out / 64), ceil(in / 2), kh, kw, 64]` (`"layout": "bf16_filter_panels"`,
with its `"columns"` and `"depth"`: the filters and channels), and its calls go to the
bf16 blocked kernels (`relax_runtime.conv2d_bf16`, `_bias`, `_bn`, `_add`, ...: the same
arguments; see `bf16_filter_panel_weights`).
"""

import math

import numpy as np

import tvm
from tvm import relax, sym

from .bindings import bindings_of, op_name, rewritten_body, rewritten_function

# Activation op -> the kernels' epilogue code.
EPILOGUE = {"relax.nn.relu": 1, "relax.nn.gelu": 2, "relax.nn.gelu_tanh": 3, "relax.nn.relu6": 4, "relax.nn.silu": 5}
RELU, RELU6, SILU, HARD_SWISH, HARD_SIGMOID, HARD_SIGMOID_SIXTH = 1, 4, 5, 6, 7, 8
# The epilogues a convolution folds in.
CONV_EPILOGUES = (RELU, RELU6, SILU, HARD_SWISH, HARD_SIGMOID, HARD_SIGMOID_SIXTH)
# The first code of the epilogue `min(max(round(x), low), high)` (relax-kernels'
# `Epilogue::Quantize`: an output quantized to 8 bits, less its zero point); its bounds
# take the low 32 bits (see `quantize_code`).
QUANTIZE_CODES = 1 << 32
# HardSigmoid's slopes the kernels have an epilogue for (`clip(slope * x + 0.5, 0, 1)`):
# ONNX's default and PyTorch's 1/6, matched within 1e-6 (PaddlePaddle writes 1/6 as
# 0.1666667).
HARD_SIGMOID_SLOPES = {HARD_SIGMOID: 0.2, HARD_SIGMOID_SIXTH: 1.0 / 6.0}


def tensor_type(expr):
    ty = getattr(expr, "ty", None)
    return ty if isinstance(ty, relax.TensorType) else None


def is_float32(*exprs):
    return all(tensor_type(e) is not None and tensor_type(e).dtype == "float32" for e in exprs)


def rank(expr):
    ty = tensor_type(expr)
    return ty.ndim if ty is not None else -1


def dims(expr):
    return dims_of_type(tensor_type(expr))


def dims_of_type(ty):
    """The dims of a tensor type, or None when it is not one or has no known shape."""
    if not isinstance(ty, relax.TensorType) or ty.shape is None or not hasattr(ty.shape, "values"):
        return None
    return list(ty.shape.values)


def static_ints(values):
    """`values` (dims) as ints, or None when there are none or one is symbolic."""
    ints = [getattr(value, "value", None) for value in values or [None]]
    return ints if all(isinstance(value, int) for value in ints) else None


def provably_equal(a, b):
    return sym.Analyzer().can_prove_equal(a, b)


def packed_name(expr):
    if op_name(expr) == "relax.call_dps_packed" and isinstance(expr.args[0], relax.ExternFunc):
        return str(expr.args[0].global_symbol)
    return None


def kernel_call(binding):
    """The kernel name and arguments (a list) of a binding calling a relax-runtime kernel
    with a tuple of arguments, or (None, None)."""
    value = binding.value
    name = packed_name(value)
    if name is None or not isinstance(value.args[1], relax.Tuple):
        return None, None
    return name, list(value.args[1].fields)


def packed(name, args, out_type):
    return relax.call_dps_packed(relax.ExternFunc(name), args, out_ty=out_type)


DENSE = ("relax_runtime.dense", "relax_runtime.dense_bias")
CONV = ("relax_runtime.conv2d", "relax_runtime.conv2d_bias", "relax_runtime.conv2d_bn")
# Transposed convolutions take every epilogue (applied to each output plane at its end).
CONV_TRANSPOSE = ("relax_runtime.conv2d_transpose", "relax_runtime.conv2d_transpose_bias")
RESIDUAL = "_add"
# relax-runtime's direct sums (`kernels::direct`) take a convolution of one group from
# fewer input channels than a block (16) onto a blocked output whose rows are at least
# this wide (on x86-64, where the blocked layout is used; `MIN_BLOCKED_WIDTH` there):
# a keyword spotter's stem has rows of 5.
DIRECT_MIN_WIDTH = 3


def constant_vector(expr):
    """The values (numpy) of a constant, else None."""
    return expr.value.numpy() if isinstance(expr, tvm.ir.Constant) else None


def quantized_output(expr, values):
    """Whether `expr` is (a variable bound to) a kernel call whose epilogue quantizes to
    integers of at most 255 in magnitude (8-bit values less their zero point)."""
    value = values.get(expr) if isinstance(expr, relax.Var) else None
    name = packed_name(value)
    if name is None or not isinstance(value.args[1], relax.Tuple):
        return False
    code = value.args[1].fields[epilogue_index(name)]
    number = prim_float(code)
    bounds = None if number is None else quantize_bounds(int(number))
    return bounds is not None and all(abs(bound) <= 255 for bound in bounds)


def quantize_code(low, high):
    """The epilogue code of `min(max(round(x), low), high)` (integer bounds)."""
    return QUANTIZE_CODES + ((low + (1 << 15)) << 16) + (high + (1 << 15))


def quantize_bounds(code):
    """The bounds of a quantizing epilogue's `code`, or None for another epilogue."""
    if not QUANTIZE_CODES <= code < 2 * QUANTIZE_CODES:
        return None
    bounds = code - QUANTIZE_CODES
    return (bounds >> 16) - (1 << 15), (bounds & 0xFFFF) - (1 << 15)


def with_residual(name):
    """Whether a kernel takes a residual (its name ends in `_add`)."""
    return name.endswith(RESIDUAL)


def epilogue_index(name):
    """The position of the epilogue code in a dense or conv kernel's arguments (the last,
    or before the residual)."""
    return -2 if with_residual(name) else -1


def conv_settings(attrs):
    """A (transposed) convolution's strides, padding (top, left, bottom, right), dilation
    and groups, as the kernels' integer arguments."""
    padding = [int(p) for p in attrs.padding]
    if len(padding) == 2:
        padding = [padding[0], padding[1], padding[0], padding[1]]
    settings = [int(s) for s in attrs.strides] + padding + [int(d) for d in attrs.dilation] + [int(attrs.groups)]
    return [int_value(value) for value in settings]


def int_value(value):
    return relax.expr.prim_value(int(value))


def float_value(value):
    return relax.expr.prim_value(float(value))


def prim_float(value):
    """A clip bound's float (an immediate, or a PrimValue of one), or None."""
    inner = value if isinstance(value, (tvm.tirx.FloatImm, tvm.tirx.IntImm)) else getattr(value, "value", None)
    return float(inner.value) if isinstance(inner, (tvm.tirx.FloatImm, tvm.tirx.IntImm)) else None


def scalar_constant(expr):
    """The value of a float32 constant with one element, or None."""
    if not isinstance(expr, tvm.ir.Constant):
        return None
    data = expr.value.numpy()
    if data.size != 1 or str(data.dtype) != "float32":
        return None
    return float(data.reshape(()))


def only_store(function):
    """The one BufferStore of a PrimFunc made of nested blocks and loops, or None."""
    stmt = function.body
    while not isinstance(stmt, tvm.tirx.BufferStore):
        if getattr(stmt, "init", None) is not None or isinstance(stmt, tvm.tirx.SeqStmt):
            return None
        if hasattr(stmt, "block"):
            stmt = stmt.block
        elif hasattr(stmt, "body"):
            stmt = stmt.body
        else:
            return None
    return stmt


def extremum_with_scalar(function):
    """"max" or "min" when `function` is `out[i] = max(a[i], b[()])` (or min) of its
    three parameters (ONNX's importer writes Clip's bounds so), else None."""
    if not isinstance(function, tvm.tirx.PrimFunc) or len(function.params) != 3:
        return None
    store = only_store(function)
    if store is None:
        return None
    a, b, out = function.params
    kind = {tvm.tirx.Max: "max", tvm.tirx.Min: "min"}.get(type(store.value))
    if kind is None or not store.buffer.same_as(out):
        return None
    left, right = store.value.a, store.value.b
    loads = isinstance(left, tvm.ir.expr.TensorLoad) and isinstance(right, tvm.ir.expr.TensorLoad)
    if not loads or not left.source.same_as(a) or not right.source.same_as(b) or len(right.indices) != 0:
        return None
    same_indices = len(left.indices) == len(store.indices) and all(
        x.same_as(y) for x, y in zip(left.indices, store.indices)
    )
    return kind if same_indices else None


def swaps_last_two(permute, ndim):
    """Whether `permute_dims(b, axes)` swaps the last two axes of a rank-`ndim` tensor."""
    axes = permute.attrs.axes
    if axes is None:
        return ndim == 2
    return [int(a) for a in axes] == list(range(ndim - 2)) + [ndim - 1, ndim - 2]


# Reductions relax_runtime.reduce_trailing computes, by its `kind` code.
REDUCTION_KINDS = {"relax.sum": 0, "relax.mean": 1, "relax.max": 2, "relax.min": 3}

# TVM's resize2d attributes -> relax-runtime's `resize2d` codes.
RESIZE_METHODS = {"nearest_neighbor": 0, "linear": 1}
RESIZE_COORDINATES = {
    "half_pixel": 0,
    "align_corners": 1,
    "asymmetric": 2,
    "pytorch_half_pixel": 3,
    "tf_half_pixel_for_nn": 4,
}
RESIZE_ROUNDING = {"round": 0, "floor": 1, "ceil": 2, "round_prefer_floor": 3, "round_prefer_ceil": 4}


def resize2d(call):
    """TVM's `image.resize2d` of a float32 NCHW or blocked tensor, nearest or bilinear,
    as relax-runtime's kernel (TVM's loops work out every output value's coordinates: 2.4
    ms a call for one FPN level of a detector), or None. The output size is the call's."""
    x = call.args[0]
    attrs = call.attrs
    method = RESIZE_METHODS.get(str(attrs.method))
    mode = str(attrs.coordinate_transformation_mode)
    rounding = str(attrs.rounding_method)
    if rounding == "":
        # TVM's default for nearest sampling.
        rounding = "round" if mode == "align_corners" else "floor"
    layouts = {"NCHW": 4, "NCHW16c": 5}
    if (
        method is None
        or mode not in RESIZE_COORDINATES
        or (method == RESIZE_METHODS["nearest_neighbor"] and rounding not in RESIZE_ROUNDING)
        or layouts.get(str(attrs.layout)) != rank(x)
        or rank(call) != rank(x)
        or (attrs.out_dtype is not None and str(attrs.out_dtype) not in ("", "float32"))
        or not is_float32(x, call)
    ):
        return None
    codes = [method, RESIZE_COORDINATES[mode], RESIZE_ROUNDING.get(rounding, 0)]
    return packed("relax_runtime.resize2d", [x] + [int_value(code) for code in codes], call.ty)


class Block:
    """One dataflow block being rewritten: what each variable is bound to (as rewritten
    so far) and how often each is used in the whole function."""

    def __init__(self, uses, module):
        self.uses = uses
        self.module = module
        self.values = {}

    def value_of(self, expr):
        """The value a variable is bound to in this block (or None)."""
        return self.values.get(expr) if isinstance(expr, relax.Var) else None

    def single_use(self, var):
        return isinstance(var, relax.DataflowVar) and self.uses.get(var, 0) == 1

    def transposed_operand(self, expr, ndim):
        """`b` when `expr` is bound to `permute_dims(b)` swapping the last two axes."""
        bound = self.value_of(expr)
        if op_name(bound) == "relax.permute_dims" and swaps_last_two(bound, ndim):
            return bound.args[0]
        return None

    def rewrite(self, value):
        """The kernel call replacing `value`, or None."""
        name = op_name(value)
        if name == "relax.matmul":
            return self.matmul(value)
        if name == "relax.nn.conv2d":
            return self.conv2d(value)
        if name == "relax.nn.conv2d_transpose":
            return self.conv2d_transpose(value)
        if name == "relax.image.resize2d":
            return resize2d(value)
        if name == "relax.nn.softmax":
            return self.softmax(value)
        if name == "relax.nn.layer_norm":
            return self.layer_norm(value)
        if name in REDUCTION_KINDS:
            return self.reduce_trailing(value, REDUCTION_KINDS[name])
        if name == "relax.multiply":
            for activation in (self.silu, self.hard_swish):
                folded = activation(value)
                if folded is not None:
                    return folded
        if name in ("relax.add", "relax.multiply", "relax.divide") or name in EPILOGUE:
            return self.fold(value, name)
        if name in ("relax.minimum", "relax.clip"):
            for epilogue in (self.quantized, self.hard_sigmoid):
                folded = epilogue(value)
                if folded is not None:
                    return folded
        if name in ("relax.maximum", "relax.minimum", "relax.clip", "relax.call_tir"):
            return self.clamp(value, name)
        if name == "relax.layout_transform":
            return self.stem_onto_blocks(value)
        if isinstance(value, tvm.ir.TupleGetItem):
            return self.batch_norm(value)
        return None

    def matmul(self, call):
        a, b = call.args
        if not is_float32(a, b, call):
            return None
        ra, rb = rank(a), rank(b)
        transposed_2d = self.transposed_operand(b, 2) if rb == 2 else None
        if rb == 2 and ra >= 1:
            weight = transposed_2d if transposed_2d is not None else b
            if rank(weight) != 2:
                return None
            args = [a, weight, int_value(transposed_2d is not None), int_value(0)]
            return packed("relax_runtime.dense", args, call.ty)
        if ra >= 3 and rb == ra:
            transposed = self.transposed_operand(b, rb)
            other = transposed if transposed is not None else b
            da, db = dims(a), dims(other)
            if da is None or db is None or not all(provably_equal(x, y) for x, y in zip(da[:-2], db[:-2])):
                return None
            args = [a, other, int_value(transposed is not None), float_value(1.0)]
            return packed("relax_runtime.batch_matmul", args, call.ty)
        return None

    def conv2d(self, call):
        x, w = call.args
        attrs = call.attrs
        blocked = attrs.data_layout == "NCHW16c"
        if blocked and attrs.kernel_layout == "OIHW16o":
            # A depthwise convolution on blocked tensors: the kernel takes the OIHW weight
            # ConvertLayout transformed.
            w = self.blocked_depthwise_kernel(w)
            if w is None or rank(x) != 5 or attrs.out_layout not in ("NCHW16c", "") or int(attrs.groups) == 1:
                return None
        elif blocked:
            # On blocked tensors (see blocked_layout.py): the kernel is ConvertLayout's
            # layout_transform of an OIHW weight, which relax-runtime takes in filter
            # panels instead (packed at load, or here for a constant).
            w = self.blocked_kernel(w, attrs)
            if w is None or rank(x) != 5 or attrs.out_layout not in ("NCHW16c", "") or int(attrs.groups) != 1:
                return None
        elif attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW" or attrs.out_layout not in ("NCHW", ""):
            return None
        if not is_float32(x, w, call) or rank(x) != (5 if blocked else 4) or rank(w) not in (4, 5):
            return None
        return packed("relax_runtime.conv2d", [x, w] + conv_settings(attrs) + [int_value(0)], call.ty)

    def conv2d_transpose(self, call):
        """ONNX's ConvTranspose (NCHW, its kernel `[C, F / groups, KH, KW]`) to the
        kernel; the output padding is in the call's output shape."""
        x, w = call.args
        attrs = call.attrs
        layouts = (attrs.data_layout, attrs.kernel_layout, attrs.out_layout)
        if layouts not in (("NCHW", "IOHW", "NCHW"), ("NCHW", "IOHW", "")):
            return None
        if not is_float32(x, w, call) or rank(x) != 4 or rank(w) != 4 or rank(call) != 4:
            return None
        return packed("relax_runtime.conv2d_transpose", [x, w] + conv_settings(attrs) + [int_value(0)], call.ty)

    def stem_onto_blocks(self, transform):
        """The convolution kernel call whose NCHW output only `transform` reads, when that
        is its transform to blocks, onto the blocked output directly: a network's stem, or
        a layer after a few NCHW ones (ConvertLayout leaves NCHW a convolution of fewer
        channels than a block, an image's 3 or a DBNet's 8), which relax-runtime's direct
        sums store blocked (`kernels::direct`); else None. MobileNetV2's stem took 129 us
        a call and its transform 26 more; a DBNet's 1x1 layer of 8 to 32 channels over
        240x320 637 us and its transform 460 (profiled)."""
        if not blocked_transform(transform) or rank(transform) != 5:
            return None
        kernel = self.kernel_of(transform.args[0])
        name = packed_name(kernel)
        if name not in CONV:
            return None
        args = list(kernel.args[1].fields)
        x, w = args[0], args[1]
        w_dims = static_ints(dims(w))
        if rank(x) != 4 or w_dims is None or len(w_dims) != 4:
            return None
        filters, channels = w_dims[0], w_dims[1]
        groups = int(args[len(args) + epilogue_index(name) - 1].value)
        width = static_ints(dims(transform)[3:4])
        if (
            groups != 1
            or channels >= BLOCK
            or filters % BLOCK
            or (width is not None and width[0] < DIRECT_MIN_WIDTH)
        ):
            return None
        return packed(name, args, transform.ty)

    def blocked_kernel(self, w, attrs):
        """The OIHW weight whose `layout_transform` to OIHW16i16o `w` is (a constant packed
        in filter panels now), or None."""
        if attrs.kernel_layout != "OIHW16i16o":
            return None
        transform = self.value_of(w)
        if op_name(transform) != "relax.layout_transform":
            return None
        weight = transform.args[0]
        weight_dims = static_ints(dims(weight))
        if weight_dims is None or len(weight_dims) != 4 or not is_float32(weight):
            return None
        if isinstance(weight, tvm.ir.Constant):
            return relax.const(filter_panels_of(weight.value.numpy()))
        return weight

    def blocked_depthwise_kernel(self, w):
        """The `[C, 1, KH, KW]` weight whose `layout_transform` to OIHW16o `w` is, or None."""
        transform = self.value_of(w)
        if op_name(transform) != "relax.layout_transform":
            return None
        weight = transform.args[0]
        weight_dims = static_ints(dims(weight))
        if weight_dims is None or len(weight_dims) != 4 or weight_dims[1] != 1 or not is_float32(weight):
            return None
        return weight

    def softmax(self, call):
        """Softmax along the last axis, with the additive mask before it folded in."""
        x = call.args[0]
        ndim = rank(x)
        if not is_float32(x, call) or ndim < 1 or int(call.attrs.axis) not in (-1, ndim - 1):
            return None
        bound = self.value_of(x)
        if op_name(bound) == "relax.add" and self.single_use(x):
            for scores, mask in (bound.args, reversed(bound.args)):
                if self.is_residual(scores, call) and self.broadcasts_over_rows(mask, call):
                    return packed("relax_runtime.softmax_add", [scores, mask], call.ty)
        return packed("relax_runtime.softmax", [x], call.ty)

    def broadcasts_over_rows(self, mask, call):
        """Whether `mask` has `call`'s rank and last dim, and each other dim is `call`'s or 1."""
        mine, theirs = dims(call), dims(mask)
        if not is_float32(mask) or mine is None or theirs is None or len(mine) != len(theirs):
            return False
        if not provably_equal(mine[-1], theirs[-1]):
            return False
        return all(provably_equal(a, b) or provably_equal(b, 1) for a, b in zip(mine[:-1], theirs[:-1]))

    def layer_norm(self, call):
        x, gamma, beta = call.args
        attrs = call.attrs
        ndim = rank(x)
        axes = [int(axis) for axis in attrs.axes]
        if (
            not is_float32(x, gamma, beta, call)
            or ndim < 1
            or axes not in ([-1], [ndim - 1])
            or not attrs.center
            or not attrs.scale
            or rank(gamma) != 1
            or rank(beta) != 1
        ):
            return None
        return packed("relax_runtime.layer_norm", [x, gamma, beta, float_value(float(attrs.epsilon))], call.ty)

    def reduce_trailing(self, call, kind):
        """A sum, mean, max or min over the trailing axes (a global average pool, for
        one; magika's max over its sequence, whose GELU TVM fused into its loop and ran
        one element at a time), `kind` its code (see REDUCTION_KINDS)."""
        x = call.args[0]
        ndim = rank(x)
        if not is_float32(x, call) or ndim < 1 or call.attrs.axis is None:
            return None
        axes = sorted(int(axis) % ndim for axis in call.attrs.axis)
        if not axes or axes != list(range(ndim - len(axes), ndim)):
            return None
        return packed("relax_runtime.reduce_trailing", [x, int_value(len(axes)), int_value(kind)], call.ty)

    def kernel_of(self, operand):
        """The kernel call `operand` (a single-use variable) is bound to, or None."""
        if not self.single_use(operand):
            return None
        bound = self.value_of(operand)
        return bound if packed_name(bound) is not None else None

    def fold(self, call, name):
        """A bias, a scale or an activation folded into the kernel call before it."""
        first = call.args[0]
        kernel = self.kernel_of(first)
        if kernel is None and name in ("relax.add", "relax.multiply"):
            # The kernel may be the second operand of a commutative op.
            kernel = self.kernel_of(call.args[1])
            if kernel is not None:
                first, other = call.args[1], call.args[0]
            else:
                return None
        elif kernel is None:
            return None
        else:
            other = call.args[1] if len(call.args) > 1 else None
        kernel_name = packed_name(kernel)
        args = list(kernel.args[1].fields)
        plain = kernel_name in DENSE + CONV
        if name in EPILOGUE:
            return self.activated(kernel, EPILOGUE[name], call.ty)
        scaled = self.scaled_per_filter(kernel, name, other, dims(first), call.ty)
        if scaled is not None:
            return scaled
        if name == "relax.add" and kernel_name in ("relax_runtime.conv2d", "relax_runtime.conv2d_transpose") and int(args[-1].value) == 0:
            # A bias first: over a 1x1 plane (a squeeze-excitation's) it has the output's
            # shape too, and as a residual it would be transformed on every call.
            bias = self.conv_bias(other, dims(first))
            if bias is not None:
                return packed(kernel_name + "_bias", args[:2] + [bias] + args[2:], call.ty)
        if name == "relax.add" and plain and int(args[-1].value) == 0 and self.is_residual(other, call):
            # `kernel(...) + residual`: added before any activation that follows.
            return packed(kernel_name + RESIDUAL, args + [other], call.ty)
        if name == "relax.add" and kernel_name == "relax_runtime.dense" and int(args[-1].value) == 0:
            n = dims(call)[-1] if dims(call) else None
            bias_dims = dims(other)
            if bias_dims is not None and len(bias_dims) == 1 and n is not None and provably_equal(bias_dims[0], n) and is_float32(other):
                return packed("relax_runtime.dense_bias", args[:2] + [other] + args[2:], call.ty)
            return None
        if name in ("relax.multiply", "relax.divide") and kernel_name == "relax_runtime.batch_matmul":
            scale = scalar_constant(other)
            if scale is None or (name == "relax.divide" and scale == 0.0):
                return None
            alpha = float(args[3].value) * (scale if name == "relax.multiply" else 1.0 / scale)
            return packed(kernel_name, args[:3] + [float_value(alpha)], call.ty)
        return None

    def scaled_per_filter(self, kernel, name, other, conv_dims, out_type):
        """A convolution's output times a scale per filter, plus a shift per filter, or
        divided by a scalar (each known when compiling), folded into the kernel's scale
        and shift: `conv2d_bn` with the mean 0 and the variance 1 (a QDQ layer's scales
        and bias, see integer_products.py); or None."""
        kernel_name = packed_name(kernel)
        args = list(kernel.args[1].fields)
        if kernel_name not in ("relax_runtime.conv2d", "relax_runtime.conv2d_bn"):
            return None
        code = int(args[-1].value)
        # A ReLU stays where it is through a division by a positive scalar.
        relu_commutes = code == RELU and name == "relax.divide" and (self.scalar(other) or 0.0) > 0.0
        if code != 0 and not relu_commutes:
            return None
        if name == "relax.multiply" and kernel_name == "relax_runtime.conv2d":
            scale = self.filter_vector(other, conv_dims)
            if scale is None:
                return None
            zeros, ones = np.zeros_like(scale), np.ones_like(scale)
            params = [relax.const(vector) for vector in (scale, zeros, zeros, ones)]
            return packed("relax_runtime.conv2d_bn", args[:2] + params + [float_value(0.0)] + args[2:], out_type)
        if kernel_name != "relax_runtime.conv2d_bn":
            return None
        gamma, beta = (constant_vector(arg) for arg in args[2:4])
        if gamma is None or beta is None:
            return None
        if name == "relax.add":
            shift = self.filter_vector(other, conv_dims)
            if shift is None:
                return None
            beta = beta + shift
        elif name == "relax.divide":
            divisor = self.scalar(other)
            if divisor is None or divisor == 0.0:
                return None
            gamma, beta = gamma / np.float32(divisor), beta / np.float32(divisor)
        else:
            return None
        return packed(kernel_name, args[:2] + [relax.const(gamma), relax.const(beta)] + args[4:], out_type)

    def filter_vector(self, expr, conv_dims):
        """A float32 value per filter known when compiling (numpy `[O]`): a constant `[O]`
        or `[1, O, 1, 1]`, also computed by `dequantize` and moved to blocks by ConvertLayout;
        or None."""
        values = self.known_values(self.conv_bias(expr, conv_dims))
        filters = static_ints(conv_dims[1:2] if len(conv_dims) == 4 else [conv_dims[1] * conv_dims[4]])
        if values is None or filters is None or values.size != filters[0] or values.dtype != np.float32:
            return None
        return values.reshape(-1)

    def known_values(self, expr, depth=0):
        """The values (numpy) of `expr` computed from constants by reshapes and
        `dequantize`, else None."""
        from .integer_products import constant_value

        if depth > 8:
            return None
        if isinstance(expr, relax.Var):
            return self.known_values(self.value_of(expr), depth + 1)
        if op_name(expr) == "relax.dequantize":
            data, scale, zero_point = (self.known_values(arg, depth + 1) for arg in expr.args[:3])
            if data is None or scale is None or zero_point is None or rank(expr) is None:
                return None
            shape = [1] * data.ndim
            if scale.size != 1 or zero_point.size != 1:
                shape[int(expr.attrs.axis) % data.ndim] = -1
            shifted = data.astype(np.int64) - zero_point.reshape(shape).astype(np.int64)
            return (shifted.astype(np.float32) * scale.reshape(shape)).astype(np.float32)
        if op_name(expr) == "relax.reshape":
            inner = self.known_values(expr.args[0], depth + 1)
            # A reshape conv_bias made has no shape yet: flattened (a vector's caller
            # checks its size).
            target = static_ints(dims(expr)) or [-1]
            return None if inner is None else inner.reshape(target)
        return None if expr is None else constant_value(expr, self.value_of)

    def quantized(self, call):
        """`min(max(round(y), low), high)` of a convolution's output `y` (or `clip`), with
        integer bounds, folded as its quantizing epilogue, when nothing else uses the steps
        between; or None."""
        name = op_name(call)
        if name == "relax.clip":
            rounded_var, bounds = call.args[0], [prim_float(call.args[1]), prim_float(call.args[2])]
        elif name == "relax.minimum" and self.single_use(call.args[0]):
            lower = self.value_of(call.args[0])
            if op_name(lower) != "relax.maximum":
                return None
            rounded_var, bounds = lower.args[0], [self.scalar(lower.args[1]), self.scalar(call.args[1])]
        else:
            return None
        rounded = self.value_of(rounded_var)
        if op_name(rounded) != "relax.round" or not self.single_use(rounded_var):
            return None
        if any(bound is None or not bound.is_integer() or abs(bound) >= 1 << 15 for bound in bounds):
            return None
        low, high = (int(bound) for bound in bounds)
        kernel = self.kernel_of(rounded.args[0])
        if packed_name(kernel) not in CONV or not self.is_residual(rounded.args[0], call):
            return None
        # After a ReLU, `round(max(y, 0))` is `max(round(y), 0)`: the low bound at least 0.
        before = int(kernel.args[1].fields[-1].value)
        if before == RELU:
            low = max(low, 0)
        if low > high or before not in (0, RELU):
            return None
        return self.activated(kernel, quantize_code(low, high), call.ty, before)

    def silu(self, call):
        """`x * sigmoid(x)` of a kernel call's output `x` (SiLU: ONNX writes a Sigmoid and
        a Mul) folded as its epilogue, when nothing else uses `x` or the sigmoid."""
        for x, gate in (tuple(call.args), tuple(reversed(call.args))):
            sigmoid = self.value_of(gate)
            if op_name(sigmoid) != "relax.sigmoid" or not sigmoid.args[0].same_as(x) or not self.single_use(gate):
                continue
            # Used by the sigmoid and by this multiply only.
            if not isinstance(x, relax.DataflowVar) or self.uses.get(x, 0) != 2 or not self.is_residual(x, call):
                continue
            kernel = self.value_of(x)
            if packed_name(kernel) is not None:
                return self.activated(kernel, SILU, call.ty)
        return None

    def hard_swish(self, call):
        """`x * (clip(x + 3, 0, 6) / 6)` of a kernel call's output `x` (how TVM imports
        ONNX's HardSwish and PyTorch's; the clip also as `maximum` then `minimum`) folded
        as its epilogue, when nothing else uses `x` or the steps between."""
        for x, gate in (tuple(call.args), tuple(reversed(call.args))):
            # Used by the gate's add and by this multiply only.
            if not isinstance(x, relax.DataflowVar) or self.uses.get(x, 0) != 2 or not self.is_residual(x, call):
                continue
            kernel = self.value_of(x)
            if packed_name(kernel) is not None and self.is_hard_gate(gate, x):
                return self.activated(kernel, HARD_SWISH, call.ty)
        return None

    def hard_sigmoid(self, call):
        """`clip(slope * x + 0.5, 0, 1)` of a kernel call's output `x` (ONNX's HardSigmoid
        as TVM imports it: a squeeze-excitation's gate; the clip also as `maximum` then
        `minimum`) folded as its epilogue, for the slopes of `HARD_SIGMOID_SLOPES`, when
        nothing else uses `x` or the steps between."""
        shifted_var = self.clamped_by(call, 0.0, 1.0)
        shifted = self.value_of(shifted_var)
        if op_name(shifted) != "relax.add" or not self.single_use(shifted_var):
            return None
        for scaled_var, offset in (tuple(shifted.args), tuple(reversed(shifted.args))):
            scaled = self.value_of(scaled_var)
            if self.scalar(offset) != 0.5 or op_name(scaled) != "relax.multiply" or not self.single_use(scaled_var):
                continue
            for x, slope in (tuple(scaled.args), tuple(reversed(scaled.args))):
                kernel = self.kernel_of(x)
                value = self.scalar(slope)
                if kernel is None or value is None or not self.is_residual(x, call):
                    continue
                for code, wanted in HARD_SIGMOID_SLOPES.items():
                    if abs(value - wanted) <= 1e-6:
                        return self.activated(kernel, code, call.ty)
        return None

    def is_hard_gate(self, gate, x):
        """Whether `gate` is `clip(x + 3, 0, 6) / 6`, each step used once."""
        divided = self.value_of(gate)
        if op_name(divided) != "relax.divide" or not self.single_use(gate) or self.scalar(divided.args[1]) != 6.0:
            return False
        shifted_var = self.clamped_operand(divided.args[0], 0.0, 6.0)
        shifted = self.value_of(shifted_var)
        return (
            op_name(shifted) == "relax.add"
            and self.single_use(shifted_var)
            and shifted.args[0].same_as(x)
            and self.scalar(shifted.args[1]) == 3.0
        )

    def clamped_operand(self, expr, low, high):
        """The operand that `expr` clamps to `[low, high]`, as `clip` or as `minimum` of a
        `maximum` (each used once), or None."""
        if not self.single_use(expr):
            return None
        return self.clamped_by(self.value_of(expr), low, high)

    def clamped_by(self, value, low, high):
        """The operand that the call `value` clamps to `[low, high]`, as `clip` or as
        `minimum` of a `maximum` (used once), or None."""
        if op_name(value) == "relax.clip":
            bounds = (prim_float(value.args[1]), prim_float(value.args[2]))
            return value.args[0] if bounds == (low, high) else None
        if op_name(value) != "relax.minimum" or self.scalar(value.args[1]) != high:
            return None
        lower = self.value_of(value.args[0])
        if op_name(lower) != "relax.maximum" or not self.single_use(value.args[0]) or self.scalar(lower.args[1]) != low:
            return None
        return lower.args[0]

    def clamp(self, call, name):
        """`max(kernel(...), 0)` folded as a ReLU, then `min(that, 6)` as a ReLU6 (so
        ONNX's importer writes Clip: a call_tir of a max or min PrimFunc against a 0-d
        bound), and `clip(kernel(...), 0, 6)` and `max` / `min` ops likewise."""
        if name == "relax.clip":
            operand, low, high = call.args[0], prim_float(call.args[1]), prim_float(call.args[2])
        else:
            if name == "relax.call_tir":
                callee = call.args[0]
                function = self.module[callee] if isinstance(callee, tvm.ir.GlobalVar) else None
                kind = extremum_with_scalar(function)
                arguments = list(call.args[1].fields) if isinstance(call.args[1], relax.Tuple) else []
                if kind is None or len(arguments) != 2:
                    return None
            else:
                kind, arguments = name[len("relax.") : len("relax.") + 3], list(call.args)
            operand, bound = arguments
            value = self.scalar(bound)
            low, high = (value, None) if kind == "max" else (None, value)
        kernel = self.kernel_of(operand)
        if kernel is None or not self.is_residual(operand, call):
            return None
        # (code, the epilogue the kernel must have now): a ReLU6 may refine a ReLU.
        folds = {(0.0, None): (RELU, 0), (None, 6.0): (RELU6, RELU), (0.0, 6.0): (RELU6, 0)}
        if (low, high) not in folds:
            return None
        code, before = folds[(low, high)]
        return self.activated(kernel, code, call.ty, before)

    def activated(self, kernel, code, out_ty, before=0):
        """The dense or convolution `kernel` call (with or without a residual) with the
        epilogue `code`, when its epilogue is `before` and, for a convolution, `code` is
        one it folds; else None."""
        kernel_name = packed_name(kernel)
        base = kernel_name[: -len(RESIDUAL)] if with_residual(kernel_name) else kernel_name
        if base not in DENSE + CONV + CONV_TRANSPOSE:
            return None
        args = list(kernel.args[1].fields)
        at = epilogue_index(kernel_name)
        convolution_code = code in CONV_EPILOGUES or quantize_bounds(code) is not None
        if int(args[at].value) != before or (base in CONV and not convolution_code):
            return None
        args[at] = int_value(code)
        return packed(kernel_name, args, out_ty)

    def scalar(self, expr):
        """The value of a float32 scalar known when compiling: a constant, or ONNX's
        importer's `where(isnan(c), ±inf, c)` of a constant `c`; else None."""
        value = scalar_constant(expr)
        if value is not None:
            return value
        chosen = self.value_of(expr)
        if op_name(chosen) != "relax.where":
            return None
        condition = chosen.args[0]
        condition = self.value_of(condition) if isinstance(condition, relax.Var) else condition
        if op_name(condition) != "relax.isnan":
            return None
        tested = scalar_constant(condition.args[0])
        if tested is None:
            return None
        return scalar_constant(chosen.args[1] if math.isnan(tested) else chosen.args[2])

    def is_residual(self, other, call):
        """Whether `other` is a float32 tensor of exactly `call`'s shape (no broadcast)."""
        mine, theirs = dims(call), dims(other)
        return (
            is_float32(other)
            and mine is not None
            and theirs is not None
            and len(mine) == len(theirs)
            and all(provably_equal(a, b) for a, b in zip(mine, theirs))
        )

    def conv_bias(self, bias, conv_dims):
        """A conv bias as a 1-D tensor of the filters (`[O]`, or `[1, O, 1, 1]` reshaped,
        also through ConvertLayout's transform to `[1, O / 16, 1, 1, 16]`)."""
        bias_dims = dims(bias)
        if bias_dims is None or conv_dims is None or not is_float32(bias):
            return None
        if len(conv_dims) == 5:
            transform = self.value_of(bias)
            if op_name(transform) != "relax.layout_transform" or len(bias_dims) != 5:
                return None
            return self.conv_bias(transform.args[0], conv_dims[:1] + [conv_dims[1] * conv_dims[4]] + conv_dims[2:4])
        filters = conv_dims[1]
        if len(bias_dims) == 1 and provably_equal(bias_dims[0], filters):
            return bias
        if len(bias_dims) == 4 and provably_equal(bias_dims[1], filters) and all(
            provably_equal(d, 1) for d in (bias_dims[0], bias_dims[2], bias_dims[3])
        ):
            # ONNX's importer reshapes a [O] bias to [1, O, 1, 1]: take the [O] tensor.
            source = self.value_of(bias)
            if op_name(source) == "relax.reshape" and rank(source.args[0]) == 1 and is_float32(source.args[0]):
                return source.args[0]
            return relax.op.reshape(bias, [filters])
        return None

    def batch_norm(self, item):
        """`batch_norm(conv2d(...))[0]` folded into the convolution."""
        if item.index != 0:
            return None
        norm = self.value_of(item.tuple_value)
        if op_name(norm) != "relax.nn.batch_norm" or not self.single_use(item.tuple_value):
            return None
        kernel = self.kernel_of(norm.args[0])
        if packed_name(kernel) != "relax_runtime.conv2d" or int(kernel.args[1].fields[-1].value) != 0:
            return None
        attrs = norm.attrs
        params = list(norm.args[1:5])
        if int(attrs.axis) != 1 or not attrs.center or not attrs.scale or not is_float32(*params):
            return None
        if any(rank(p) != 1 for p in params):
            return None
        args = list(kernel.args[1].fields)
        new_args = args[:2] + params + [float_value(float(attrs.epsilon))] + args[2:]
        return packed("relax_runtime.conv2d_bn", new_args, tensor_type(item))


def branches(binding):
    """The bodies (SeqExprs) of the If `binding` binds, else []."""
    value = binding.value if isinstance(binding, relax.VarBinding) else None
    if isinstance(value, relax.If):
        return [value.true_branch, value.false_branch]
    return []


def with_branches(binding, rewritten):
    """The If `binding` with its branches replaced by `rewritten` (one per branch, None
    for a branch kept), or None when neither was rewritten."""
    if all(branch is None for branch in rewritten):
        return None
    true_branch, false_branch = (new or old for new, old in zip(rewritten, branches(binding)))
    return relax.VarBinding(binding.var, relax.If(binding.value.cond, true_branch, false_branch))


def count_uses(function):
    """How many bindings (and the function's result) use each variable, the bindings in
    If branches included."""
    uses = {}

    def add(expr):
        for var in relax.analysis.free_vars(expr):
            uses[var] = uses.get(var, 0) + 1

    def count(seq):
        for block in seq.blocks:
            for binding in block.bindings:
                inner = branches(binding)
                add(binding.value.cond if inner else binding.value)
                for branch in inner:
                    count(branch)
        add(seq.body)

    count(function.body)
    return uses


def defines_symbolic_dims(binding):
    """Whether `binding` is a match_cast that gives symbolic dims their values: the dims
    may be used where its variable is not (a reshape to them), so it must stay."""
    return isinstance(binding, relax.MatchCast) and bool(
        relax.analysis.definable_tir_vars_in_type(binding.ty)
    )


def without_unused_bindings(function):
    """The function with the dataflow bindings nothing uses removed (transitively), in
    If branches too."""
    body = seq_without_unused_bindings(function.body)
    if body is None:
        return function
    return relax.Function(function.params, body, function.ret_ty, function.is_pure, function.attrs)


def seq_without_unused_bindings(seq):
    """`seq` without its unused dataflow bindings, or None when it has none."""

    def dead(binding):
        return (
            isinstance(binding.var, relax.DataflowVar) and binding.var not in used and not defines_symbolic_dims(binding)
        )

    used = set(relax.analysis.free_vars(seq.body))
    for block in reversed(seq.blocks):
        for binding in reversed(block.bindings):
            if not dead(binding):
                used.update(relax.analysis.free_vars(binding.value))
    blocks = []
    changed = False
    for block in seq.blocks:
        kept = []
        for binding in block.bindings:
            if dead(binding):
                changed = True
                continue
            pruned = with_branches(binding, [seq_without_unused_bindings(branch) for branch in branches(binding)])
            if pruned is not None:
                binding, changed = pruned, True
            kept.append(binding)
        blocks.append(relax.DataflowBlock(kept) if isinstance(block, relax.DataflowBlock) else relax.BindingBlock(kept))
    return relax.SeqExpr(blocks, seq.body) if changed else None


def rewrite_function(function, module):
    # Unused bindings (a batch norm's running statistics) would count as uses.
    function = without_unused_bindings(function)
    uses = count_uses(function)
    body = rewrite_seq(function.body, uses, module)
    if body is None:
        return function
    # The bindings the folding left unused go.
    return without_unused_bindings(relax.Function(function.params, body, function.ret_ty, function.is_pure, function.attrs))


def rewrite_seq(seq, uses, module):
    """`seq` with its dataflow blocks' bindings rewritten to kernel calls, those in the
    branches of its Ifs too (TVM's importer gives each If branch its own scope, see
    onnx_ops/control_flow.py); None when nothing was."""
    blocks = []
    changed = False
    for block in seq.blocks:
        if not isinstance(block, relax.DataflowBlock):
            bindings = []
            for binding in block.bindings:
                rewritten = with_branches(binding, [rewrite_seq(branch, uses, module) for branch in branches(binding)])
                if rewritten is not None:
                    binding, changed = rewritten, True
                bindings.append(binding)
            blocks.append(relax.BindingBlock(bindings))
            continue
        state = Block(uses, module)
        bindings = []
        for binding in block.bindings:
            if not isinstance(binding, relax.VarBinding):
                bindings.append(binding)
                continue
            value = binding.value
            rewritten = state.rewrite(value)
            if rewritten is not None:
                value = rewritten
                changed = True
            state.values[binding.var] = value
            bindings.append(relax.VarBinding(binding.var, value))
        blocks.append(relax.DataflowBlock(bindings))
    return relax.SeqExpr(blocks, seq.body) if changed else None


def take_weights_otherwise(function, weight_rank, fits, new_dims, adjust=None):
    """Replaces the weight parameters of rank `weight_rank` whose every use is as the
    weight operand (argument 1) of a kernel call for which `fits(name, args, out_type)`
    holds, by parameters of dims `new_dims(old dims)`; `adjust(name, args)` then updates
    those calls' other arguments in place, and returns the kernel they call instead, or
    None to keep it.

    Returns the function and the indices of the parameters it replaced.
    """
    attrs = function.attrs if function.attrs is not None else {}
    num_input = int(attrs["num_input"]) if "num_input" in attrs else len(function.params)
    candidates = {param: index for index, param in enumerate(function.params) if index >= num_input and rank(param) == weight_rank}
    fitting = set()
    disqualified = set()
    for block in function.body.blocks:
        for binding in block.bindings:
            value = binding.value
            name = packed_name(value)
            if not name:
                disqualified.update(v for v in relax.analysis.free_vars(value) if v in candidates)
                continue
            args = list(value.args[1].fields)
            for position, arg in enumerate(args):
                if arg in candidates:
                    if position == 1 and fits(name, args, binding.var.ty):
                        fitting.add(arg)
                    else:
                        disqualified.add(arg)
    disqualified.update(v for v in relax.analysis.free_vars(function.body.body) if v in candidates)
    chosen = fitting - disqualified
    if not chosen:
        return function, []
    replacement = {
        param: relax.Var(param.name, relax.TensorType(new_dims(dims(param)), tensor_type(param).dtype)) for param in chosen
    }

    def replaced(binding):
        value = binding.value
        name = packed_name(value)
        if name is None or len(value.args[1].fields) <= 1 or value.args[1].fields[1] not in replacement:
            return None
        args = list(value.args[1].fields)
        args[1] = replacement[args[1]]
        if adjust is not None:
            name = adjust(name, args) or name
        return packed(name, args, binding.var.ty)

    params = [replacement.get(param, param) for param in function.params]
    body = rewritten_body(function, replaced)
    if body is None:
        body = function.body
    indices = sorted(candidates[param] for param in chosen)
    return relax.Function(params, body, function.ret_ty, function.is_pure, function.attrs), indices


# Columns per panel of a packed dense weight (relax-runtime's `kernels::panels::PANEL`).
PANEL = 64
# Channels per block of a channel-blocked tensor (see blocked_layout.py).
BLOCK = 16


def bf16_kernel(name):
    """The bf16 dense kernel taking the same arguments as float32 `name`."""
    return "relax_runtime.dense_bf16" + name.removeprefix("relax_runtime.dense")


def panel_weights(function, precision="f32"):
    """Takes the weights used only as dense operands (`[in, out]`, or `[out, in]` taken
    transposed as nn.Linear stores them) as `[ceil(out / 64), in, 64]` parameters: packed
    in panels at load, read by the dense kernel without packing them on every call. With
    `precision` "bf16", as `[ceil(out / 64), ceil(in / 2), 64]` panels of bf16 pairs, read
    by the bf16 dense kernels.

    Returns the function and {parameter index: {"layout": ..., "columns": N}}, with
    `"depth": K` too for bf16 panels (whose `ceil(K / 2)` rows do not say K).
    """
    bf16 = precision == "bf16"
    chosen = {}
    for transposed, layout in ((True, "transposed_panels"), (False, "panels")):
        if bf16:
            layout = "bf16_" + layout

        def dense_operand(name, args, _out_type, transposed=transposed):
            return (
                name.removesuffix(RESIDUAL) in DENSE
                and static_ints(dims(args[1])) is not None
                and (int(args[epilogue_index(name) - 1].value) == 1) == transposed
            )

        def packed_dims(d, transposed=transposed):
            depth, columns = (int(d[1]), int(d[0])) if transposed else (int(d[0]), int(d[1]))
            rows = (depth + 1) // 2 if bf16 else depth
            return [(columns + PANEL - 1) // PANEL, rows, PANEL]

        def now_packed(name, args):
            args[epilogue_index(name) - 1] = int_value(0)
            return bf16_kernel(name) if bf16 else None

        stored = {index: dims(param) for index, param in enumerate(function.params)}
        function, indices = take_weights_otherwise(function, 2, dense_operand, packed_dims, now_packed)
        for index in indices:
            d = stored[index]
            columns, depth = (int(d[0]), int(d[1])) if transposed else (int(d[1]), int(d[0]))
            chosen[index] = {"layout": layout, "columns": columns}
            if bf16:
                chosen[index]["depth"] = depth
    if bf16:
        function = bf16_constant_weights(function)
    return function, chosen


def precision_warnings(ir_module):
    """What a build asking for bf16 should hear (a model's kernel calls, counted by kind):
    nothing when every matmul and convolution went to a bf16 kernel; else how many did
    and what stays float32."""
    counts = {"bf16": 0, "bf16_conv": 0, "dense": 0, "conv": 0, "batch_matmul": 0}

    def count(expr):
        name = packed_name(expr) if isinstance(expr, relax.Call) else None
        if name is None:
            return
        if name.startswith("relax_runtime.dense_bf16"):
            counts["bf16"] += 1
        elif name.startswith("relax_runtime.conv2d_bf16"):
            counts["bf16_conv"] += 1
        elif name.startswith("relax_runtime.dense"):
            counts["dense"] += 1
        elif name.startswith("relax_runtime.conv2d"):
            counts["conv"] += 1
        elif name == "relax_runtime.batch_matmul":
            counts["batch_matmul"] += 1

    for function in ir_module.functions.values():
        # Every call, those in an If's branches too.
        if isinstance(function, relax.Function):
            relax.analysis.post_order_visit(function.body, count)
    staying = [
        f"{counts[kind]} {what}"
        for kind, what in (
            ("dense", "dense layers whose weight is computed or also used otherwise"),
            ("conv", "convolutions (depthwise, transposed, from an NCHW input, or 3x3 ones Winograd computes faster)"),
            ("batch_matmul", "products of two activations (attention's)"),
        )
        if counts[kind]
    ]
    if not staying and counts["bf16"] + counts["bf16_conv"]:
        return []
    return [
        f'precision = "bf16": {counts["bf16"]} dense layers and {counts["bf16_conv"]} convolutions run in bf16; '
        + (", ".join(staying) if staying else "no matmul or convolution at all")
        + " stay float32 (relax-runtime has bf16 kernels for dense layers by a weight and for blocked convolutions)"
    ]


def bf16_constant_weights(function, exact=False):
    """The dense calls whose weight is a float32 constant (`[N, K]` taken transposed, or
    `[K, N]`) take it packed in bf16 panels of pairs now and call the bf16 kernels. With
    `exact`, only those that bf16 computes exactly: a float32 copy of 8-bit values by a
    weight of integers within [-256, 256] (integer_products.py's products; the kernels
    sum in float32 as the float32 ones do), for half the bytes to stream and the CPU's
    bf16 instructions (or tiles) to multiply."""
    from .integer_products import float_copy_of_narrow

    values = bindings_of(function) if exact else None

    def packed_constant(binding):
        name, args = kernel_call(binding)
        if name is None or name.removesuffix(RESIDUAL) not in DENSE:
            return None
        weight = args[1]
        if exact:
            matrix = exact_integer_weight(weight, 2)
            if matrix is None or not float_copy_of_narrow(args[0], values.get):
                return None
        elif not isinstance(weight, tvm.ir.Constant) or rank(weight) != 2 or not is_float32(weight):
            return None
        else:
            matrix = weight.value.numpy()
        if int(args[epilogue_index(name) - 1].value) == 1:
            matrix = matrix.T
        args[1] = relax.const(bf16_panels_of(matrix))
        args[epilogue_index(name) - 1] = int_value(0)
        return packed(bf16_kernel(name), args, binding.var.ty)

    return rewritten_function(function, packed_constant)


def exact_integer_weight(weight, weight_rank):
    """The value (numpy) of `weight` when it is a float32 constant of rank `weight_rank`
    holding integers within [-256, 256] (which bf16 holds exactly), else None."""
    import numpy as np

    if not isinstance(weight, tvm.ir.Constant) or rank(weight) != weight_rank or not is_float32(weight):
        return None
    values = weight.value.numpy()
    if not (np.all(np.abs(values) <= 256) and np.array_equal(values, np.round(values))):
        return None
    return values


def exact_bf16_convolutions(function, matrix_units=False):
    """The blocked convolutions that compute integer products exactly in bf16 (a float32
    copy of 8-bit values by a constant kernel of integers within [-256, 256]: a QDQ
    model's layers, integer_products.py) take their kernel in bf16 filter panels, packed
    now, and call the bf16 blocked kernels: where the direct blocked kernel computes
    them in a bf16 build (`takes_bf16_filter_panels`)."""
    from .integer_products import float_copy_of_narrow

    values = bindings_of(function)

    def packed_exactly(binding):
        name, args = kernel_call(binding)
        if name is None or not takes_bf16_filter_panels(name, args, binding.var.ty, matrix_units):
            return None
        if not (float_copy_of_narrow(args[0], values.get) or quantized_output(args[0], values)):
            return None
        kernel = exact_integer_weight(args[1], 4)
        if kernel is None:
            # A constant kernel `Block.blocked_kernel` packed in float32 filter panels.
            panels = exact_integer_weight(args[1], 5)
            out_dims = static_ints(dims_of_type(binding.var.ty))
            if panels is None or out_dims is None:
                return None
            kernel = oihw_of_filter_panels(panels, out_dims[1] * out_dims[4])
        args[1] = relax.const(bf16_filter_panels_of(kernel))
        return packed(bf16_conv_kernel(name), args, binding.var.ty)

    return rewritten_function(function, packed_exactly)


def oihw_of_filter_panels(panels, filters):
    """The OIHW kernel (numpy) of `filters` filters that `filter_panels_of` packed in
    `panels`."""
    count, channels, kernel_h, kernel_w, width = panels.shape
    return panels.transpose(0, 4, 1, 2, 3).reshape(count * width, channels, kernel_h, kernel_w)[:filters]


def bf16_values(values):
    """float32 values (numpy) rounded to bf16, as uint16 bit patterns: to nearest with ties
    to even, a NaN a quiet NaN (relax-kernels' `bf16_panels::round`)."""
    import numpy as np

    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    quiet = ((bits >> 16) | 0x40).astype(np.uint16)
    return np.where(np.isnan(values), quiet, rounded)


def bf16_panels_of(matrix):
    """A `[K, N]` float32 matrix (numpy) packed in bf16 panels of pairs, `[ceil(N / 64),
    ceil(K / 2), 64]` words (as float32 bit patterns), as relax-runtime packs a weight at
    load: word (p, n) holds rows 2p (low half) and 2p + 1 (high half) of column n."""
    import numpy as np

    depth, columns = matrix.shape
    panels, pairs = (columns + PANEL - 1) // PANEL, (depth + 1) // 2
    padded = np.zeros((2 * pairs, panels * PANEL), dtype=np.float32)
    padded[:depth, :columns] = matrix
    halves = bf16_values(padded).astype(np.uint32)
    words = halves[0::2] | (halves[1::2] << 16)
    words = words.reshape(pairs, panels, PANEL).transpose(1, 0, 2)
    return np.ascontiguousarray(words).view(np.float32)


RECURRENT = "relax_runtime.recurrent"


def recurrent_weights(function):
    """Takes the recurrence weights `R` of recurrent layers (`[D, G*H, H]` parameters that
    the kernel gets transposed, as `permute_dims(R, [0, 2, 1])`: see
    onnx_ops/recurrent.py) as `[D, H, G*H]` parameters, transposed once at load, so that
    no call transposes them. Only a parameter whose one use is that transposition, and
    whose transposition only the kernel's calls read (as their argument 1), is taken so.

    Returns the function and {parameter index: "transposed"}.
    """
    attrs = function.attrs if function.attrs is not None else {}
    num_input = int(attrs["num_input"]) if "num_input" in attrs else len(function.params)
    weights = {param: index for index, param in enumerate(function.params) if index >= num_input and rank(param) == 3}
    uses = count_uses(function)
    transposed = {}
    recurrence_uses = {}
    for block in function.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if (
                op_name(value) == "relax.permute_dims"
                and value.args[0] in weights
                and [int(axis) for axis in value.attrs.axes] == [0, 2, 1]
            ):
                transposed[binding.var] = value.args[0]
            if packed_name(value) == RECURRENT:
                fields = list(value.args[1].fields)
                if fields[1] in transposed and not any(field.same_as(fields[1]) for field in fields[2:] + fields[:1]):
                    recurrence_uses[fields[1]] = recurrence_uses.get(fields[1], 0) + 1
    chosen = {
        var: param
        for var, param in transposed.items()
        if uses.get(param) == 1 and recurrence_uses.get(var, 0) == uses.get(var, 0) > 0
    }
    if not chosen:
        return function, {}
    replacement = {}
    for var, param in chosen.items():
        d = dims(param)
        replacement[var] = relax.Var(param.name, relax.TensorType([d[0], d[2], d[1]], tensor_type(param).dtype))

    def replaced(binding):
        if packed_name(binding.value) != RECURRENT:
            return None
        args = list(binding.value.args[1].fields)
        if args[1] not in replacement:
            return None
        args[1] = replacement[args[1]]
        out_type = binding.var.ty
        # The kernel's three outputs: a tuple type, which call_dps_packed takes as a list.
        return packed(RECURRENT, args, list(out_type.fields) if isinstance(out_type, relax.TupleType) else out_type)

    by_param = {param: replacement[var] for var, param in chosen.items()}
    params = [by_param.get(param, param) for param in function.params]
    body = rewritten_body(function, replaced)
    rewritten = without_unused_bindings(relax.Function(params, body, function.ret_ty, function.is_pure, function.attrs))
    return rewritten, {weights[param]: "transposed" for param in chosen.values()}


# Which Winograd variant beats im2col, measured per layer on one thread (relax-runtime's
# kernels, medians of 15 calls; time / im2col's):
#   64 channels over 56x56: F(2x2) 0.81, F(4x4) 0.67;   32 over 56x56: 1.06, 0.80
#   128 over 28x28: 0.77, 0.64;   64 over 28x28: 0.74, 0.82
#   256 over 14x14: 0.88, 1.61 (16 tiles of 4x4);   128 over 14x14: 0.74, 0.86
#   512 over 7x7: 1.24, 1.95 (the transformed weights dominate);   3 or 16 channels: 1.3-2.8
# and inside ResNet-50 on 2 threads (per-layer times in the whole model): F(4x4) took
# 0.70-0.82 of im2col's time at 64 channels over 56x56, but no less than F(2x2) at 128
# over 28x28 (its 7 rows of tiles: blocks too small to share). So F(4x4, 3x3) from this
# many channels and filters and 4x4 output tiles per image...
WINOGRAD4_MIN_CHANNELS = 64
WINOGRAD4_MIN_TILES = 196
# ... else F(2x2, 3x3) from this many channels and filters and 2x2 tiles per image (in
# the whole model, 2 threads, it took 1.04-1.10x im2col's time at 64 channels).
WINOGRAD_MIN_CHANNELS = 128
WINOGRAD_MIN_TILES = 36

# Winograd variant (output tile side) -> (layout, values per transformed kernel).
WINOGRAD_LAYOUTS = {4: ("winograd4", 36), 2: ("winograd", 16)}


def static_convolution(name, args, out_ty, out_rank=4, symbolic_plane=False):
    """For a convolution kernel call `name(args)` with an OIHW kernel and an output of
    rank `out_rank` (4: NCHW, 5: blocked) whose kernel and output sizes are static:
    `(filters, channels, kernel_h, kernel_w, output height, output width)` and its ints
    `(stride_h, stride_w, top, left, bottom, right, dilation_h, dilation_w, groups)`;
    else None. With `symbolic_plane`, output sizes that are symbolic are None."""
    if name is None or name.removesuffix(RESIDUAL) not in CONV:
        return None
    w_dims, out_dims = dims(args[1]), dims_of_type(out_ty)
    if w_dims is None or out_dims is None or len(w_dims) != 4 or len(out_dims) != out_rank:
        return None
    kernel, plane = static_ints(w_dims), static_ints(out_dims[2:4])
    if plane is None and symbolic_plane:
        plane = [None, None]
    if kernel is None or plane is None:
        return None
    at = len(args) + epilogue_index(name)
    return kernel + plane, [int(a.value) for a in args[at - 9 : at]]


def winograd_shaped(convolution):
    """Whether `static_convolution`'s `convolution` has what Winograd F(m x m, 3x3)
    computes: a 3x3 kernel, stride 1, no dilation, one group."""
    (_, _, kernel_h, kernel_w, _, _), ints = convolution
    stride_h, stride_w, _, _, _, _, dilation_h, dilation_w, groups = ints
    return (kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w, groups) == (3, 3, 1, 1, 1, 1, 1)


def winograd_tile(name, args, out_ty):
    """The side of the output tiles of the Winograd variant that computes the kernel call
    `name(args)` best (4 or 2), or None when im2col does."""
    convolution = static_convolution(name, args, out_ty)
    if convolution is None or not winograd_shaped(convolution):
        return None
    (filters, channels, _, _, height, width), _ = convolution
    smaller = min(filters, channels)
    tiles4 = ((height + 3) // 4) * ((width + 3) // 4)
    if smaller >= WINOGRAD4_MIN_CHANNELS and tiles4 >= WINOGRAD4_MIN_TILES:
        return 4
    if smaller >= WINOGRAD_MIN_CHANNELS and ((height + 1) // 2) * ((width + 1) // 2) >= WINOGRAD_MIN_TILES:
        return 2
    return None


def winograd_weights(function):
    """Takes the weights used only as kernels of convolutions that one Winograd variant
    computes best (`winograd_tile`) as `[16 or 36, in, out]` parameters (their transform,
    computed at load).

    Returns the function and {parameter index: layout}.
    """
    chosen = {}
    for tile, (layout, values) in WINOGRAD_LAYOUTS.items():

        def fits(name, args, out_ty, tile=tile):
            return winograd_tile(name, args, out_ty) == tile

        function, indices = take_weights_otherwise(function, 4, fits, lambda d, values=values: [values, d[1], d[0]])
        chosen.update({index: layout for index in indices})
    return function, chosen


# Convolutions whose output planes have at most this many pixels take their kernel packed
# in filter panels, `[ceil(out / 64), in, kh, kw, 64]` (relax-runtime's
# `kernels::filter_panels`): the filters run along the vector lanes, which strips fill
# with a 7x7 plane's 49 pixels only to 49 of 64. ResNet-50's layers onto 7x7 planes took
# 0.79-0.93 of their time on strips (per layer, in the whole model, 2 threads); on one
# thread, 14x14 planes (196 pixels: 13 vectors of 16, nearly full) measured the same.
FILTER_PANELS_MAX_PIXELS = 64
# ... from this many: below a 4x4 plane a convolution is a few matrix-vector products,
# bound by reading the weights, where strips measured faster (EfficientNet-B0's
# squeeze-excite convolutions on 1x1 planes: 1-11 us against 2-17) ...
FILTER_PANELS_MIN_PIXELS = 16
# ... and with filters a multiple of this: whole panels, an even number of them (with
# a partial panel, or an odd number shared out over two threads, MobileNetV2's and
# EfficientNet-B0's 7x7 layers of 160, 192 and 320 filters took 1.1-1.75x their time on
# strips).
FILTER_PANELS_FILTERS = 128


def filter_panels_of(weight):
    """An OIHW kernel (numpy) packed in filter panels, `[ceil(O / 64), I, kh, kw, 64]`
    (zero-padded filters), as relax-runtime packs a weight at load."""
    import numpy as np

    filters = weight.shape[0]
    panels = (filters + PANEL - 1) // PANEL
    padded = np.zeros((panels * PANEL,) + weight.shape[1:], dtype=weight.dtype)
    padded[:filters] = weight
    return np.ascontiguousarray(padded.reshape((panels, PANEL) + weight.shape[1:]).transpose(0, 2, 3, 4, 1))


def filter_panels_expr(weight):
    """Relax ops that pack the OIHW kernel `weight` (static dims) in filter panels on every
    call, as `filter_panels_of` does once."""
    filters, channels, kernel_h, kernel_w = static_ints(dims(weight))
    panels = (filters + PANEL - 1) // PANEL
    padded = weight
    if panels * PANEL != filters:
        padded = relax.op.nn.pad(weight, [0, panels * PANEL - filters, 0, 0, 0, 0, 0, 0])
    split = relax.op.reshape(padded, [panels, PANEL, channels, kernel_h, kernel_w])
    return relax.op.permute_dims(split, [0, 2, 3, 4, 1])


def blocked_kernels_packed(function, transformed=()):
    """The function with the OIHW kernel of each blocked convolution still taking one (a
    weight also used otherwise, which `filter_panel_weights` leaves stored) packed in filter
    panels by Relax ops on every call: the blocked kernel reads only filter panels (or the
    `transformed` parameters, in blocked Winograd form, also of rank 4)."""

    def packed_kernel(binding):
        name, args = kernel_call(binding)
        if name is None or not blocked_convolution(name, args, binding.var.ty) or rank(args[1]) != 4 or args[1] in transformed:
            return None
        args[1] = filter_panels_expr(args[1])
        return packed(name, args, binding.var.ty)

    return rewritten_function(function, packed_kernel)


# A blocked convolution with a 3x3 kernel, stride 1, no dilation and one group is
# computed by Winograd (relax-runtime's `kernels::blocked_winograd`): F(4x4, 3x3) from
# this many channels and filters (any whole block) and this many 4x4 tiles per image...
# One core, AMD Zen 4, time / the direct blocked kernel's, two runs (`cargo bench -p
# relax-kernels --bench layers -- 3x3/1`): DBNet's 96 channels onto 32 filters 0.54-0.87
# over 120x120 and 0.54-0.56 over 30x30, DenseNet-121's 128 onto 32 0.43-0.52 over 56x56
# and 0.36-0.41 over 28x28, SqueezeNet's 16 onto 64 0.58-0.71 over 55x55 and 32 onto 128
# 0.41-0.42 over 27x27.
BLOCKED_WINOGRAD4_MIN_CHANNELS = 16
BLOCKED_WINOGRAD4_MIN_TILES = 49
# ... else F(2x2, 3x3) from this many channels and filters and 2x2 tiles per image. Two
# threads, ResNet-50's layers, time / the direct blocked kernel's, medians of 15 calls
# alternating, two runs: F(4x4) 0.77-0.95 and F(2x2) 0.99-1.14 at 64 channels over 56x56
# (196 tiles of 4x4); 0.60 and 0.75-0.79 at 128 over 28x28 (49); 0.81 and 0.70-0.80 at 256
# over 14x14 (16 tiles of 4x4: too few to fill the products); at 512 over 7x7 (16 tiles of
# 2x2, whose transformed weights, 16/9 of the kernel's size, are read for too few tiles)
# 0.92-1.02 and 1.12-1.23.
BLOCKED_WINOGRAD_MIN_CHANNELS = 128
BLOCKED_WINOGRAD_MIN_TILES = 36

# Blocked Winograd variant (output tile side) -> (layout, values per transformed kernel).
BLOCKED_WINOGRAD_LAYOUTS = {4: ("blocked_winograd4", 36), 2: ("blocked_winograd", 16)}


def blocked_winograd_tile(name, args, out_ty):
    """The side of the output tiles of the Winograd variant (4 or 2) that computes best the
    kernel call `name(args)`, a blocked convolution with an OIHW kernel of static sizes; or
    None when the direct blocked kernel does (see `BLOCKED_WINOGRAD4_MIN_CHANNELS`)."""
    convolution = static_convolution(name, args, out_ty, out_rank=5, symbolic_plane=True)
    if convolution is None or not winograd_shaped(convolution):
        return None
    (filters, channels, _, _, height, width), _ = convolution
    if channels % 16 or filters % 16:
        return None
    smaller = min(filters, channels)
    if height is None or width is None:
        # A plane sized at run time (a detector's, whose input image is): taken as large
        # enough for F(4x4), which took 0.81 of the direct kernel's time at 256 channels
        # over 14x14 and 0.92-1.02 at 512 over 7x7 (see above), less over larger planes.
        return 4 if smaller >= BLOCKED_WINOGRAD4_MIN_CHANNELS else None
    tiles4 = ((height + 3) // 4) * ((width + 3) // 4)
    tiles2 = ((height + 1) // 2) * ((width + 1) // 2)
    if smaller >= BLOCKED_WINOGRAD4_MIN_CHANNELS and tiles4 >= BLOCKED_WINOGRAD4_MIN_TILES:
        return 4
    if smaller >= BLOCKED_WINOGRAD_MIN_CHANNELS and tiles2 >= BLOCKED_WINOGRAD_MIN_TILES:
        return 2
    return None


def blocked_winograd(name, args, out_ty):
    """Whether the kernel call `name(args)` is a blocked convolution that a Winograd
    variant computes best (`blocked_winograd_tile`)."""
    return blocked_winograd_tile(name, args, out_ty) is not None


def blocked_winograd_weights(function):
    """Takes the weights used only as kernels of blocked convolutions that one Winograd
    variant computes best (`blocked_winograd_tile`) as `[16 or 36, ceil(out / 64), in, 64]`
    parameters (their transform, computed at load).

    Returns the function and {parameter index: (layout, columns)}.
    """
    stored = {index: dims(param) for index, param in enumerate(function.params)}
    chosen = {}
    for tile, (layout, values) in BLOCKED_WINOGRAD_LAYOUTS.items():

        def fits(name, args, out_ty, tile=tile):
            return blocked_winograd_tile(name, args, out_ty) == tile

        def transformed_dims(d, values=values):
            return [values, (int(d[0]) + PANEL - 1) // PANEL, d[1], PANEL]

        function, indices = take_weights_otherwise(function, 4, fits, transformed_dims)
        chosen.update({index: (layout, int(stored[index][0])) for index in indices})
    return function, chosen


def blocked_convolution(name, args, out_ty):
    """Whether the kernel call `name(args)` is a convolution of one group from a blocked
    input onto a blocked output (see blocked_layout.py), whose kernel relax-runtime takes
    in filter panels (a depthwise one takes its OIHW kernel as it is, and so does a stem
    from an NCHW input: see `Block.stem_onto_blocks`)."""
    out_dims = dims_of_type(out_ty)
    if name is None or name.removesuffix(RESIDUAL) not in CONV or out_dims is None or len(out_dims) != 5:
        return False
    if rank(args[0]) != 5:
        return False
    groups = args[len(args) + epilogue_index(name) - 1]
    return int(groups.value) == 1


def takes_filter_panels(name, args, out_ty):
    """Whether the kernel call `name(args)` (a convolution with one group and static
    sizes) computes best with its kernel packed in filter panels: a blocked convolution
    does unless Winograd does (`blocked_winograd`)."""
    if blocked_convolution(name, args, out_ty):
        return not blocked_winograd(name, args, out_ty)
    convolution = static_convolution(name, args, out_ty)
    if convolution is None:
        return False
    (filters, _, _, _, height, width), ints = convolution
    groups = ints[-1]
    pixels = height * width
    return (
        groups == 1
        and filters % FILTER_PANELS_FILTERS == 0
        and FILTER_PANELS_MIN_PIXELS <= pixels <= FILTER_PANELS_MAX_PIXELS
    )


def bf16_conv_kernel(name):
    """The bf16 blocked convolution kernel taking the same arguments as float32 `name`."""
    return "relax_runtime.conv2d_bf16" + name.removeprefix("relax_runtime.conv2d")


# With precision = "bf16", a blocked 3x3 layer that float32 Winograd F(4x4) computes best
# (`blocked_winograd_tile`) stays so from this many channels and filters; the others, and
# every F(2x2) one, run bf16's direct sums. One core, AMD Zen 5, time of F(4x4) / bf16
# (`cargo bench -p relax-kernels --bench layers -- 3x3/1`): ResNet-50's 64 channels over
# 56x56 0.81, 128 over 28x28 0.66; with 32 filters DBNet's 96 channels over 120x120 1.55
# and over 30x30 1.65, DenseNet-121's 128 channels over 56x56 1.05 (over 28x28 0.87),
# SqueezeNet's 16 onto 64 over 55x55 1.35. F(2x2) took 0.70-0.80 of float32's direct
# time on ResNet-50 (see `BLOCKED_WINOGRAD_MIN_CHANNELS`): bf16's took 0.52.
# On a CPU with AMX-BF16 (the request's "matrix_units"), none stays: one core, Intel Xeon
# with AMX, ResNet-50's 3x3 layers took 0.45-0.68 of F(4x4)'s time in bf16 on AMX tiles
# (0.25 over 7x7; `cargo bench -p relax-kernels --bench layers -- ResNet-50`).
BF16_WINOGRAD4_MIN_CHANNELS = 64


def bf16_keeps_winograd(name, args, out_ty, matrix_units=False):
    """Whether the blocked convolution `name(args)` stays float32 Winograd F(4x4) in a
    bf16 build (see `BF16_WINOGRAD4_MIN_CHANNELS`), for a CPU with AMX-BF16's tiles
    (`matrix_units`) or not."""
    if matrix_units or blocked_winograd_tile(name, args, out_ty) != 4:
        return False
    (filters, channels, *_), _ = static_convolution(name, args, out_ty, out_rank=5, symbolic_plane=True)
    return min(filters, channels) >= BF16_WINOGRAD4_MIN_CHANNELS


def takes_bf16_filter_panels(name, args, out_ty, matrix_units=False):
    """Whether the kernel call `name(args)` is a blocked convolution with static kernel
    sizes that a bf16 build runs in bf16 (all but what `bf16_keeps_winograd`)."""
    return (
        blocked_convolution(name, args, out_ty)
        and static_ints(dims(args[1])) is not None
        and not bf16_keeps_winograd(name, args, out_ty, matrix_units)
    )


def bf16_filter_panel_weights(function, matrix_units=False):
    """With `precision = "bf16"`: takes the weights used only as kernels of blocked
    convolutions that the direct blocked kernel computes (`takes_bf16_filter_panels`) as
    `[ceil(out / 64), ceil(in / 2), kh, kw, 64]` parameters of bf16 pairs (rounded and
    packed at load), and sends their calls to the bf16 blocked kernels
    (`relax_runtime.conv2d_bf16...`, the same arguments). A constant kernel is packed now.
    One core, AMD Zen 5 (`cargo bench -p relax-kernels --bench layers -- ResNet-50`):
    ResNet-50's 1x1 layers ran at 346-472 GFLOP/s in bf16 against 232-248 in float32, its
    3x3 layers at 469-476 against 243-252; float32 Winograd F(4x4) outran bf16 on the 3x3
    layers of many channels and filters over large planes (see `bf16_keeps_winograd`),
    but for a CPU with AMX-BF16's tiles (`matrix_units`).

    Returns the function and {parameter index: {"layout": "bf16_filter_panels", "columns":
    out, "depth": in}}.
    """
    stored = {index: dims(param) for index, param in enumerate(function.params)}

    def taken(name, args, out_ty):
        return takes_bf16_filter_panels(name, args, out_ty, matrix_units)

    def packed_dims(d):
        filters, channels, kernel_h, kernel_w = (int(value) for value in d)
        return [(filters + PANEL - 1) // PANEL, (channels + 1) // 2, kernel_h, kernel_w, PANEL]

    function, indices = take_weights_otherwise(
        function, 4, taken, packed_dims, lambda name, _args: bf16_conv_kernel(name)
    )
    chosen = {
        index: {"layout": "bf16_filter_panels", "columns": int(stored[index][0]), "depth": int(stored[index][1])}
        for index in indices
    }

    def packed_constant(binding):
        name, args = kernel_call(binding)
        if name is None or not taken(name, args, binding.var.ty):
            return None
        weight = args[1]
        if not isinstance(weight, tvm.ir.Constant) or rank(weight) != 4 or not is_float32(weight):
            return None
        args[1] = relax.const(bf16_filter_panels_of(weight.value.numpy()))
        return packed(bf16_conv_kernel(name), args, binding.var.ty)

    return rewritten_function(function, packed_constant), chosen


def bf16_filter_panels_of(weight):
    """An OIHW float32 kernel (numpy) rounded to bf16 and packed in filter panels of pairs,
    `[ceil(O / 64), ceil(I / 2), kh, kw, 64]` words (as float32 bit patterns), as
    relax-runtime packs a weight at load: word (pair p, filter o) holds channels 2p (low
    half) and 2p + 1 (high half)."""
    import numpy as np

    filters, channels, kernel_h, kernel_w = weight.shape
    panels, pairs = (filters + PANEL - 1) // PANEL, (channels + 1) // 2
    padded = np.zeros((panels * PANEL, pairs * 2, kernel_h, kernel_w), dtype=np.float32)
    padded[:filters, :channels] = weight
    halves = bf16_values(padded).astype(np.uint32)
    words = halves[:, 0::2] | (halves[:, 1::2] << np.uint32(16))
    split = words.reshape(panels, PANEL, pairs, kernel_h, kernel_w).transpose(0, 2, 3, 4, 1)
    return np.ascontiguousarray(split).view(np.float32)


def filter_panel_weights(function):
    """Takes the weights used only as kernels of convolutions that compute best with
    filter panels (`takes_filter_panels`) as `[ceil(out / 64), in, kh, kw, 64]`
    parameters (packed at load).

    Returns the function and {parameter index: (layout, columns)}.
    """
    stored = {index: dims(param) for index, param in enumerate(function.params)}

    def packed_dims(d):
        return [(int(d[0]) + PANEL - 1) // PANEL, d[1], d[2], d[3], PANEL]

    function, indices = take_weights_otherwise(function, 4, takes_filter_panels, packed_dims)
    return function, {index: ("filter_panels", int(stored[index][0])) for index in indices}


# A point of NCHW and where the blocked layout puts it: `[N, C, H, W]` -> `[N, C / 16, H, W,
# 16]`, the index map of ConvertLayout's NCHW16c transforms (and blocked_layout.py's back).
NCHW_POINT, BLOCKED_POINT = (1, 37, 2, 3), (1, 2, 2, 3, 5)


def maps(index_map, point, image):
    """Whether `index_map` takes the indices `point` to `image`."""
    analyzer = sym.Analyzer()
    mapped = index_map.map_indices([tvm.tirx.IntImm("int64", value) for value in point])
    return len(mapped) == len(image) and all(
        getattr(analyzer.simplify(index), "value", None) == value for index, value in zip(mapped, image)
    )


def blocked_transform(call):
    """Whether `call` is a float32 `layout_transform` between NCHW and NCHW16c (either way)
    without padding, whose channels are whole blocks."""
    if op_name(call) != "relax.layout_transform" or not is_float32(call.args[0], call):
        return False
    attrs = call.attrs
    if attrs.pad_value is not None:
        return False
    source, target = dims(call.args[0]), dims(call)
    if source is None or target is None:
        return False
    if (len(source), len(target)) == (4, 5):
        point, image, blocked = NCHW_POINT, BLOCKED_POINT, target
    elif (len(source), len(target)) == (5, 4):
        point, image, blocked = BLOCKED_POINT, NCHW_POINT, source
    else:
        return False
    return getattr(blocked[4], "value", None) == BLOCK and maps(attrs.index_map, point, image)


def constant_derived(expr, values, depth=0):
    """Whether `expr` is computed from constants alone (by ops of them, through the
    function's `values` {variable: bound value}), which TVM folds when it builds."""
    if depth > 8:
        return False
    if isinstance(expr, tvm.ir.Constant):
        return True
    if isinstance(expr, relax.Var):
        value = values.get(expr)
        return value is not None and constant_derived(value, values, depth)
    if not isinstance(expr, relax.Call) or not isinstance(expr.op, tvm.ir.Op) or expr.op.name.startswith("relax.call"):
        return False
    tensors = [arg for arg in expr.args if isinstance(arg, relax.Expr) and isinstance(getattr(arg, "ty", None), relax.TensorType)]
    return bool(tensors) and all(constant_derived(arg, values, depth + 1) for arg in tensors)


def layout_kernel_calls(function):
    """The function with each used transform between NCHW and channel-blocked tensors (see
    `blocked_transform`) run by relax-runtime's `layout_blocked` kernel: TVM's loops for it
    read 16 planes a value at a time (about 1 GB/s; MobileNetV2's took 10% of its time)."""
    uses = count_uses(function)
    values = bindings_of(function)

    def kernel_call(binding):
        if not blocked_transform(binding.value) or uses.get(binding.var, 0) == 0:
            return None
        if constant_derived(binding.value.args[0], values):
            # Folded when the model is built (a quantized layer's scales per channel).
            return None
        return packed("relax_runtime.layout_blocked", [binding.value.args[0]], binding.var.ty)

    return rewritten_function(function, kernel_call)


def rewrite(ir_module, target, precision="f32", matrix_units=False, fast_bf16=False):
    """The module with its matmuls and convolutions rewritten into kernel calls, and, per
    function name, how it takes each weight parameter it takes otherwise than stored
    (index -> {"layout": "panels", "transposed_panels", "bf16_panels",
    "bf16_transposed_panels", "winograd", "winograd4", "filter_panels",
    "blocked_winograd", "blocked_winograd4", "bf16_filter_panels" or "transposed",
    "columns": N of packed ones, "depth": K of bf16 ones}). `precision` "bf16" takes dense
    weights in bf16 panels (see `panel_weights`) and blocked convolutions' kernels in bf16
    filter panels (see `bf16_filter_panel_weights`). With `fast_bf16` (the target
    CPU multiplies bf16 faster than float32), dense layers and blocked convolutions whose integer
    products bf16 holds exactly go to the bf16 kernels whatever the precision (see
    `bf16_constant_weights`, `exact_bf16_convolutions`)."""
    del target  # the kernels choose their instructions at run time
    module = ir_module
    layouts = {}
    for global_var, function in list(ir_module.functions.items()):
        if isinstance(function, relax.Function) and isinstance(function.body, relax.SeqExpr):
            rewritten = rewrite_function(function, ir_module)
            rewritten, dense_panels = panel_weights(rewritten, precision)
            if fast_bf16 and precision != "bf16":
                rewritten = bf16_constant_weights(rewritten, exact=True)
            bf16_filter_panels = {}
            if precision == "bf16":
                rewritten, bf16_filter_panels = bf16_filter_panel_weights(rewritten, matrix_units)
            elif fast_bf16:
                rewritten = exact_bf16_convolutions(rewritten, matrix_units)
            rewritten, winograd = winograd_weights(rewritten)
            rewritten, recurrent = recurrent_weights(rewritten)
            winograd.update(recurrent)
            rewritten, filter_panels = filter_panel_weights(rewritten)
            rewritten, blocked_winograd_taken = blocked_winograd_weights(rewritten)
            rewritten = blocked_kernels_packed(rewritten, {rewritten.params[index] for index in blocked_winograd_taken})
            rewritten = layout_kernel_calls(rewritten)
            packed = dict(filter_panels)
            packed.update(blocked_winograd_taken)
            chosen = {index: {"layout": layout, "columns": columns} for index, (layout, columns) in packed.items()}
            chosen.update(dense_panels)
            chosen.update(bf16_filter_panels)
            chosen.update({index: {"layout": layout} for index, layout in winograd.items()})
            if chosen:
                layouts[global_var.name_hint] = chosen
            if not rewritten.same_as(function):
                if module is ir_module:
                    module = tvm.IRModule(dict(ir_module.functions), attrs=ir_module.attrs)
                module[global_var] = rewritten
    if module is not ir_module:
        module = relax.transform.Normalize()(module)
    return module, layouts
