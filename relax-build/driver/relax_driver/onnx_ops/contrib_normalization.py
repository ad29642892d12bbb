"""onnxruntime's fused normalizations (domain com.microsoft, and SimplifiedLayerNormalization,
which onnxruntime registers in the ONNX domain): SkipLayerNormalization,
SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization, EmbedLayerNormalization
and its quantized form QEmbedLayerNormalization.

TVM's importer has SkipLayerNormalization and EmbedLayerNormalization, but the first
refuses a missing beta or bias and returns placeholders for its other outputs (the
optimizer reads input_skip_bias_sum), and the second needs static shapes; both are
built here. Statistics are computed in float32; the outputs are the input's type.
"""

from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from .common import const, dims_of, dtype_of, rank_of


def in_float32(bb, x):
    return bb.emit(relax.op.astype(x, "float32")) if dtype_of(x) != "float32" else x


def layer_normalized(bb, x, gamma, beta, epsilon):
    """(y, mean, 1 / std) over the last axis, all float32 (mean and 1 / std keep it as 1)."""
    mean = bb.emit(relax.op.mean(x, axis=[-1], keepdims=True))
    centered = bb.emit(relax.op.subtract(x, mean))
    variance = relax.op.mean(relax.op.multiply(centered, centered), axis=[-1], keepdims=True)
    inv_std = bb.emit(relax.op.rsqrt(relax.op.add(variance, const(epsilon, "float32"))))
    y = relax.op.multiply(relax.op.multiply(centered, inv_std), in_float32(bb, gamma))
    if beta is not None:
        y = relax.op.add(y, in_float32(bb, beta))
    return bb.emit(y), mean, inv_std


def rms_normalized(bb, x, gamma, epsilon):
    """(y, 1 / rms) over the last axis, float32 (1 / rms keeps the axis as 1)."""
    mean_square = relax.op.mean(relax.op.multiply(x, x), axis=[-1], keepdims=True)
    inverse_rms = bb.emit(relax.op.rsqrt(relax.op.add(mean_square, const(epsilon, "float32"))))
    return bb.emit(relax.op.multiply(relax.op.multiply(x, inverse_rms), in_float32(bb, gamma))), inverse_rms


def skip_sum(bb, inputs, bias_index):
    """input + skip (+ bias), in float32."""
    total = relax.op.add(in_float32(bb, inputs[0]), in_float32(bb, inputs[1]))
    if inputs[bias_index] is not None:
        total = relax.op.add(total, in_float32(bb, inputs[bias_index]))
    return bb.emit(total)


def as_type(bb, x, dtype):
    return bb.emit(relax.op.astype(x, dtype)) if dtype != "float32" else x


class SkipLayerNormalization(onnx_frontend.OnnxOpConverter):
    """LayerNorm(input + skip + bias) * gamma + beta over the last axis; outputs output,
    mean, inv_std_var, input_skip_bias_sum (beta and bias optional)."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        dtype = dtype_of(inputs[0])
        total = skip_sum(bb, inputs, 4)
        y, mean, inv_std = layer_normalized(bb, total, inputs[2], inputs[3], attr.get("epsilon", 1e-12))
        return relax.Tuple([as_type(bb, y, dtype), mean, inv_std, as_type(bb, total, dtype)])


class SkipSimplifiedLayerNormalization(onnx_frontend.OnnxOpConverter):
    """RMSNorm(input + skip + bias) * gamma over the last axis; outputs output, mean (not
    computed by onnxruntime either: zeros), inv_std_var, input_skip_bias_sum."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        dtype = dtype_of(inputs[0])
        total = skip_sum(bb, inputs, 3)
        y, inverse_rms = rms_normalized(bb, total, inputs[2], attr.get("epsilon", 1e-12))
        mean = bb.emit(relax.op.zeros_like(inverse_rms))
        return relax.Tuple([as_type(bb, y, dtype), mean, inverse_rms, as_type(bb, total, dtype)])


