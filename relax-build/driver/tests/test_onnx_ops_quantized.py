"""The driver's integer and quantized converters against onnxruntime
(onnx_ops/quantized.py), and the supported-operator check on onnxruntime-only ones."""

import os
import sys
import unittest

import numpy as np
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_ops_cases import assert_matches, graph_model

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relax_driver import onnx_prepare  # noqa: E402
from relax_driver.errors import DriverError  # noqa: E402

RNG = np.random.default_rng(2)


def integers(dtype, *shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def scalar(value, dtype):
    return np.array(value, dtype)


class IntegerOperators(unittest.TestCase):
    def test_conv_integer_with_padding_and_per_channel_weight_zero_points(self):
        # (onnxruntime has no per-channel weight zero points here: ONNX's reference is the judge.)
        node = helper.make_node("ConvInteger", ["x", "w", "x_zero", "w_zero"], ["y"], pads=[1, 1, 1, 1])
        data = integers(np.uint8, 1, 2, 5, 5)
        made = graph_model(node, {"x": data}, {"y": np.int32},
                           {"w": integers(np.uint8, 3, 2, 3, 3), "x_zero": scalar(7, np.uint8),
                            "w_zero": np.array([1, 128, 255], np.uint8)}, opset=13)
        assert_matches(self, made, {"x": data}, expected=ReferenceEvaluator(made).run(None, {"x": data}))

    def test_qlinear_conv_per_channel_with_bias(self):
        inputs = ["x", "x_scale", "x_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero", "bias"]
        node = helper.make_node("QLinearConv", inputs, ["y"], strides=[2, 2])
        constants = {
            "x_scale": scalar(0.02, np.float32), "x_zero": scalar(-3, np.int8),
            "w": integers(np.int8, 4, 3, 3, 3), "w_scale": np.array([0.01, 0.02, 0.005, 0.03], np.float32),
            "w_zero": np.zeros(4, np.int8), "y_scale": scalar(0.05, np.float32), "y_zero": scalar(5, np.int8),
            "bias": RNG.integers(-500, 500, 4).astype(np.int32),
        }
        data = integers(np.int8, 1, 3, 7, 7)
        assert_matches(self, graph_model(node, {"x": data}, {"y": np.int8}, constants, opset=13), {"x": data})

    def test_qlinear_matmul_uint8_and_int8(self):
        for dtype in (np.uint8, np.int8):
            with self.subTest(dtype=dtype.__name__):
                inputs = ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale", "y_zero"]
                node = helper.make_node("QLinearMatMul", inputs, ["y"])
                constants = {
                    "a_scale": scalar(0.03, np.float32), "a_zero": scalar(3, dtype),
                    "b": integers(dtype, 2, 6, 5), "b_scale": scalar(0.02, np.float32), "b_zero": scalar(1, dtype),
                    "y_scale": scalar(0.4, np.float32), "y_zero": scalar(2, dtype),
                }
                data = integers(dtype, 2, 4, 6)
                assert_matches(self, graph_model(node, {"a": data}, {"y": dtype}, constants, opset=13), {"a": data})


class QuantizeDequantize(unittest.TestCase):
    def test_qdq_per_tensor_and_per_axis_as_the_quantizer_writes_them(self):
        data = RNG.standard_normal((2, 4, 3)).astype(np.float32)
        cases = {
            "per tensor uint8": (scalar(0.05, np.float32), scalar(128, np.uint8), {}),
            "per axis int8": (np.array([0.01, 0.02, 0.04, 0.08], np.float32), np.zeros(4, np.int8), {"axis": 1}),
        }
        for name, (scale, zero, attributes) in cases.items():
            with self.subTest(name):
                nodes = [
                    helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"], **attributes),
                    helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"], **attributes),
                ]
                made = graph_model(nodes, {"x": data}, ["y"], {"scale": scale, "zero": zero}, opset=13)
                assert_matches(self, made, {"x": data}, rtol=0, atol=1e-6)

    def test_qdq_conv_with_per_channel_int8_weights(self):
        # The form quantize_static(..., quant_format=QuantFormat.QDQ, per_channel=True) writes.
        data = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
        nodes = [
            helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["xq"]),
            helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero"], ["xd"]),
            helper.make_node("DequantizeLinear", ["wq", "w_scale", "w_zero"], ["wd"], axis=0),
            helper.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("QuantizeLinear", ["c", "y_scale", "y_zero"], ["yq"]),
            helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zero"], ["y"]),
        ]
        constants = {
            "x_scale": scalar(0.03, np.float32), "x_zero": scalar(120, np.uint8),
            "wq": integers(np.int8, 4, 3, 3, 3), "w_scale": np.array([0.01, 0.004, 0.02, 0.008], np.float32),
            "w_zero": np.zeros(4, np.int8), "b": RNG.standard_normal(4).astype(np.float32),
            "y_scale": scalar(0.2, np.float32), "y_zero": scalar(128, np.uint8),
        }
        made = graph_model(nodes, {"x": data}, ["y"], constants, opset=13)
        assert_matches(self, made, {"x": data}, rtol=0, atol=1e-5)

    def test_dynamic_quantize_linear(self):
        data = np.concatenate([RNG.standard_normal(20), [-1.0, 0.0, 2.5]]).astype(np.float32)
        node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero"])
        made = graph_model(node, {"x": data}, {"y": np.uint8, "scale": np.float32, "zero": np.uint8}, opset=13)
        assert_matches(self, made, {"x": data})

    def test_blocked_scales(self):
        data = RNG.standard_normal((3, 8)).astype(np.float32) * 4
        scale = (RNG.random((3, 2)) + 0.1).astype(np.float32)
        zero = integers(np.int8, 3, 2)
        nodes = [
            helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"], axis=1, block_size=4),
            helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"], axis=1, block_size=4),
        ]
        made = graph_model(nodes, {"x": data}, ["y"], {"scale": scale, "zero": zero}, opset=21)
        assert_matches(self, made, {"x": data}, rtol=0, atol=1e-6)


class OnnxruntimeOnlyOperators(unittest.TestCase):
    def test_the_error_names_them_and_the_fix(self):
        node = helper.make_node("QLinearReduceMean", ["a", "s", "z", "s", "z"], ["y"], domain="com.microsoft", axes=[0])
        made = graph_model(node, {"a": integers(np.uint8, 4)}, {"y": np.uint8},
                           {"s": scalar(0.1, np.float32), "z": scalar(0, np.uint8)}, extra_opsets=[("com.microsoft", 1)])
        with self.assertRaises(DriverError) as raised:
            onnx_prepare.check_supported(made, "model.onnx")
        error = raised.exception
        self.assertEqual(error.kind, "onnx_unsupported")
        self.assertEqual(error.operators[0]["reason"], "onnxruntime-only contrib operator")
        self.assertIn("QLinearReduceMean x1 (node(s) #0, an onnxruntime-only contrib operator)", error.message)
        self.assertIn("quantize_static with QuantFormat.QDQ", error.detail)


if __name__ == "__main__":
    unittest.main()
