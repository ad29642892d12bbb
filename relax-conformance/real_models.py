"""Writes models shaped like real exports (built with onnx.helper, seeded weights) as
backend-test cases for relax-conformance, each with data sets at several sizes of its
symbolic dims (one compiled library serves them all) and onnxruntime's outputs as the
expected ones:

    python relax-conformance/real_models.py OUT [NAME ...]

(all of them, or the ones named).

- crnn: a text recognizer: a conv stack, two bidirectional LSTM layers, a linear layer;
  the image width (hence the sequence length) symbolic.
- gru_speech: a GRU over features with `sequence_lens` (linear_before_reset, as PyTorch
  exports it), the time dim symbolic.
- if_scalar: an `If` on an input boolean scalar.
- bert_mask: a BERT-style self-attention whose mask is expanded through `Shape` of a
  symbolic input compared with `Equal` (as sentence-encoder exports write it).
- qdq_cnn: an int8 CNN in the QDQ format of onnxruntime's quantizer (activations
  quantized per tensor, convolution weights per output channel). onnxruntime computes
  its convolutions in integers, TVM in float32 on the dequantized values: an activation
  within float rounding of a quantization boundary may take the neighbouring step
  (here up to 4e-4 in the logits), so it is compared at a looser tolerance.
- integer_dense: a dense layer as onnxruntime's dynamic quantizer writes one, a
  `MatMulInteger` of 8-bit activations by a constant 8-bit weight, both less their zero
  points: exact int32 sums, compared exactly (on a CPU with bf16 instructions it runs
  on relax-runtime's bf16 kernels, which hold such values exactly).
- detector_head: a MobileNetV3-style block (hard-swish, depthwise, squeeze-excitation),
  an FPN-style `Resize` and add, a `ConvTranspose` head, and a `Reshape` whose target
  comes from `Shape`; every input dim symbolic, run at three image sizes.
"""

import os
import sys

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
RNG = np.random.default_rng(2026)


