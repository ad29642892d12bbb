"""The com.microsoft activations against onnxruntime: TVM's Gelu, BiasGelu and FastGelu,
the driver's QuickGelu (onnx_ops/contrib_activations.py); BiasAdd and BiasSplitGelu,
which onnxruntime runs on CUDA only, against numpy. Within 1e-4 relative."""

import math
import unittest

import numpy as np
from onnx import helper
from onnx_ops_cases import assert_matches, graph_model

RNG = np.random.default_rng(12)
MICROSOFT = [("com.microsoft", 1)]


def tensor(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


class Activations(unittest.TestCase):
    def check(self, op_type, inputs, constants=None, expected=None, **attributes):
        node = helper.make_node(op_type, list(inputs), ["y"], domain="com.microsoft", **attributes)
        feeds = {name: value for name, value in inputs.items() if name not in (constants or {})}
        made = graph_model(node, feeds, ["y"], constants or {}, opset=17, extra_opsets=MICROSOFT)
        assert_matches(self, made, feeds, rtol=1e-4, atol=1e-5, expected=expected)

    def test_gelus_against_onnxruntime(self):
        bias = tensor(6)
        cases = {
            "Gelu": ({"x": tensor(2, 3, 6)}, {}, {}),
            "BiasGelu": ({"x": tensor(2, 3, 6), "bias": bias}, {"bias": bias}, {}),
            "FastGelu": ({"x": tensor(2, 3, 6), "bias": bias}, {"bias": bias}, {}),
            "QuickGelu": ({"x": tensor(2, 3, 6)}, {}, {"alpha": 1.5}),
        }
        for op_type, (inputs, constants, attributes) in cases.items():
            with self.subTest(op_type):
                self.check(op_type, inputs, constants, **attributes)

    def test_bias_add_and_bias_split_gelu_against_numpy(self):
        x, bias, skip = tensor(2, 4, 6), tensor(6), tensor(2, 4, 6)
        self.check("BiasAdd", {"x": x, "bias": bias, "skip": skip}, {"bias": bias}, expected=[x + bias + skip])
        total = x + bias
        self.check("BiasSplitGelu", {"x": x, "bias": bias}, {"bias": bias},
                   expected=[(total[..., :3] * gelu(total[..., 3:])).astype(np.float32)])


if __name__ == "__main__":
    unittest.main()
