"""Channel-blocked tensors for CNNs: `[N, C/16, H, W, 16]` between convolutions.

relax-runtime's blocked convolution kernel (`kernels::blocked`) reads and writes the 16
channels of a pixel as one AVX-512 vector: in NCHW each step of a convolution's depth
reads another plane, and its output goes to as many rows as it has filters. Measured on
one thread of an Intel AVX-512 machine, against the NCHW kernels on ResNet-50's layers in
one process, the blocked kernel took 1.1-2.1x less time on 1x1 convolutions and 1.4-1.9x
less on 3x3 ones; ONNX Runtime's own blocked path runs ResNet-50 1.65x faster than its
NCHW one there.

`convert` runs TVM's ConvertLayout with conv2d in NCHW16c: it converts the convolutions
whose input and output channels are whole blocks (not one over 3 channels), and carries
the layout through the ops between them (adds, ReLUs, pools, concatenations), with
`layout_transform` where a tensor changes layout. A depthwise convolution (one channel
per group, whole blocks of channels) keeps its kernel OIHW, as ConvertLayout's OIHW16o
(relax-runtime's `blocked_depthwise` kernel reads the OIHW weight beneath): MobileNets and
EfficientNets then stay blocked from their stem to their head. Before, every depthwise
layer stayed NCHW and transformed its input and output on every call (MobileNetV2: 56
multiply-adds of its blocked convolutions per value transformed, too few to convert).

Before ConvertLayout, a convolution whose filters are not whole blocks (24, 40, 72...)
gets zero filters up to whole blocks, its output carried padded through the layers after
it (padded_channels.py), so that MobileNets and EfficientNets stay blocked through their
24- and 40-channel stages. Three rewrites go first too, each of an op ConvertLayout does
not carry and left between two transforms: batch norms are decomposed into multiply-adds; a per-channel operand
`[C, 1, 1]` (how ONNX writes a batch norm's scale) is reshaped to `[1, C, 1, 1]`
(DenseNet-121's 62 pre-activation batch norms: 27 million values moved per call); and
the `call_tir`s of `max` or `min` against a scalar bound that ONNX's importer writes for
Clip (MobileNetV2's ReLU6) become `maximum` and `minimum` ops, as does each `clip` with
constant bounds (hard-swish, hard-sigmoid). The module is kept only when the activations
it transforms are few: a convolution that stays NCHW between blocked ones (one over
channels that are not whole blocks) transforms its input and output on every call.

ConvertLayout leaves NCHW a convolution whose filters are not whole blocks that the
padding left (its kernel a weight of values not known when compiling, or fewer than 16
filters over a plane), such as SqueezeNet's last before it (512 channels to 1000 classes
over 13x13, 36% of its multiply-adds), and transforms its blocked input back for it.
`whole_filter_blocks` runs such a
convolution on the blocked input instead, its kernel padded with zero filters to whole
blocks (relax-runtime's filter panels are zero-padded already), and slices the padding
off its output after the transform back to NCHW. One thread, that convolution alone:
111-113 GFLOP/s against 56-64 in NCHW.

ConvertLayout carries no resize either (TVM 0.27's layout inference of `image.resize2d`
fails on NCHW16c): `blocked_resizes` runs a resize of a blocked tensor's NCHW transform on
the blocked tensor, and a detector's FPN keeps its upsampled levels blocked (`ocr_det`:
13 activation transforms a call down to 7).
"""

import tvm
from tvm import relax, sym

from . import offload, padded_channels
from .errors import DriverError
from .bindings import COPY, new_var, rewritten_function
from .offload import BLOCK, extremum_with_scalar, prim_float, static_ints

BLOCKED_LAYOUTS = {"relax.nn.conv2d": ["NCHW16c", "OIHW16i16o"]}
# A depthwise convolution's: its kernel `[C, 1, KH, KW]` has no blocks of input channels.
BLOCKED_DEPTHWISE_LAYOUTS = {"relax.nn.conv2d": ["NCHW16c", "OIHW16o"]}
NCHW_LAYOUTS = {"relax.nn.conv2d": ["NCHW", "OIHW"]}

