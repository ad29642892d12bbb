"""Resize (opsets 11-19), for the forms TVM's importer gets wrong or refuses.

TVM maps output to input coordinates with the ratio of the sizes, where ONNX uses the
scale given (they differ when scale * length is not a whole number), and has no
antialiasing, `axes`, `keep_aspect_ratio_policy` or half_pixel_symmetric. Those forms
are built here: each resized axis (of static length) is resampled on its own, as ONNX's
separable definition allows, by a constant (out, in) weight matrix computed at import
(nearest: a gather of indices). Every other form goes to TVM's resize operator, given
the output sizes computed here. Scales or sizes known only at run time (a graph input,
or computed from one) go to relax-kernels' `relax_runtime.resize` (float32): the output
dims are computed in the graph and become new symbolic dims, and the kernel derives the
same sizes and scales, checks the output against them, and resamples.
"""

import math

import numpy as np
from tvm import relax
from tvm.ir.prim.expr import IntImm as tvm_int
from tvm.relax.frontend.onnx import onnx_frontend

from .common import constant_value, dtype_of, rank_of, shape_of_tensor, static_dims

# relax_runtime.resize's numbering of the attributes' values.
MODES = ("nearest", "linear", "cubic")
COORDINATES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
POLICIES = ("stretch", "not_larger", "not_smaller")


def text(attr, name, default):
    value = attr.get(name, default)
    return value.decode("ascii") if isinstance(value, bytes) else value


def source_coordinates(mode, out_len, in_len, scale, roi):
    """The input coordinate each output index maps to, per coordinate_transformation_mode."""
    y = np.arange(out_len, dtype=np.float64)
    scaled_len = scale * in_len
    if mode == "align_corners":
        return np.zeros(out_len) if scaled_len == 1 else y * (in_len - 1) / (scaled_len - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if scaled_len == 1:
            return np.full(out_len, (end - start) * (in_len - 1) / 2 + start * (in_len - 1))
        return y * (end - start) * (in_len - 1) / (scaled_len - 1) + start * (in_len - 1)
    if mode == "pytorch_half_pixel":
        return np.full(out_len, -0.5) if scaled_len == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / scaled_len)
        return offset + (y + 0.5) / scale - 0.5
    raise ValueError(f"Resize: unknown coordinate_transformation_mode {mode!r}")


def nearest_index(x, rounding):
    """The input index nearest to coordinate `x`, ties and rounding per nearest_mode."""
    low, fraction = math.floor(x), x - math.floor(x)
    if fraction == 0:
        return low
    up = {
        "round_prefer_floor": fraction > 0.5,
        "round_prefer_ceil": fraction >= 0.5,
        "floor": False,
        "ceil": True,
    }[rounding]
    return low + 1 if up else low


def cubic_kernel(t, a):
    t = abs(t)
    if t <= 1:
        return (a + 2) * t**3 - (a + 3) * t**2 + 1
    if t < 2:
        return a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a
    return 0.0


def axis_weights(in_len, out_len, scale, roi, settings):
    """(weights (out, in), extrapolated (out,) bool or None) for one axis; weights of an
    index beyond the input go to the edge, as ONNX pads with the edge values."""
    x_all = source_coordinates(settings["coordinates"], out_len, in_len, scale, roi)
    weights = np.zeros((out_len, in_len))
    extrapolated = None
    if settings["coordinates"] == "tf_crop_and_resize":
        extrapolated = (x_all < 0) | (x_all > in_len - 1)
    mode = settings["mode"]
    for row, x in enumerate(x_all):
        if mode == "nearest":
            weights[row, min(max(nearest_index(x, settings["nearest"]), 0), in_len - 1)] = 1.0
            continue
        support = 1.0 if mode == "linear" else 2.0
        stretch = min(scale, 1.0) if settings["antialias"] else 1.0
        reach = support / stretch
        taps = np.arange(math.floor(x - reach), math.ceil(x + reach) + 1)
        if mode == "linear":
            values = np.clip(1 - np.abs((taps - x) * stretch), 0, None)
        else:
            values = np.array([cubic_kernel((tap - x) * stretch, settings["cubic_a"]) for tap in taps])
        if settings["antialias"]:
            values = values / values.sum()
        if settings["exclude_outside"]:
            values = np.where((taps < 0) | (taps >= in_len), 0.0, values)
            values = values / values.sum() if values.sum() else values
        np.add.at(weights[row], np.clip(taps, 0, in_len - 1), values)
    return weights, extrapolated


def resample_axis(bb, x, axis, weights, extrapolated, settings):
    """x resampled along `axis` by `weights` (float32 x; nearest: a gather)."""
    if settings["mode"] == "nearest" and extrapolated is None:
        indices = relax.const(np.argmax(weights, axis=1).astype("int64"))
        return bb.emit(relax.op.take(x, indices, axis=axis))
    rank = rank_of(x)
    order = [i for i in range(rank) if i != axis] + [axis]
    back = list(np.argsort(order))
    moved = bb.emit(relax.op.permute_dims(x, order))
    product = relax.op.matmul(moved, relax.const(weights.T.astype("float32")))
    result = bb.emit(relax.op.permute_dims(bb.emit(product), back))
    if extrapolated is not None and extrapolated.any():
        shape = [1] * rank
        shape[axis] = len(extrapolated)
        mask = relax.const(extrapolated.reshape(shape))
        fill = relax.const(np.float32(settings["extrapolation"]))
        result = bb.emit(relax.op.where(mask, fill, result))
    return result


