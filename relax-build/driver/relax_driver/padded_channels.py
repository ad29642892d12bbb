"""Channels padded to whole blocks, so that a CNN's layers over 24, 40 or 72 channels stay
on blocked tensors (see blocked_layout.py) instead of going back to NCHW.

ConvertLayout blocks only the convolutions whose channels are whole blocks of 16. A
MobileNet's or EfficientNet's stages of 24 and 40 channels, and a MobileNetV3's of 72,
120 or 200, then run NCHW between two layout transforms: in MobileNetV2, its 24-channel
stage's two expansions and their transforms took about 0.8 ms of a 9 ms call, and
MobileNetV3-Large kept most of its layers NCHW (ONNX Runtime's blocked path, in blocks of 8
with AVX2, has no such gap).

`padded` gives such a tensor whole blocks first, in NCHW, so that ConvertLayout then
blocks everything: a convolution to `F` filters (`F` at least 16, not a multiple of 16)
gets zero filters up to whole blocks, and its padded output is carried through what comes
after it as long as that is element-wise (adds, multiplies, clamps, activations, with a
per-channel operand padded with a neutral value: 0 to add, 1 to multiply or divide by),
a pool or a mean over the plane, a depthwise convolution (its kernel padded with zero
filters) or the input of another convolution (its kernel padded with zero input
channels). The padded channels then hold zeros or at least finite values (a hard
sigmoid's 0.5), which the next convolution multiplies by zero weights. Anything else (a
concatenation, a reshape, the function's result) reads the padded tensor sliced back to
its channels.

The padded kernels and per-channel operands are weights: a constant is padded now, and so
is a weight parameter whose values the driver holds (a new parameter, `name:padded`,
written with the others); relax-runtime packs them at load as any kernel. A convolution
whose kernel is neither keeps its channels.
"""

import numpy as np
import tvm
from tvm import relax

from .bindings import new_var
from .offload import BLOCK, dims, is_float32, op_name, static_ints

# Binary element-wise ops through which padded channels are carried, and the value a
# per-channel operand is padded with: one that keeps the padded channels finite.
NEUTRAL = {
    "relax.add": 0.0,
    "relax.subtract": 0.0,
    "relax.multiply": 1.0,
    "relax.divide": 1.0,
    "relax.maximum": 0.0,
    "relax.minimum": 0.0,
}
# Ops of one tensor, applied to each channel alone, that keep finite values finite.
UNARY = ("relax.nn.relu", "relax.nn.silu", "relax.nn.gelu", "relax.sigmoid", "relax.tanh", "relax.clip")
POOLS = ("relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.nn.adaptive_avg_pool2d")
PLANE_REDUCTIONS = ("relax.mean", "relax.max", "relax.sum")