class SimplifiedLayerNormalization(onnx_frontend.OnnxOpConverter):
    """RMSNorm(X) * scale over the axes from `axis` (the last by default); outputs Y and
    inv_std_var."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        data, scale = inputs[0], inputs[1]
        dtype = dtype_of(data)
        axis = attr.get("axis", -1)
        axis = axis + rank_of(data) if axis < 0 else axis
        axes = list(range(axis, rank_of(data)))
        x = in_float32(bb, data)
        mean_square = relax.op.mean(relax.op.multiply(x, x), axis=axes, keepdims=True)
        inverse_rms = bb.emit(relax.op.rsqrt(relax.op.add(mean_square, const(attr.get("epsilon", 1e-5), "float32"))))
        y = bb.emit(relax.op.multiply(relax.op.multiply(x, inverse_rms), in_float32(bb, scale)))
        return relax.Tuple([as_type(bb, y, dtype), inverse_rms])


def dequantized(bb, quantized, scale, zero_point):
    """(quantized - zero_point) * scale in float32."""
    values = relax.op.astype(quantized, "float32")
    if zero_point is not None:
        values = relax.op.subtract(values, relax.op.astype(zero_point, "float32"))
    return bb.emit(relax.op.multiply(values, in_float32(bb, scale)))


def embed_layer_normalized(bb, inputs, epsilon):
    """EmbedLayerNormalization on float tables: inputs input_ids, segment_ids, word,
    position, segment embeddings, gamma, beta, mask, position_ids -> (output,
    mask_index, embedding_sum)."""
    input_ids, segment_ids, word, position, segment, gamma, beta, mask, position_ids = (inputs[i] for i in range(9))
    batch, sequence = dims_of(input_ids)
    if position_ids is None:  # positions 0 .. sequence - 1 of every row
        position_ids = bb.emit(relax.op.reshape(relax.op.arange(0, sequence, 1, "int64"), (1, sequence)))
    total = relax.op.add(relax.op.take(in_float32(bb, word), input_ids, axis=0),
                         relax.op.take(in_float32(bb, position), position_ids, axis=0))
    if segment_ids is not None:
        total = relax.op.add(total, relax.op.take(in_float32(bb, segment), segment_ids, axis=0))
    total = bb.emit(total)
    y, _, _ = layer_normalized(bb, total, gamma, beta, epsilon)
    if mask is not None:  # the count of the mask's non-zero entries per row, as onnxruntime's CPU kernel
        nonzero = relax.op.astype(relax.op.not_equal(mask, relax.const(0, dtype_of(mask))), "int32")
        mask_index = bb.emit(relax.op.sum(nonzero, axis=[1]))
    else:
        mask_index = bb.emit(relax.op.zeros(relax.ShapeExpr([batch]), "int32"))
    return y, mask_index, total


class EmbedLayerNormalization(onnx_frontend.OnnxOpConverter):
    """LayerNorm(word[input_ids] + position[position_ids] + segment[segment_ids]) * gamma
    + beta; outputs output, mask_index (int32 count of the mask's non-zeros per row) and
    embedding_sum."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        dtype = dtype_of(inputs[2])
        y, mask_index, total = embed_layer_normalized(bb, inputs, attr.get("epsilon", 1e-12))
        return relax.Tuple([as_type(bb, y, dtype), mask_index, as_type(bb, total, dtype)])


class QEmbedLayerNormalization(onnx_frontend.OnnxOpConverter):
    """EmbedLayerNormalization whose tables, gamma and beta are quantized (uint8 or int8
    with a scale and zero point each), as quantize_dynamic writes it: dequantized here,
    then computed in float32."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        input_ids, segment_ids, mask = inputs[0], inputs[1], inputs[7]
        tables = []
        for quantized, scale, zero in ((2, 8, 13), (3, 9, 14), (4, 10, 15), (5, 11, 16), (6, 12, 17)):
            value = inputs[quantized]
            tables.append(dequantized(bb, value, inputs[scale], inputs[zero]) if value is not None else None)
        word, position, segment, gamma, beta = tables
        y, mask_index, _ = embed_layer_normalized(
            bb, [input_ids, segment_ids, word, position, segment, gamma, beta, mask, None], attr.get("epsilon", 1e-12))
        return relax.Tuple([y, mask_index])


CONVERTERS = {
    "SkipLayerNormalization": SkipLayerNormalization,
    "SkipSimplifiedLayerNormalization": SkipSimplifiedLayerNormalization,
    "SimplifiedLayerNormalization": SimplifiedLayerNormalization,
    "EmbedLayerNormalization": EmbedLayerNormalization,
    "QEmbedLayerNormalization": QEmbedLayerNormalization,
}
