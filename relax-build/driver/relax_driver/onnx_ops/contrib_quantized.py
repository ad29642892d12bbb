"""onnxruntime's quantized operators (domain com.microsoft), which its quantizer writes
(quantize_dynamic; quantize_static with QuantFormat.QOperator) and its graph
optimizations fuse, and TVM's importer lacks: DynamicQuantizeMatMul,
MatMulIntegerToFloat, QAttention, DynamicQuantizeLSTM, QGemm and the QLinear
elementwise, pooling, concat, softmax and where operators.

Arithmetic as onnxruntime's CPU kernels: a dynamically quantized input takes
DynamicQuantizeLinear's uint8 scale and zero point, products accumulate in int32 and
are scaled in float32; a quantized output is round-half-to-even of the float32 value
over its scale, plus its zero point, saturated. onnxruntime computes its elementwise
operators through 256-entry tables and its pools with its own float order, so an output
may differ from it by one quantization step where the float value falls on a rounding
boundary.
"""

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from . import contrib_attention, recurrent
from .common import constant_value, dims_of, dtype_of, rank_of
from .quantized import INTEGER_RANGES, as_float32, per_axis, requantized, shifted


def node_name(attr):
    return (attr.get("tvm_custom") or {}).get("name") or "(unnamed)"


def dequantized(bb, value, scale, zero_point, axis=None):
    """(value - zero_point) * scale in float32 (a 1-D scale and zero point along `axis`)."""
    rank = rank_of(value)
    values = relax.op.astype(shifted(bb, value, zero_point, axis), "float32")
    return bb.emit(relax.op.multiply(values, per_axis(bb, as_float32(bb, scale), rank, axis)))


def quantized_to(bb, value, scale, zero_point, dtype):
    """saturate(round(value / scale) + zero_point) in `dtype`."""
    low, high = INTEGER_RANGES[dtype]
    scaled = relax.op.round(relax.op.divide(value, as_float32(bb, scale)))
    if zero_point is not None:
        scaled = relax.op.add(scaled, relax.op.astype(zero_point, "float32"))
    return bb.emit(relax.op.astype(relax.op.clip(scaled, low, high), dtype))


def dynamically_quantized(bb, x):
    """(x as uint8, its scale, its zero point) by DynamicQuantizeLinear's rule: the range
    [min(0, x), max(0, x)] over 255 steps."""
    fields = onnx_frontend.DynamicQuantizeLinear._impl_v11(bb, [x], {}, None)
    return tuple(bb.emit(field) for field in fields)


def integer_product_to_float(bb, a, a_scale, a_zero, b, b_scale, b_zero, bias):
    """(a - a_zero) @ (b - b_zero) in int32, times a_scale * b_scale (b's per column),
    plus bias, in float32."""
    product = bb.emit(relax.op.matmul(shifted(bb, a, a_zero, -2), shifted(bb, b, b_zero, -1), out_dtype="int32"))
    rank = rank_of(product)
    scale = relax.op.multiply(per_axis(bb, as_float32(bb, a_scale), rank, -2),
                              per_axis(bb, as_float32(bb, b_scale), rank, -1))
    result = relax.op.multiply(relax.op.astype(product, "float32"), scale)
    if bias is not None:
        result = relax.op.add(result, as_float32(bb, bias))
    return bb.emit(result)


class MatMulIntegerToFloat(onnx_frontend.OnnxOpConverter):
    """Inputs A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias; float output."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        a, b, a_scale, b_scale, a_zero, b_zero, bias = (inputs[i] for i in range(7))
        return integer_product_to_float(bb, a, a_scale, a_zero, b, b_scale, b_zero, bias)


class DynamicQuantizeMatMul(onnx_frontend.OnnxOpConverter):
    """Inputs A (float, quantized here to uint8 per tensor), B, b_scale, b_zero_point,
    bias; float output."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        a, a_scale, a_zero = dynamically_quantized(bb, inputs[0])
        return integer_product_to_float(bb, a, a_scale, a_zero, inputs[1], inputs[2], inputs[3], inputs[4])


