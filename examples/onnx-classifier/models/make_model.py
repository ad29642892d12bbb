"""Writes models/digits.onnx: the quickstart's digit MLP as an ONNX graph.

    python examples/onnx-classifier/models/make_model.py    # needs numpy and onnx

Input `pixels` float32[batch, 64]; outputs `logits` float32[batch, 10] and
`probabilities` (Softmax of the logits). Weights are the quickstart's
(examples/quickstart/models/digits.safetensors), stored as initializers.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "fixtures"))
import safetensors_numpy  # noqa: E402

weights = safetensors_numpy.load(os.path.join(HERE, "..", "..", "quickstart", "models", "digits.safetensors"))
initializers = [
    numpy_helper.from_array(np.ascontiguousarray(weights["fc1.weight"].T), "fc1_weight_t"),
    numpy_helper.from_array(weights["fc1.bias"], "fc1_bias"),
    numpy_helper.from_array(np.ascontiguousarray(weights["fc2.weight"].T), "fc2_weight_t"),
    numpy_helper.from_array(weights["fc2.bias"], "fc2_bias"),
]
nodes = [
    helper.make_node("MatMul", ["pixels", "fc1_weight_t"], ["hidden_linear"], name="fc1_matmul"),
    helper.make_node("Add", ["hidden_linear", "fc1_bias"], ["hidden_biased"], name="fc1_add"),
    helper.make_node("Relu", ["hidden_biased"], ["hidden"], name="relu"),
    helper.make_node("MatMul", ["hidden", "fc2_weight_t"], ["logits_linear"], name="fc2_matmul"),
    helper.make_node("Add", ["logits_linear", "fc2_bias"], ["logits"], name="fc2_add"),
    helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1, name="softmax"),
]
graph = helper.make_graph(
    nodes,
    "digits",
    [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", 64])],
    [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10]),
        helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10]),
    ],
    initializers,
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="relax-cargo")
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, os.path.join(HERE, "digits.onnx"))
