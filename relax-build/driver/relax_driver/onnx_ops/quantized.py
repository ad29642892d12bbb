"""Integer and quantized operators TVM's importer lacks: ConvInteger, QLinearConv,
QLinearMatMul; and QuantizeLinear/DequantizeLinear with block_size (blocked scales),
which it refuses (the other forms stay TVM's).

Arithmetic as ONNX specifies: zero points subtracted in int32, products accumulated in
int32, requantization in float32 (the scales' product over the output's scale), rounded
half to even, the output's zero point added and saturated to the output type.
"""

from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from .common import dims_of, dtype_of, rank_of

INTEGER_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
                  "int32": (-(2**31), 2**31 - 1)}


def shifted(bb, value, zero_point, channel_axis=None):
    """int32(value) - int32(zero_point). A 1-D zero point holds one value per entry of
    `channel_axis` of `value` (a matrix's rows or columns, a filter's output channels)."""
    value = bb.emit(relax.op.astype(value, "int32"))
    if zero_point is None:
        return value
    zero_point = bb.emit(relax.op.astype(zero_point, "int32"))
    return bb.emit(relax.op.subtract(value, per_axis(bb, zero_point, rank_of(value), channel_axis)))


def per_axis(bb, parameter, rank, axis):
    """A scale or zero point shaped to broadcast over a tensor of `rank`: a 1-D one of
    more than one value along `axis`, any other as it is."""
    if axis is None or rank_of(parameter) != 1 or dims_of(parameter)[0] == 1:
        return parameter
    axis = axis + rank if axis < 0 else axis
    shape = [1] * rank
    shape[axis] = dims_of(parameter)[0]
    return bb.emit(relax.op.reshape(parameter, shape))


def requantized(bb, accumulated, multiplier, zero_point, out_dtype):
    """saturate(round(accumulated * multiplier) + zero_point) in `out_dtype`."""
    low, high = INTEGER_RANGES[out_dtype]
    scaled = relax.op.round(relax.op.multiply(relax.op.astype(accumulated, "float32"), multiplier))
    if zero_point is not None:
        scaled = relax.op.add(scaled, relax.op.astype(zero_point, "float32"))
    return bb.emit(relax.op.astype(relax.op.clip(scaled, low, high), out_dtype))


def as_float32(bb, value):
    return bb.emit(relax.op.astype(value, "float32")) if dtype_of(value) != "float32" else value


def integer_conv(bb, data, weight, attr, params):
    """TVM's Conv converter on int32 operands (zero points already subtracted), given a
    copy of the attributes (it adds kernel_shape to them)."""
    return bb.emit(onnx_frontend.Conv._impl_v11(bb, onnx_frontend.onnx_input([data, weight]), dict(attr), params))


class ConvInteger(onnx_frontend.OnnxOpConverter):
    """int32 convolution of (x - x_zero_point) and (w - w_zero_point)."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        data = shifted(bb, inputs[0], inputs[2])
        weight = shifted(bb, inputs[1], inputs[3], channel_axis=0)
        return integer_conv(bb, data, weight, attr, params)


class QLinearConv(onnx_frontend.OnnxOpConverter):
    """Inputs x, x_scale, x_zero_point, w, w_scale (per tensor or per output channel),
    w_zero_point, y_scale, y_zero_point, optional int32 bias B."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias = (inputs[i] for i in range(9))
        accumulated = integer_conv(bb, shifted(bb, x, x_zero), shifted(bb, w, w_zero, channel_axis=0), attr, params)
        rank = rank_of(accumulated)
        if bias is not None:
            accumulated = bb.emit(relax.op.add(accumulated, per_axis(bb, bias, rank, 1)))
        w_scale = per_axis(bb, as_float32(bb, w_scale), rank, 1)
        multiplier = relax.op.divide(relax.op.multiply(as_float32(bb, x_scale), w_scale), as_float32(bb, y_scale))
        return requantized(bb, accumulated, bb.emit(multiplier), y_zero, dtype_of(y_zero if y_zero is not None else x))


