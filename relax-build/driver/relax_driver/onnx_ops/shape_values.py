"""Operators on shape values (the `Shape` of a tensor with symbolic dims) that TVM's
converters mishandle, so that a graph computing a reshape target from `Shape` keeps its
dims symbolic:

- `Equal` of a shape with a tensor, which TVM's converter passes to `relax.op.equal` as
  they are (and Relax refuses a shape there);
- `Reshape` to a target computed at run time (TVM's converter takes only shapes and
  constants);
- `Slice` of a shape, which TVM's converter refuses ("requires a statically known input
  rank") before it reaches its own code for shapes: a shape of known dims is sliced as a
  shape, one known only at run time as an int64 tensor;
- `ConstantOfShape` of a target computed at run time, cast to a shape of new
  symbolic dims (as a run-time `Reshape` target is);
- `Cast` of a shape to int32 and back, and `Concat` of a shape with int32 constants,
  which TVM's converters turn into tensors whose values are lost to what follows.

A shape (`Shape` of a tensor with symbolic dims) meets a tensor that is no constant when
the preparation step has made a `Constant` node an initializer and the weights are
external (the initializer is then a parameter): exporters compare a `Shape` with -1s
this way before an `Expand`. The shape becomes an int64 tensor (`shape_to_tensor`).
"""

from tvm import relax, tirx
from tvm.ir import GenericConst
from tvm.relax.frontend.onnx import onnx_frontend

from .common import known_entries, shape_of_tensor


def is_shape(expr):
    return isinstance(expr, relax.Expr) and isinstance(expr.ty, relax.ShapeType)


def as_tensor(expr):
    """A shape value as an int64 tensor; any other expression as it is."""
    return relax.op.shape_to_tensor(expr) if is_shape(expr) else expr


class Equal(onnx_frontend.Equal):
    """TVM's `Equal`, with a shape compared to a non-constant tensor as a tensor."""

    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        mixed = any(is_shape(value) for value in inputs) and not all(
            is_shape(value) or isinstance(value, GenericConst) for value in inputs
        )
        if mixed:
            return relax.op.equal(as_tensor(inputs[0]), as_tensor(inputs[1]))
        return super()._impl_v13(bb, inputs, attr, params)


def constant_ints(expr):
    """The values of a 1-element-per-entry int constant (a list), or None."""
    if isinstance(expr, GenericConst):
        return [int(value) for value in expr.value.numpy().reshape(-1)]
    return None


def shape_literal(expr):
    """A shape value as a ShapeExpr of its dims (a literal, or a variable whose type
    knows them), or None for any other expression."""
    if isinstance(expr, relax.ShapeExpr):
        return expr
    values = getattr(expr.ty, "values", None) if is_shape(expr) else None
    return relax.ShapeExpr(list(values)) if values is not None else None


class Slice(onnx_frontend.Slice):
    """TVM's `Slice`, with the slice of a literal shape along its one axis taken here: a
    shape of constant starts, ends and steps stays a shape (its dims symbolic)."""

    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        # (TVM's converter reads the optional axes and steps by position.)
        inputs = [*inputs] + [None] * (5 - len(inputs))
        values = [inputs[0], *(onnx_frontend.get_constant(value, params) for value in inputs[1:])]
        data = shape_literal(values[0])
        if data is not None:
            starts, ends = constant_ints(values[1]), constant_ints(values[2])
            axes = constant_ints(values[3]) if values[3] is not None else [0]
            steps = constant_ints(values[4]) if values[4] is not None else [1]
            known = all(part is not None and len(part) == 1 for part in (starts, ends, axes, steps))
            if known and axes[0] in (0, -1):
                sliced = list(data.values)[slice(starts[0], ends[0], steps[0])]
                if all(isinstance(value, tirx.IntImm) for value in sliced):
                    return relax.const([int(value) for value in sliced], "int64")
                return relax.ShapeExpr(sliced)
        if is_shape(inputs[0]):
            # A shape known only at run time: sliced as an int64 tensor.
            inputs = [bb.emit(as_tensor(inputs[0])), *inputs[1:]]
        to_the_end = sliced_to_the_end(values)
        if to_the_end is not None:
            return to_the_end
        return super()._impl_v13(bb, inputs, attr, params)


# Ends from this value up are exporters' "to the end" (PyTorch writes INT64_MAX,
# tf2onnx INT32_MAX, jax2tf 10**9): no axis of a model is that long.
TO_THE_END = 10**9


