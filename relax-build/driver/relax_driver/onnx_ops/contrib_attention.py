"""onnxruntime's attention operators (domain com.microsoft): Attention (reached through
attention.py, which owns the name it shares with ONNX's operator), MultiHeadAttention,
GroupQueryAttention, and the attention of QAttention (contrib_quantized.py).

TVM's importer converts com.microsoft Attention only for static shapes, a 2-D or 3-D
mask, no past and no unidirectional; it is built here as onnxruntime's CPU kernels
compute it: softmax(scale * Q K^T + mask + attention_bias) V, where the mask (from
mask_index: key lengths (batch), ends and starts (2 * batch), a 0/1 mask (batch,
total) or (batch, seq, total)) puts `mask_filter_value` (-10000 by default) on the
masked keys, and unidirectional attention puts the float32 lowest value on the keys
after each query (its position counts the past).
"""

import math

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend
from tvm.sym.analyzer import Analyzer

from .common import const, dims_of, dtype_of, rank_of
from .rotary import rotated

FLOAT32_LOWEST = float(np.finfo(np.float32).min)


def node_name(attr):
    return (attr.get("tvm_custom") or {}).get("name") or "(unnamed)"


def refuse(op_type, attr, what):
    raise ValueError(f"{op_type} (com.microsoft) node {node_name(attr)!r}: {what} is not supported")