class QAttention(onnx_frontend.OnnxOpConverter):
    """com.microsoft Attention on a quantized input and weight: inputs input, weight,
    bias, input_scale, weight_scale (per tensor or per column), mask_index,
    input_zero_point, weight_zero_point, past; outputs output, present."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        contrib_attention.refuse_unsupported("QAttention", attr, inputs, {})
        x, weight, bias, x_scale, weight_scale, mask, x_zero, weight_zero, past = (inputs[i] for i in range(9))
        qkv = integer_product_to_float(bb, x, x_scale, x_zero, weight, weight_scale, weight_zero, bias)
        return contrib_attention.attention_from_projection(bb, "QAttention", qkv, attr, mask, past, None)


def constant_dequantized(values, scale, zero_point):
    """DynamicQuantizeLSTM's weights (directions, rows, 4 * hidden) dequantized with a
    scale and zero point per direction or per direction and column."""
    scale = scale.astype(np.float32)
    zero_point = zero_point.astype(np.int32)
    shape = (-1, 1, 1) if scale.ndim == 1 else (scale.shape[0], 1, scale.shape[1])
    return (values.astype(np.int32) - zero_point.reshape(shape)).astype(np.float32) * scale.reshape(shape)


class DynamicQuantizeLSTM(onnx_frontend.OnnxOpConverter):
    """An LSTM with int8/uint8 weights W (directions, input, 4 * hidden) and R
    (directions, hidden, 4 * hidden) and their scales and zero points (per direction,
    or per direction and column): the weights are dequantized to float32 at import and
    the layer is recurrent.py's LSTM.

    The input and hidden state stay float32: onnxruntime quantizes them to uint8 at
    every step, so its results differ from the float layer by about one quantization
    step of those values times the weights (its tests of this operator allow 1e-3 of
    relative error; test_onnx_ops_contrib_quantized states the bound used)."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        x, w, r, bias, lengths, initial_h, initial_c, peepholes = (inputs[i] for i in range(8))
        weights = []
        for value, scale, zero in ((w, inputs[8], inputs[9]), (r, inputs[10], inputs[11])):
            known = [constant_value(part, params) for part in (value, scale, zero)]
            if any(part is None for part in known):
                raise ValueError(f"DynamicQuantizeLSTM (com.microsoft) node {node_name(attr)!r}: weights, scales "
                                 "and zero points computed at run time are not supported (constants are)")
            # (directions, rows, 4 * hidden) -> ONNX's (directions, 4 * hidden, rows)
            weights.append(relax.const(np.ascontiguousarray(constant_dequantized(*known).transpose(0, 2, 1))))
        return recurrent.LSTM.convert(bb, [x, weights[0], weights[1], bias, lengths, initial_h, initial_c, peepholes],
                                      attr)


def output_dtype(zero_point, x):
    return dtype_of(zero_point) if zero_point is not None else dtype_of(x)


class QLinearAdd(onnx_frontend.OnnxOpConverter):
    """C = round((A - za) * sa / sc + (B - zb) * sb / sc) + zc, saturated (broadcasting)."""

    operation = "add"

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        a, a_scale, a_zero, b, b_scale, b_zero, c_scale, c_zero = (inputs[i] for i in range(8))
        a_values = relax.op.astype(shifted(bb, a, a_zero), "float32")
        b_values = relax.op.astype(shifted(bb, b, b_zero), "float32")
        c_scale = as_float32(bb, c_scale)
        if cls.operation == "add":
            total = relax.op.add(relax.op.multiply(a_values, relax.op.divide(as_float32(bb, a_scale), c_scale)),
                                 relax.op.multiply(b_values, relax.op.divide(as_float32(bb, b_scale), c_scale)))
        else:
            ratio = relax.op.divide(relax.op.multiply(as_float32(bb, a_scale), as_float32(bb, b_scale)), c_scale)
            total = relax.op.multiply(relax.op.multiply(a_values, b_values), ratio)
        return requantized(bb, bb.emit(total), relax.const(1.0, "float32"), c_zero, output_dtype(c_zero, a))