def weight(name, shape, scale=None):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
    scale = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def ints(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def floats(name, values):
    return numpy_helper.from_array(np.asarray(values, np.float32), name)


def model(nodes, inputs, outputs, initializers, opset=OPSET):
    graph = helper.make_graph(nodes, "graph", inputs, outputs, initializers)
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    built.ir_version = 8
    onnx.checker.check_model(built)
    return built


def bidirectional_lstm(prefix, source, inputs, hidden):
    """Nodes of a bidirectional LSTM over `source` [T, 1, inputs] whose output is
    [T, 1, 2 * hidden], and its weights."""
    nodes = [
        helper.make_node(
            "LSTM",
            [source, f"{prefix}_w", f"{prefix}_r", f"{prefix}_b"],
            [f"{prefix}_y"],
            hidden_size=hidden,
            direction="bidirectional",
        ),
        helper.make_node("Transpose", [f"{prefix}_y"], [f"{prefix}_yt"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", [f"{prefix}_yt", "keep_two"], [f"{prefix}_out"]),
    ]
    weights = [
        weight(f"{prefix}_w", [2, 4 * hidden, inputs]),
        weight(f"{prefix}_r", [2, 4 * hidden, hidden]),
        weight(f"{prefix}_b", [2, 8 * hidden], 0.1),
    ]
    return nodes, weights


def crnn():
    nodes = [
        helper.make_node("Conv", ["image", "c1_w", "c1_b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "c2_w", "c2_b"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        # [1, 32, 8, W/4] -> [W/4, 1, 32, 8] -> [W/4, 1, 256]: the columns as a sequence.
        helper.make_node("Transpose", ["p2"], ["columns"], perm=[3, 0, 1, 2]),
        helper.make_node("Reshape", ["columns", "keep_two"], ["sequence"]),
    ]
    initializers = [
        weight("c1_w", [16, 1, 3, 3]),
        weight("c1_b", [16], 0.1),
        weight("c2_w", [32, 16, 3, 3]),
        weight("c2_b", [32], 0.1),
        ints("keep_two", [0, 0, -1]),
        weight("fc_w", [96, 37]),
        weight("fc_b", [37], 0.1),
    ]
    for prefix, source, width in (("lstm1", "sequence", 256), ("lstm2", "lstm1_out", 96)):
        layer_nodes, layer_weights = bidirectional_lstm(prefix, source, width, 48)
        nodes += layer_nodes
        initializers += layer_weights
    nodes += [
        helper.make_node("MatMul", ["lstm2_out", "fc_w"], ["projected"]),
        helper.make_node("Add", ["projected", "fc_b"], ["logits"]),
    ]
    built = model(
        nodes,
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 32, "width"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["steps", 1, 37])],
        initializers,
    )
    data = [[RNG.standard_normal((1, 1, 32, width)).astype(np.float32)] for width in (32, 64, 100)]
    return built, data


def gru_speech():
    hidden, features, batch = 64, 40, 3
    nodes = [
        helper.make_node(
            "GRU",
            ["features", "w", "r", "b", "lengths"],
            ["y", "y_h"],
            hidden_size=hidden,
            linear_before_reset=1,
        ),
        helper.make_node("Squeeze", ["y_h", "zero"], ["last"]),
        helper.make_node("MatMul", ["last", "head"], ["scores"]),
    ]
    initializers = [
        weight("w", [1, 3 * hidden, features]),
        weight("r", [1, 3 * hidden, hidden]),
        weight("b", [1, 6 * hidden], 0.1),
        ints("zero", [0]),
        weight("head", [hidden, 5]),
    ]
    built = model(
        nodes,
        [
            helper.make_tensor_value_info("features", TensorProto.FLOAT, ["time", batch, features]),
            helper.make_tensor_value_info("lengths", TensorProto.INT32, [batch]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["time", 1, batch, hidden]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [batch, 5]),
        ],
        initializers,
    )
    data = [
        [
            RNG.standard_normal((time, batch, features)).astype(np.float32),
            np.asarray(lengths, np.int32),
        ]
        for time, lengths in ((20, [20, 17, 5]), (50, [1, 50, 33]))
    ]
    return built, data


def if_scalar():
    def branch(name, op_type, operand):
        graph = helper.make_graph(
            [helper.make_node(op_type, ["x", f"{name}_c"], [f"{name}_out"])],
            name,
            [],
            [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [4])],
            [floats(f"{name}_c", [operand])],
        )
        return graph

    nodes = [
        helper.make_node(
            "If",
            ["flag"],
            ["chosen"],
            then_branch=branch("then", "Mul", 2.0),
            else_branch=branch("else", "Sub", 1.0),
        )
    ]
    built = model(
        nodes,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("chosen", TensorProto.FLOAT, [4])],
        [],
    )
    x = np.asarray([1.0, -2.0, 3.5, 0.25], np.float32)
    return built, [[x, np.asarray(True)], [x, np.asarray(False)]]


def bert_mask():
    width = 16
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["embedded"]),
        # The mask expansion sentence-encoder exports write.
        helper.make_node("Shape", ["input_ids"], ["shape"]),
        helper.make_node("Constant", [], ["minus_ones"], value=ints("minus_ones_value", [-1, -1])),
        helper.make_node("Equal", ["shape", "minus_ones"], ["is_minus_one"]),
        helper.make_node("Where", ["is_minus_one", "minus_ones", "shape"], ["target"]),
        helper.make_node("Expand", ["attention_mask", "target"], ["mask"]),
        helper.make_node("Cast", ["mask"], ["mask_float"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "mask_float"], ["masked"]),
        helper.make_node("Mul", ["masked", "minus_big"], ["bias"]),
        helper.make_node("Unsqueeze", ["bias", "axis_one"], ["bias_rows"]),
        helper.make_node("MatMul", ["embedded", "wq"], ["q"]),
        helper.make_node("MatMul", ["embedded", "wk"], ["k"]),
        helper.make_node("MatMul", ["embedded", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "bias_rows"], ["biased"]),
        helper.make_node("Softmax", ["biased"], ["weights"], axis=-1),
        helper.make_node("MatMul", ["weights", "v"], ["attended"]),
    ]
    initializers = [
        weight("table", [100, width], 1.0),
        floats("one", 1.0),
        floats("minus_big", -10000.0),
        ints("axis_one", [1]),
        weight("wq", [width, width]),
        weight("wk", [width, width]),
        weight("wv", [width, width]),
        floats("scale", 0.25),
    ]
    dims = ["batch_size", "sequence_length"]
    built = model(
        nodes,
        [helper.make_tensor_value_info(name, TensorProto.INT64, dims) for name in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info("attended", TensorProto.FLOAT, ["batch_size", "sequence_length", width])],
        initializers,
    )
    data = []
    for batch, length in ((2, 5), (1, 9), (3, 1)):
        ids = RNG.integers(0, 100, (batch, length)).astype(np.int64)
        mask = np.ones((batch, length), np.int64)
        mask[0, length // 2 + 1 :] = 0
        data.append([ids, mask])
    return built, data


def qdq(prefix, source, scale, zero_point=0):
    """Nodes quantizing `source` to uint8 and back (QuantizeLinear, DequantizeLinear)."""
    nodes = [
        helper.make_node("QuantizeLinear", [source, f"{prefix}_scale", f"{prefix}_zero"], [f"{prefix}_q"]),
        helper.make_node("DequantizeLinear", [f"{prefix}_q", f"{prefix}_scale", f"{prefix}_zero"], [f"{prefix}_dq"]),
    ]
    initializers = [floats(f"{prefix}_scale", scale), numpy_helper.from_array(np.asarray(zero_point, np.uint8), f"{prefix}_zero")]
    return nodes, initializers


def int8_weight(name, shape):
    """An int8 convolution weight quantized per output channel to 7 bits (onnxruntime's
    `reduce_range`), and its DequantizeLinear. With full 8-bit weights, onnxruntime's
    uint8 x int8 products on CPUs with AVX2 but no VNNI saturate pairs of them in 16 bits
    (its quantization docs say so), and its outputs here were off by up to 0.47."""
    values = RNG.standard_normal(shape).astype(np.float32) / np.sqrt(np.prod(shape[1:]))
    scales = (np.abs(values).reshape(shape[0], -1).max(axis=1) / 63.0).astype(np.float32)
    quantized = np.clip(np.round(values / scales.reshape(-1, 1, 1, 1)), -63, 63).astype(np.int8)
    node = helper.make_node(
        "DequantizeLinear", [f"{name}_q", f"{name}_scale", f"{name}_zero"], [name], axis=0
    )
    initializers = [
        numpy_helper.from_array(quantized, f"{name}_q"),
        numpy_helper.from_array(scales, f"{name}_scale"),
        numpy_helper.from_array(np.zeros(shape[0], np.int8), f"{name}_zero"),
    ]
    return node, initializers


def qdq_cnn():
    nodes, initializers = qdq("input", "image", 1.0 / 64, 128)
    for name, shape in (("w1", [16, 3, 3, 3]), ("w2", [32, 16, 3, 3])):
        node, weights = int8_weight(name, shape)
        nodes.append(node)
        initializers += weights
    nodes += [helper.make_node("Conv", ["input_dq", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1])]
    nodes += [helper.make_node("Relu", ["c1"], ["r1"])]
    more, values = qdq("act1", "r1", 1.0 / 32)
    nodes += more
    initializers += values
    nodes += [
        helper.make_node("Conv", ["act1_dq", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
    ]
    more, values = qdq("act2", "r2", 1.0 / 32)
    nodes += more
    initializers += values
    nodes += [
        helper.make_node("GlobalAveragePool", ["act2_dq"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    initializers += [weight("b1", [16], 0.1), weight("b2", [32], 0.1), weight("fc_w", [10, 32]), weight("fc_b", [10], 0.1)]
    built = model(
        nodes,
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializers,
    )
    return built, [[RNG.uniform(0, 3.9, (batch, 3, 16, 16)).astype(np.float32)] for batch in (1, 4)]


def integer_dense():
    # 256 products a sum: exact in float32 whatever the values (see integer_products.py).
    depth, columns = 256, 200
    w = RNG.integers(0, 256, (depth, columns)).astype(np.uint8)
    initializers = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array(7, np.uint8), "x_zero"),
        numpy_helper.from_array(np.array(131, np.uint8), "w_zero"),
    ]
    nodes = [helper.make_node("MatMulInteger", ["x", "w", "x_zero", "w_zero"], ["y"])]
    built = model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.UINT8, ["batch", depth])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["batch", columns])],
        initializers,
    )
    # 20 rows: a tile of 16 and a partial one.
    return built, [[RNG.integers(0, 256, (batch, depth)).astype(np.uint8)] for batch in (1, 20)]


