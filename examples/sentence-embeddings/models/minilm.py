"""all-MiniLM-L6-v2 as a relax.frontend.nn module: a 6-layer BERT encoder (hidden 384,
12 heads, intermediate 1536, GELU, layer-norm eps 1e-12), then mean pooling over the
attention mask and L2 normalisation, as sentence-transformers computes it.

Parameter names are those of the model's `model.safetensors`, so its weights bind by
name. `batch` and `seq` are symbolic: one library serves every batch size and length.
"""

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

HIDDEN = 384
HEADS = 12
HEAD_SIZE = HIDDEN // HEADS
INTERMEDIATE = 1536
LAYERS = 6
VOCAB = 30522
POSITIONS = 512
EPS = 1e-12


class Embeddings(nn.Module):
    def __init__(self):
        self.word_embeddings = nn.Embedding(VOCAB, HIDDEN)
        self.position_embeddings = nn.Embedding(POSITIONS, HIDDEN)
        self.token_type_embeddings = nn.Embedding(2, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=EPS)

    def forward(self, input_ids):
        seq = input_ids.shape[1]
        # Lookups read memory at the index: out-of-range ids are clamped, never read out
        # of bounds (the app truncates sentences to the 512 positions the model has).
        ids = op.minimum(op.maximum(input_ids, op.zeros((1, 1), "int64")), op.full((1, 1), VOCAB - 1, "int64"))
        positions = op.minimum(op.arange(0, seq, dtype="int64"), op.full((1,), POSITIONS - 1, "int64"))
        words = self.word_embeddings(ids)
        positions = self.position_embeddings(positions)
        # Every token is of type 0 (one sentence per input).
        token_type = self.token_type_embeddings(op.zeros((1,), "int64"))
        return self.LayerNorm(words + positions + token_type)


class SelfAttention(nn.Module):
    def __init__(self):
        self.query = nn.Linear(HIDDEN, HIDDEN)
        self.key = nn.Linear(HIDDEN, HIDDEN)
        self.value = nn.Linear(HIDDEN, HIDDEN)

    def heads(self, x):
        batch, seq = x.shape[0], x.shape[1]
        return op.permute_dims(op.reshape(x, (batch, seq, HEADS, HEAD_SIZE)), [0, 2, 1, 3])

    def forward(self, hidden, mask_bias):
        batch, seq = hidden.shape[0], hidden.shape[1]
        query = self.heads(self.query(hidden))
        key = self.heads(self.key(hidden))
        value = self.heads(self.value(hidden))
        scores = op.matmul(query, op.permute_dims(key, [0, 1, 3, 2])) * (HEAD_SIZE**-0.5)
        probabilities = op.softmax(scores + mask_bias, axis=-1)
        context = op.matmul(probabilities, value)
        return op.reshape(op.permute_dims(context, [0, 2, 1, 3]), (batch, seq, HIDDEN))


class SelfOutput(nn.Module):
    def __init__(self):
        self.dense = nn.Linear(HIDDEN, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=EPS)

    def forward(self, context, residual):
        return self.LayerNorm(self.dense(context) + residual)


class Attention(nn.Module):
    def __init__(self):
        self.self = SelfAttention()
        self.output = SelfOutput()

    def forward(self, hidden, mask_bias):
        return self.output(self.self(hidden, mask_bias), hidden)


class Intermediate(nn.Module):
    def __init__(self):
        self.dense = nn.Linear(HIDDEN, INTERMEDIATE)

    def forward(self, hidden):
        return op.gelu(self.dense(hidden))


class Output(nn.Module):
    def __init__(self):
        self.dense = nn.Linear(INTERMEDIATE, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=EPS)

    def forward(self, intermediate, residual):
        return self.LayerNorm(self.dense(intermediate) + residual)


class Layer(nn.Module):
    def __init__(self):
        self.attention = Attention()
        self.intermediate = Intermediate()
        self.output = Output()

    def forward(self, hidden, mask_bias):
        attended = self.attention(hidden, mask_bias)
        return self.output(self.intermediate(attended), attended)


class Encoder(nn.Module):
    def __init__(self):
        self.layer = nn.ModuleList([Layer() for _ in range(LAYERS)])

    def forward(self, hidden, mask_bias):
        for layer in self.layer:
            hidden = layer(hidden, mask_bias)
        return hidden


class MiniLM(nn.Module):
    """Sentence embeddings: `forward(input_ids, attention_mask)` -> float32[batch, 384]."""

    def __init__(self):
        self.embeddings = Embeddings()
        self.encoder = Encoder()

    def forward(self, input_ids, attention_mask):
        batch, seq = input_ids.shape[0], input_ids.shape[1]
        mask = op.astype(attention_mask, "float32")
        # Padding gets a large negative score, so softmax gives it no weight.
        mask_bias = op.reshape((1.0 - mask) * -10000.0, (batch, 1, 1, seq))
        hidden = self.encoder(self.embeddings(input_ids), mask_bias)
        # Mean over the real tokens, then unit length.
        weights = op.reshape(mask, (batch, seq, 1))
        summed = op.sum(hidden * weights, axis=1)
        counts = op.maximum(op.sum(weights, axis=1), op.full((1, 1), 1e-9, "float32"))
        pooled = summed / counts
        norm = op.sqrt(op.sum(pooled * pooled, axis=1, keepdims=True))
        return pooled / op.maximum(norm, op.full((1, 1), 1e-12, "float32"))