class QLinearMul(QLinearAdd):
    """C = round((A - za) * (B - zb) * sa * sb / sc) + zc, saturated (broadcasting)."""

    operation = "multiply"


def unary(function):
    """A QLinear operator computing quantize(function(dequantize(X))): inputs X, X_scale,
    X_zero_point, Y_scale, Y_zero_point."""

    class Unary(onnx_frontend.OnnxOpConverter):
        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            x, x_scale, x_zero, y_scale, y_zero = (inputs[i] for i in range(5))
            value = bb.emit(function(dequantized(bb, x, x_scale, x_zero), attr))
            return quantized_to(bb, value, y_scale, y_zero, output_dtype(y_zero, x))

    return Unary


QLinearSigmoid = unary(lambda x, attr: relax.op.sigmoid(x))
QLinearLeakyRelu = unary(lambda x, attr: relax.op.nn.leakyrelu(x, attr.get("alpha", 0.01)))


class QLinearGlobalAveragePool(onnx_frontend.OnnxOpConverter):
    """The int32 sum over the spatial dims (of N values) less N * zx, times sx / (sy *
    N), rounded, plus zy; channels first, or last with channels_last."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        x, x_scale, x_zero, y_scale, y_zero = (inputs[i] for i in range(5))
        rank = rank_of(x)
        axes = list(range(1, rank - 1)) if attr.get("channels_last", 0) else list(range(2, rank))
        count = 1
        for axis in axes:
            count *= dims_of(x)[axis]
        shifted_x = shifted(bb, x, x_zero)
        ratio = relax.op.divide(as_float32(bb, x_scale), as_float32(bb, y_scale))
        if isinstance(count, int):
            total = bb.emit(relax.op.sum(shifted_x, axis=axes, keepdims=True))
            multiplier = bb.emit(relax.op.divide(ratio, relax.const(float(count), "float32")))
        else:  # spatial dims known at run time only: the float mean
            total = bb.emit(relax.op.mean(relax.op.astype(shifted_x, "float32"), axis=axes, keepdims=True))
            multiplier = bb.emit(ratio)
        return requantized(bb, total, bb.emit(multiplier), y_zero, output_dtype(y_zero, x))


class QLinearAveragePool(onnx_frontend.OnnxOpConverter):
    """AveragePool of the dequantized input (TVM's converter), quantized to the output's
    scale and zero point; channels first, or last with channels_last."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        x, x_scale, x_zero, y_scale, y_zero = (inputs[i] for i in range(5))
        rank = rank_of(x)
        values = dequantized(bb, x, x_scale, x_zero)
        channels_last = attr.get("channels_last", 0)
        if channels_last:
            values = bb.emit(relax.op.permute_dims(values, [0, rank - 1] + list(range(1, rank - 1))))
        pool_attr = {key: value for key, value in attr.items() if key != "channels_last"}
        pooled = bb.emit(onnx_frontend.AveragePool._impl_v1(bb, [values], pool_attr, params))
        if channels_last:
            pooled = bb.emit(relax.op.permute_dims(pooled, [0] + list(range(2, rank)) + [1]))
        return quantized_to(bb, pooled, y_scale, y_zero, output_dtype(y_zero, x))


class QLinearConcat(onnx_frontend.OnnxOpConverter):
    """Inputs Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per tensor: each
    requantized to Y's scale and zero point, then concatenated along `axis`."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        y_scale, y_zero = inputs[0], inputs[1]
        dtype = dtype_of(y_zero)
        parts = []
        for index in range(2, len(inputs), 3):
            x, x_scale, x_zero = inputs[index], inputs[index + 1], inputs[index + 2]
            parts.append(quantized_to(bb, dequantized(bb, x, x_scale, x_zero), y_scale, y_zero, dtype))
        return relax.op.concat(parts, axis=attr["axis"])


class QLinearSoftmax(onnx_frontend.OnnxOpConverter):
    """Softmax of the dequantized input along `axis` (before `opset` 13: over the input
    flattened from `axis` to a matrix), quantized to the output's scale and zero point."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        x, x_scale, x_zero, y_scale, y_zero = (inputs[i] for i in range(5))
        values = dequantized(bb, x, x_scale, x_zero)
        axis = attr.get("axis", -1 if attr.get("opset", 13) >= 13 else 1)
        softmax = onnx_frontend.Softmax._impl_v13 if attr.get("opset", 13) >= 13 else onnx_frontend.Softmax._impl_v1
        probabilities = bb.emit(softmax(bb, [values], {"axis": axis}, params))
        return quantized_to(bb, probabilities, y_scale, y_zero, output_dtype(y_zero, x))


class QLinearWhere(onnx_frontend.OnnxOpConverter):
    """Inputs condition, X, x_scale, x_zero_point, Y, y_scale, y_zero_point, z_scale,
    z_zero_point: X or Y (each requantized to Z's scale and zero point) by condition."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        condition, x, x_scale, x_zero, y, y_scale, y_zero, z_scale, z_zero = (inputs[i] for i in range(9))
        dtype = output_dtype(z_zero, x)
        chosen_x = quantized_to(bb, dequantized(bb, x, x_scale, x_zero), z_scale, z_zero, dtype)
        chosen_y = quantized_to(bb, dequantized(bb, y, y_scale, y_zero), z_scale, z_zero, dtype)
        return relax.op.where(condition, chosen_x, chosen_y)


class QGemm(onnx_frontend.OnnxOpConverter):
    """alpha * (A - za) @ (B - zb) (transA/transB; B's scale and zero point per tensor or
    per column) plus the int32 C (quantized with scale alpha * sa * sb): float32
    without y_scale, else requantized to y_scale and y_zero_point."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        a, a_scale, a_zero, b, b_scale, b_zero, c, y_scale, y_zero = (inputs[i] for i in range(9))
        if attr.get("transA", 0):
            a = bb.emit(relax.op.permute_dims(a, [1, 0]))
        trans_b = attr.get("transB", 0)
        b_shifted = shifted(bb, b, b_zero, 0 if trans_b else 1)
        if trans_b:
            b_shifted = bb.emit(relax.op.permute_dims(b_shifted, [1, 0]))
        product = relax.op.matmul(shifted(bb, a, a_zero), b_shifted, out_dtype="int32")
        if c is not None:
            product = relax.op.add(product, relax.op.astype(c, "int32"))
        product = bb.emit(product)
        scale = relax.op.multiply(as_float32(bb, a_scale), per_axis(bb, as_float32(bb, b_scale), 2, 1))
        scale = relax.op.multiply(scale, relax.const(attr.get("alpha", 1.0), "float32"))
        if y_scale is None:
            return relax.op.multiply(relax.op.astype(product, "float32"), scale)
        multiplier = bb.emit(relax.op.divide(scale, as_float32(bb, y_scale)))
        return requantized(bb, product, multiplier, y_zero, output_dtype(y_zero, a))


CONVERTERS = {
    "MatMulIntegerToFloat": MatMulIntegerToFloat,
    "DynamicQuantizeMatMul": DynamicQuantizeMatMul,
    "QAttention": QAttention,
    "DynamicQuantizeLSTM": DynamicQuantizeLSTM,
    "QLinearAdd": QLinearAdd,
    "QLinearMul": QLinearMul,
    "QLinearSigmoid": QLinearSigmoid,
    "QLinearLeakyRelu": QLinearLeakyRelu,
    "QLinearGlobalAveragePool": QLinearGlobalAveragePool,
    "QLinearAveragePool": QLinearAveragePool,
    "QLinearConcat": QLinearConcat,
    "QLinearSoftmax": QLinearSoftmax,
    "QLinearWhere": QLinearWhere,
    "QGemm": QGemm,
}
