"""The corpus's own exports: small models of the kinds apps export themselves, written by
PyTorch's ONNX exporter (torch.onnx, TorchScript-based, which takes opsets 7-20) with
their batch and sequence or image dims dynamic, as real exports have them:

- `detector`: a YOLO-style CNN with an NMS-free head that decodes boxes over a grid made
  from the feature maps' shapes (`Shape`, `Range`, `Expand`, `Concat` on symbolic dims);
- `transformer`: a BERT-style encoder taking `input_ids` and `attention_mask`
  (positions from the sequence length, the mask made additive, masked mean pooling);
- `tagger`: a recurrent tagger (embedding, bidirectional GRU, per-token linear).

The weights are seeded, so an export is the same at every run. tests/corpus.rs runs

    python relax-conformance/torch_exports.py OUT NAME:KIND:OPSET [...]

with the toolchain's Python and torch; each export goes to `OUT/NAME/model.onnx`.
"""

import os
import sys

import torch
from torch import nn

SEED = 2026


def conv(channels_in, channels_out, stride):
    return nn.Sequential(
        nn.Conv2d(channels_in, channels_out, 3, stride, 1, bias=False),
        nn.BatchNorm2d(channels_out),
        nn.SiLU(),
    )


class Detector(nn.Module):
    """Two detection levels (strides 16 and 8) joined by an upsampling path; each cell
    predicts a box (centre offset and log size) and class scores, decoded in the graph."""

    classes = 5

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(conv(3, 8, 2), conv(8, 16, 2), conv(16, 24, 2))
        self.deep = conv(24, 32, 2)
        self.merge = conv(32 + 24, 24, 1)
        self.heads = nn.ModuleList([nn.Conv2d(24, 4 + self.classes, 1), nn.Conv2d(32, 4 + self.classes, 1)])
        for module in self.modules():
            if isinstance(module, nn.BatchNorm2d):
                # Statistics of a trained network, not the identity of a fresh one.
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 1.5)

    @staticmethod
    def decode(prediction, stride):
        batch, channels, height, width = prediction.shape
        rows = torch.arange(height, dtype=torch.float32).view(1, height, 1).expand(1, height, width)
        columns = torch.arange(width, dtype=torch.float32).view(1, 1, width).expand(1, height, width)
        grid = torch.stack([columns, rows], dim=-1).reshape(1, height * width, 2)
        cells = prediction.flatten(2).transpose(1, 2)
        centres = (cells[..., :2].sigmoid() + grid) * stride
        sizes = cells[..., 2:4].clamp(max=6.0).exp() * stride
        return torch.cat([centres, sizes, cells[..., 4:].sigmoid()], dim=-1)

    def forward(self, images):
        shallow = self.stem(images)
        deep = self.deep(shallow)
        upsampled = nn.functional.interpolate(deep, size=shallow.shape[2:], mode="nearest")
        merged = self.merge(torch.cat([upsampled, shallow], dim=1))
        return torch.cat([self.decode(self.heads[0](merged), 8), self.decode(self.heads[1](deep), 16)], dim=1)


class Transformer(nn.Module):
    """Two encoder layers of hand-written multi-head attention, in the layout of
    Hugging Face's BERT (separate query, key and value projections, an additive mask)."""

    vocabulary, hidden, heads, layers, longest = 100, 32, 4, 2, 64

    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(self.vocabulary, self.hidden)
        self.positions = nn.Embedding(self.longest, self.hidden)
        self.norm = nn.LayerNorm(self.hidden)
        self.blocks = nn.ModuleList([self.block() for _ in range(self.layers)])

    def block(self):
        return nn.ModuleDict({
            "query": nn.Linear(self.hidden, self.hidden),
            "key": nn.Linear(self.hidden, self.hidden),
            "value": nn.Linear(self.hidden, self.hidden),
            "out": nn.Linear(self.hidden, self.hidden),
            "norm1": nn.LayerNorm(self.hidden),
            "up": nn.Linear(self.hidden, 4 * self.hidden),
            "down": nn.Linear(4 * self.hidden, self.hidden),
            "norm2": nn.LayerNorm(self.hidden),
        })

    def split(self, x):
        batch, sequence, _ = x.shape
        return x.view(batch, sequence, self.heads, self.hidden // self.heads).transpose(1, 2)

    def attention(self, block, x, bias):
        batch, sequence, _ = x.shape
        query, key, value = (self.split(block[name](x)) for name in ("query", "key", "value"))
        scores = query @ key.transpose(-1, -2) / (self.hidden // self.heads) ** 0.5 + bias
        context = (scores.softmax(-1) @ value).transpose(1, 2).reshape(batch, sequence, self.hidden)
        return block["out"](context)

    def forward(self, input_ids, attention_mask):
        sequence = input_ids.shape[1]
        positions = torch.arange(sequence, device=input_ids.device).unsqueeze(0)
        x = self.norm(self.tokens(input_ids) + self.positions(positions))
        bias = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
        for block in self.blocks:
            x = block["norm1"](x + self.attention(block, x, bias))
            x = block["norm2"](x + block["down"](nn.functional.gelu(block["up"](x))))
        weights = attention_mask.unsqueeze(-1).to(torch.float32)
        return (x * weights).sum(1) / weights.sum(1).clamp(min=1.0)


class Tagger(nn.Module):
    """Token embedding, a bidirectional GRU and a tag per token."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(50, 16)
        self.recurrent = nn.GRU(16, 24, batch_first=True, bidirectional=True)
        self.tags = nn.Linear(48, 7)

    def forward(self, tokens):
        states, _ = self.recurrent(self.embedding(tokens))
        return self.tags(states).log_softmax(-1)


def detector():
    inputs = (torch.rand(1, 3, 128, 160),)
    return Detector(), inputs, ["images"], ["detections"], {
        "images": {0: "batch", 2: "height", 3: "width"},
        "detections": {0: "batch", 1: "cells"},
    }


def transformer():
    inputs = (torch.randint(0, Transformer.vocabulary, (2, 12)), torch.ones(2, 12, dtype=torch.int64))
    return Transformer(), inputs, ["input_ids", "attention_mask"], ["pooled"], {
        "input_ids": {0: "batch", 1: "sequence"},
        "attention_mask": {0: "batch", 1: "sequence"},
        "pooled": {0: "batch"},
    }


def tagger():
    inputs = (torch.randint(0, 50, (2, 9)),)
    return Tagger(), inputs, ["tokens"], ["tag_scores"], {
        "tokens": {0: "batch", 1: "sequence"},
        "tag_scores": {0: "batch", 1: "sequence"},
    }


KINDS = {"detector": detector, "transformer": transformer, "tagger": tagger}


def export(out, name, kind, opset):
    torch.manual_seed(SEED)
    model, inputs, input_names, output_names, dynamic_axes = KINDS[kind]()
    model.eval()
    os.makedirs(os.path.join(out, name), exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(
            model,
            inputs,
            os.path.join(out, name, "model.onnx"),
            dynamo=False,
            opset_version=opset,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
        )


def main():
    out, *wanted = sys.argv[1:]
    for item in wanted:
        name, kind, opset = item.split(":")
        if kind not in KINDS:
            raise SystemExit(f"torch_exports.py: unknown kind {kind!r} (known: {', '.join(KINDS)})")
        export(out, name, kind, int(opset))


if __name__ == "__main__":
    import warnings

    # The TorchScript-based exporter warns that it is deprecated at every export.
    warnings.simplefilter("ignore", DeprecationWarning)
    main()
