"""The ONNX standard Attention operator (opsets 23-25).

TVM's importer passes no domain to a converter: a node with `num_heads` (which
onnxruntime's com.microsoft Attention requires and ONNX's lacks) is onnxruntime's, built
by contrib_attention.py.
The standard operator is built here as ONNX's reference computes it: Q and K scaled by
the square root of the scale, an additive bias (attention mask, causal frontier aligned
to the past, sliding window, padding of an external cache), softcap, a softmax whose
fully masked rows are zero, grouped-query heads repeated, present key/value returned.
"""

import math

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from . import contrib_attention
from .common import ONNX_DTYPES, const, dims_of, dtype_of, rank_of, static_dims


def split_heads(x, heads):
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    batch, seq, hidden = dims_of(x)
    return relax.op.permute_dims(relax.op.reshape(x, (batch, seq, heads, hidden // heads)), [0, 2, 1, 3])


def bias_from_mask(mask, kv_len, dtype):
    """An attention mask as an additive bias: a boolean mask's False becomes -inf; a mask
    shorter than the keys is padded with masked positions."""
    masked = const(-math.inf, dtype)
    dims = static_dims(mask)
    if dtype_of(mask) == "bool":
        mask = relax.op.where(mask, const(0.0, dtype), masked)
    if dims is not None and isinstance(kv_len, int) and dims[-1] < kv_len:
        pad = const(np.full(dims[:-1] + [kv_len - dims[-1]], -math.inf), dtype)
        mask = relax.op.concat([mask, pad], axis=-1)
    return mask


def frontier_bias(allowed, dtype):
    return relax.op.where(allowed, const(0.0, dtype), const(-math.inf, dtype))


def matmul(a, b, dtype):
    """a @ b rounded to `dtype`; 16-bit floats are multiplied and summed in float32, as
    ONNX's reference (numpy) does."""
    if dtype not in ("float16", "bfloat16"):
        return relax.op.matmul(a, b)
    product = relax.op.matmul(relax.op.astype(a, "float32"), relax.op.astype(b, "float32"))
    return relax.op.astype(product, dtype)


def softmax(bb, x, dtype):
    """Softmax over the last axis. For 16-bit floats, each step is computed in float32
    and rounded to `dtype`, as ONNX's reference (numpy) computes it."""
    if dtype not in ("float16", "bfloat16"):
        return relax.op.nn.softmax(x, axis=-1)

    def rounded(expr):
        return bb.emit(relax.op.astype(relax.op.astype(expr, dtype), "float32"))

    x = bb.emit(relax.op.astype(x, "float32"))
    shifted = rounded(relax.op.subtract(x, relax.op.max(x, axis=-1, keepdims=True)))
    exponentials = rounded(relax.op.exp(shifted))
    total = rounded(relax.op.sum(exponentials, axis=-1, keepdims=True))
    return relax.op.astype(relax.op.divide(exponentials, total), dtype)


class Attention(onnx_frontend.OnnxOpConverter):
    """Standard ONNX Attention, or com.microsoft Attention (with `num_heads`)."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        if "num_heads" in attr:
            return contrib_attention.microsoft_attention(bb, inputs, attr)
        return standard_attention(bb, inputs, attr)


def attention_bias(bb, attr, mask, nonpad, past_len, q_len, kv_len, dtype):
    """The additive bias (broadcasting to (batch, heads, q, kv)), or None: the mask, the
    causal frontier, the sliding window and an external cache's padding. A query's
    absolute position is its index plus the past's length, or, with an external cache
    (nonpad_kv_seqlen), its index plus its batch's length less the queries'."""
    terms = [bias_from_mask(mask, kv_len, dtype)] if mask is not None else []
    causal = attr.get("is_causal", 0)
    left, right = attr.get("left_window_size", -1), attr.get("right_window_size", -1)
    if causal or left >= 0 or right >= 0 or nonpad is not None:
        rows = bb.emit(relax.op.reshape(bb.emit(relax.op.arange(0, q_len, 1, "int64")), (q_len, 1)))
        columns = bb.emit(relax.op.reshape(bb.emit(relax.op.arange(0, kv_len, 1, "int64")), (1, kv_len)))
        if nonpad is not None:
            lengths = bb.emit(relax.op.reshape(bb.emit(relax.op.astype(nonpad, "int64")), (-1, 1, 1, 1)))
            offset = bb.emit(relax.op.subtract(lengths, relax.const(q_len, "int64")))
            terms.append(frontier_bias(relax.op.less(columns, lengths), dtype))
        else:
            offset = relax.const(past_len, "int64")
        position = bb.emit(relax.op.add(rows, offset))
        if causal:
            terms.append(frontier_bias(relax.op.less_equal(columns, position), dtype))
        if left >= 0 or right >= 0:  # the sliding window: keys left/right of the query
            distance = bb.emit(relax.op.subtract(position, columns))
            if left >= 0:
                terms.append(frontier_bias(relax.op.less_equal(distance, relax.const(left, "int64")), dtype))
            if right >= 0:
                terms.append(frontier_bias(relax.op.greater_equal(distance, relax.const(-right, "int64")), dtype))
    if not terms:
        return None
    bias = terms[0]
    for term in terms[1:]:
        bias = relax.op.add(bias, term)
    return bb.emit(bias)


def standard_attention(bb, inputs, attr):
    """(Y, present_key, present_value, qk_matmul_output) for inputs Q, K, V and the
    optional attn_mask, past_key, past_value, nonpad_kv_seqlen."""
    query, key, value, mask, past_key, past_value, nonpad = (inputs[i] for i in range(7))
    dtype = dtype_of(query)
    three_d = rank_of(query) == 3
    if three_d:
        query = bb.emit(split_heads(query, attr["q_num_heads"]))
        key = bb.emit(split_heads(key, attr["kv_num_heads"]))
        value = bb.emit(split_heads(value, attr["kv_num_heads"]))
    scale = attr.get("scale", 1.0 / math.sqrt(dims_of(query)[3]))
    root = const(math.sqrt(scale), dtype)
    if past_key is not None:
        key = relax.op.concat([past_key, key], axis=2)
        value = relax.op.concat([past_value, value], axis=2)
    present_key, present_value = bb.emit(key), bb.emit(value)
    q_len, kv_len = dims_of(query)[2], dims_of(present_key)[2]
    past_len = dims_of(past_key)[2] if past_key is not None else 0
    bias = attention_bias(bb, attr, mask, nonpad, past_len, q_len, kv_len, dtype)

    q_heads, kv_heads = dims_of(query)[1], dims_of(key)[1]
    if q_heads != kv_heads:
        key = relax.op.repeat(key, q_heads // kv_heads, axis=1)
        value = relax.op.repeat(value, q_heads // kv_heads, axis=1)
    transposed = relax.op.permute_dims(relax.op.multiply(key, root), [0, 1, 3, 2])
    scores = matmul(relax.op.multiply(query, root), transposed, dtype)
    softcap = attr.get("softcap", 0.0)
    if softcap > 0:
        cap = const(softcap, dtype)
        scores = relax.op.multiply(relax.op.tanh(relax.op.divide(scores, cap)), cap)
    scores = bb.emit(scores)
    mode = attr.get("qk_matmul_output_mode", 0)
    biased = bb.emit(relax.op.add(scores, bias)) if bias is not None else scores
    exposed = biased if mode == 2 else scores
    softmax_dtype = ONNX_DTYPES[attr["softmax_precision"]] if "softmax_precision" in attr else dtype
    if softmax_dtype != dtype:
        biased = bb.emit(relax.op.astype(biased, softmax_dtype))
    probabilities = softmax(bb, biased, softmax_dtype)
    if bias is not None:  # rows the bias masks entirely attend to nothing: zeros
        # (Whether any key is allowed, as 0/1: TVM's max starts from the lowest finite
        # value, so the max of a row of -inf is not -inf.)
        allowed = relax.op.astype(relax.op.greater(bias, const(-math.inf, dtype)), "float32")
        row_masked = relax.op.equal(relax.op.max(allowed, axis=-1, keepdims=True), relax.const(0.0, "float32"))
        probabilities = relax.op.where(row_masked, const(0.0, softmax_dtype), probabilities)
    if softmax_dtype != dtype:
        probabilities = relax.op.astype(probabilities, dtype)
    probabilities = bb.emit(probabilities)
    if mode == 3:
        exposed = probabilities
    output = matmul(probabilities, value, dtype)
    if three_d:
        batch, heads, seq, size = dims_of(bb.normalize(output))
        output = relax.op.reshape(relax.op.permute_dims(output, [0, 2, 1, 3]), (batch, seq, heads * size))
    return relax.Tuple([bb.emit(output), present_key, present_value, exposed])


CONVERTERS = {"Attention": Attention}
