"""RotaryEmbedding in its two forms, which share the name: ONNX's (opset 23) and
onnxruntime's (domain com.microsoft). TVM's importer lacks both and passes no domain
to a converter; the forms are told apart by their second input: ONNX's is cos_cache (a
float), onnxruntime's position_ids (an integer).

ONNX: inputs X, cos_cache, sin_cache, optional position_ids. onnxruntime: inputs
input, position_ids ((1): the first position, the others following it; or (batch,
seq)), cos_cache, sin_cache. Input (batch, heads, seq, head) or (batch, seq, heads *
head) with `num_heads` (onnxruntime infers the head size from the caches without it);
the first `rotary_embedding_dim` features of each head (all by default) are rotated by
the angles of the caches' rows at the positions, in halves or, with `interleaved`, in
even/odd pairs; the rest pass through.
"""

from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from .common import dims_of, dtype_of, rank_of


def rotated(bb, x, cos, sin, rotary, interleaved):
    """x (batch, seq, heads, head) with its first `rotary` features of each head rotated
    by the angles cos, sin (broadcasting to (batch, seq, rotary / 2))."""
    batch, seq, heads, head = dims_of(x)
    half = rotary // 2
    # (..., seq, half) -> (..., seq, 1, half): the same angles for every head.
    cos = bb.emit(relax.op.expand_dims(bb.emit(cos), 2))
    sin = bb.emit(relax.op.expand_dims(bb.emit(sin), 2))
    part = x if rotary == head else bb.emit(relax.op.strided_slice(x, [3], [0], [rotary]))
    if interleaved:
        pairs = bb.emit(relax.op.reshape(part, (batch, seq, heads, half, 2)))
        first, second = (bb.emit(relax.op.squeeze(piece, [4])) for piece in relax.op.split(pairs, 2, axis=4))
    else:
        first = bb.emit(relax.op.strided_slice(part, [3], [0], [half]))
        second = bb.emit(relax.op.strided_slice(part, [3], [half], [rotary]))
    real = relax.op.subtract(relax.op.multiply(cos, first), relax.op.multiply(sin, second))
    imaginary = relax.op.add(relax.op.multiply(sin, first), relax.op.multiply(cos, second))
    if interleaved:
        stacked = bb.emit(relax.op.stack([real, imaginary], axis=4))
        result = relax.op.reshape(stacked, (batch, seq, heads, rotary))
    else:
        result = relax.op.concat([real, imaginary], axis=3)
    if rotary != head:
        result = relax.op.concat([result, relax.op.strided_slice(x, [3], [rotary], [head])], axis=3)
    return bb.emit(result)


def rotary_embedding(bb, data, cos, sin, positions, attr, head=None):
    """The rotation of `data` (4-D, or 3-D with `num_heads` or a known `head` size) at
    `positions` (None: the caches' rows are the positions already; else indices into
    them, broadcasting to (batch, seq))."""
    dims = dims_of(data)
    if rank_of(data) == 4:  # (batch, heads, seq, head) -> (batch, seq, heads, head)
        x = bb.emit(relax.op.permute_dims(data, [0, 2, 1, 3]))
    else:
        heads = attr.get("num_heads", 0) or dims[2] // head
        x = bb.emit(relax.op.reshape(data, (dims[0], dims[1], heads, dims[2] // heads)))
    rotary = attr.get("rotary_embedding_dim", 0) or dims_of(x)[3]
    if positions is not None:
        cos, sin = relax.op.take(cos, positions, axis=0), relax.op.take(sin, positions, axis=0)
    result = rotated(bb, x, cos, sin, rotary, attr.get("interleaved", 0))
    if rank_of(data) == 4:
        return relax.op.permute_dims(result, [0, 2, 1, 3])
    return relax.op.reshape(result, dims)


def microsoft_positions(bb, positions, seq):
    """onnxruntime's position_ids as indices broadcasting to (batch, seq): a (1) tensor
    holds the first position."""
    positions = bb.emit(relax.op.astype(positions, "int64"))
    if rank_of(positions) == 1:
        return bb.emit(relax.op.reshape(relax.op.add(relax.op.arange(0, seq, 1, "int64"), positions), (1, seq)))
    return positions


class RotaryEmbedding(onnx_frontend.OnnxOpConverter):
    @classmethod
    def convert(cls, bb, inputs, attr):
        if dtype_of(inputs[1]).startswith(("int", "uint")):  # onnxruntime's form
            if attr.get("is_packed_batching", 0):
                name = attr["tvm_custom"]["name"]
                raise ValueError(f"RotaryEmbedding (com.microsoft) node {name!r}: is_packed_batching=1 (ragged "
                                 "batches) is not supported")
            data, cos, sin = inputs[0], inputs[2], inputs[3]
            seq = dims_of(data)[2 if rank_of(data) == 4 else 1]
            head = attr.get("rotary_embedding_dim", 0) or 2 * dims_of(cos)[1]
            return rotary_embedding(bb, data, cos, sin, microsoft_positions(bb, inputs[1], seq), attr, head)
        return rotary_embedding(bb, inputs[0], inputs[1], inputs[2], inputs[3], attr)

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        return cls.convert(bb, inputs, attr)

    @classmethod
    def _impl_v23(cls, bb, inputs, attr, params):
        return cls.convert(bb, inputs, attr)


CONVERTERS = {"RotaryEmbedding": RotaryEmbedding}
