"""Shared by test_onnx_ops_contrib_models: small float models written with onnx.helper in
the layouts exporters write, for onnxruntime's own tools (its transformer optimizer and
quantizer) to rewrite into its com.microsoft contrib operators."""

import math

import numpy as np
from onnx import TensorProto, helper, numpy_helper


class Graph:
    """Nodes and initializers collected while a model is written."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.initializers = []
        self.count = 0

    def name(self, prefix):
        self.count += 1
        return f"{prefix}_{self.count}"

    def constant(self, value, prefix="c"):
        name = self.name(prefix)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, *shape, scale=0.2):
        return self.constant((self.rng.standard_normal(shape) * scale).astype(np.float32), "w")

    def node(self, op_type, inputs, outputs=1, **attributes):
        names = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=self.name(op_type), **attributes))
        return names[0] if outputs == 1 else names

    def linear(self, x, inputs, outputs):
        return self.node("Add", [self.node("MatMul", [x, self.weight(inputs, outputs)]), self.weight(outputs, scale=0.05)])

    def layer_norm(self, x, hidden):
        gamma = self.constant((1 + 0.1 * self.rng.standard_normal(hidden)).astype(np.float32), "gamma")
        beta = self.constant((0.1 * self.rng.standard_normal(hidden)).astype(np.float32), "beta")
        return self.node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-12)

    def model(self, inputs, outputs, opset):
        graph = helper.make_graph(self.nodes, "model", inputs, outputs, self.initializers)
        made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        made.ir_version = 8
        return made


def bert_encoder(hidden=32, heads=2, layers=2, intermediate=64, vocabulary=50, positions=16, seed=0):
    """A BERT encoder as transformers' ONNX export writes it (opset 17): word, position and
    token-type embeddings (the positions sliced from a [1, max] constant by the input's
    length), the mask made additive (1 - mask) * -10000, per layer Q/K/V MatMul + Add,
    Reshape to heads, Transpose, QK^T / sqrt(head), Softmax, the output projection, residual
    Add + LayerNormalization, and an erf GELU feed-forward. Inputs input_ids,
    attention_mask, token_type_ids (int64, batch x sequence, both dynamic); output the last
    hidden state."""
    g = Graph(seed)
    head = hidden // heads
    word = g.node("Gather", [g.weight(vocabulary, hidden, scale=0.5), "input_ids"])
    token_type = g.node("Gather", [g.weight(2, hidden, scale=0.5), "token_type_ids"])
    length = g.node("Gather", [g.node("Shape", ["input_ids"]), g.constant(np.array(1, np.int64))], axis=0)
    end = g.node("Unsqueeze", [length, g.constant(np.array([0], np.int64))])
    position_ids = g.node("Slice", [g.constant(np.arange(positions, dtype=np.int64)[None]), g.constant(np.array([0], np.int64)),
                                    end, g.constant(np.array([1], np.int64)), g.constant(np.array([1], np.int64))])
    position = g.node("Gather", [g.weight(positions, hidden, scale=0.5), position_ids])
    x = g.layer_norm(g.node("Add", [g.node("Add", [word, token_type]), position]), hidden)

    unsqueezed = g.node("Unsqueeze", [g.node("Unsqueeze", ["attention_mask", g.constant(np.array([1], np.int64))]),
                                      g.constant(np.array([2], np.int64))])
    inverted = g.node("Sub", [g.constant(np.array(1.0, np.float32)), g.node("Cast", [unsqueezed], to=TensorProto.FLOAT)])
    mask = g.node("Mul", [inverted, g.constant(np.array(-10000.0, np.float32))])
    split_shape = g.constant(np.array([0, 0, heads, head], np.int64))
    merge_shape = g.constant(np.array([0, 0, hidden], np.int64))
    for _ in range(layers):
        q, k, v = (g.node("Reshape", [g.linear(x, hidden, hidden), split_shape]) for _ in range(3))
        q = g.node("Transpose", [q], perm=[0, 2, 1, 3])
        k = g.node("Transpose", [k], perm=[0, 2, 3, 1])
        v = g.node("Transpose", [v], perm=[0, 2, 1, 3])
        scores = g.node("Div", [g.node("MatMul", [q, k]), g.constant(np.array(math.sqrt(head), np.float32))])
        probabilities = g.node("Softmax", [g.node("Add", [scores, mask])], axis=-1)
        context = g.node("Transpose", [g.node("MatMul", [probabilities, v])], perm=[0, 2, 1, 3])
        attended = g.linear(g.node("Reshape", [context, merge_shape]), hidden, hidden)
        x = g.layer_norm(g.node("Add", [attended, x]), hidden)
        inner = g.linear(x, hidden, intermediate)
        erf = g.node("Erf", [g.node("Div", [inner, g.constant(np.array(math.sqrt(2.0), np.float32))])])
        gelu = g.node("Mul", [g.node("Mul", [inner, g.node("Add", [erf, g.constant(np.array(1.0, np.float32))])]),
                              g.constant(np.array(0.5, np.float32))])
        x = g.layer_norm(g.node("Add", [g.linear(gelu, intermediate, hidden), x]), hidden)
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
              for name in ("input_ids", "attention_mask", "token_type_ids")]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", hidden])]
    return g.model(inputs, outputs, opset=17)


def bert_feeds(batch=2, sequence=7, vocabulary=50, seed=1):
    """input_ids, attention_mask (the second row padded after 4 tokens), token_type_ids."""
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, sequence), np.int64)
    mask[1:, 4:] = 0
    types = np.zeros((batch, sequence), np.int64)
    types[:, sequence // 2:] = 1
    return {"input_ids": rng.integers(0, vocabulary, (batch, sequence)).astype(np.int64), "attention_mask": mask,
            "token_type_ids": types}


def crnn(channels=4, hidden=8, classes=6, height=8, bidirectional=True, seed=0):
    """A CRNN: Conv + Relu + MaxPool over a (batch, 1, height, width) image, the columns as
    a sequence (height folded into features), an LSTM (bidirectional by default), and a
    per-step linear classifier. Input image (batch and width dynamic); output logits
    (width / 2, batch, classes)."""
    g = Graph(seed)
    features = g.node("Relu", [g.node("Conv", ["image", g.weight(channels, 1, 3, 3, scale=0.5), g.weight(channels)],
                                      pads=[1, 1, 1, 1])])
    pooled = g.node("MaxPool", [features], kernel_shape=[2, 2], strides=[2, 2])
    # (batch, channels, height/2, width/2) -> (width/2, batch, channels * height/2)
    columns = g.node("Transpose", [pooled], perm=[3, 0, 1, 2])
    size = channels * height // 2
    sequence = g.node("Reshape", [columns, g.constant(np.array([0, 0, size], np.int64))])
    directions = 2 if bidirectional else 1
    y, _, _ = g.node("LSTM", [sequence, g.weight(directions, 4 * hidden, size), g.weight(directions, 4 * hidden, hidden),
                              g.weight(directions, 8 * hidden, scale=0.1)], outputs=3, hidden_size=hidden,
                     direction="bidirectional" if bidirectional else "forward")
    # (steps, directions, batch, hidden) -> (steps, batch, directions * hidden)
    steps = g.node("Reshape", [g.node("Transpose", [y], perm=[0, 2, 1, 3]),
                               g.constant(np.array([0, 0, directions * hidden], np.int64))])
    g.nodes.append(helper.make_node("Add", [g.node("MatMul", [steps, g.weight(directions * hidden, classes)]),
                                            g.weight(classes)], ["logits"]))
    inputs = [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, height, "width"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)]
    return g.model(inputs, outputs, opset=17)


def small_cnn(seed=0):
    """A small CNN of two branches: Conv + Relu, a residual Add, a Concat of two
    convolutions, Sigmoid, GlobalAveragePool, AveragePool, Flatten, Gemm. Input image
    (batch, 3, 8, 8); output logits (batch, 5)."""
    g = Graph(seed)
    stem = g.node("Relu", [g.node("Conv", ["image", g.weight(8, 3, 3, 3), g.weight(8)], pads=[1, 1, 1, 1])])
    branch = g.node("Conv", [stem, g.weight(8, 8, 3, 3, scale=0.1), g.weight(8)], pads=[1, 1, 1, 1])
    residual = g.node("Add", [stem, branch])
    left = g.node("Conv", [residual, g.weight(4, 8, 1, 1), g.weight(4)])
    right = g.node("Conv", [residual, g.weight(4, 8, 3, 3, scale=0.1), g.weight(4)], pads=[1, 1, 1, 1])
    joined = g.node("Sigmoid", [g.node("Concat", [left, right], axis=1)])
    pooled = g.node("AveragePool", [joined], kernel_shape=[2, 2], strides=[2, 2])
    leaky = g.node("LeakyRelu", [g.node("Conv", [pooled, g.weight(8, 8, 1, 1), g.weight(8)])], alpha=0.1)
    summed = g.node("Mul", [leaky, pooled])
    flat = g.node("Flatten", [g.node("GlobalAveragePool", [summed])], axis=1)
    g.nodes.append(helper.make_node("Gemm", [flat, g.weight(5, 8), g.weight(5)], ["logits"], transB=1))
    inputs = [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 8, 8])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 5])]
    return g.model(inputs, outputs, opset=17)