# The module is blocked only when the activations it transforms, in values, times this
# are at most the multiply-adds of its blocked convolutions (a transform moves each value
# through memory about as slowly as a convolution does a hundred multiply-adds; the
# margin is for the ops between convolutions, which TVM's loops run either way). The
# multiply-adds per transformed value: ResNet-50 9900, Inception v2 9500, DenseNet-121 660
# and Inception v1 590 (faster blocked); MobileNetV2 181 and EfficientNet-B0 176 before
# their 24- and 40-channel layers were padded to whole blocks, and MobileNetV3-Large 57
# (most of its layers over channels that were not whole blocks).
TRANSFORM_COST = 150


def converts(target):
    """Whether `target` (the request's target dict) runs the blocked kernels' AVX-512
    tiles: x86-64 (the portable tiles elsewhere are slower than the NCHW kernels)."""
    triple = target.get("mtriple", "")
    return triple == "" or triple.startswith("x86_64")


def static_size(dims):
    """The number of values of a tensor of `dims`, symbolic dims counted as 1."""
    size = 1
    for dim in dims:
        value = getattr(dim, "value", None)
        size *= value if isinstance(value, int) else 1
    return size


def dims_of(expr):
    return offload.dims_of_type(getattr(expr, "ty", None))


def costs(function):
    """(values the function's activation layout transforms move, multiply-adds of its
    blocked convolutions). A transform of a weight (a parameter after `num_input`) or a
    constant happens once, when TVM folds it or relax-runtime packs it, and a [N, C, 1,
    1] tensor (a bias) is small: neither counts."""
    attrs = function.attrs if function.attrs is not None else {}
    num_input = int(attrs["num_input"]) if "num_input" in attrs else len(function.params)
    weights = set(function.params[num_input:])
    moved, multiply_adds = 0, 0
    for block in function.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
                continue
            if value.op.name == "relax.layout_transform":
                source = value.args[0]
                source_dims = dims_of(source)
                if source in weights or isinstance(source, tvm.ir.Constant) or source_dims is None:
                    continue
                if static_size(source_dims[2:4]) > 1:
                    moved += static_size(source_dims)
            elif value.op.name == "relax.nn.conv2d" and value.attrs.data_layout == "NCHW16c":
                out_dims, w_dims = dims_of(binding.var), dims_of(value.args[1])
                if out_dims is not None and w_dims is not None:
                    # out [N, F/16, OH, OW, 16], w [F/16, C/16, kh, kw, 16i, 16o], or
                    # depthwise (OIHW16o) [C/16, 1, kh, kw, 16].
                    per_output = w_dims[1:5] if value.attrs.kernel_layout == "OIHW16i16o" else w_dims[1:4]
                    multiply_adds += static_size(out_dims) * static_size(per_output)
    return moved, multiply_adds


def has_conv2d(function):
    found = []
    if isinstance(function, relax.Function):
        relax.analysis.post_order_visit(
            function.body,
            lambda expr: found.append(expr)
            if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.nn.conv2d"
            else None,
        )
    return bool(found)


ELEMENTWISE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


def channel_operands(function):
    """The function with each `[C, 1, 1]` operand of an element-wise op on an `[N, C, H,
    W]` tensor reshaped to `[1, C, 1, 1]` (the same broadcast, of the same rank)."""
    analyzer = sym.Analyzer()

    def per_channel(operand, other):
        mine, theirs = dims_of(operand), dims_of(other)
        return (
            mine is not None
            and theirs is not None
            and len(mine) == 3
            and len(theirs) == 4
            and analyzer.can_prove_equal(mine[0], theirs[1])
            and all(analyzer.can_prove_equal(dim, 1) for dim in mine[1:])
        )

    def reshaped(binding):
        value = binding.value
        if not (
            isinstance(value, relax.Call)
            and isinstance(value.op, tvm.ir.Op)
            and value.op.name in ELEMENTWISE
            and len(value.args) == 2
        ):
            return None
        args = list(value.args)
        changed = False
        for index in (0, 1):
            if per_channel(value.args[index], value.args[1 - index]):
                args[index] = relax.op.reshape(value.args[index], [1, dims_of(value.args[index])[0], 1, 1])
                changed = True
        return relax.Call(value.op, args, value.attrs) if changed else None

    return rewritten_function(function, reshaped)