def sliced_to_the_end(values):
    """The slice of a tensor whose constant ends run "to the end" (`TO_THE_END` and over)
    along symbolic dims, with those ends the dims themselves; None for any other slice.

    TVM's converter keeps such an end as a number, so the dim becomes `min(end, n)`: a
    different dim from `n` for what follows (a reshape to `n` must copy), and one whose
    upper bound, the sentinel, TVM's memory planning allocates (std::bad_alloc at run
    time)."""
    data = values[0]
    shape = getattr(data.ty, "shape", None) if isinstance(data.ty, relax.TensorType) else None
    if shape is None or not isinstance(shape, relax.ShapeExpr):
        return None
    starts, ends = constant_ints(values[1]), constant_ints(values[2])
    if starts is None or ends is None or len(starts) != len(ends):
        return None
    axes = constant_ints(values[3]) if values[3] is not None else list(range(len(starts)))
    steps = constant_ints(values[4]) if values[4] is not None else [1] * len(starts)
    if axes is None or steps is None or len(axes) != len(starts) or len(steps) != len(starts):
        return None
    dims = list(shape.values)
    axes = [axis + len(dims) if axis < 0 else axis for axis in axes]
    if not all(0 <= axis < len(dims) for axis in axes):
        return None
    open_ended = [
        step > 0 and end >= TO_THE_END and not isinstance(dims[axis], tirx.IntImm)
        for axis, end, step in zip(axes, ends, steps)
    ]
    if not any(open_ended) or 0 in steps:
        return None
    # An axis sliced from 0 to its end by 1 is left alone (a slice of no axis is the
    # tensor itself: jax2tf slices every axis so); the others end at their dims.
    kept = [
        (axis, start, dims[axis] if open else end, step)
        for axis, start, end, step, open in zip(axes, starts, ends, steps, open_ended)
        if not (open and start == 0 and step == 1)
    ]
    if not kept:
        return data
    axes, starts, ends, steps = (list(part) for part in zip(*kept))
    return relax.op.strided_slice(data, axes, starts, ends, steps, assume_inbound=False)


def int64(value):
    return relax.const(value, "int64")


class Reshape(onnx_frontend.Reshape):
    """TVM's `Reshape`, with a target computed at run time (an int64 tensor, e.g. a
    `Shape` sliced and concatenated with constants) resolved at run time as ONNX says:
    a 0 copies the input's dim (unless `allowzero`), a -1 takes what is left."""

    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        # (An initializer is a parameter when weights are external: its value is in params.)
        data, target = inputs[0], onnx_frontend.get_constant(inputs[1], params)
        computed = (
            not isinstance(target, (GenericConst, relax.ShapeExpr))
            and isinstance(target.ty, relax.TensorType)
            and target.ty.ndim == 1
            and isinstance(data.ty, relax.TensorType)
            and data.ty.ndim >= 0
        )
        length = onnx_frontend._get_known_tensor_length(target) if computed else None
        if length is None:
            return super()._impl_v13(bb, inputs, attr, params)
        given = reshape_dims_known(bb, data, target, length, attr.get("allowzero", 0))
        target = bb.emit(relax.op.astype(target, "int64"))
        data_dims = bb.emit(relax.op.shape_to_tensor(bb.emit(relax.op.shape_of(data))))
        if not attr.get("allowzero", 0) and data.ty.ndim > 0:
            # The input's dims where the target has a 0 (positions past its rank keep 1s).
            copied = relax.op.strided_slice(data_dims, axes=[0], begin=[0], end=[min(length, data.ty.ndim)])
            if length > data.ty.ndim:
                copied = relax.op.concat([copied, relax.op.ones([length - data.ty.ndim], "int64")])
            target = bb.emit(relax.op.where(relax.op.equal(target, int64(0)), copied, target))
        unknown = relax.op.equal(target, int64(-1))
        known = relax.op.prod(relax.op.where(unknown, int64(1), target))
        left = relax.op.floor_divide(relax.op.prod(data_dims), known)
        target = bb.emit(relax.op.where(unknown, left, target))
        # A shape expression of the cast's dims, not the cast variable: TVM's legalization
        # of `reshape` takes a variable only when it is bound to a shape expression
        # (YOLOv8's head, nudenet's export, failed there with an AssertionError).
        shape = shape_of_tensor(bb, target, [f"reshape_dim_{i}" for i in range(length)], given)
        return relax.op.reshape(data, relax.ShapeExpr(list(shape.ty.values)))


