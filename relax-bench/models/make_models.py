"""Writes the benchmark's ONNX models (seeded random weights; needs numpy and onnx).

    python relax-bench/models/make_models.py                       the small committed models
    python relax-bench/models/make_models.py NAME OUT.onnx         a generated model, NAME one of LIGHT_MODELS or MOBILE_MODELS (relax-bench's build.rs)
    python relax-bench/models/make_models.py minilm WEIGHTS OUT    all-MiniLM-L6-v2 (the bench's ORT side)
    python relax-bench/models/make_models.py torch_cnn WEIGHTS OUT torch_cnn.py's weights and its ONNX export (needs torch)
    python relax-bench/models/make_models.py crnn|gru OUT.onnx     a recurrent model with a symbolic time dim
    python relax-bench/models/make_models.py resnet50_int8 RESNET50 OUT   ResNet-50 quantized by onnxruntime (needs onnxruntime)

mlp_b1.onnx / mlp_b64.onnx  784-128-10 MLP (Gemm, Relu, Gemm) at batch 1 and 64
matmul.onnx                 C = A @ B, A and B float32[1024, 1024]
cnn.onnx                    conv 3x3 16ch (pad 1) on 1x3x224x224, relu, global average pool, linear 16->10
add.onnx                    C = A + B on float32[1, 4] (the VM call overhead case)
tiny_mlp.onnx               64-128-128-10 MLP (Gemm, Relu, Gemm, Relu, Gemm) at batch 1, a small classifier head
kws_cnn.onnx                DS-CNN-S keyword spotter ("Hello Edge", Zhang et al. 2017) on 1x1x49x10 MFCC frames:
                            conv 10x4 stride 2 64ch, 4 depthwise-separable blocks (depthwise 3x3, pointwise
                            1x1 64ch), each conv followed by BatchNormalization and Relu as an exporter writes
                            them, global average pool, linear 64->12

ResNet-50 (100 MB of weights), the other light models and MiniLM (90 MB) are not
committed: ResNet-50, DenseNet-121, Inception v1 and v2, ShuffleNet and SqueezeNet are the
architectures onnx ships as backend/test/data/light/light_<name>.onnx with seeded random
weights; MobileNetV2, EfficientNet-B0 and MobileNetV3-Large are built here as PyTorch exports
torchvision's, and ocr_det as PaddleOCR's mobile DBNet text detectors are exported (a
MobileNetV3 backbone, an FPN with Resize and Concat, a ConvTranspose head; batch,
height and width symbolic), with seeded random weights; the MiniLM graph is built here, op for op as an exporter writes a BERT
encoder, from the safetensors weights the bench's `minilm` model fetches. torch_cnn.py's
module gets seeded random weights (a safetensors file, which the bench compiles it with)
and is exported with those weights to ONNX by torch.onnx.export, for the same model
compiled from both sources. resnet50_int8 is that ResNet-50 as onnxruntime's static
quantizer writes it: its pre-processing (batch norms folded into the convolutions), then
QDQ with activations uint8 per tensor and weights int8 per output channel, calibrated
with MinMax on 8 seeded images of the bench's input distribution.

crnn and gru are shaped as the text recognizers and speech models users export: crnn a
CRNN (four 3x3 convolutions with pooling to one row, the columns as a sequence, two
bidirectional LSTM layers of 128, a linear layer to 97 classes) on a 1x1x32xW grey image,
W symbolic; gru two GRU layers of 256 over [T, 1, 80] filterbank frames, T symbolic, and
a linear layer to 64 classes.
"""

import json
import math
import os
import struct
import sys
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(42)


def save(name, nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="relax-bench")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, f"{name}.onnx"))


