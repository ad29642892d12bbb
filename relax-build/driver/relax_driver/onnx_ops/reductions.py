"""Reductions TVM's importer gets wrong in three cases; every other case stays TVM's.

- An empty set (a reduced axis of length 0): ONNX gives the reduction's identity
  (0 for sums, 1 for a product, -inf for a max or log-sum, +inf for a min); TVM returns
  uninitialized memory.
- Boolean ReduceMax/ReduceMin (logical any/all), which TVM cannot compile: reduced as
  uint8 and cast back.
- Floating-point ReduceMax/ReduceMin of a row of -inf (+inf): TVM starts its max (min)
  from the lowest (highest) finite value, so it returns that value instead of the
  infinity (which the fully-masked-row checks of attention graphs test for). Those are
  reduced here from the infinity.
"""

import math

import numpy as np
from tvm import relax, te, tirx
from tvm.relax.frontend.onnx import onnx_frontend

from .common import constant_value, dtype_of, normalized_axes, rank_of, static_dims

# Operator -> the value of its reduction over no elements.
IDENTITIES = {
    "ReduceSum": 0.0, "ReduceSumSquare": 0.0, "ReduceL1": 0.0, "ReduceL2": 0.0, "ReduceMean": math.nan,
    "ReduceProd": 1.0, "ReduceMax": -math.inf, "ReduceMin": math.inf,
    "ReduceLogSum": -math.inf, "ReduceLogSumExp": -math.inf,
}
LOGICAL = {"ReduceMax", "ReduceMin"}


def reduced_axes(inputs, attr, params):
    """The axes to reduce as given (attribute or constant input), or None when none are."""
    if "axes" in attr:
        return list(attr["axes"])
    if len(inputs) > 1 and inputs[1] is not None:
        value = constant_value(inputs[1], params)
        return None if value is None else value.tolist()
    return None


def empty_set_result(name, inputs, attr, params):
    """The constant result of reducing over an axis of length 0, or None when no
    reduced axis is empty (or the shape is not static)."""
    data = inputs[0]
    dims = static_dims(data)
    axes = reduced_axes(inputs, attr, params)
    if dims is None or (not axes and attr.get("noop_with_empty_axes", 0)):
        return None
    axes = normalized_axes(axes, rank_of(data)) if axes else list(range(len(dims)))
    if all(dims[axis] for axis in axes):
        return None
    keep = attr.get("keepdims", 1)
    shape = [1 if axis in axes else dim for axis, dim in enumerate(dims) if keep or axis not in axes]
    dtype = dtype_of(data)
    identity = IDENTITIES[name]
    if dtype == "bool":  # any (max) of nothing is False, all (min) of nothing True
        identity = identity > 0
    elif np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        identity = {math.inf: info.max, -math.inf: info.min}.get(identity, identity)
    return relax.const(np.full(shape, identity, dtype), dtype)


def extreme(data, axes, keepdims, largest):
    """The te computation of max (`largest`) or min of `data` over `axes`, starting from
    -inf (+inf)."""
    combine = tirx.max if largest else tirx.min
    start = -math.inf if largest else math.inf
    reducer = te.comm_reducer(lambda a, b: combine(a, b), lambda dtype: tirx.const(start, dtype), name="extreme")
    reduced = {axis: te.reduce_axis((0, data.shape[axis]), f"k{axis}") for axis in axes}
    shape = [1 if axis in reduced else dim for axis, dim in enumerate(data.shape) if keepdims or axis not in reduced]

    def element(*index):
        kept = iter(index)
        full = []
        for axis in range(len(data.shape)):
            if axis in reduced:
                full.append(reduced[axis])
                if keepdims:
                    next(kept)
            else:
                full.append(next(kept))
        return reducer(data[tuple(full)], axis=list(reduced.values()))

    return te.compute(shape, element, name="extreme")


def float_extreme(bb, name, inputs, attr, params):
    """A floating-point ReduceMax/ReduceMin from the infinity, or None for TVM's
    converter (other operators and types, axes computed at run time, a no-op)."""
    data = inputs[0]
    if name not in LOGICAL or not dtype_of(data).startswith(("float", "bfloat")):
        return None
    axes = reduced_axes(inputs, attr, params)
    if axes is None and len(inputs) > 1 and inputs[1] is not None:
        return None
    if not axes:
        if attr.get("noop_with_empty_axes", 0):
            return None
        axes = range(rank_of(data))
    axes = normalized_axes(list(axes), rank_of(data))
    return bb.emit_te(extreme, data, axes, bool(attr.get("keepdims", 1)), name == "ReduceMax")


def reduction(name, base):
    """`base` (TVM's converter for `name`) with the empty-set and boolean cases."""

    class Reduction(base):
        @classmethod
        def get_converter(cls, opset):
            convert = base.get_converter(opset)

            def converter(bb, inputs, attr, params):
                empty = empty_set_result(name, inputs, attr, params)
                if empty is not None:
                    return empty
                infinite = float_extreme(bb, name, inputs, attr, params)
                if infinite is not None:
                    return infinite
                if name in LOGICAL and dtype_of(inputs[0]) == "bool":
                    widened = onnx_frontend.onnx_input([bb.emit(relax.op.astype(inputs[0], "uint8")), *inputs[1:]])
                    return relax.op.astype(bb.emit(convert(bb, widened, attr, params)), "bool")
                return convert(bb, inputs, attr, params)

            return converter

    Reduction.__name__ = name
    Reduction.__doc__ = f"TVM's {name}, but for the cases this module's docstring lists."
    return Reduction


CONVERTERS = {name: reduction(name, getattr(onnx_frontend, name)) for name in IDENTITIES}