def blocked_source(expr, values):
    """The blocked tensor `[N, C/16, H, W, 16]` whose NCHW transform `expr` is bound to
    (`values`: the bindings of its function), or None."""
    bound = values.get(expr) if isinstance(expr, relax.Var) else None
    if not isinstance(bound, relax.Call) or getattr(bound.op, "name", None) != "relax.layout_transform":
        return None
    source = bound.args[0]
    source_dims, target_dims = dims_of(source), dims_of(expr)
    if source_dims is None or target_dims is None or len(source_dims) != 5 or len(target_dims) != 4:
        return None
    analyzer = sym.Analyzer()
    same = [(source_dims[0], target_dims[0]), (source_dims[1] * BLOCK, target_dims[1])] + list(
        zip(source_dims[2:4], target_dims[2:4])
    )
    if getattr(source_dims[4], "value", None) != BLOCK or not all(analyzer.can_prove_equal(a, b) for a, b in same):
        return None
    return source


def whole_filter_blocks(function):
    """The function with each NCHW convolution of the NCHW transform of a blocked tensor,
    whose filters are not whole blocks (see the module's doc), on the blocked tensor with
    its kernel padded to whole blocks; its output sliced to its filters."""
    values = {}
    for block in function.body.blocks:
        for binding in block.bindings:
            if isinstance(binding, relax.VarBinding):
                values[binding.var] = binding.value

    def padded(binding):
        value = binding.value
        if not isinstance(value, relax.Call) or getattr(value.op, "name", None) != "relax.nn.conv2d":
            return None
        attrs = value.attrs
        x, w = value.args
        source = blocked_source(x, values)
        w_dims = dims_of(w)
        if (
            source is None
            or attrs.data_layout != "NCHW"
            or attrs.kernel_layout != "OIHW"
            or attrs.out_layout not in ("NCHW", "")
            or int(attrs.groups) != 1
            or w_dims is None
            or len(w_dims) != 4
            or not all(isinstance(getattr(dim, "value", None), int) for dim in w_dims)
        ):
            return None
        filters, channels = int(w_dims[0]), int(w_dims[1])
        if filters % BLOCK == 0 or channels % BLOCK != 0:
            return None
        kernel = relax.op.layout_transform(
            w,
            index_map=lambda o, i, h, k: (o // BLOCK, i // BLOCK, h, k, i % BLOCK, o % BLOCK),
            pad_value=0.0,
        )
        convolution = relax.op.nn.conv2d(
            source,
            kernel,
            strides=attrs.strides,
            padding=attrs.padding,
            dilation=attrs.dilation,
            groups=1,
            data_layout="NCHW16c",
            kernel_layout="OIHW16i16o",
            out_layout="NCHW16c",
            out_dtype=attrs.out_dtype,
        )
        return relax.op.strided_slice(nchw_of(convolution), axes=[1], begin=[0], end=[filters])

    return rewritten_function(function, padded)


def nchw_of(blocked):
    """The NCHW transform of the blocked tensor `blocked`."""
    # The op itself: relax.op.layout_transform reads the dtype of its operand, which a
    # nested call has only once normalized (with no pad value, it needs none).
    to_nchw = tvm.tirx.IndexMap.from_func(lambda n, c, h, k, b: (n, c * BLOCK + b, h, k), index_dtype="int64")
    return relax.op._ffi_api.layout_transform(blocked, to_nchw, None)


def blocked_resizes(function):
    """The function with each NCHW resize of the NCHW transform of a blocked tensor done
    on the blocked tensor (ConvertLayout carries no resize: TVM 0.27's layout inference
    of `image.resize2d` fails on NCHW16c), and each transform back to blocks of such a
    resize, also through the copy and match_cast that align an FPN's operands
    (onnx_ops/broadcast.py), the blocked resize itself. The NCHW values stay bound to
    their variables for what else reads them (removed when nothing does)."""
    values = {}
    blocked = {}  # NCHW variable -> the blocked variable it is the transform of
    changed = False
    blocks = []
    for block in function.body.blocks:
        dataflow = isinstance(block, relax.DataflowBlock)

        bindings = []
        for binding in block.bindings:
            value = binding.value
            values[binding.var] = value
            if isinstance(binding, relax.MatchCast):
                source = blocked.get(value)
                dims = blocked_dims_of_type(binding.ty)
                if source is not None and dims is not None:
                    # The same check on the blocked tensor's dims; the NCHW tensor its
                    # transform (a match_cast would stay, used or not).
                    var = new_var(f"{binding.var.name}_blocked", relax.TensorType(dims, binding.ty.dtype), dataflow)
                    bindings.append(relax.MatchCast(var, source, var.ty))
                    bindings.append(relax.VarBinding(binding.var, relax.BlockBuilder().normalize(nchw_of(var))))
                    blocked[binding.var] = var
                    continue
                bindings.append(binding)
                continue
            name = getattr(getattr(value, "op", None), "name", None)
            if name == "relax.image.resize2d" and str(value.attrs.layout) == "NCHW":
                source = blocked_source(value.args[0], values)
                if source is not None and dims_of(binding.var) is not None:
                    attrs = value.attrs
                    resized = relax.BlockBuilder().normalize(
                        relax.op.image.resize2d(
                            source,
                            value.args[1],
                            roi=[float(v) for v in attrs.roi],
                            layout="NCHW16c",
                            method=str(attrs.method),
                            coordinate_transformation_mode=str(attrs.coordinate_transformation_mode),
                            rounding_method=str(attrs.rounding_method),
                            cubic_alpha=float(attrs.cubic_alpha),
                            cubic_exclude=int(attrs.cubic_exclude),
                            extrapolation_value=float(attrs.extrapolation_value),
                            out_dtype=attrs.out_dtype,
                        )
                    )
                    var = new_var(f"{binding.var.name}_blocked", resized.ty, dataflow)
                    bindings.append(relax.VarBinding(var, resized))
                    bindings.append(relax.VarBinding(binding.var, relax.BlockBuilder().normalize(nchw_of(var))))
                    blocked[binding.var] = var
                    changed = True
                    continue
            elif name == "relax.call_pure_packed" and is_copy(value) and value.args[1] in blocked:
                source = blocked[value.args[1]]
                copied = relax.BlockBuilder().normalize(
                    relax.call_pure_packed(COPY, source, ty_args=[relax.TensorType(ndim=5, dtype=source.ty.dtype)])
                )
                var = new_var(f"{binding.var.name}_blocked", copied.ty, dataflow)
                bindings.append(relax.VarBinding(var, copied))
                blocked[binding.var] = var
            elif name == "relax.layout_transform" and value.args[0] in blocked and offload.blocked_transform(value):
                if len(dims_of(binding.var)) == 5:
                    bindings.append(relax.VarBinding(binding.var, blocked[value.args[0]]))
                    continue
            bindings.append(binding)
        blocks.append(relax.DataflowBlock(bindings) if dataflow else relax.BindingBlock(bindings))
    if not changed:
        return function
    return relax.Function(
        function.params, relax.SeqExpr(blocks, function.body.body), function.ret_ty, function.is_pure, function.attrs
    )


def is_copy(call):
    """Whether `call` is `call_pure_packed` of the VM's identity copy."""
    callee = call.args[0] if call.args else None
    return isinstance(callee, relax.ExternFunc) and str(callee.global_symbol) == COPY


def blocked_dims_of_type(ty):
    """The blocked dims `[N, C/16, H, W, 16]` of a float32 NCHW tensor type whose channels
    are static whole blocks, or None."""
    dims = offload.dims_of_type(ty)
    channels = getattr(dims[1], "value", None) if dims is not None and len(dims) == 4 else None
    if not isinstance(channels, int) or channels % BLOCK != 0 or str(ty.dtype) != "float32":
        return None
    return [dims[0], channels // BLOCK, dims[2], dims[3], BLOCK]


def with_whole_filter_blocks(ir_module):
    """`whole_filter_blocks` and `blocked_resizes` on each function, normalized, without
    the transforms they left unused."""
    functions = {
        global_var: blocked_resizes(whole_filter_blocks(function))
        if isinstance(function, relax.Function) and isinstance(function.body, relax.SeqExpr)
        else function
        for global_var, function in ir_module.functions.items()
    }
    module = relax.transform.Normalize()(tvm.IRModule(functions, attrs=ir_module.attrs))
    return relax.transform.DeadCodeElimination()(module)


@relax.expr_functor.mutator
class PositiveAxes(relax.PyExprMutator):
    """See `positive_axes`."""

    def visit_call_(self, call):
        call = super().visit_call_(call)
        name = getattr(call.op, "name", None)
        if name not in ("relax.squeeze", "relax.expand_dims") or call.attrs.axis is None:
            return call
        axes = [int(axis) for axis in call.attrs.axis]
        # squeeze counts axes of its operand, expand_dims of its result.
        ty = getattr(call.args[0], "ty", None) if name == "relax.squeeze" else getattr(call, "ty", None)
        rank = getattr(ty, "ndim", -1)
        if all(axis >= 0 for axis in axes) or rank is None or rank < 0:
            return call
        axes = [axis + rank if axis < 0 else axis for axis in axes]
        return (relax.op.squeeze if name == "relax.squeeze" else relax.op.expand_dims)(call.args[0], axes)


def positive_axes(function):
    """The function with the negative axes of its `squeeze` and `expand_dims` (in If
    branches too) counted from the front: TVM 0.27's ConvertLayout fails on a negative
    one (`std::bad_alloc`; silero-vad's decoder squeezes axis -1)."""
    return PositiveAxes().visit_expr(function)


def clamp_ops(function, module):
    """The function with each `call_tir` of a `max` or `min` of a tensor and a scalar
    bound (how ONNX's importer writes Clip) as a `maximum` or `minimum` op, and each
    `clip` as a `maximum` then a `minimum` of constants."""

    def op(binding):
        value = binding.value
        if not isinstance(value, relax.Call):
            return None
        if getattr(value.op, "name", None) == "relax.clip":
            return clip_as_extrema(value)
        if getattr(value.op, "name", None) != "relax.call_tir":
            return None
        callee, arguments = value.args[0], value.args[1]
        if not isinstance(callee, tvm.ir.GlobalVar) or not isinstance(arguments, relax.Tuple):
            return None
        kind = extremum_with_scalar(module[callee])
        if kind is None or len(arguments.fields) != 2:
            return None
        operand, bound = arguments.fields
        return (relax.op.maximum if kind == "max" else relax.op.minimum)(operand, bound)

    return rewritten_function(function, op)


def clip_as_extrema(clip):
    """`clip(x, low, high)` of a float tensor as `minimum(maximum(x, low), high)`, or None
    (bounds not known when compiling)."""
    operand, low, high = clip.args
    ty = getattr(operand, "ty", None)
    bounds = [prim_float(bound) for bound in (low, high)]
    if not isinstance(ty, relax.TensorType) or not str(ty.dtype).startswith("float") or None in bounds:
        return None
    lower = relax.op.maximum(operand, relax.const(bounds[0], ty.dtype))
    return relax.op.minimum(lower, relax.const(bounds[1], ty.dtype))


def stacks_as_concatenations(function):
    """`function` with each `stack` of a tuple written as the concatenation of its
    tensors each given the new axis (the same values): TVM 0.27's ConvertLayout fails on
    any `stack` ("Invalid SLayout: can't find S in source layout ABC"; magika's layer
    norms stack their variance with zeros), convolutions or not."""

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", None) != "relax.stack" or not isinstance(call.args[0], relax.Tuple):
                return call
            axis = int(call.attrs.axis)
            parts = [self.builder_.emit(relax.op.expand_dims(field, [axis])) for field in call.args[0].fields]
            return relax.op.concat(parts, axis=axis)

    return Rewrite().visit_expr(function)


def channel_splits_as_slices(function):
    """`function` with each `split` of an NCHW tensor's channels (static) written as the
    slices it makes: TVM 0.27's ConvertLayout splits a channel-blocked tensor into parts
    of 0 channels (the convolution after YOLOv8's C2f split, nudenet's, then failed:
    "the data channel size is T.int64(0)"), where it slices one right."""

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", None) != "relax.split" or int(call.attrs.axis) % 4 != 1:
                return call
            dims = dims_of(call.args[0])
            if dims is None or len(dims) != 4 or not isinstance(dims[1], tvm.tirx.IntImm):
                return call
            channels = int(dims[1])
            sections = call.attrs.indices_or_sections
            if isinstance(sections, tvm.tirx.IntImm):
                if channels % int(sections):
                    return call
                bounds = [channels // int(sections) * part for part in range(int(sections) + 1)]
            else:
                bounds = [0, *(min(int(index), channels) for index in sections), channels]
            parts = [
                self.builder_.emit(relax.op.strided_slice(call.args[0], [1], [start], [end]))
                for start, end in zip(bounds, bounds[1:])
            ]
            return relax.Tuple(parts)

    return Rewrite().visit_expr(function)


def prepared(ir_module):
    """The module as ConvertLayout carries it best: batch norms decomposed, stacks as
    concatenations, channel splits as slices, per-channel operands of rank 4, clamps as
    ops (see the module's doc), axes counted from the front (`positive_axes`)."""
    module = relax.transform.DecomposeOpsForInference()(ir_module)
    functions = {
        global_var: clamp_ops(
            channel_operands(channel_splits_as_slices(stacks_as_concatenations(positive_axes(function)))), module
        )
        if isinstance(function, relax.Function) and isinstance(function.body, relax.SeqExpr)
        else function
        for global_var, function in module.functions.items()
    }
    module = relax.transform.Normalize()(tvm.IRModule(functions, attrs=module.attrs))
    # The clamps' PrimFuncs, now unused.
    return relax.transform.DeadCodeElimination()(module)


def desired_layouts(call):
    """ConvertLayout's layouts for `call`: a depthwise convolution over whole blocks of
    channels keeps its kernel OIHW (see the module's doc); a convolution of other groups
    stays NCHW, as relax-runtime's kernels run it (ConvertLayout would block one of
    groups of whole blocks, which neither they nor TVM's legalization run); and a
    transposed convolution keeps its own layouts (with none asked, ConvertLayout gives it
    its blocked input's layout, of another rank than its attributes', and fails)."""
    name = getattr(call.op, "name", None)
    if name == "relax.nn.conv2d_transpose":
        attrs = call.attrs
        return {name: [attrs.data_layout, attrs.kernel_layout, attrs.out_layout or attrs.data_layout]}
    if name == "relax.nn.conv2d" and int(call.attrs.groups) > 1:
        w_dims = static_ints(dims_of(call.args[1]))
        groups = int(call.attrs.groups)
        if w_dims is not None and w_dims[0] == groups and w_dims[1] == 1 and groups % BLOCK == 0:
            return BLOCKED_DEPTHWISE_LAYOUTS
        return NCHW_LAYOUTS
    return BLOCKED_LAYOUTS


def convert(ir_module, target, warnings=None, weights=(None, None)):
    """(The module with its convolutions on blocked tensors where that pays (see the
    module's doc), else the module itself; whether it converted; the values and names of
    its weight parameters). `weights` are those of the module as it comes (values or names
    None when not known): channels padded to whole blocks (padded_channels.py) may add
    padded weights and leave others unused. When TVM's ConvertLayout fails on the module,
    it stays NCHW, and a line saying so goes to `warnings` (the build's output) when given:
    the layout is an optimization, and must never lose a model (TVM 0.27's ConvertLayout
    raises `RuntimeError: Back optional access` on a convolution over a tensor whose dims
    are unknown, for one)."""
    if not converts(target):
        return ir_module, False, weights
    if not any(has_conv2d(function) for function in ir_module.functions.values()):
        return ir_module, False, weights
    try:
        module, *padded_weights = padded_channels.padded(prepared(ir_module), *weights)
        converted = with_whole_filter_blocks(relax.transform.ConvertLayout(BLOCKED_LAYOUTS, desired_layouts)(module))
    except Exception as error:  # noqa: BLE001 - TVM raises InternalError, RuntimeError, ValueError...
        if isinstance(error, DriverError):
            raise
        if warnings is not None:
            first_line = str(error).strip().splitlines()[-1][:300] if str(error).strip() else type(error).__name__
            warnings.append(
                f"the model's convolutions stay NCHW (slower on this CPU): TVM's ConvertLayout failed on it ({first_line})"
            )
        return ir_module, False, weights
    moved, multiply_adds = 0, 0
    for function in converted.functions.values():
        if isinstance(function, relax.Function) and isinstance(function.body, relax.SeqExpr):
            function_moved, function_multiply_adds = costs(function)
            moved += function_moved
            multiply_adds += function_multiply_adds
    if multiply_adds == 0 or moved * TRANSFORM_COST > multiply_adds:
        return ir_module, False, weights
    # ConvertLayout transforms a tensor once per consumer (ResNet-50's max pool output
    # twice: for a block's first convolution and for its shortcut's); one is enough.
    return relax.transform.EliminateCommonSubexpr()(converted), True, tuple(padded_weights)
