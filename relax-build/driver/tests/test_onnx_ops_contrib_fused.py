"""The driver's FusedConv, FusedMatMul (against onnxruntime) and NhwcConv (which
onnxruntime runs on CUDA only: against its Conv on the data transposed), from
onnx_ops/contrib_fused.py; within 1e-4 relative."""

import unittest

import numpy as np
from onnx import helper
from onnx_ops_cases import assert_matches, graph_model, run_onnxruntime

RNG = np.random.default_rng(13)
MICROSOFT = [("com.microsoft", 1)]


def tensor(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def check(test, node, feeds, constants, expected=None):
    made = graph_model(node, feeds, ["y"], constants, opset=17, extra_opsets=MICROSOFT)
    assert_matches(test, made, feeds, rtol=1e-4, atol=1e-5, expected=expected)


class FusedConv(unittest.TestCase):
    def test_activations_and_the_sum_input(self):
        cases = {
            "Relu with Z": ({"activation": "Relu"}, True),
            "LeakyRelu": ({"activation": "LeakyRelu", "activation_params": [0.2]}, False),
            "Clip": ({"activation": "Clip", "activation_params": [-0.5, 0.5]}, False),
            "Sigmoid, strided": ({"activation": "Sigmoid", "strides": [2, 2]}, False),
            "HardSigmoid": ({"activation": "HardSigmoid", "activation_params": [0.3, 0.4]}, False),
            "Tanh, grouped": ({"activation": "Tanh", "group": 2}, False),
        }
        for name, (attributes, with_sum) in cases.items():
            with self.subTest(name):
                group = attributes.get("group", 1)
                feeds = {"x": tensor(1, 4, 6, 6)}
                stride = attributes.get("strides", [1, 1])[0]
                if with_sum:
                    feeds["z"] = tensor(1, 4, 6 // stride, 6 // stride)
                names = ["x", "w", "b"] + (["z"] if with_sum else [])
                node = helper.make_node("FusedConv", names, ["y"], domain="com.microsoft", pads=[1, 1, 1, 1],
                                        **attributes)
                check(self, node, feeds, {"w": tensor(4, 4 // group, 3, 3), "b": tensor(4)})


class FusedMatMul(unittest.TestCase):
    def test_transposes_batch_transposes_and_alpha(self):
        cases = {
            "transA": ({"transA": 1}, (2, 5, 3), (2, 5, 4)),
            "transB, alpha": ({"transB": 1, "alpha": 0.5}, (2, 3, 5), (2, 4, 5)),
            "transBatchA": ({"transBatchA": 1}, (3, 2, 5), (2, 5, 4)),
            "transBatchB with transB": ({"transBatchB": 1, "transB": 1}, (2, 3, 5), (4, 2, 5)),
            "2-D": ({"transA": 1, "transB": 1}, (5, 3), (4, 5)),
        }
        for name, (attributes, a_shape, b_shape) in cases.items():
            with self.subTest(name):
                node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", **attributes)
                feeds = {"a": tensor(*a_shape), "b": tensor(*b_shape)}
                check(self, node, feeds, {})


class NhwcConv(unittest.TestCase):
    def test_channels_last_with_bias_and_stride(self):
        data, weight, bias = tensor(1, 7, 7, 4), tensor(6, 3, 3, 4), tensor(6)
        reference = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])
        feeds = {"x": data.transpose(0, 3, 1, 2).copy()}
        expected = run_onnxruntime(graph_model(reference, feeds, ["y"], {"w": weight.transpose(0, 3, 1, 2).copy(),
                                                                          "b": bias}, opset=17), feeds)
        node = helper.make_node("NhwcConv", ["x", "w", "b"], ["y"], domain="com.microsoft", pads=[1, 1, 1, 1],
                                strides=[2, 2])
        check(self, node, {"x": data}, {"w": weight, "b": bias}, expected=[expected[0].transpose(0, 2, 3, 1)])


if __name__ == "__main__":
    unittest.main()