class Resize(onnx_frontend.OnnxOpConverter):
    """Resize with scales or sizes (constants, or computed and folded to constants)."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        """Opset 10 (inputs X and scales) stays TVM's, as before."""
        return onnx_frontend.Resize._impl_v18(bb, inputs, attr, params)

    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        x = inputs[0]
        dims = static_dims(x)
        roi = constant_value(inputs[1], params) if inputs[1] is not None else None
        scales = constant_value(inputs[2], params) if inputs[2] is not None else None
        sizes = constant_value(inputs[3], params) if inputs[3] is not None else None
        rank = rank_of(x)
        axes = [axis + rank if axis < 0 else axis for axis in attr.get("axes", range(rank))]
        given = (scales is not None and scales.size) or (sizes is not None and sizes.size)
        if not given and dtype_of(x) == "float32" and rank > 0:
            return runtime_resize(bb, inputs, axes, attr)
        if dims is None or not given:
            # Unknown input dims with constant scales or sizes, or another type: TVM's
            # importer decides.
            return onnx_frontend.Resize._impl_v18(bb, inputs, attr, params)
        settings = {
            "mode": text(attr, "mode", "nearest"),
            "coordinates": text(attr, "coordinate_transformation_mode", "half_pixel"),
            "nearest": text(attr, "nearest_mode", "round_prefer_floor"),
            "cubic_a": attr.get("cubic_coeff_a", -0.75),
            "exclude_outside": attr.get("exclude_outside", 0),
            "extrapolation": attr.get("extrapolation_value", 0.0),
            "antialias": attr.get("antialias", 0) and text(attr, "mode", "nearest") != "nearest",
        }
        full_scales, full_sizes = [1.0] * rank, list(dims)
        if sizes is not None and sizes.size:
            for axis, size in zip(axes, sizes.tolist()):
                full_sizes[axis], full_scales[axis] = int(size), size / dims[axis]
            policy = text(attr, "keep_aspect_ratio_policy", "stretch")
            if policy != "stretch":
                pick = min if policy == "not_larger" else max
                scale = pick(full_scales[axis] for axis in axes)
                for axis in axes:
                    full_scales[axis], full_sizes[axis] = scale, int(scale * dims[axis] + 0.5)
        else:
            for axis, scale in zip(axes, scales.tolist()):
                full_scales[axis], full_sizes[axis] = scale, int(scale * dims[axis])
        full_roi = [0.0] * rank + [1.0] * rank
        if roi is not None and roi.size:
            for i, axis in enumerate(axes):
                full_roi[axis], full_roi[rank + axis] = float(roi[i]), float(roi[len(axes) + i])
        if tvm_resize_agrees(settings, dims, full_scales, full_sizes, full_roi, attr, rank):
            given = onnx_frontend.onnx_input(
                [x, relax.const(np.array(full_roi, "float32")), None, relax.const(np.array(full_sizes, "int64"))]
            )
            return onnx_frontend.Resize._impl_v18(bb, given, attr, params)
        dtype = dtype_of(x)
        result = x if dtype == "float32" or settings["mode"] == "nearest" else bb.emit(relax.op.astype(x, "float32"))
        for axis in range(rank):
            roi_pair = (full_roi[axis], full_roi[rank + axis])
            if full_sizes[axis] == dims[axis] and full_scales[axis] == 1.0 and roi_pair == (0.0, 1.0):
                continue
            weights, extrapolated = axis_weights(dims[axis], full_sizes[axis], full_scales[axis], roi_pair, settings)
            result = resample_axis(bb, result, axis, weights, extrapolated, settings)
        if dtype_of(result) == dtype:
            return result
        if np.dtype(dtype).kind in "iu":
            info = np.iinfo(dtype)
            result = relax.op.clip(relax.op.round(result), int(info.min), int(info.max))
        return relax.op.astype(result, dtype)