def reshape_dims_known(bb, data, target, length, allowzero):
    """The dims of a `Reshape` to a target computed at run time that the graph gives: a
    constant entry of the target (YOLOv8's `[batch, 4, -1]`), or the input's dim where
    the entry is a constant 0; None where only the run time knows (a -1, a `Shape`'s
    dim). Known dims keep what follows static (a `[batch, 4, n]` sliced in two halves of
    2, against anchors of 2 rows: new variables there left the sum's shape unknown)."""
    input_dims = data.ty.shape.values if isinstance(data.ty.shape, relax.ShapeExpr) else None
    known = []
    for position, entry in enumerate(known_entries(bb, target, length)):
        if entry is not None and entry > 0:
            known.append(tirx.IntImm("int64", entry))
        elif entry == 0 and not allowzero and input_dims is not None and position < len(input_dims):
            known.append(input_dims[position])
        else:
            known.append(None)
    return known


# Integer types wide enough for any dim: a shape cast to one of them keeps its values.
WIDE_INTEGERS = ("int32", "int64", "uint32", "uint64")


class Cast(onnx_frontend.Cast):
    """TVM's `Cast`, with a shape cast to a wide integer type kept a shape (TVM makes a
    symbolic one an int64 tensor, whose values nothing after it knows: magika's export,
    from jax2tf, casts `Shape` to int32 and back before its `Reshape` and `Expand`
    targets, which then could not be resolved)."""

    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        literal = shape_literal(inputs[0]) if is_shape(inputs[0]) else None
        if literal is not None and str(onnx_frontend.get_type(attr["to"])) in WIDE_INTEGERS:
            return literal
        return super()._impl_v13(bb, inputs, attr, params)


class Concat(onnx_frontend.Concat):
    """TVM's `Concat`, with a shape and integer constants of any wide type (not only
    int64) concatenated into a shape (see `Cast`)."""

    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        values = [onnx_frontend.get_constant(value, params) for value in inputs]
        parts = []
        for value in values:
            if is_shape(value) and shape_literal(value) is not None:
                parts.extend(shape_literal(value).values)
            elif (
                isinstance(value, GenericConst)
                and value.ty.ndim == 1
                and str(value.ty.dtype) in WIDE_INTEGERS
            ):
                parts.extend(int(number) for number in value.value.numpy())
            else:
                parts = None
                break
        if parts is not None and any(is_shape(value) for value in values):
            return relax.ShapeExpr(parts)
        return super()._impl_v13(bb, inputs, attr, params)


class ConstantOfShape(onnx_frontend.ConstantOfShape):
    """TVM's `ConstantOfShape`, with a target computed at run time (an int64 tensor, e.g.
    a product of two dims of a `Shape`, as YOLOv8's head computes its anchor count) cast
    to a shape of new symbolic dims: TVM's converter broadcasts to `tensor_to_shape` of
    the tensor, a shape whose dims nothing knows, which TVM's legalization of
    `broadcast_to` refuses (an AssertionError in `reshape_call_te`)."""

    @classmethod
    def _impl_v9(cls, bb, inputs, attr, params):
        target = onnx_frontend.get_constant(inputs[0], params)
        literal = shape_literal(target) if is_shape(target) else None
        if literal is not None:
            return super()._impl_v9(bb, [literal], attr, params)
        computed = (
            not isinstance(target, (GenericConst, relax.ShapeExpr))
            and isinstance(target.ty, relax.TensorType)
            and target.ty.ndim == 1
        )
        length = onnx_frontend._get_known_tensor_length(target) if computed else None
        if length is None:
            return super()._impl_v9(bb, inputs, attr, params)
        known = [
            None if entry is None or entry < 0 else tirx.IntImm("int64", entry)
            for entry in known_entries(bb, target, length)
        ]
        target = bb.emit(relax.op.astype(target, "int64"))
        shape = shape_of_tensor(bb, target, [f"filled_dim_{i}" for i in range(length)], known)
        return super()._impl_v9(bb, [relax.ShapeExpr(list(shape.ty.values))], attr, params)


CONVERTERS = {
    "Cast": Cast,
    "Concat": Concat,
    "ConstantOfShape": ConstantOfShape,
    "Equal": Equal,
    "Reshape": Reshape,
    "Slice": Slice,
}
