"""The driver's com.microsoft quantized converters against onnxruntime
(onnx_ops/contrib_quantized.py), and the supported-operator check on the contrib
operators it does not convert.

Bounds: float outputs of integer products (MatMulIntegerToFloat, DynamicQuantizeMatMul,
QAttention, QGemm without y_scale) within 1e-5 relative; quantized outputs within one
quantization step (onnxruntime rounds through tables and its own float order);
DynamicQuantizeLSTM within 1e-2 absolute on states in [-1, 1] (onnxruntime quantizes the
input and hidden state to uint8 at every step, the driver keeps them float32).
"""

import os
import sys
import unittest

import numpy as np
from onnx import helper
from onnx_ops_cases import graph_model, run_driver, run_onnxruntime

import recurrent_stand_in

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relax_driver import onnx_prepare  # noqa: E402
from relax_driver.errors import DriverError  # noqa: E402

RNG = np.random.default_rng(14)
MICROSOFT = [("com.microsoft", 1)]


def integers(dtype, *shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def scalar(value, dtype):
    return np.array(value, dtype)


def compare(test, op_type, names, feeds, outputs, constants, steps=0, rtol=1e-5, atol=1e-6, **attributes):
    """The node against onnxruntime: integer outputs within `steps` quantization steps,
    float outputs within rtol/atol."""
    node = helper.make_node(op_type, names, list(outputs), domain="com.microsoft", **attributes)
    made = graph_model(node, feeds, outputs, constants, opset=17, extra_opsets=MICROSOFT)
    got, want = run_driver(made, feeds), run_onnxruntime(made, feeds)
    for mine, theirs in zip(got, want):
        test.assertEqual(mine.shape, theirs.shape)
        if theirs.dtype.kind in "iu":
            difference = np.abs(mine.astype(np.int32) - theirs.astype(np.int32))
            test.assertLessEqual(int(difference.max()), steps, f"{op_type}: {difference.max()} steps")
        else:
            np.testing.assert_allclose(mine, theirs, rtol=rtol, atol=atol)


class IntegerProductsToFloat(unittest.TestCase):
    def test_matmul_integer_to_float_per_column_with_bias(self):
        constants = {"b": integers(np.int8, 6, 5), "a_scale": scalar(0.02, np.float32),
                     "b_scale": (RNG.random(5) * 0.05 + 0.01).astype(np.float32), "a_zero": scalar(120, np.uint8),
                     "b_zero": np.zeros(5, np.int8), "bias": RNG.standard_normal(5).astype(np.float32)}
        feeds = {"a": integers(np.uint8, 2, 3, 6)}
        compare(self, "MatMulIntegerToFloat", ["a", "b", "a_scale", "b_scale", "a_zero", "b_zero", "bias"], feeds,
                ["y"], constants)

    def test_dynamic_quantize_matmul(self):
        for zero in (None, scalar(3, np.int8)):
            with self.subTest(zero_point=zero is not None):
                constants = {"b": integers(np.int8, 8, 4), "b_scale": scalar(0.03, np.float32)}
                names = ["a", "b", "b_scale", "b_zero" if zero is not None else "", "bias"]
                if zero is not None:
                    constants["b_zero"] = zero
                constants["bias"] = RNG.standard_normal(4).astype(np.float32)
                feeds = {"a": RNG.standard_normal((2, 5, 8)).astype(np.float32)}
                compare(self, "DynamicQuantizeMatMul", names, feeds, ["y"], constants, rtol=1e-5, atol=1e-5)

    def test_qgemm_float_and_quantized_outputs(self):
        constants = {"a_scale": scalar(0.05, np.float32), "a_zero": scalar(128, np.uint8),
                     "b": integers(np.int8, 4, 6), "b_scale": scalar(0.02, np.float32), "b_zero": scalar(0, np.int8),
                     "c": RNG.integers(-300, 300, 4).astype(np.int32), "y_scale": scalar(0.3, np.float32),
                     "y_zero": scalar(100, np.uint8)}
        feeds = {"a": integers(np.uint8, 3, 6)}
        names = ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "c"]
        compare(self, "QGemm", names, feeds, ["y"], constants, transB=1, alpha=0.5)
        compare(self, "QGemm", names + ["y_scale", "y_zero"], feeds, {"y": np.uint8}, constants, steps=1, transB=1)