def runtime_resize(bb, inputs, axes, attr):
    """Resize by scales or sizes known at run time, on relax_runtime.resize.

    Sizes computed from other tensors' shapes (`interpolate(size=y.shape[2:])`: a shape
    value, see `shape_values`) are the output's dims as they are, symbolic ones
    included, so that the result lines up with those tensors (a `Concat` with `y`)."""
    x, roi, scales, sizes = inputs[0], inputs[1], inputs[2], inputs[3]
    rank = rank_of(x)
    sized_dims = None
    if sizes is not None and isinstance(sizes.ty, relax.ShapeType):
        sized_dims = getattr(sizes.ty, "values", None)
        sizes = bb.emit(relax.op.shape_to_tensor(sizes))
    by_sizes = sizes is not None and not is_empty(sizes)
    values = bb.emit(relax.op.astype(sizes if by_sizes else scales, "float64"))
    with_roi = roi is not None and not is_empty(roi)
    roi = bb.emit(relax.op.astype(roi, "float64")) if with_roi else None

    def element(tensor, index):
        return relax.op.take(tensor, relax.const(np.array([index], "int64")), axis=0)

    def constant(value):
        return relax.const(np.array([value], "float64"), "float64")

    dims = bb.emit(relax.op.astype(relax.op.shape_to_tensor(relax.op.shape_of(x)), "float64"))
    rows, listed_values = [], []
    for axis in range(rank):
        listed = axis in axes
        position = axes.index(axis) if listed else None
        value = element(values, position) if listed else (element(dims, axis) if by_sizes else constant(1.0))
        if listed:
            listed_values.append(value)
        start = element(roi, position) if listed and with_roi else constant(0.0)
        end = element(roi, len(axes) + position) if listed and with_roi else constant(1.0)
        rows += [constant(1.0 if listed else 0.0), value, start, end]
    sizing = bb.emit(relax.op.astype(relax.op.concat(rows, axis=0), "float32"))
    policy = text(attr, "keep_aspect_ratio_policy", "stretch") if by_sizes else "stretch"
    if not by_sizes:
        full = relax.op.concat([rows[4 * axis + 1] for axis in range(rank)], axis=0)
        out = relax.op.floor(relax.op.multiply(dims, full))
    elif policy == "stretch":
        out = relax.op.concat([rows[4 * axis + 1] for axis in range(rank)], axis=0)
    else:
        ratios = relax.op.divide(relax.op.concat(listed_values, axis=0),
                                 relax.op.concat([element(dims, axis) for axis in axes], axis=0))
        pick = relax.op.min if policy == "not_larger" else relax.op.max
        scale = pick(ratios, axis=0, keepdims=True)
        listed = relax.const(np.array([axis in axes for axis in range(rank)]))
        out = relax.op.where(listed, relax.op.floor(relax.op.add(relax.op.multiply(dims, scale), constant(0.5))),
                             dims)
    known_x = isinstance(getattr(x.ty, "shape", None), relax.ShapeExpr)
    if by_sizes and policy == "stretch" and known_x and sized_dims is not None and len(sized_dims) == len(axes):
        dims_of_x = list(x.ty.shape.values)
        shape = relax.ShapeExpr([sized_dims[axes.index(axis)] if axis in axes else dims_of_x[axis]
                                 for axis in range(rank)])
    else:
        out = bb.emit(relax.op.astype(out, "int64"))
        shape = shape_of_tensor(bb, out, [f"resized_{axis}" for axis in range(rank)])
    mode = text(attr, "mode", "nearest")
    integers = [
        int(by_sizes),
        POLICIES.index(policy),
        MODES.index(mode),
        COORDINATES.index(text(attr, "coordinate_transformation_mode", "half_pixel")),
        NEAREST_MODES.index(text(attr, "nearest_mode", "round_prefer_floor")),
    ]
    arguments = [x, sizing] + [relax.expr.prim_value(value) for value in integers] + [
        relax.expr.prim_value(float(attr.get("cubic_coeff_a", -0.75))),
        relax.expr.prim_value(int(attr.get("exclude_outside", 0))),
        relax.expr.prim_value(float(attr.get("extrapolation_value", 0.0))),
        relax.expr.prim_value(int(bool(attr.get("antialias", 0)) and mode != "nearest")),
    ]
    out_type = relax.TensorType(list(shape.ty.values), "float32")
    resized = bb.emit(relax.call_dps_packed(relax.ExternFunc("relax_runtime.resize"), arguments, out_ty=out_type))
    # call_dps_packed takes the output's dims themselves, which leaves the shape variable
    # unused, and dead code elimination would drop the match_cast that computes them. The
    # VM's own reshape to the variable (a view of the same tensor, no copy) uses it.
    return relax.call_pure_packed("vm.builtin.reshape", resized, shape, ty_args=out_type)


def is_empty(expr):
    """Whether a tensor expression has no elements (an empty constant, as exporters write
    for the unused one of scales and sizes)."""
    shape = expr.ty.shape if hasattr(expr.ty, "shape") else None
    return isinstance(shape, relax.ShapeExpr) and any(
        isinstance(dim, tvm_int) and int(dim) == 0 for dim in shape.values
    )


def tvm_resize_agrees(settings, dims, scales, sizes, roi, attr, rank):
    """Whether TVM's resize computes this form as ONNX does: every axis scaled by exactly
    its size ratio, spatial axes only (from 2 on), and modes TVM has."""
    exact = all(sizes[axis] == scales[axis] * dims[axis] for axis in range(rank))
    batch_and_channels = all(
        sizes[axis] == dims[axis] and roi[axis] == 0.0 and roi[rank + axis] == 1.0 for axis in (0, 1)
    )
    return (
        exact
        and batch_and_channels
        and rank in (3, 4, 5)
        and not settings["antialias"]
        and settings["coordinates"] != "half_pixel_symmetric"
        and not (settings["coordinates"] == "align_corners" and min(sizes[2:]) == 1)
        and "axes" not in attr
    )


CONVERTERS = {"Resize": Resize}
