"""The driver's reductions (onnx_ops/reductions.py) against onnxruntime: axes as an
attribute and as an input, and the cases TVM gets wrong (boolean max/min; max/min of
infinities; an empty reduced axis, also of a graph input declared empty)."""

import unittest

import numpy as np
from onnx import helper
from onnx_ops_cases import assert_matches, graph_model

RNG = np.random.default_rng(3)


class Reductions(unittest.TestCase):
    def test_axes_as_attribute_and_as_input(self):
        data = RNG.standard_normal((2, 3, 4)).astype(np.float32)
        old = helper.make_node("ReduceLogSumExp", ["x"], ["y"], axes=[0, -1], keepdims=0)
        assert_matches(self, graph_model(old, {"x": data}, ["y"], opset=11), {"x": data})
        new = helper.make_node("ReduceL2", ["x", "axes"], ["y"], keepdims=1)
        made = graph_model(new, {"x": data}, ["y"], {"axes": np.array([1], np.int64)}, opset=18)
        assert_matches(self, made, {"x": data})

    def test_boolean_max_and_min(self):
        data = RNG.random((3, 4)) > 0.5
        for name in ("ReduceMax", "ReduceMin"):
            with self.subTest(name):
                node = helper.make_node(name, ["x", "axes"], ["y"], keepdims=0)
                made = graph_model(node, {"x": data}, {"y": np.bool_}, {"axes": np.array([1], np.int64)}, opset=20)
                assert_matches(self, made, {"x": data})

    def test_max_and_min_of_infinite_rows_are_infinite(self):
        data = np.array([[-np.inf, -np.inf], [np.inf, np.inf], [-3.4028235e38, 1.0]], np.float32)
        for name in ("ReduceMax", "ReduceMin"):
            with self.subTest(name):
                node = helper.make_node(name, ["x"], ["y"], axes=[-1], keepdims=1)
                assert_matches(self, graph_model(node, {"x": data}, ["y"], opset=13), {"x": data})

    def test_an_empty_axis_gives_the_identity(self):
        # The empty tensor comes from a Slice of a constant, so that its 0 is static.
        data = np.zeros((2, 3), np.float32)
        expected = {"ReduceSum": 0.0, "ReduceProd": 1.0, "ReduceMax": -np.inf, "ReduceMin": np.inf}
        for name, identity in expected.items():
            with self.subTest(name):
                nodes = [
                    helper.make_node("Slice", ["x", "start", "end", "axis"], ["empty"]),
                    helper.make_node(name, ["empty", "axis"], ["y"], keepdims=0),
                ]
                constants = {name: np.array([value], np.int64) for name, value in (("start", 0), ("end", 0), ("axis", 1))}
                made = graph_model(nodes, {"x": data}, ["y"], constants, opset=18)
                assert_matches(self, made, {"x": data}, expected=[np.full((2,), identity, np.float32)])

    def test_a_graph_input_declared_empty(self):
        # (TVM's importer alone would read the declared 0 as an unknown dim.)
        data = np.zeros((2, 0, 4), np.float32)
        for name in ("ReduceSum", "ReduceL2", "ReduceLogSumExp"):
            with self.subTest(name):
                node = helper.make_node(name, ["x", "axes"], ["y"], keepdims=1)
                made = graph_model(node, {"x": data}, ["y"], {"axes": np.array([1], np.int64)}, opset=18)
                assert_matches(self, made, {"x": data})


if __name__ == "__main__":
    unittest.main()