def detector_head():
    nodes = [
        helper.make_node("Conv", ["image", "stem_w", "stem_b"], ["stem"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("HardSwish", ["stem"], ["stem_act"]),
        helper.make_node("Conv", ["stem_act", "dw_w", "dw_b"], ["dw"], pads=[1, 1, 1, 1], group=16),
        helper.make_node("HardSwish", ["dw"], ["dw_act"]),
        # Squeeze-excitation.
        helper.make_node("GlobalAveragePool", ["dw_act"], ["pooled"]),
        helper.make_node("Conv", ["pooled", "se1_w", "se1_b"], ["se1"]),
        helper.make_node("Relu", ["se1"], ["se1_act"]),
        helper.make_node("Conv", ["se1_act", "se2_w", "se2_b"], ["se2"]),
        helper.make_node("HardSigmoid", ["se2"], ["gate"], alpha=1.0 / 6, beta=0.5),
        helper.make_node("Mul", ["dw_act", "gate"], ["excited"]),
        # A coarser level, upsampled back and added (an FPN's top-down path).
        helper.make_node("Conv", ["excited", "down_w", "down_b"], ["down"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Resize", ["down", "", "twice"], ["up"], mode="nearest"),
        helper.make_node("Add", ["excited", "up"], ["merged"]),
        # The head: a transposed convolution back to the input's size, and a sigmoid.
        helper.make_node("ConvTranspose", ["merged", "head_w", "head_b"], ["head"], strides=[2, 2], kernel_shape=[2, 2]),
        helper.make_node("Sigmoid", ["head"], ["probability"]),
        # A reshape target computed from Shape: [N, C, H * W].
        helper.make_node("Shape", ["probability"], ["probability_shape"]),
        helper.make_node("Slice", ["probability_shape", "start", "two"], ["leading"]),
        helper.make_node("Concat", ["leading", "minus_one"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["probability", "flat_shape"], ["flat"]),
    ]
    initializers = [
        weight("stem_w", [16, 3, 3, 3]),
        weight("stem_b", [16], 0.1),
        weight("dw_w", [16, 1, 3, 3]),
        weight("dw_b", [16], 0.1),
        weight("se1_w", [4, 16, 1, 1]),
        weight("se1_b", [4], 0.1),
        weight("se2_w", [16, 4, 1, 1]),
        weight("se2_b", [16], 0.1),
        weight("down_w", [16, 16, 3, 3]),
        weight("down_b", [16], 0.1),
        floats("twice", [1.0, 1.0, 2.0, 2.0]),
        weight("head_w", [16, 1, 2, 2]),
        weight("head_b", [1], 0.1),
        ints("start", [0]),
        ints("two", [2]),
        ints("minus_one", [-1]),
    ]
    built = model(
        nodes,
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [helper.make_tensor_value_info("flat", TensorProto.FLOAT, ["batch", 1, "pixels"])],
        initializers,
    )
    sizes = ((1, 32, 32), (2, 48, 64), (1, 64, 40))
    return built, [[RNG.standard_normal((batch, 3, h, w)).astype(np.float32)] for batch, h, w in sizes]


def write(out, name, built, data):
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    onnx.save(built, os.path.join(folder, "model.onnx"))
    session = onnxruntime.InferenceSession(built.SerializeToString(), providers=["CPUExecutionProvider"])
    input_names = [value.name for value in session.get_inputs()]
    for index, arrays in enumerate(data):
        data_set = os.path.join(folder, f"test_data_set_{index}")
        os.makedirs(data_set, exist_ok=True)
        outputs = session.run(None, dict(zip(input_names, arrays)))
        for kind, values in (("input", arrays), ("output", outputs)):
            for position, value in enumerate(values):
                with open(os.path.join(data_set, f"{kind}_{position}.pb"), "wb") as handle:
                    handle.write(numpy_helper.from_array(np.asarray(value)).SerializeToString())


MODELS = {
    "crnn": crnn,
    "gru_speech": gru_speech,
    "if_scalar": if_scalar,
    "bert_mask": bert_mask,
    "qdq_cnn": qdq_cnn,
    "integer_dense": integer_dense,
    "detector_head": detector_head,
}


def main():
    if len(sys.argv) < 2 or any(name not in MODELS for name in sys.argv[2:]):
        sys.exit(__doc__)
    names = sys.argv[2:] or list(MODELS)
    for name in names:
        built, data = MODELS[name]()
        write(sys.argv[1], name, built, data)
    print(f"wrote {len(names)} models to {sys.argv[1]}")


if __name__ == "__main__":
    main()