class QLinearMatMul(onnx_frontend.OnnxOpConverter):
    """Inputs a, a_scale, a_zero_point, b, b_scale, b_zero_point (per tensor or per
    column), y_scale, y_zero_point; float16 or float32 scales."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = (inputs[i] for i in range(8))
        product = bb.emit(relax.op.matmul(shifted(bb, a, a_zero, -2), shifted(bb, b, b_zero, -1), out_dtype="int32"))
        rank = rank_of(product)
        a_scale = per_axis(bb, as_float32(bb, a_scale), rank, -2)
        b_scale = per_axis(bb, as_float32(bb, b_scale), rank, -1)
        multiplier = relax.op.divide(relax.op.multiply(a_scale, b_scale), as_float32(bb, y_scale))
        return requantized(bb, product, bb.emit(multiplier), y_zero, dtype_of(y_zero))


def block_expanded(bb, parameter, axis, block_size, length):
    """A blocked scale or zero point repeated `block_size` times along `axis` and cut
    to `length`, so that it matches the quantized tensor element for element."""
    repeated = bb.emit(relax.op.repeat(parameter, block_size, axis=axis))
    if dims_of(repeated)[axis] != length:
        repeated = bb.emit(relax.op.strided_slice(repeated, [axis], [0], [length]))
    return repeated


def blocked_parameters(bb, inputs, attr, x):
    axis = attr.get("axis", 1)
    axis = axis + rank_of(x) if axis < 0 else axis
    length = dims_of(x)[axis]
    block = attr["block_size"]
    scale = block_expanded(bb, inputs[1], axis, block, length)
    zero = block_expanded(bb, inputs[2], axis, block, length) if inputs[2] is not None else None
    return scale, zero


class QuantizeLinear(onnx_frontend.QuantizeLinear):
    """TVM's, but for blocked quantization (block_size > 0)."""

    @classmethod
    def blocked(cls, bb, inputs, attr):
        x = inputs[0]
        scale, zero = blocked_parameters(bb, inputs, attr, x)
        output_dtype = attr.get("output_dtype", 0)
        out_dtype = onnx_frontend.get_type(output_dtype) if output_dtype else dtype_of(zero) if zero is not None else "uint8"
        low, high = INTEGER_RANGES[out_dtype]
        quantized = relax.op.round(relax.op.divide(as_float32(bb, x), as_float32(bb, scale)))
        if zero is not None:
            quantized = relax.op.add(quantized, relax.op.astype(zero, "float32"))
        return relax.op.astype(relax.op.clip(quantized, low, high), out_dtype)

    @classmethod
    def _impl_v21(cls, bb, inputs, attr, params):
        if attr.get("block_size", 0):
            return cls.blocked(bb, inputs, attr)
        return super()._impl_v21(bb, inputs, attr, params)

    @classmethod
    def _impl_v23(cls, bb, inputs, attr, params):
        if attr.get("block_size", 0) and not attr.get("precision", 0):
            return cls.blocked(bb, inputs, attr)
        return super()._impl_v23(bb, inputs, attr, params)


class DequantizeLinear(onnx_frontend.DequantizeLinear):
    """TVM's, but for blocked quantization (block_size > 0)."""

    @classmethod
    def blocked(cls, bb, inputs, attr):
        x = inputs[0]
        scale, zero = blocked_parameters(bb, inputs, attr, x)
        output_dtype = attr.get("output_dtype", 0)
        out_dtype = onnx_frontend.get_type(output_dtype) if output_dtype else dtype_of(scale)
        values = shifted(bb, x, zero)
        return relax.op.astype(relax.op.multiply(relax.op.astype(values, "float32"), as_float32(bb, scale)), out_dtype)

    @classmethod
    def _impl_v21(cls, bb, inputs, attr, params):
        if attr.get("block_size", 0):
            return cls.blocked(bb, inputs, attr)
        return super()._impl_v21(bb, inputs, attr, params)

    @classmethod
    def _impl_v23(cls, bb, inputs, attr, params):
        if attr.get("block_size", 0):
            return cls.blocked(bb, inputs, attr)
        return super()._impl_v23(bb, inputs, attr, params)


CONVERTERS = {
    "ConvInteger": ConvInteger,
    "QLinearConv": QLinearConv,
    "QLinearMatMul": QLinearMatMul,
    "QuantizeLinear": QuantizeLinear,
    "DequantizeLinear": DequantizeLinear,
}