def tensor(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def weights(name, shape, scale):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def small_models():
    mlp_weights = [
        weights("fc1_weight", (128, 784), 0.05),
        weights("fc1_bias", (128,), 0.01),
        weights("fc2_weight", (10, 128), 0.1),
        weights("fc2_bias", (10,), 0.01),
    ]
    for batch in (1, 64):
        save(
            f"mlp_b{batch}",
            [
                helper.make_node("Gemm", ["x", "fc1_weight", "fc1_bias"], ["hidden_linear"], transB=1),
                helper.make_node("Relu", ["hidden_linear"], ["hidden"]),
                helper.make_node("Gemm", ["hidden", "fc2_weight", "fc2_bias"], ["logits"], transB=1),
            ],
            [tensor("x", [batch, 784])],
            [tensor("logits", [batch, 10])],
            mlp_weights,
        )
    save("matmul", [helper.make_node("MatMul", ["a", "b"], ["c"])], [tensor("a", [1024, 1024]), tensor("b", [1024, 1024])], [tensor("c", [1024, 1024])])
    save(
        "cnn",
        [
            helper.make_node("Conv", ["x", "conv_weight", "conv_bias"], ["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["conv"], ["activated"]),
            helper.make_node("GlobalAveragePool", ["activated"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["features"], axis=1),
            helper.make_node("Gemm", ["features", "fc_weight", "fc_bias"], ["logits"], transB=1),
        ],
        [tensor("x", [1, 3, 224, 224])],
        [tensor("logits", [1, 10])],
        [
            weights("conv_weight", (16, 3, 3, 3), 0.2),
            weights("conv_bias", (16,), 0.01),
            weights("fc_weight", (10, 16), 0.2),
            weights("fc_bias", (10,), 0.01),
        ],
    )
    save("add", [helper.make_node("Add", ["a", "b"], ["c"])], [tensor("a", [1, 4]), tensor("b", [1, 4])], [tensor("c", [1, 4])])
    # The models below draw from `rng` after the ones above, which keeps those bytes as they were.
    save(
        "tiny_mlp",
        [
            helper.make_node("Gemm", ["x", "fc1_weight", "fc1_bias"], ["fc1"], transB=1),
            helper.make_node("Relu", ["fc1"], ["hidden1"]),
            helper.make_node("Gemm", ["hidden1", "fc2_weight", "fc2_bias"], ["fc2"], transB=1),
            helper.make_node("Relu", ["fc2"], ["hidden2"]),
            helper.make_node("Gemm", ["hidden2", "fc3_weight", "fc3_bias"], ["logits"], transB=1),
        ],
        [tensor("x", [1, 64])],
        [tensor("logits", [1, 10])],
        [
            weights("fc1_weight", (128, 64), 0.125),
            weights("fc1_bias", (128,), 0.01),
            weights("fc2_weight", (128, 128), 0.09),
            weights("fc2_bias", (128,), 0.01),
            weights("fc3_weight", (10, 128), 0.09),
            weights("fc3_bias", (10,), 0.01),
        ],
    )
    kws_cnn()


def kws_cnn():
    """kws_cnn.onnx (see the module's documentation): convolutions without biases, He-scaled,
    each followed by a BatchNormalization with scale in [0.9, 1.4), shift and running mean in
    [-0.1, 0.1) and running variance in [0.5, 1.5). (Scales in [0.5, 1) shrank the activations
    through the nine normalizations to logits of about 0.05; these keep them about 1.)"""
    nodes, initializers = [], []

    def conv_bn_relu(x, name, channels, filters, kernel, strides=(1, 1), pads=(0, 0, 0, 0), group=1):
        fan_in = channels // group * kernel[0] * kernel[1]
        initializers.append(weights(f"{name}_weight", (filters, channels // group, *kernel), math.sqrt(2.0 / fan_in)))
        nodes.append(helper.make_node("Conv", [x, f"{name}_weight"], [f"{name}_conv"], kernel_shape=list(kernel), strides=list(strides), pads=list(pads), group=group))
        for kind, (low, high) in (("scale", (0.9, 1.4)), ("bias", (-0.1, 0.1)), ("mean", (-0.1, 0.1)), ("var", (0.5, 1.5))):
            initializers.append(numpy_helper.from_array(rng.uniform(low, high, filters).astype(np.float32), f"{name}_bn_{kind}"))
        bn = [f"{name}_conv"] + [f"{name}_bn_{kind}" for kind in ("scale", "bias", "mean", "var")]
        nodes.append(helper.make_node("BatchNormalization", bn, [f"{name}_bn"], epsilon=1e-3))
        nodes.append(helper.make_node("Relu", [f"{name}_bn"], [f"{name}_relu"]))
        return f"{name}_relu"

    # 49x10 -> 25x5: kernel 10x4, stride 2, padded 4 and 5 in time, 1 and 2 in frequency.
    x = conv_bn_relu("features", "conv1", 1, 64, (10, 4), strides=(2, 2), pads=(4, 1, 5, 2))
    for block in range(1, 5):
        x = conv_bn_relu(x, f"dw{block}", 64, 64, (3, 3), pads=(1, 1, 1, 1), group=64)
        x = conv_bn_relu(x, f"pw{block}", 64, 64, (1, 1))
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"]))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["flat"], axis=1))
    nodes.append(helper.make_node("Gemm", ["flat", "fc_weight", "fc_bias"], ["logits"], transB=1))
    initializers += [weights("fc_weight", (12, 64), 0.125), weights("fc_bias", (12,), 0.01)]
    save("kws_cnn", nodes, [tensor("features", [1, 1, 49, 10])], [tensor("logits", [1, 12])], initializers)


def write_atomically(model, path):
    temporary = f"{path}.{os.getpid()}.tmp"
    onnx.save(model, temporary)
    os.replace(temporary, path)


# The light models relax-bench runs, ResNet-50 among them (their architectures, as onnx
# ships them under backend/test/data/light/), each with its seed.
LIGHT_MODELS = {"resnet50": 50, "densenet121": 121, "inception_v1": 1, "inception_v2": 2, "shufflenet": 3, "squeezenet": 4}


def light_model(name, path):
    """light_<name>'s graph with every weight a seeded random initializer: He-scaled
    convolutions and linear layers, batch norms near identity, per-channel scales (`Mul`)
    near 1 and shifts (`Add`, `Sum`) near 0. The light models make their weights with
    `ConstantOfShape` nodes or carry placeholder initializers; both are replaced."""
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")
    model = onnx.load(light)
    graph = model.graph
    generator = np.random.default_rng(LIGHT_MODELS[name])
    shapes = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    produced = {}
    for node in list(graph.node):
        if node.op_type == "ConstantOfShape":
            produced[node.output[0]] = tuple(int(d) for d in shapes[node.input[0]])
            graph.node.remove(node)
    consumers = {}
    for node in graph.node:
        for position, value in enumerate(node.input):
            consumers.setdefault(value, (node, position))

    def consumer(value):
        """The node that uses `value`, past any `Unsqueeze` (DenseNet's per-channel scales)."""
        node, position = consumers[value]
        while node.op_type == "Unsqueeze":
            node, position = consumers[node.output[0]]
        return node, position

    def values(value, shape):
        node, position = consumer(value)
        if node.op_type == "BatchNormalization":
            low, high = {1: (0.5, 1.0), 2: (-0.1, 0.1), 3: (-0.1, 0.1), 4: (0.5, 1.5)}[position]
            return generator.uniform(low, high, shape)
        if node.op_type == "Mul":
            return generator.uniform(0.5, 1.0, shape)
        if node.op_type in ("Add", "Sum"):
            return generator.uniform(-0.1, 0.1, shape)
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        return generator.standard_normal(shape) * (math.sqrt(2.0 / fan_in) if len(shape) > 1 else 0.01)

    weights = {value: shape for value, shape in produced.items() if value in consumers}
    for value, array in shapes.items():
        if value in consumers and consumer(value)[0].op_type in ("Conv", "BatchNormalization", "Gemm", "Mul", "Add", "Sum"):
            weights[value] = array.shape
    new_initializers = [numpy_helper.from_array(values(value, shape).astype(np.float32), value) for value, shape in weights.items()]
    data = [value for value in graph.input if value.name not in produced and value.name not in shapes]
    assert len(data) == 1, f"light_{name} has one data input: {[value.name for value in data]}"
    for value in list(graph.input):
        if value.name != data[0].name:
            graph.input.remove(value)
    used = {value for node in graph.node for value in node.input}
    kept = [init for init in graph.initializer if init.name in used and init.name not in weights]
    del graph.initializer[:]
    graph.initializer.extend(kept + new_initializers)
    last = graph.node[-1]
    if last.op_type == "Softmax" and name != "resnet50":
        # The logits: with random weights the probabilities all lie near 1/1000, where the
        # bench's 1e-4 output check could not tell a wrong model from a right one.
        # (ResNet-50's row keeps the graph it was measured with; its outputs spread to 0.5.)
        graph.output[0].name = last.input[0]
        graph.node.remove(last)
    # IR 4 and later allow initializers that are not graph inputs.
    model.ir_version = max(model.ir_version, 7)
    onnx.checker.check_model(model)
    write_atomically(model, path)


# Mobile architectures, written here as PyTorch's exporter writes torchvision's models
# (batch norms folded into the convolutions' biases, SiLU as Sigmoid and Mul, ReLU6 as
# Clip with 0-d Constant bounds), each with its seed.
MOBILE_MODELS = {"mobilenet_v2": 22, "efficientnet_b0": 7, "mobilenet_v3": 3, "ocr_det": 11}


class Builder:
    """An ONNX graph on one 1x3x224x224 input, built op by op, with seeded weights:
    He-scaled convolutions (each filter scaled by [0.8, 1.2), as a folded batch norm would)
    and biases in [-0.1, 0.1)."""

    def __init__(self, seed):
        self.generator = np.random.default_rng(seed)
        self.nodes, self.initializers, self.count = [], [], 0

    def name(self, kind):
        self.count += 1
        return f"{kind}_{self.count}"

    def node(self, op, inputs, **attributes):
        output = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [output], **attributes))
        return output

    def constant(self, array, kind="w"):
        name = self.name(kind)
        self.initializers.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def conv(self, x, channels, filters, kernel=1, stride=1, groups=1, gain=1.0):
        fan_in = channels // groups * kernel * kernel
        w = self.generator.standard_normal((filters, channels // groups, kernel, kernel)) * math.sqrt(2.0 / fan_in) * gain
        w *= self.generator.uniform(0.8, 1.2, (filters, 1, 1, 1))
        b = self.generator.uniform(-0.1, 0.1, filters)
        pad = kernel // 2
        return self.node(
            "Conv",
            [x, self.constant(w), self.constant(b, "b")],
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
            group=groups,
        )

    def silu(self, x):
        return self.node("Mul", [x, self.node("Sigmoid", [x])])

    def relu6(self, x):
        bounds = []
        for value in (0.0, 6.0):
            bound = self.name("bound")
            self.nodes.append(helper.make_node("Constant", [], [bound], value=numpy_helper.from_array(np.array(value, np.float32))))
            bounds.append(bound)
        return self.node("Clip", [x, *bounds])

    def relu(self, x):
        return self.node("Relu", [x])

    def hard_swish(self, x):
        return self.node("HardSwish", [x])

    def conv_transpose(self, x, channels, filters, gain=1.0):
        """A 2x2 stride-2 transposed convolution (an upsampling head), with bias; its
        He-scaled weights times `gain`."""
        w = self.generator.standard_normal((channels, filters, 2, 2)) * math.sqrt(2.0 / channels) * gain
        b = self.generator.uniform(-0.1, 0.1, filters)
        return self.node("ConvTranspose", [x, self.constant(w), self.constant(b, "b")], kernel_shape=[2, 2], strides=[2, 2])

    def upsample(self, x, factor):
        """Nearest-neighbour Resize by `factor` in height and width (ONNX's scales form)."""
        scales = self.constant([1.0, 1.0, float(factor), float(factor)], "scales")
        return self.node("Resize", [x, "", scales], mode="nearest")

    def classifier(self, x, channels):
        flat = self.node("Flatten", [self.node("GlobalAveragePool", [x])], axis=1)
        w = self.generator.standard_normal((1000, channels)) * math.sqrt(1.0 / channels)
        b = self.generator.uniform(-0.1, 0.1, 1000)
        return self.node("Gemm", [flat, self.constant(w), self.constant(b, "b")], transB=1)


def mobilenet_v2(builder):
    """torchvision's MobileNetV2: inverted residual blocks (expand 1x1, depthwise 3x3,
    project 1x1), ReLU6."""
    x = builder.relu6(builder.conv("input", 3, 32, 3, 2))
    channels = 32
    for expand, filters, repeats, first_stride in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for index in range(repeats):
            stride = first_stride if index == 0 else 1
            hidden = channels * expand
            y = x if expand == 1 else builder.relu6(builder.conv(x, channels, hidden))
            y = builder.relu6(builder.conv(y, hidden, hidden, 3, stride, groups=hidden))
            y = builder.conv(y, hidden, filters)
            x = builder.node("Add", [x, y]) if stride == 1 and channels == filters else y
            channels = filters
    return builder.classifier(builder.relu6(builder.conv(x, channels, 1280)), 1280)


def efficientnet_b0(builder):
    """torchvision's EfficientNet-B0: MBConv blocks (expand 1x1, depthwise 3x3 or 5x5,
    squeeze-and-excitation, project 1x1), SiLU."""
    x = builder.silu(builder.conv("input", 3, 32, 3, 2))
    channels = 32
    for expand, kernel, first_stride, filters, repeats in [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]:
        for index in range(repeats):
            stride = first_stride if index == 0 else 1
            hidden = channels * expand
            y = x if expand == 1 else builder.silu(builder.conv(x, channels, hidden))
            y = builder.silu(builder.conv(y, hidden, hidden, kernel, stride, groups=hidden))
            squeezed = max(1, channels // 4)
            scale = builder.silu(builder.conv(builder.node("GlobalAveragePool", [y]), hidden, squeezed))
            y = builder.node("Mul", [y, builder.node("Sigmoid", [builder.conv(scale, squeezed, hidden)])])
            y = builder.conv(y, hidden, filters)
            x = builder.node("Add", [x, y]) if stride == 1 and channels == filters else y
            channels = filters
    return builder.classifier(builder.silu(builder.conv(x, channels, 1280)), 1280)


def make_divisible(channels, divisor=8):
    """torchvision's rounding of a block's width: to a multiple of 8, never 10% below."""
    rounded = max(divisor, int(channels + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * channels else rounded


# torchvision's MobileNetV3-Large blocks: kernel, expanded width, output width,
# squeeze-and-excitation, hard-swish (else ReLU), stride.
MOBILENET_V3_LARGE = [
    (3, 16, 16, False, False, 1),
    (3, 64, 24, False, False, 2),
    (3, 72, 24, False, False, 1),
    (5, 72, 40, True, False, 2),
    (5, 120, 40, True, False, 1),
    (5, 120, 40, True, False, 1),
    (3, 240, 80, False, True, 2),
    (3, 200, 80, False, True, 1),
    (3, 184, 80, False, True, 1),
    (3, 184, 80, False, True, 1),
    (3, 480, 112, True, True, 1),
    (3, 672, 112, True, True, 1),
    (5, 672, 160, True, True, 2),
    (5, 960, 160, True, True, 1),
    (5, 960, 160, True, True, 1),
]


def mobilenet_v3_backbone(builder, x, width, hard_sigmoid):
    """MobileNetV3-Large's stem and blocks at `width` (1.0 or PaddleOCR's 0.5), its
    squeeze-and-excitation gates through `hard_sigmoid` (alpha, beta); returns the
    final 1x1 convolution's output and the feature maps at strides 4, 8 and 16."""
    channels = make_divisible(16 * width)
    x = builder.hard_swish(builder.conv(x, 3, channels, 3, 2))
    features = []
    for kernel, expanded, filters, squeeze, hard, stride in MOBILENET_V3_LARGE:
        if stride == 2 and len(features) < 3 and channels != make_divisible(16 * width):
            features.append(x)
        expanded, filters = make_divisible(expanded * width), make_divisible(filters * width)
        activation = builder.hard_swish if hard else builder.relu
        y = x if expanded == channels else activation(builder.conv(x, channels, expanded))
        y = activation(builder.conv(y, expanded, expanded, kernel, stride, groups=expanded))
        if squeeze:
            squeezed = make_divisible(expanded // 4)
            gate = builder.relu(builder.conv(builder.node("GlobalAveragePool", [y]), expanded, squeezed))
            alpha, beta = hard_sigmoid
            gate = builder.node("HardSigmoid", [builder.conv(gate, squeezed, expanded)], alpha=alpha, beta=beta)
            y = builder.node("Mul", [y, gate])
        # A gain of 0.8 on the projections keeps activations in the tens, as the trained
        # model's batch norms do: at full gain they reach the hundreds, where float32
        # sums in another order (onnxruntime against numpy) already differ by 1e-4.
        y = builder.conv(y, expanded, filters, gain=0.8)
        x = builder.node("Add", [x, y]) if stride == 1 and channels == filters else y
        channels = filters
    last = make_divisible(960 * width)
    return builder.hard_swish(builder.conv(x, channels, last)), last, features


def mobilenet_v3(builder):
    """torchvision's MobileNetV3-Large (hard-swish, squeeze-and-excitation with
    hard-sigmoid gates), its classifier 960 -> 1280 -> 1000."""
    x, channels, _ = mobilenet_v3_backbone(builder, "input", 1.0, (1.0 / 6.0, 0.5))
    flat = builder.node("Flatten", [builder.node("GlobalAveragePool", [x])], axis=1)
    hidden = builder.constant(builder.generator.standard_normal((1280, channels)) * math.sqrt(2.0 / channels))
    flat = builder.hard_swish(builder.node("Gemm", [flat, hidden, builder.constant(np.zeros(1280), "b")], transB=1))
    w = builder.generator.standard_normal((1000, 1280)) * math.sqrt(1.0 / 1280)
    return builder.node("Gemm", [flat, builder.constant(w), builder.constant(np.zeros(1000), "b")], transB=1)


def ocr_det(builder):
    """A DBNet text detector as PaddleOCR's mobile detectors export it: MobileNetV3-Large
    at width 0.5 (gates hard-sigmoid 0.2x + 0.5), an FPN of 96 channels (1x1 lateral
    convolutions, nearest 2x upsampling and sums, 3x3 convolutions to 24, each level
    upsampled to stride 4 and concatenated), and a head of a 3x3 convolution and two 2x2
    stride-2 transposed convolutions to a sigmoid probability map at the input's size."""
    x, channels, features = mobilenet_v3_backbone(builder, "input", 0.5, (0.2, 0.5))
    widths = [make_divisible(c * 0.5) for c in (24, 40, 112)] + [channels]
    laterals = [builder.conv(feature, width, 96) for feature, width in zip(features + [x], widths)]
    merged = [laterals[3]]
    for lateral in reversed(laterals[:3]):
        merged.insert(0, builder.node("Add", [lateral, builder.upsample(merged[0], 2)]))
    levels = [builder.conv(level, 96, 24, 3) for level in merged]
    levels = [levels[0]] + [builder.upsample(level, 2**index) for index, level in enumerate(levels) if index > 0]
    fused = builder.node("Concat", levels[::-1], axis=1)
    y = builder.relu(builder.conv(fused, 96, 24, 3))
    y = builder.relu(builder.conv_transpose(y, 24, 24))
    # Random weights give logits in the hundreds, a map of 0s and 1s that no output
    # check could tell apart: the last layer's gain brings them to about 1.
    return builder.node("Sigmoid", [builder.conv_transpose(y, 24, 1, gain=1.0 / 200)])


def mobile_model(name, path):
    builder = Builder(MOBILE_MODELS[name])
    builders = {"mobilenet_v2": mobilenet_v2, "efficientnet_b0": efficientnet_b0, "mobilenet_v3": mobilenet_v3, "ocr_det": ocr_det}
    output = builders[name](builder)
    if name == "ocr_det":
        # Any image whose sides are multiples of 32, as the detector's users feed it.
        shapes = (["batch", 3, "height", "width"], ["batch", 1, "height", "width"])
    else:
        shapes = ([1, 3, 224, 224], [1, 1000])
    graph = helper.make_graph(
        builder.nodes,
        name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, shapes[0])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, shapes[1])],
        builder.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="relax-bench")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    write_atomically(model, path)


def load_safetensors(path):
    raw = open(path, "rb").read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    body = raw[8 + length :]
    tensors = {}
    for name, entry in header.items():
        if name != "__metadata__":
            start, end = entry["data_offsets"]
            dtype = {"F32": np.float32, "I64": np.int64}[entry["dtype"]]
            tensors[name] = np.frombuffer(body[start:end], dtype).reshape(entry["shape"])
    return tensors


def minilm(weights_path, path):
    """all-MiniLM-L6-v2 (mean pooling, L2 normalisation) as an exporter writes BERT:
    MatMul + Add with [in, out] weights, LayerNormalization, Erf GELU, reshaped and
    transposed attention heads; inputs input_ids and attention_mask, int64[batch, seq]."""
    w = load_safetensors(weights_path)
    nodes, initializers = [], []
    counter = [0]

    def const(array, name=None):
        counter[0] += 1
        name = name or f"const_{counter[0]}"
        initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(op, inputs, **attributes):
        counter[0] += 1
        output = f"{op.lower()}_{counter[0]}"
        nodes.append(helper.make_node(op, inputs, [output], **attributes))
        return output

    def linear(x, prefix):
        weight = const(np.ascontiguousarray(w[prefix + ".weight"].T), prefix + ".weight")
        return node("Add", [node("MatMul", [x, weight]), const(w[prefix + ".bias"], prefix + ".bias")])

    def layer_norm(x, prefix):
        return node("LayerNormalization", [x, const(w[prefix + ".weight"], prefix + ".weight"), const(w[prefix + ".bias"], prefix + ".bias")], axis=-1, epsilon=1e-12)

    words = node("Gather", [const(w["embeddings.word_embeddings.weight"], "word_embeddings"), "input_ids"])
    seq = node("Gather", [node("Shape", ["input_ids"]), const(np.array(1, np.int64))], axis=0)
    positions = node("Range", [const(np.array(0, np.int64)), seq, const(np.array(1, np.int64))])
    position_embeddings = node("Gather", [const(w["embeddings.position_embeddings.weight"], "position_embeddings"), positions])
    token_type = const(w["embeddings.token_type_embeddings.weight"][0], "token_type_embedding")
    x = layer_norm(node("Add", [node("Add", [words, position_embeddings]), token_type]), "embeddings.LayerNorm")
    mask = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    bias = node("Mul", [node("Sub", [const(np.array(1.0, np.float32)), mask]), const(np.array(-10000.0, np.float32))])
    bias = node("Unsqueeze", [bias, const(np.array([1, 2], np.int64))])
    heads = const(np.array([0, 0, 12, 32], np.int64))
    merged = const(np.array([0, 0, 384], np.int64))
    for layer in range(6):
        p = f"encoder.layer.{layer}."
        q = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.query"), heads])], perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.key"), heads])], perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.value"), heads])], perm=[0, 2, 1, 3])
        scores = node("Div", [node("MatMul", [q, k]), const(np.array(math.sqrt(32), np.float32))])
        probabilities = node("Softmax", [node("Add", [scores, bias])], axis=-1)
        context = node("Reshape", [node("Transpose", [node("MatMul", [probabilities, v])], perm=[0, 2, 1, 3]), merged])
        x = layer_norm(node("Add", [linear(context, p + "attention.output.dense"), x]), p + "attention.output.LayerNorm")
        inner = linear(x, p + "intermediate.dense")
        erf = node("Erf", [node("Div", [inner, const(np.array(math.sqrt(2.0), np.float32))])])
        gelu = node("Mul", [node("Mul", [inner, node("Add", [erf, const(np.array(1.0, np.float32))])]), const(np.array(0.5, np.float32))])
        x = layer_norm(node("Add", [linear(gelu, p + "output.dense"), x]), p + "output.LayerNorm")
    weights_mask = node("Unsqueeze", [mask, const(np.array([2], np.int64))])
    summed = node("ReduceSum", [node("Mul", [x, weights_mask]), const(np.array([1], np.int64))], keepdims=0)
    counts = node("Max", [node("ReduceSum", [weights_mask, const(np.array([1], np.int64))], keepdims=0), const(np.array(1e-9, np.float32))])
    pooled = node("Div", [summed, counts])
    norm = node("Max", [node("ReduceL2", [pooled], axes=[1], keepdims=1), const(np.array(1e-12, np.float32))])
    nodes.append(helper.make_node("Div", [pooled, norm], ["embeddings"]))
    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", 384])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="relax-bench")
    model.ir_version = 8
    onnx.checker.check_model(model)
    write_atomically(model, path)


def save_safetensors(tensors, path):
    """`tensors` (name -> numpy array) as a safetensors file: an 8-byte little-endian
    header length, the JSON header, then the raw little-endian values."""
    dtypes = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        blob = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtypes[array.dtype], "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "wb") as file:
        file.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    os.replace(temporary, path)


TORCH_CNN_SEED = 18


def torch_cnn(weights_path, path):
    """torch_cnn.py's module with seeded random weights, by its state dict's names:
    He-scaled convolutions, batch norms near identity (scale in [0.5, 1), shift and
    running mean in [-0.1, 0.1), running variance in [0.5, 1.5)), a linear layer scaled by
    1/sqrt(fan in); written as safetensors to `weights_path`, and the module with them
    exported to ONNX by torch.onnx.export (TorchScript exporter, opset 17, as a PyTorch
    user exports for onnxruntime: batch norms folded into the convolutions) to `path`."""
    import torch

    sys.path.insert(0, HERE)
    from torch_cnn import TorchCnn

    module = TorchCnn().eval()
    generator = np.random.default_rng(TORCH_CNN_SEED)
    ranges = {"weight": (0.5, 1.0), "bias": (-0.1, 0.1), "running_mean": (-0.1, 0.1), "running_var": (0.5, 1.5)}
    norms = {name for name, child in module.named_modules() if isinstance(child, torch.nn.BatchNorm2d)}
    state = {}
    for name, value in module.state_dict().items():
        owner, _, kind = name.rpartition(".")
        shape = tuple(value.shape)
        if kind == "num_batches_tracked":
            array = np.zeros(shape, np.int64)
        elif owner in norms:
            array = generator.uniform(*ranges[kind], shape)
        elif kind == "bias":
            array = generator.uniform(-0.1, 0.1, shape)
        else:
            fan_in = int(np.prod(shape[1:]))
            scale = math.sqrt((2.0 if len(shape) == 4 else 1.0) / fan_in)
            array = generator.standard_normal(shape) * scale
        state[name] = array.astype(value.numpy().dtype)
    save_safetensors(state, weights_path)
    module.load_state_dict({name: torch.from_numpy(array.copy()) for name, array in load_safetensors(weights_path).items()}, strict=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    with torch.no_grad(), warnings.catch_warnings():
        # (torch 2.9 and later warn that the TorchScript exporter is the legacy one.)
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            module,
            (torch.rand(1, 3, 224, 224),),
            temporary,
            input_names=["x"],
            output_names=["logits"],
            opset_version=17,
            dynamo=False,
        )
    onnx.checker.check_model(onnx.load(temporary))
    os.replace(temporary, path)


def recurrent_model(name, path):
    """crnn or gru (see the module's documentation), opset 17, seeded weights."""
    nodes, initializers = [], []

    def add(op, inputs, output, **attributes):
        nodes.append(helper.make_node(op, inputs, [output], **attributes))
        return output

    def constant(name, array):
        initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def layer_weights(prefix, op, gates, inputs, hidden, directions):
        w = constant(f"{prefix}_w", (rng.standard_normal((directions, gates * hidden, inputs)) / math.sqrt(inputs)).astype(np.float32))
        r = constant(f"{prefix}_r", (rng.standard_normal((directions, gates * hidden, hidden)) / math.sqrt(hidden)).astype(np.float32))
        b = constant(f"{prefix}_b", (rng.standard_normal((directions, 2 * gates * hidden)) * 0.1).astype(np.float32))
        return [w, r, b]

    def linear(x, prefix, inputs, outputs):
        w = constant(f"{prefix}_w", (rng.standard_normal((inputs, outputs)) / math.sqrt(inputs)).astype(np.float32))
        b = constant(f"{prefix}_b", (rng.standard_normal(outputs) * 0.1).astype(np.float32))
        return add("Add", [add("MatMul", [x, w], f"{prefix}_mm"), b], f"{prefix}_out")

    if name == "crnn":
        x, channels = "image", 1
        for index, (filters, pool) in enumerate(((64, (2, 2)), (128, (2, 2)), (256, (2, 1)), (256, (4, 1)))):
            w = constant(f"c{index}_w", (rng.standard_normal((filters, channels, 3, 3)) / math.sqrt(9 * channels)).astype(np.float32))
            b = constant(f"c{index}_b", (rng.standard_normal(filters) * 0.1).astype(np.float32))
            x = add("Relu", [add("Conv", [x, w, b], f"c{index}", pads=[1, 1, 1, 1])], f"r{index}")
            x = add("MaxPool", [x], f"p{index}", kernel_shape=list(pool), strides=list(pool))
            channels = filters
        # [1, 256, 1, W/4] -> [W/4, 1, 256, 1] -> [W/4, 1, 256]: the columns as a sequence.
        keep_two = constant("keep_two", np.array([0, 0, -1], np.int64))
        x = add("Reshape", [add("Transpose", [x], "columns", perm=[3, 0, 1, 2]), keep_two], "sequence")
        width = 256
        for layer in range(2):
            y = add("LSTM", [x] + layer_weights(f"lstm{layer}", "LSTM", 4, width, 128, 2), f"lstm{layer}_y",
                    hidden_size=128, direction="bidirectional")
            x = add("Reshape", [add("Transpose", [y], f"lstm{layer}_t", perm=[0, 2, 1, 3]), keep_two], f"lstm{layer}_out")
            width = 256
        inputs = [tensor("image", [1, 1, 32, "width"])]
        outputs = [tensor(linear(x, "fc", 256, 97), ["steps", 1, 97])]
    else:
        x, width = "frames", 80
        for layer in range(2):
            y = add("GRU", [x] + layer_weights(f"gru{layer}", "GRU", 3, width, 256, 1), f"gru{layer}_y",
                    hidden_size=256, linear_before_reset=1)
            x = add("Squeeze", [y, constant(f"gru{layer}_axis", np.array([1], np.int64))], f"gru{layer}_out")
            width = 256
        inputs = [tensor("frames", ["time", 1, 80])]
        outputs = [tensor(linear(x, "fc", 256, 64), ["time", 1, 64])]
    graph = helper.make_graph(nodes, name, inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="relax-bench")
    model.ir_version = 8
    write_atomically(model, path)


RECURRENT_MODELS = ("crnn", "gru")


def resnet50_int8(source, path):
    """`source` (ResNet-50) quantized by onnxruntime's static quantizer (see the module's
    doc) to `path`."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    # Per-channel scales need DequantizeLinear's `axis`, from opset 13 (the light model
    # is of opset 8).
    model = onnx.version_converter.convert_version(onnx.load(source), 13)
    name = model.graph.input[0].name

    class Images(CalibrationDataReader):
        def __init__(self):
            generator = np.random.default_rng(8)
            self.batches = iter([{name: generator.random((1, 3, 224, 224), dtype=np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    upgraded = f"{path}.{os.getpid()}.opset13.onnx"
    prepared, quantized = f"{path}.{os.getpid()}.pre.onnx", f"{path}.{os.getpid()}.tmp"
    try:
        onnx.save(model, upgraded)
        quant_pre_process(upgraded, prepared)
        quantize_static(
            prepared,
            quantized,
            Images(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )
        os.replace(quantized, path)
    finally:
        for leftover in (upgraded, prepared, quantized):
            if os.path.exists(leftover):
                os.remove(leftover)


if __name__ == "__main__":
    if len(sys.argv) == 1:
        small_models()
    elif sys.argv[1] in LIGHT_MODELS and len(sys.argv) == 3:
        light_model(sys.argv[1], sys.argv[2])
    elif sys.argv[1] in MOBILE_MODELS and len(sys.argv) == 3:
        mobile_model(sys.argv[1], sys.argv[2])
    elif sys.argv[1] in RECURRENT_MODELS and len(sys.argv) == 3:
        recurrent_model(sys.argv[1], sys.argv[2])
    elif sys.argv[1] == "minilm" and len(sys.argv) == 4:
        minilm(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "torch_cnn" and len(sys.argv) == 4:
        torch_cnn(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "resnet50_int8" and len(sys.argv) == 4:
        resnet50_int8(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
