"""A numpy forward pass of all-MiniLM-L6-v2, independent of TVM: the reference the tests
compare the compiled model with.

    python reference.py MODEL.safetensors TOKEN_IDS_JSON

TOKEN_IDS_JSON is a list of token-id lists (one per sentence, each its own length);
prints the embeddings (one list of 384 floats per sentence) as JSON.
"""

import json
import math
import struct
import sys

import numpy as np


def load_safetensors(path):
    data = open(path, "rb").read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    body = data[8 + length :]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        start, end = entry["data_offsets"]
        dtype = {"F32": np.float32, "I64": np.int64}[entry["dtype"]]
        tensors[name] = np.frombuffer(body[start:end], dtype).reshape(entry["shape"])
    return tensors


def layer_norm(x, weight, bias, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * weight + bias


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def linear(x, w, prefix):
    return x @ w[prefix + ".weight"].T + w[prefix + ".bias"]


def embed(w, ids):
    """One sentence (no padding) -> its normalized mean-pooled embedding."""
    ids = np.asarray(ids)
    seq = len(ids)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:seq]
        + w["embeddings.token_type_embeddings.weight"][0]
    ).astype(np.float64)
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    for i in range(6):
        p = f"encoder.layer.{i}."
        heads = lambda t: t.reshape(seq, 12, 32).transpose(1, 0, 2)
        q = heads(linear(x, w, p + "attention.self.query"))
        k = heads(linear(x, w, p + "attention.self.key"))
        v = heads(linear(x, w, p + "attention.self.value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(32)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probabilities = scores / scores.sum(-1, keepdims=True)
        context = (probabilities @ v).transpose(1, 0, 2).reshape(seq, 384)
        x = layer_norm(
            linear(context, w, p + "attention.output.dense") + x,
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
        )
        intermediate = gelu(linear(x, w, p + "intermediate.dense"))
        x = layer_norm(
            linear(intermediate, w, p + "output.dense") + x,
            w[p + "output.LayerNorm.weight"],
            w[p + "output.LayerNorm.bias"],
        )
    pooled = x.mean(0)
    return pooled / max(np.linalg.norm(pooled), 1e-12)


if __name__ == "__main__":
    weights = load_safetensors(sys.argv[1])
    sentences = json.load(open(sys.argv[2]))
    print(json.dumps([embed(weights, ids).tolist() for ids in sentences]))