def heads_first(bb, x, heads):
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    batch, seq, hidden = dims_of(x)
    return bb.emit(relax.op.permute_dims(relax.op.reshape(x, (batch, seq, heads, hidden // heads)), [0, 2, 1, 3]))


def heads_last(bb, x):
    """(batch, heads, seq, size) -> (batch, seq, heads * size)."""
    batch, heads, seq, size = dims_of(x)
    return bb.emit(relax.op.reshape(relax.op.permute_dims(x, [0, 2, 1, 3]), (batch, seq, heads * size)))


def positions(bb, length, shape):
    """0 .. length - 1 as int64, reshaped to `shape` (one dim of which is `length`)."""
    return bb.emit(relax.op.reshape(relax.op.arange(0, length, 1, "int64"), shape))


def is_twice(length, batch):
    """Whether a 1-D mask of `length` holds ends and starts (2 * batch entries)."""
    if isinstance(length, int) and isinstance(batch, int):
        return length == 2 * batch
    return not isinstance(length, int) and Analyzer().can_prove_equal(length, batch * 2)


def mask_bias(bb, op_type, attr, mask, batch, total, dtype):
    """The additive bias of a mask_index / key_padding_mask, broadcasting to (batch, 1,
    seq, total): 0 where a key is kept, `mask_filter_value` where it is masked."""
    filtered = const(attr.get("mask_filter_value", -10000.0), dtype)
    zero = const(0.0, dtype)
    rank = rank_of(mask)
    if rank == 1:
        columns = positions(bb, total, (1, total))
        mask = bb.emit(relax.op.astype(mask, "int64"))
        if is_twice(dims_of(mask)[0], batch):
            halves = bb.emit(relax.op.reshape(mask, (2, batch, 1)))
            ends, starts = (bb.emit(relax.op.take(halves, relax.const(i, "int64"), axis=0)) for i in (0, 1))
            kept = relax.op.logical_and(relax.op.less(columns, ends), relax.op.greater_equal(columns, starts))
        else:
            kept = relax.op.less(columns, bb.emit(relax.op.reshape(mask, (batch, 1))))
        return bb.emit(relax.op.reshape(relax.op.where(kept, zero, filtered), (batch, 1, 1, total)))
    kept = relax.op.greater(mask, relax.const(0, dtype_of(mask)))
    bias = bb.emit(relax.op.where(kept, zero, filtered))
    if rank == 2:  # (batch, total)
        return bb.emit(relax.op.reshape(bias, (batch, 1, 1, total)))
    if rank == 3:  # (batch, seq, total)
        return bb.emit(relax.op.expand_dims(bias, 1))
    refuse(op_type, attr, f"a {rank}-D mask (the 4-D Megatron form (batch, 1, max, max) has no CPU kernel either)")


def causal(bb, bias, seq, total, offset, dtype):
    """`bias` (or zeros) with the float32 lowest value on the keys after each query; query
    i sits at position i + offset (a count, or a (batch, 1, 1, 1) tensor)."""
    rows = positions(bb, seq, (seq, 1))
    columns = positions(bb, total, (1, total))
    if not isinstance(offset, relax.Expr):
        offset = relax.const(offset, "int64")
    allowed = relax.op.less_equal(columns, relax.op.add(rows, offset))
    kept = bias if bias is not None else const(0.0, dtype)
    return bb.emit(relax.op.where(allowed, kept, const(FLOAT32_LOWEST, dtype)))


def attend(bb, query, key, value, scale, biases, softcap=0.0):
    """softmax(scale * query key^T (softcapped) + the biases) value; query (batch,
    heads, seq, size), key and value (batch, heads, total, size)."""
    dtype = dtype_of(query)
    scores = relax.op.multiply(relax.op.matmul(query, relax.op.permute_dims(key, [0, 1, 3, 2])), const(scale, dtype))
    if softcap > 0:
        cap = const(softcap, dtype)
        scores = relax.op.multiply(relax.op.tanh(relax.op.divide(scores, cap)), cap)
    for bias in biases:
        if bias is not None:
            scores = relax.op.add(scores, bias)
    probabilities = bb.emit(relax.op.nn.softmax(bb.emit(scores), axis=-1))
    return bb.emit(relax.op.matmul(probabilities, value))


def attention_from_projection(bb, op_type, qkv, attr, mask, past, attention_bias):
    """onnxruntime's Attention after the input projection `qkv` (batch, seq, hidden +
    hidden + v_hidden): (output, present)."""
    heads = attr["num_heads"]
    width = dims_of(qkv)[2]
    hidden, _, v_hidden = attr.get("qkv_hidden_sizes", (width // 3,) * 3)
    query, key, value = (heads_first(bb, bb.emit(part), heads)
                         for part in relax.op.split(qkv, [hidden, 2 * hidden], axis=2))
    batch, _, seq, size = dims_of(query)
    past_length = 0
    if past is not None:  # (2, batch, heads, past, size)
        past_length = dims_of(past)[3]
        key = bb.emit(relax.op.concat([relax.op.take(past, relax.const(0, "int64"), axis=0), key], axis=2))
        value = bb.emit(relax.op.concat([relax.op.take(past, relax.const(1, "int64"), axis=0), value], axis=2))
    total = dims_of(key)[2]
    dtype = dtype_of(query)
    bias = mask_bias(bb, op_type, attr, mask, batch, total, dtype) if mask is not None else None
    if attr.get("unidirectional", 0):
        bias = causal(bb, bias, seq, total, past_length, dtype)
    scale = attr.get("scale", 0.0) or 1.0 / math.sqrt(size)
    output = heads_last(bb, attend(bb, query, key, value, scale, [bias, attention_bias]))
    if hidden == v_hidden:
        present = bb.emit(relax.op.stack([key, value], axis=0))
    else:  # (onnxruntime has no present for differing sizes either)
        present = relax.const(np.zeros(0, np.float32))
    return relax.Tuple([output, present])


def refuse_unsupported(op_type, attr, inputs, optional_inputs):
    """Errors for the attributes and inputs this file does not convert."""
    if attr.get("do_rotary", 0):
        refuse(op_type, attr, "do_rotary=1 (rotary embedding inside attention)")
    if attr.get("past_present_share_buffer", 0):
        refuse(op_type, attr, "past_present_share_buffer=1 (a shared key/value cache buffer)")
    for index, what in optional_inputs.items():
        if len(inputs) > index and inputs[index] is not None:
            refuse(op_type, attr, what)


def microsoft_attention(bb, inputs, attr):
    """com.microsoft Attention: inputs input, weights, bias, mask_index, past,
    attention_bias, past_sequence_length; outputs output, present."""
    refuse_unsupported("Attention", attr, inputs, {6: "the past_sequence_length input (a shared cache buffer)"})
    qkv = relax.op.matmul(inputs[0], inputs[1])
    if inputs[2] is not None:
        qkv = relax.op.add(qkv, inputs[2])
    return attention_from_projection(bb, "Attention", bb.emit(qkv), attr, inputs[3], inputs[4], inputs[5])


class MultiHeadAttention(onnx_frontend.OnnxOpConverter):
    """Query (batch, seq, hidden) with key and value (batch, total, hidden) or already in
    heads (batch, heads, total, size), or packed Q/K/V (batch, seq, heads, 3, size) or K/V
    (batch, total, heads, 2, size); the bias (of the 3-D forms), key_padding_mask (the
    mask_index forms), attention_bias, past_key/past_value (batch, heads, past, size),
    unidirectional. Outputs output, present_key, present_value."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        op_type = "MultiHeadAttention"
        refuse_unsupported(op_type, attr, inputs, {8: "the past_sequence_length input (a shared cache buffer)",
                                                   9: "the cache_indirection input (beam search)"})
        query, key, value, bias = inputs[0], inputs[1], inputs[2], inputs[3]
        heads = attr["num_heads"]
        if rank_of(query) == 5:  # packed (batch, seq, heads, 3, size)
            if bias is not None:
                refuse(op_type, attr, "a bias with packed Q/K/V")
            query, key, value = (bb.emit(relax.op.permute_dims(relax.op.squeeze(part, [3]), [0, 2, 1, 3]))
                                 for part in relax.op.split(query, 3, axis=3))
        else:
            hidden = dims_of(query)[2]
            biases = [None, None, None]
            if bias is not None:
                biases = [bb.emit(part) for part in relax.op.split(bias, [hidden, 2 * hidden], axis=0)]
            query = heads_first(bb, bb.emit(relax.op.add(query, biases[0])) if bias is not None else query, heads)
            if rank_of(key) == 5:  # packed (batch, total, heads, 2, size)
                if bias is not None:
                    refuse(op_type, attr, "a bias with packed K/V")
                key, value = (bb.emit(relax.op.permute_dims(relax.op.squeeze(part, [3]), [0, 2, 1, 3]))
                              for part in relax.op.split(key, 2, axis=3))
            elif rank_of(key) == 3:
                key = heads_first(bb, bb.emit(relax.op.add(key, biases[1])) if bias is not None else key, heads)
                value = heads_first(bb, bb.emit(relax.op.add(value, biases[2])) if bias is not None else value, heads)
        past_key, past_value = inputs[6], inputs[7]
        past_length = 0
        if past_key is not None:
            past_length = dims_of(past_key)[2]
            key = bb.emit(relax.op.concat([past_key, key], axis=2))
            value = bb.emit(relax.op.concat([past_value, value], axis=2))
        batch, _, seq, size = dims_of(query)
        total = dims_of(key)[2]
        dtype = dtype_of(query)
        mask = inputs[4]
        bias = mask_bias(bb, op_type, attr, mask, batch, total, dtype) if mask is not None else None
        if attr.get("unidirectional", 0):
            bias = causal(bb, bias, seq, total, past_length, dtype)
        scale = attr.get("scale", 0.0) or 1.0 / math.sqrt(size)
        output = heads_last(bb, attend(bb, query, key, value, scale, [bias, inputs[5]]))
        return relax.Tuple([output, key, value])


class GroupQueryAttention(onnx_frontend.OnnxOpConverter):
    """Causal attention of `num_heads` query heads over `kv_num_heads` key/value heads:
    query (batch, seq, hidden) with key and value, or packed Q/K/V; past_key/past_value
    (batch, kv_heads, past, size) followed by the new keys; seqlens_k (batch) the total
    length less one of each row (keys beyond it are masked); optional rotary embedding
    of Q and K (do_rotary, the caches, position_ids), local_window_size, softcap,
    attention_bias. Outputs output, present_key, present_value.

    The present cache is past followed by the new keys (past + seq long): onnxruntime's
    when every row's total length is that (a cache shared with past, where new keys are
    written at each row's own length, is refused)."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        op_type = "GroupQueryAttention"
        for name in ("smooth_softmax", "qk_output"):
            if attr.get(name, 0):
                refuse(op_type, attr, f"{name}={attr[name]}")
        if len(inputs) > 11 and inputs[11] is not None:
            refuse(op_type, attr, "the head_sink input")
        query, key, value, past_key, past_value, seqlens = (inputs[i] for i in range(6))
        heads, kv_heads = attr["num_heads"], attr["kv_num_heads"]
        if key is None:  # packed (batch, seq, (heads + 2 * kv_heads) * size)
            width = dims_of(query)[2]
            size = width // (heads + 2 * kv_heads)
            query, key, value = (bb.emit(part) for part in
                                 relax.op.split(query, [heads * size, (heads + kv_heads) * size], axis=2))
        query, key, value = heads_first(bb, query, heads), heads_first(bb, key, kv_heads), heads_first(bb, value, kv_heads)
        batch, _, seq, size = dims_of(query)
        lengths = bb.emit(relax.op.reshape(relax.op.add(relax.op.astype(seqlens, "int64"), relax.const(1, "int64")),
                                           (batch, 1, 1, 1)))
        first_prompt = past_key is None or dims_of(past_key)[2] == 0
        # Query i sits at position i in a first prompt, else at i + the row's past length.
        offset = relax.const(0, "int64") if first_prompt else bb.emit(relax.op.subtract(lengths, relax.const(seq, "int64")))
        if attr.get("do_rotary", 0):
            cos, sin, given = inputs[7], inputs[8], inputs[9] if len(inputs) > 9 else None
            if given is not None:
                indices = bb.emit(relax.op.astype(given, "int64"))
            else:
                indices = bb.emit(relax.op.add(positions(bb, seq, (1, seq)), relax.op.reshape(offset, (-1, 1))))
            cos, sin = bb.emit(relax.op.take(cos, indices, axis=0)), bb.emit(relax.op.take(sin, indices, axis=0))
            interleaved = attr.get("rotary_interleaved", 0)

            def rotate(x):
                turned = rotated(bb, bb.emit(relax.op.permute_dims(x, [0, 2, 1, 3])), cos, sin, size, interleaved)
                return bb.emit(relax.op.permute_dims(turned, [0, 2, 1, 3]))

            query, key = rotate(query), rotate(key)
        if past_key is not None:
            key = bb.emit(relax.op.concat([past_key, key], axis=2))
            value = bb.emit(relax.op.concat([past_value, value], axis=2))
        present_key, present_value = key, value
        total = dims_of(key)[2]
        dtype = dtype_of(query)
        columns = positions(bb, total, (1, total))
        kept = bb.emit(relax.op.where(relax.op.less(columns, lengths), const(0.0, dtype), const(FLOAT32_LOWEST, dtype)))
        bias = causal(bb, kept, seq, total, offset, dtype)
        window = attr.get("local_window_size", -1)
        if window >= 0:  # only the query's own key and the `window` keys before it
            rows = positions(bb, seq, (seq, 1))
            near = relax.op.greater_equal(columns, relax.op.subtract(relax.op.add(rows, offset), relax.const(window, "int64")))
            bias = bb.emit(relax.op.where(near, bias, const(FLOAT32_LOWEST, dtype)))
        if heads != kv_heads:
            key = bb.emit(relax.op.repeat(key, heads // kv_heads, axis=1))
            value = bb.emit(relax.op.repeat(value, heads // kv_heads, axis=1))
        scale = attr.get("scale", 0.0) or 1.0 / math.sqrt(size)
        attention_bias = inputs[10] if len(inputs) > 10 else None
        output = attend(bb, query, key, value, scale, [bias, attention_bias], attr.get("softcap", 0.0))
        return relax.Tuple([heads_last(bb, output), present_key, present_value])


CONVERTERS = {"MultiHeadAttention": MultiHeadAttention, "GroupQueryAttention": GroupQueryAttention}