class QuantizedAttention(unittest.TestCase):
    def test_qattention_with_key_lengths(self):
        constants = {"w": integers(np.int8, 16, 48), "bias": RNG.standard_normal(48).astype(np.float32),
                     "x_scale": scalar(0.02, np.float32), "w_scale": scalar(0.01, np.float32),
                     "mask": np.array([5, 3], np.int32), "x_zero": scalar(128, np.uint8), "w_zero": scalar(0, np.int8)}
        feeds = {"x": integers(np.uint8, 2, 5, 16)}
        names = ["x", "w", "bias", "x_scale", "w_scale", "mask", "x_zero", "w_zero"]
        compare(self, "QAttention", names, feeds, ["y"], constants, rtol=1e-4, atol=1e-5, num_heads=2)


class QLinearOperators(unittest.TestCase):
    def test_add_and_mul_broadcasting(self):
        for op_type in ("QLinearAdd", "QLinearMul"):
            for dtype in (np.uint8, np.int8):
                with self.subTest(op_type=op_type, dtype=dtype.__name__):
                    constants = {"a_scale": scalar(0.05, np.float32), "a_zero": scalar(10, dtype),
                                 "b": integers(dtype, 4), "b_scale": scalar(0.03, np.float32), "b_zero": scalar(-2 if dtype == np.int8 else 7, dtype),
                                 "c_scale": scalar(0.08, np.float32), "c_zero": scalar(5, dtype)}
                    names = ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "c_scale", "c_zero"]
                    compare(self, op_type, names, {"a": integers(dtype, 2, 3, 4)}, {"y": dtype}, constants, steps=1)

    def test_unary_operators(self):
        constants = {"x_scale": scalar(0.05, np.float32), "x_zero": scalar(128, np.uint8),
                     "y_scale": scalar(0.01, np.float32), "y_zero": scalar(20, np.uint8)}
        feeds = {"x": np.arange(256, dtype=np.uint8).reshape(4, 64)}
        for op_type, attributes in (("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})):
            with self.subTest(op_type):
                compare(self, op_type, ["x", "x_scale", "x_zero", "y_scale", "y_zero"], feeds, {"y": np.uint8},
                        constants, steps=1, **attributes)

    def test_pools_channels_first_and_last(self):
        constants = {"x_scale": scalar(0.05, np.float32), "x_zero": scalar(128, np.uint8),
                     "y_scale": scalar(0.03, np.float32), "y_zero": scalar(110, np.uint8)}
        names = ["x", "x_scale", "x_zero", "y_scale", "y_zero"]
        for channels_last in (0, 1):
            with self.subTest(channels_last=channels_last):
                feeds = {"x": integers(np.uint8, 2, 5, 5, 3) if channels_last else integers(np.uint8, 2, 3, 5, 5)}
                compare(self, "QLinearGlobalAveragePool", names, feeds, {"y": np.uint8}, constants, steps=1,
                        channels_last=channels_last)
                compare(self, "QLinearAveragePool", names, feeds, {"y": np.uint8}, constants, steps=1,
                        channels_last=channels_last, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])

    def test_concat_softmax_where(self):
        y = {"y_scale": scalar(0.04, np.float32), "y_zero": scalar(120, np.uint8)}
        parts = {"a_scale": scalar(0.02, np.float32), "a_zero": scalar(128, np.uint8),
                 "b_scale": scalar(0.04, np.float32), "b_zero": scalar(120, np.uint8)}
        feeds = {"a": integers(np.uint8, 2, 3, 4), "b": integers(np.uint8, 2, 2, 4)}
        compare(self, "QLinearConcat", ["y_scale", "y_zero", "a", "a_scale", "a_zero", "b", "b_scale", "b_zero"], feeds,
                {"y": np.uint8}, {**y, **parts}, steps=1, axis=1)
        softmax = {"x_scale": scalar(0.1, np.float32), "x_zero": scalar(128, np.uint8),
                   "y_scale": scalar(1 / 256, np.float32), "y_zero": scalar(0, np.uint8)}
        compare(self, "QLinearSoftmax", ["x", "x_scale", "x_zero", "y_scale", "y_zero"],
                {"x": integers(np.uint8, 3, 10)}, {"y": np.uint8}, softmax, steps=1, axis=-1, opset=13)
        where = {"condition": RNG.integers(0, 2, (2, 3, 4)).astype(bool), **parts, "z_scale": y["y_scale"],
                 "z_zero": y["y_zero"], "b": integers(np.uint8, 3, 4)}
        compare(self, "QLinearWhere", ["condition", "a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "z_scale", "z_zero"],
                {"a": feeds["a"]}, {"y": np.uint8}, where, steps=1)


class DynamicQuantizeLSTM(unittest.TestCase):
    def test_bidirectional_per_channel_weights(self):
        recurrent_stand_in.register()
        hidden, size = 6, 5
        constants = {
            "w": integers(np.int8, 2, size, 4 * hidden), "r": integers(np.int8, 2, hidden, 4 * hidden),
            "b": (RNG.standard_normal((2, 8 * hidden)) * 0.1).astype(np.float32),
            "w_scale": (RNG.random((2, 4 * hidden)) * 0.004 + 0.002).astype(np.float32),
            "w_zero": np.zeros((2, 4 * hidden), np.int8),
            "r_scale": (RNG.random((2, 4 * hidden)) * 0.004 + 0.002).astype(np.float32),
            "r_zero": np.zeros((2, 4 * hidden), np.int8),
        }
        # (W and R both per channel: onnxruntime misreads a per-tensor R zero point beside a
        # per-channel W one. The CRNN of test_onnx_ops_contrib_models has both per tensor.)
        names = ["x", "w", "r", "b", "", "", "", "", "w_scale", "w_zero", "r_scale", "r_zero"]
        feeds = {"x": RNG.standard_normal((4, 2, size)).astype(np.float32)}
        compare(self, "DynamicQuantizeLSTM", names, feeds, ["y", "y_h", "y_c"], constants, rtol=0, atol=1e-2,
                hidden_size=hidden, direction="bidirectional")


class SupportedOperatorCheck(unittest.TestCase):
    def test_a_contrib_operator_named_like_an_onnx_one_is_refused(self):
        node = helper.make_node("Pad", ["x", "pads"], ["y"], domain="com.microsoft")
        made = graph_model(node, {"x": np.zeros((2, 2), np.float32)}, ["y"], {"pads": np.zeros(4, np.int64)},
                           extra_opsets=MICROSOFT)
        with self.assertRaises(DriverError) as raised:
            onnx_prepare.check_supported(made, "model.onnx")
        self.assertIn("Pad x1 (node(s) #0, an onnxruntime-only contrib operator)", raised.exception.message)

    def test_the_converted_contrib_operators_pass(self):
        node = helper.make_node("QLinearAdd", ["a", "s", "z", "a", "s", "z", "s", "z"], ["y"], domain="com.microsoft")
        made = graph_model(node, {"a": integers(np.uint8, 4)}, {"y": np.uint8},
                           {"s": scalar(0.1, np.float32), "z": scalar(0, np.uint8)}, extra_opsets=MICROSOFT)
        onnx_prepare.check_supported(made, "model.onnx")


if __name__ == "__main__":
    unittest.main()
