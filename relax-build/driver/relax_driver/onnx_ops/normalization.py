"""LayerNormalization and RMSNormalization.

TVM's LayerNormalization returns placeholders for the Mean and InvStdDev outputs, and its
RMSNormalization fails when the normalized axes start at axis 0. Both are built here
with every output, computed in the stash type (float32 by default) as ONNX specifies;
the main output stays TVM's fused normalization operator where it is right, so that
the build's later passes see the operator they know.
"""

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from .common import ONNX_DTYPES, const, dims_of, dtype_of, rank_of


def stash_dtype(attr):
    """The type the statistics are computed in: `stash_type` (float32 by default)."""
    return ONNX_DTYPES.get(attr.get("stash_type", 1), "float32")


def normalized_axes(attr, data):
    """The axes from `axis` (negative from the end) to the last."""
    rank = rank_of(data)
    axis = attr.get("axis", -1)
    axis = axis + rank if axis < 0 else axis
    return list(range(axis, rank))


def statistics(bb, x, axes, epsilon):
    """(mean, x - mean, 1 / sqrt(variance + epsilon)) over `axes`, kept as 1s."""
    mean = bb.emit(relax.op.mean(x, axis=axes, keepdims=True))
    centered = bb.emit(relax.op.subtract(x, mean))
    variance = relax.op.mean(relax.op.multiply(centered, centered), axis=axes, keepdims=True)
    inv_std = bb.emit(relax.op.rsqrt(relax.op.add(variance, const(epsilon, dtype_of(x)))))
    return mean, centered, inv_std


class LayerNormalization(onnx_frontend.OnnxOpConverter):
    """Y = (X - mean) / sqrt(var + epsilon) * scale + bias over the axes from `axis`;
    also Mean and InvStdDev (keeping the normalized axes as 1s) when the node has them."""

    @classmethod
    def _impl_v17(cls, bb, inputs, attr, params):
        data, scale, bias = inputs[0], inputs[1], inputs[2]
        dtype = dtype_of(data)
        stash = stash_dtype(attr)
        epsilon = attr.get("epsilon", 1e-5)
        axes = normalized_axes(attr, data)
        statistics_used = attr["tvm_custom"]["num_outputs"] > 1
        x = bb.emit(relax.op.astype(data, stash)) if stash != dtype else data
        if bias is None:
            bias = relax.const(np.zeros([int(dim) for dim in dims_of(scale)], "float32"))
            bias = bb.emit(relax.op.astype(bias, dtype_of(scale)))
        gamma, beta = (bb.emit(relax.op.astype(v, stash)) if stash != dtype_of(v) else v for v in (scale, bias))
        if dims_of(scale) == dims_of(data)[axes[0]:] and dims_of(bias) == dims_of(scale):
            y = relax.op.nn.layer_norm(x, gamma, beta, axes, epsilon)
            mean, _, inv_std = statistics(bb, x, axes, epsilon) if statistics_used else (None, None, None)
        else:  # a scale or bias that broadcasts (lower rank, or dims of 1)
            mean, centered, inv_std = statistics(bb, x, axes, epsilon)
            y = relax.op.add(relax.op.multiply(relax.op.multiply(centered, inv_std), gamma), beta)
        y = bb.emit(relax.op.astype(y, dtype) if stash != dtype else y)
        return relax.Tuple([y, mean, inv_std]) if statistics_used else y


class RMSNormalization(onnx_frontend.OnnxOpConverter):
    """Y = X / sqrt(mean(X^2) + epsilon) * scale over the axes from `axis`."""

    @classmethod
    def _impl_v23(cls, bb, inputs, attr, params):
        data, scale = inputs[0], inputs[1]
        dtype = dtype_of(data)
        stash = stash_dtype(attr)
        epsilon = attr.get("epsilon", 1e-5)
        axes = normalized_axes(attr, data)
        x = bb.emit(relax.op.astype(data, stash)) if stash != dtype else data
        gamma = bb.emit(relax.op.astype(scale, stash)) if stash != dtype_of(scale) else scale
        if axes[0] > 0 and dims_of(scale) == dims_of(data)[axes[0]:]:
            y = relax.op.nn.rms_norm(x, gamma, axes, epsilon)
        else:  # all axes (TVM's rms_norm fails there) or a broadcasting scale
            mean_square = relax.op.mean(relax.op.multiply(x, x), axis=axes, keepdims=True)
            inverse_rms = relax.op.rsqrt(relax.op.add(mean_square, const(epsilon, stash)))
            y = relax.op.multiply(relax.op.multiply(x, inverse_rms), gamma)
        return bb.emit(relax.op.astype(y, dtype) if stash != dtype else y)


CONVERTERS = {"LayerNormalization": LayerNormalization, "RMSNormalization": RMSNormalization}
