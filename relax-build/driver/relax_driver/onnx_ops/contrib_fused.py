"""onnxruntime's fused convolution and matmul operators (domain com.microsoft), which
TVM's importer lacks: FusedConv (Conv + an optional sum input Z + an activation),
FusedMatMul (transposes and a scale folded into MatMul) and NhwcConv (Conv on
channels-last data).
"""

from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from .common import const, dtype_of, rank_of


def node_name(attr):
    return (attr.get("tvm_custom") or {}).get("name") or "(unnamed)"


def convolution(bb, inputs, attr, params):
    """TVM's Conv converter (which takes kernel_shape, strides, pads, dilations, group,
    auto_pad), given its own copy of the attributes."""
    conv_attr = {key: value for key, value in attr.items() if key not in ("activation", "activation_params")}
    return bb.emit(onnx_frontend.Conv._impl_v11(bb, onnx_frontend.onnx_input(list(inputs)), conv_attr, params))


def activated(x, attr):
    """`x` through FusedConv's `activation` (with `activation_params`), or as it is."""
    activation = attr.get("activation", b"")
    activation = activation.decode() if isinstance(activation, bytes) else str(activation)
    parameters = list(attr.get("activation_params", ()))
    dtype = dtype_of(x)
    if not activation:
        return x
    if activation == "Relu":
        return relax.op.nn.relu(x)
    if activation == "Tanh":
        return relax.op.tanh(x)
    if activation == "Sigmoid":
        return relax.op.sigmoid(x)
    if activation == "LeakyRelu":
        return relax.op.nn.leakyrelu(x, parameters[0] if parameters else 0.01)
    if activation == "Clip":
        low, high = parameters if parameters else (float("-inf"), float("inf"))
        return relax.op.minimum(relax.op.maximum(x, const(low, dtype)), const(high, dtype))
    if activation == "HardSigmoid":
        alpha, beta = parameters if parameters else (0.2, 0.5)
        linear = relax.op.add(relax.op.multiply(x, const(alpha, dtype)), const(beta, dtype))
        return relax.op.clip(linear, 0.0, 1.0)
    raise ValueError(f"FusedConv (com.microsoft) node {node_name(attr)!r}: activation {activation!r} is not supported "
                     "(Relu, Tanh, Sigmoid, LeakyRelu, Clip and HardSigmoid are)")


class FusedConv(onnx_frontend.OnnxOpConverter):
    """activation(Conv(X, W, B) + Z); inputs X, W, optional B and Z."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        y = convolution(bb, [inputs[0], inputs[1]] + ([inputs[2]] if inputs[2] is not None else []), attr, params)
        if len(inputs) > 3 and inputs[3] is not None:
            y = bb.emit(relax.op.add(y, inputs[3]))
        return activated(y, attr)


def transposed(x, trans, trans_batch):
    """FusedMatMul's view of an operand: with `trans_batch`, the first dim moves after the
    batch dims (..., M, K) -> (batch dims, first, last) as onnxruntime reads it; with
    `trans`, the last two dims swap."""
    rank = rank_of(x)
    if rank < 3 or not trans_batch:
        if trans:
            order = list(range(rank - 2)) + [rank - 1, rank - 2] if rank >= 2 else [0]
            return relax.op.permute_dims(x, order)
        return x
    # transBatch: (d0, d1, ..., dn-2, dn-1) -> (d1, ..., dn-2, d0, dn-1), then transposed if asked.
    order = list(range(1, rank - 1)) + [0, rank - 1]
    if trans:
        order = order[:-2] + [order[-1], order[-2]]
    return relax.op.permute_dims(x, order)


class FusedMatMul(onnx_frontend.OnnxOpConverter):
    """alpha * op(A) @ op(B), op from transA/transB and transBatchA/transBatchB."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        a = transposed(inputs[0], attr.get("transA", 0), attr.get("transBatchA", 0))
        b = transposed(inputs[1], attr.get("transB", 0), attr.get("transBatchB", 0))
        product = relax.op.matmul(a, b)
        alpha = attr.get("alpha", 1.0)
        if alpha != 1.0:
            product = relax.op.multiply(product, const(alpha, dtype_of(inputs[0])))
        return product


class NhwcConv(onnx_frontend.OnnxOpConverter):
    """Conv on channels-last X (N, H, W, C) with channels-last W (M, kH, kW, C / group),
    giving (N, H', W', M) (onnxruntime has it on CUDA only; the layout its
    fusion_nhwc_conv writes)."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        rank = rank_of(inputs[0])
        to_first = [0, rank - 1] + list(range(1, rank - 1))
        data = bb.emit(relax.op.permute_dims(inputs[0], to_first))
        weight = bb.emit(relax.op.permute_dims(inputs[1], to_first))
        conv_inputs = [data, weight] + ([inputs[2]] if len(inputs) > 2 and inputs[2] is not None else [])
        y = convolution(bb, conv_inputs, attr, params)
        return relax.op.permute_dims(y, [0] + list(range(2, rank)) + [1])


CONVERTERS = {"FusedConv": FusedConv, "FusedMatMul": FusedMatMul, "NhwcConv": NhwcConv}
