"""onnxruntime's fused activations (domain com.microsoft) that TVM's importer lacks:
QuickGelu, BiasAdd, BiasSplitGelu. (Gelu, BiasGelu and FastGelu stay TVM's: they compute
what onnxruntime does.)
"""

from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from .common import const, dims_of, dtype_of


class QuickGelu(onnx_frontend.OnnxOpConverter):
    """x * sigmoid(alpha * x), alpha 1.702 by default."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        x = inputs[0]
        alpha = const(attr.get("alpha", 1.702), dtype_of(x))
        return relax.op.multiply(x, relax.op.sigmoid(relax.op.multiply(x, alpha)))


class BiasAdd(onnx_frontend.OnnxOpConverter):
    """X + bias + skip (X and skip (N, S, C), bias (C))."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        return relax.op.add(relax.op.add(inputs[0], inputs[1]), inputs[2])


class BiasSplitGelu(onnx_frontend.OnnxOpConverter):
    """X + bias (N, S, D) split in halves along D: left * gelu(right) (exact gelu)."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        total = bb.emit(relax.op.add(inputs[0], inputs[1]))
        half = dims_of(total)[2] // 2
        left, right = (bb.emit(part) for part in relax.op.split(total, [half], axis=2))
        return relax.op.multiply(left, relax.op.nn.gelu(right))


CONVERTERS = {"QuickGelu": QuickGelu, "BiasAdd": BiasAdd, "BiasSplitGelu": BiasSplitGelu}
