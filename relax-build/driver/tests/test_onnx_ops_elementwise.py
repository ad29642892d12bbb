"""The driver's BitShift, Dropout and Trilu converters (onnx_ops/elementwise.py) and its
reading of optional graph inputs (onnx_source.py), against onnxruntime or ONNX's rules."""

import unittest

import numpy as np
from onnx import TensorProto, helper
from onnx_ops_cases import assert_matches, graph_model, run_driver

RNG = np.random.default_rng(3)


class BitShift(unittest.TestCase):
    def test_amounts_of_the_width_or_more_or_negative_follow_onnx(self):
        # ONNX (opset 28's cases): an amount read as unsigned of at least the width gives
        # 0, or -1 for a negative value shifted right; within the width, the plain shift.
        x = np.array([-8, 4, -1, 5, 127, -128], np.int8)
        amount = np.array([-1, 8, 9, 1, 3, 7], np.int8)
        expected = {
            "LEFT": np.array([0, 0, 0, 10, 127 << 3 & 0xFF, 0], np.uint8).view(np.int8),
            "RIGHT": np.array([-1, 0, -1, 2, 15, -1], np.int8),
        }
        for direction, want in expected.items():
            with self.subTest(direction=direction):
                node = helper.make_node("BitShift", ["x", "s"], ["y"], direction=direction)
                made = graph_model(node, {"x": x, "s": amount}, {"y": np.int8})
                (got,) = run_driver(made, {"x": x, "s": amount})
                np.testing.assert_array_equal(got, want)

    def test_unsigned_shifts_match_onnxruntime(self):
        x = RNG.integers(0, 2**32, 16, dtype=np.uint32)
        amount = RNG.integers(0, 32, 16, dtype=np.uint32)
        for direction in ("LEFT", "RIGHT"):
            with self.subTest(direction=direction):
                node = helper.make_node("BitShift", ["x", "s"], ["y"], direction=direction)
                made = graph_model(node, {"x": x, "s": amount}, {"y": np.uint32}, opset=18)
                assert_matches(self, made, {"x": x, "s": amount})


class Dropout(unittest.TestCase):
    def test_the_mask_is_bool_ones_and_the_input_passes(self):
        # As ONNX's node tests expect (onnxruntime, graph optimizations off, gives a mask
        # of zeros at inference).
        x = RNG.standard_normal((3, 4)).astype(np.float32)
        for opset in (10, 13):
            with self.subTest(opset=opset):
                node = helper.make_node("Dropout", ["x"], ["y", "mask"])
                made = graph_model(node, {"x": x}, {"y": np.float32, "mask": np.bool_}, opset=opset)
                y, mask = run_driver(made, {"x": x})
                np.testing.assert_array_equal(y, x)
                self.assertEqual(mask.dtype, np.bool_)
                self.assertTrue(mask.all())

    def test_a_constant_training_mode_with_a_ratio_is_refused(self):
        from relax_driver.errors import DriverError

        x = RNG.standard_normal((3, 4)).astype(np.float32)
        node = helper.make_node("Dropout", ["x", "ratio", "training"], ["y"])
        made = graph_model(node, {"x": x}, ["y"], {"ratio": np.array(0.5, np.float32), "training": np.array(True)})
        with self.assertRaises(DriverError) as raised:
            run_driver(made, {"x": x})
        self.assertIn("training mode", raised.exception.message)


class Trilu(unittest.TestCase):
    def test_k_given_at_run_time_on_static_and_empty_shapes(self):
        for shape, upper, k in (((2, 4, 5), 1, -1), ((4, 5), 0, 2), ((3, 0, 5), 1, 0), ((3, 0, 5), 0, 6)):
            with self.subTest(shape=shape, upper=upper, k=k):
                x = RNG.integers(0, 10, shape).astype(np.int64)
                feeds = {"x": x, "k": np.array(k, np.int64)}
                node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)
                made = graph_model(node, feeds, {"y": np.int64})
                assert_matches(self, made, feeds)


class OptionalInputs(unittest.TestCase):
    def test_an_optional_tensor_input_is_that_tensor(self):
        tensor_type = helper.make_tensor_type_proto(TensorProto.FLOAT, [4])
        optional = helper.make_value_info("o", helper.make_optional_type_proto(tensor_type))
        nodes = [
            helper.make_node("OptionalHasElement", ["o"], ["has"]),
            helper.make_node("OptionalGetElement", ["o"], ["value"]),
        ]
        outputs = [
            helper.make_tensor_value_info("has", TensorProto.BOOL, []),
            helper.make_tensor_value_info("value", TensorProto.FLOAT, [4]),
        ]
        made = helper.make_model(
            helper.make_graph(nodes, "g", [optional], outputs), opset_imports=[helper.make_opsetid("", 18)]
        )
        made.ir_version = 10
        x = np.arange(4, dtype=np.float32)
        has, value = run_driver(made, {"o": x})
        self.assertTrue(bool(has))
        np.testing.assert_array_equal(value, x)


if __name__ == "__main__":
    unittest.main()