def whole_blocks(channels):
    return -(-channels // BLOCK) * BLOCK


def pads_filters(filters, plane):
    """Whether a convolution to `filters` over an output plane of dims `plane` gets zero
    filters up to whole blocks: from 16 filters (which costs it at most 1/3 more
    multiply-adds from 24 on), or fewer over one pixel (a squeeze-excitation's squeeze, of
    a few multiply-adds, whose output would go back to NCHW and return)."""
    if filters % BLOCK == 0:
        return False
    return filters >= BLOCK or static_ints(plane) == [1, 1]


class Weights:
    """The values of a function's weight parameters (those after `num_input`), with their
    names, and the padded weights made from them."""

    def __init__(self, params, arrays, names):
        self.arrays = dict(zip(params, arrays))
        self.names = dict(zip(params, names))
        self.made = {}  # (parameter, padding, value) -> new parameter
        self.new = []  # (new parameter, values, name)

    def padded(self, param, widths, value):
        """A parameter holding `param`'s values padded by `widths` with `value`, or None
        when `param` is no weight of known values."""
        if param not in self.arrays:
            return None
        key = (param, tuple(widths), value)
        if key not in self.made:
            array = np.pad(self.arrays[param], widths, constant_values=value)
            name = f"{self.names[param]}:padded"
            var = relax.Var(name, relax.TensorType(list(array.shape), str(array.dtype)))
            self.made[key] = var
            self.new.append((var, array, name))
        return self.made[key]


def padded(ir_module, arrays=None, names=None):
    """(`ir_module` with its convolutions' channels padded to whole blocks where that keeps
    them blocked, the values of its weight parameters, their names). `arrays` and
    `names` are those of the weights of the one function that has them (None when they
    are embedded as constants or not known); the results are then in the same order as
    the function's new weight parameters."""
    new_arrays, new_names = arrays, names
    functions = {}
    for global_var, function in ir_module.functions.items():
        if not isinstance(function, relax.Function) or not isinstance(function.body, relax.SeqExpr):
            functions[global_var] = function
            continue
        attrs = function.attrs if function.attrs is not None else {}
        num_input = int(attrs["num_input"]) if "num_input" in attrs else len(function.params)
        params = list(function.params)[num_input:]
        known = arrays is not None and len(arrays) == len(params) and params
        weights = Weights(params, arrays, names or [str(p.name) for p in params]) if known else Weights([], [], [])
        rewritten = padded_function(function, weights)
        if known and not rewritten.same_as(function):
            kept, new_arrays, used_names = used_weights(rewritten, num_input, weights)
            new_names = used_names if names is not None else None
            rewritten = relax.Function(
                list(rewritten.params)[:num_input] + kept, rewritten.body, rewritten.ret_ty, rewritten.is_pure, rewritten.attrs
            )
        functions[global_var] = rewritten
    module = relax.transform.Normalize()(tvm.IRModule(functions, attrs=ir_module.attrs))
    return module, new_arrays, new_names


def used_weights(function, num_input, weights):
    """(the weight parameters the function's body still uses, in order, the old ones
    first; their values; their names)."""
    used = set(relax.analysis.free_vars(function.body))
    old = [param for param in list(function.params)[num_input:] if param in used]
    new = [(var, array, name) for var, array, name in weights.new if var in used]
    kept = old + [var for var, _, _ in new]
    arrays = [weights.arrays[param] for param in old] + [array for _, array, _ in new]
    names = [weights.names[param] for param in old] + [name for _, _, name in new]
    return kept, arrays, names


def padded_function(function, weights):
    """The function with the padding of the module's doc, unused bindings removed."""
    values = {}  # variable -> the value bound to it
    carried = {}  # variable with channels not whole blocks -> the padded variable
    changed = False
    blocks = []
    for block in function.body.blocks:
        dataflow = isinstance(block, relax.DataflowBlock)
        bindings = []
        for binding in block.bindings:
            rewrite = Rewrite(values, carried, weights, dataflow)
            rewritten = rewrite.of(binding) if isinstance(binding, relax.VarBinding) else None
            if isinstance(binding, relax.VarBinding):
                values[binding.var] = binding.value
            if rewritten is None:
                bindings.append(binding)
                continue
            value, is_padded = rewritten
            changed = True
            if is_padded:
                # The padded value, and the binding's own variable its slice, for what
                # reads the channels themselves (removed when nothing does).
                carried[binding.var] = rewrite.bound(f"{binding.var.name}_padded", value)
                channels = int(dims(binding.var)[1])
                value = relax.op.strided_slice(carried[binding.var], axes=[1], begin=[0], end=[channels])
            bindings += rewrite.bindings
            bindings.append(relax.VarBinding(binding.var, relax.BlockBuilder().normalize(value)))
        blocks.append(relax.DataflowBlock(bindings) if dataflow else relax.BindingBlock(bindings))
    if not changed:
        return function
    body = relax.SeqExpr(blocks, function.body.body)
    rewritten = relax.Function(function.params, body, function.ret_ty, function.is_pure, function.attrs)
    module = relax.transform.Normalize()(tvm.IRModule({"f": rewritten}))
    return relax.transform.DeadCodeElimination()(module)["f"]


class Rewrite:
    """One binding's value rewritten to read or give padded channels, and whether it gives
    them; or None."""

    def __init__(self, values, carried, weights, dataflow):
        self.values = values
        self.carried = carried
        self.weights = weights
        self.dataflow = dataflow
        # The bindings of what the rewritten value reads that it computes (a padded
        # operand's reshape), in order.
        self.bindings = []

    def bound(self, name, value):
        """A new variable bound to `value` (appended to `bindings`)."""
        value = relax.BlockBuilder().normalize(value)
        var = new_var(name, value.ty, self.dataflow)
        self.bindings.append(relax.VarBinding(var, value))
        return var

    def of(self, binding):
        value = binding.value
        name = op_name(value)
        out = dims(binding.var)
        if name is None or out is None or len(out) != 4 or not is_float32(binding.var):
            return None
        channels = getattr(out[1], "value", None)
        if not isinstance(channels, int):
            return None
        if name == "relax.nn.conv2d":
            return self.conv2d(value, out[2:])
        if channels % BLOCK == 0:
            return None
        if name in NEUTRAL:
            call = self.binary(value, name, channels)
            return None if call is None else (call, True)
        x = value.args[0]
        if x not in self.carried:
            return None
        per_channel = (
            name in UNARY
            or (name in POOLS and value.attrs.layout == "NCHW" and value.attrs.out_layout in ("NCHW", ""))
            or (name in PLANE_REDUCTIONS and self.over_the_plane(value))
        )
        if not per_channel:
            return None
        return relax.Call(value.op, [self.carried[x]] + list(value.args[1:]), value.attrs), True

    @staticmethod
    def over_the_plane(reduction):
        axes = reduction.attrs.axis
        return bool(reduction.attrs.keepdims) and axes is not None and sorted(int(a) % 4 for a in axes) == [2, 3]

    def conv2d(self, call, plane):
        attrs = call.attrs
        x, w = call.args
        w_dims = static_ints(dims(w))
        if (
            attrs.data_layout != "NCHW"
            or attrs.kernel_layout != "OIHW"
            or attrs.out_layout not in ("NCHW", "")
            or w_dims is None
            or not is_float32(x, w)
        ):
            return None
        filters, per_group = w_dims[0], w_dims[1]
        groups = int(attrs.groups)
        channels = per_group * groups
        if groups > 1:
            # A depthwise convolution of a padded input: zero filters for the padding.
            if x not in self.carried or groups != channels or filters != channels:
                return None
            wide = whole_blocks(channels)
            kernel = self.padded_operand(w, [(0, wide - filters), (0, 0), (0, 0), (0, 0)], 0.0)
            return None if kernel is None else (convolution(self.carried[x], kernel, attrs, wide), True)
        input_padding = whole_blocks(channels) - channels if x in self.carried else 0
        filter_padding = whole_blocks(filters) - filters if pads_filters(filters, plane) else 0
        if input_padding == 0 and filter_padding == 0:
            return None
        kernel = self.padded_operand(w, [(0, filter_padding), (0, input_padding), (0, 0), (0, 0)], 0.0)
        if kernel is None:
            return None
        source = self.carried[x] if input_padding else x
        return convolution(source, kernel, attrs, 1), filter_padding > 0

    def binary(self, call, name, channels):
        wide = whole_blocks(channels)
        args = []
        for index, operand in enumerate(call.args):
            if operand in self.carried:
                if index == 1 and name == "relax.divide":
                    return None  # its padded channels may be zero
                if int(dims(operand)[1]) != channels:
                    return None  # broadcast along the channels
                args.append(self.carried[operand])
                continue
            operand_dims = dims(operand)
            operand_dims = operand_dims if operand_dims == [] else static_ints(operand_dims)
            if operand_dims is None:
                return None
            if len(operand_dims) < 3 or (len(operand_dims) == 4 and operand_dims[1] == 1):
                args.append(operand)  # the same for every channel
            elif operand_dims in ([1, channels, 1, 1], [channels, 1, 1]):
                axis = len(operand_dims) - 3
                widths = [(0, 0)] * len(operand_dims)
                widths[axis] = (0, wide - channels)
                operand = self.padded_operand(operand, widths, NEUTRAL[name])
                if operand is None:
                    return None
                args.append(operand)
            else:
                return None
        if not any(operand in self.carried for operand in call.args):
            return None
        return relax.Call(call.op, args, call.attrs)

    def padded_operand(self, operand, widths, value):
        """`operand` (a constant, a weight, or a reshape of either to more dims of 1)
        padded by `widths` with `value`, or None."""
        if isinstance(operand, tvm.ir.Constant):
            return relax.const(np.pad(operand.value.numpy(), widths, constant_values=value))
        bound = self.values.get(operand)
        if op_name(bound) == "relax.reshape":
            source = bound.args[0]
            source_dims = static_ints(dims(source))
            operand_dims = static_ints(dims(operand))
            grown = [width for width in widths if width != (0, 0)]
            if source_dims is None or len(source_dims) != 1 or len(grown) != 1:
                return None
            inner = self.padded_operand(source, [grown[0]], value)
            if inner is None:
                return None
            shape = [size + before + after for size, (before, after) in zip(operand_dims, widths)]
            return self.bound(f"{operand.name}_padded", relax.op.reshape(inner, shape))
        if isinstance(operand, relax.Var):
            return self.weights.padded(operand, widths, value)
        return None


def convolution(x, kernel, attrs, groups):
    """`attrs`' convolution (NCHW, OIHW) of `x` by `kernel`, of `groups` groups."""
    return relax.op.nn.conv2d(
        x,
        kernel,
        strides=attrs.strides,
        padding=attrs.padding,
        dilation=attrs.dilation,
        groups=groups,
        data_layout="NCHW",
        kernel_layout="OIHW",
        out_layout="NCHW",
        out_dtype=attrs.out_dtype,
    )
