"""The ONNX RotaryEmbedding operator (opset 23), which TVM's importer lacks.

Input (batch, heads, seq, head) or (batch, seq, heads * head) with `num_heads`; the first
`rotary_embedding_dim` features of each head (all by default) are rotated by the angles
of cos_cache/sin_cache (rows picked by position_ids when given), in halves or, with
`interleaved`, in even/odd pairs; the rest pass through.
"""

from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from .common import dims_of, rank_of


class RotaryEmbedding(onnx_frontend.OnnxOpConverter):
    @classmethod
    def _impl_v23(cls, bb, inputs, attr, params):
        data, cos, sin, positions = inputs[0], inputs[1], inputs[2], inputs[3]
        dims = dims_of(data)
        if rank_of(data) == 4:  # (batch, heads, seq, head) -> (batch, seq, heads, head)
            x = bb.emit(relax.op.permute_dims(data, [0, 2, 1, 3]))
        else:
            heads = attr["num_heads"]
            x = bb.emit(relax.op.reshape(data, (dims[0], dims[1], heads, dims[2] // heads)))
        batch, seq, heads, head = dims_of(x)
        rotary = attr.get("rotary_embedding_dim", 0) or head
        half = rotary // 2
        if positions is not None:
            cos, sin = relax.op.take(cos, positions, axis=0), relax.op.take(sin, positions, axis=0)
        # (batch, seq, half) -> (batch, seq, 1, half): the same angles for every head.
        cos = bb.emit(relax.op.expand_dims(bb.emit(cos), 2))
        sin = bb.emit(relax.op.expand_dims(bb.emit(sin), 2))
        rotated = x if rotary == head else bb.emit(relax.op.strided_slice(x, [3], [0], [rotary]))
        if attr.get("interleaved", 0):
            pairs = bb.emit(relax.op.reshape(rotated, (batch, seq, heads, half, 2)))
            first, second = (bb.emit(relax.op.squeeze(part, [4])) for part in relax.op.split(pairs, 2, axis=4))
        else:
            first = bb.emit(relax.op.strided_slice(rotated, [3], [0], [half]))
            second = bb.emit(relax.op.strided_slice(rotated, [3], [half], [rotary]))
        real = relax.op.subtract(relax.op.multiply(cos, first), relax.op.multiply(sin, second))
        imaginary = relax.op.add(relax.op.multiply(sin, first), relax.op.multiply(cos, second))
        if attr.get("interleaved", 0):
            stacked = bb.emit(relax.op.stack([real, imaginary], axis=4))
            result = relax.op.reshape(stacked, (batch, seq, heads, rotary))
        else:
            result = relax.op.concat([real, imaginary], axis=3)
        if rotary != head:
            result = relax.op.concat([result, relax.op.strided_slice(x, [3], [rotary], [head])], axis=3)
        result = bb.emit(result)
        if rank_of(data) == 4:
            return relax.op.permute_dims(result, [0, 2, 1, 3])
        return relax.op.reshape(result, dims)


CONVERTERS = {"RotaryEmbedding": RotaryEmbedding}
