"""Writes the benchmark's ONNX models (seeded random weights; needs numpy and onnx).

    python relax-bench/models/make_models.py

mlp_b1.onnx / mlp_b64.onnx  784-128-10 MLP (Gemm, Relu, Gemm) at batch 1 and 64
matmul.onnx                 C = A @ B, A and B float32[1024, 1024]
cnn.onnx                    conv 3x3 16ch (pad 1) on 1x3x224x224, relu, global average pool, linear 16->10
add.onnx                    C = A + B on float32[1, 4] (the VM call overhead case)
"""

import os

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
