"""Unit tests of the ONNX preparation step's own parts (run by tests/driver_python.rs).

onnx and numpy only: no TVM, no onnxslim.
"""

import os
import sys
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relax_driver import onnx_prepare  # noqa: E402


def model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    made.ir_version = 8
    return made


def value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


class FoldConstants(unittest.TestCase):
    def test_a_computed_reshape_target_becomes_a_constant(self):
        shape = numpy_helper.from_array(np.array([2, 6, 8], np.int64), "shape")
        made = model(
            [
                helper.make_node("Slice", ["shape", "one", "three"], ["tail"]),
                helper.make_node("ReduceProd", ["tail"], ["features"], keepdims=1),
                helper.make_node("Slice", ["shape", "zero", "one"], ["batch"]),
                helper.make_node("Concat", ["batch", "features"], ["target"], axis=0),
                helper.make_node("Reshape", ["x", "target"], ["y"]),
            ],
            [value("x", [2, 6, 8])],
            [value("y", [2, 48])],
            [
                shape,
                numpy_helper.from_array(np.array([0], np.int64), "zero"),
                numpy_helper.from_array(np.array([1], np.int64), "one"),
                numpy_helper.from_array(np.array([3], np.int64), "three"),
            ],
        )
        self.assertEqual(onnx_prepare.fold_constants(made), 4)
        self.assertEqual([node.op_type for node in made.graph.node], ["Reshape"])
        target = {init.name: numpy_helper.to_array(init) for init in made.graph.initializer}["target"]
        self.assertEqual(target.tolist(), [2, 48])

    def test_nodes_reading_graph_inputs_or_random_stay(self):
        made = model(
            [
                helper.make_node("Relu", ["x"], ["r"]),
                helper.make_node("RandomNormal", [], ["noise"], shape=[2], dtype=TensorProto.FLOAT),
                helper.make_node("Add", ["r", "noise"], ["y"]),
            ],
            [value("x", [2])],
            [value("y", [2])],
        )
        self.assertEqual(onnx_prepare.fold_constants(made), 0)
        self.assertEqual(len(made.graph.node), 3)

    def test_a_fold_that_would_grow_the_model_is_skipped(self):
        made = model(
            [
                helper.make_node("ConstantOfShape", ["huge"], ["zeros"]),
                helper.make_node("Add", ["x", "zeros"], ["y"]),
            ],
            [value("x", [1024, 1024])],
            [value("y", [1024, 1024])],
            [numpy_helper.from_array(np.array([1024, 1024], np.int64), "huge")],
        )
        self.assertEqual(onnx_prepare.fold_constants(made), 0)

    def test_weights_computed_from_constants_fold_whatever_their_size(self):
        # A 512x512 MatMul weight from a ConstantOfShape (as the onnx package's light
        # models write theirs), through a Transpose, and a Constant node of 300k values.
        big = numpy_helper.from_array(np.full([300, 1000], 0.5, np.float32), "big")
        made = model(
            [
                helper.make_node("ConstantOfShape", ["shape"], ["filled"]),
                helper.make_node("Transpose", ["filled"], ["w"]),
                helper.make_node("MatMul", ["x", "w"], ["y"]),
                helper.make_node("Constant", [], ["k"], value=big),
                helper.make_node("Gemm", ["z", "k"], ["u"], transB=1),
            ],
            [value("x", [2, 512]), value("z", [2, 1000])],
            [value("y", [2, 512]), value("u", [2, 300])],
            [numpy_helper.from_array(np.array([512, 512], np.int64), "shape")],
        )
        self.assertEqual(onnx_prepare.fold_constants(made), 3)
        self.assertEqual([node.op_type for node in made.graph.node], ["MatMul", "Gemm"])
        initializers = {init.name: numpy_helper.to_array(init) for init in made.graph.initializer}
        self.assertEqual(initializers["w"].shape, (512, 512))
        self.assertEqual(initializers["k"].shape, (300, 1000))


class SumsToAdds(unittest.TestCase):
    def test_a_sum_of_three_becomes_two_adds_with_the_same_result(self):
        made = model(
            [helper.make_node("Sum", ["a", "b", "c"], ["y"], name="total")],
            [value("a", [2, 3]), value("b", [1, 3]), value("c", [2, 1])],
            [value("y", [2, 3])],
        )
        feeds = {name: np.random.default_rng(index).standard_normal(shape).astype(np.float32)
                 for index, (name, shape) in enumerate([("a", (2, 3)), ("b", (1, 3)), ("c", (2, 1))])}
        before = ReferenceEvaluator(made).run(None, feeds)[0]
        self.assertEqual(onnx_prepare.sums_to_adds(made), 1)
        self.assertEqual([node.op_type for node in made.graph.node], ["Add", "Add"])
        onnx.checker.check_model(made)
        np.testing.assert_allclose(ReferenceEvaluator(made).run(None, feeds)[0], before, rtol=1e-6)

    def test_graphs_before_opset_8_are_left_alone(self):
        made = model([helper.make_node("Sum", ["a", "b"], ["y"])], [value("a", [2]), value("b", [2])], [value("y", [2])], opset=7)
        self.assertEqual(onnx_prepare.sums_to_adds(made), 0)


class Inputs(unittest.TestCase):
    def test_inputs_a_simplifier_dropped_come_back_in_order(self):
        original = model([helper.make_node("Relu", ["b"], ["y"])], [value("a", [2]), value("b", [2])], [value("y", [2])])
        prepared = model([helper.make_node("Relu", ["b"], ["y"])], [value("b", [2])], [value("y", [2])])
        onnx_prepare.keep_inputs(original, prepared)
        self.assertEqual([value.name for value in prepared.graph.input], ["a", "b"])


class Unsupported(unittest.TestCase):
    def test_every_unsupported_operator_is_listed_with_count_and_first_nodes(self):
        made = model(
            [helper.make_node("Det", ["x"], [f"d{i}"], name=f"det{i}") for i in range(5)]
            + [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Foo", ["x"], ["f"])],
            [value("x", [3, 3])],
            [value("r", [3, 3])],
        )
        operators = onnx_prepare.unsupported_operators(made, {"Relu"})
        self.assertEqual(
            operators,
            [
                {"op_type": "Det", "count": 5, "nodes": ["det0", "det1", "det2"], "reason": "unsupported"},
                {"op_type": "Foo", "count": 1, "nodes": ["#6"], "reason": "unsupported"},
            ],
        )
        self.assertEqual(onnx_prepare.describe(operators[0]), "Det x5 (node(s) det0, det1, det2, ...)")

    def test_onnxruntime_contrib_operators_are_named_as_such(self):
        made = model(
            [helper.make_node("FusedConv", ["x", "w"], ["y"], name="fused", domain="com.microsoft")],
            [value("x", [1, 1, 4, 4]), value("w", [1, 1, 1, 1])],
            [value("y", [1, 1, 4, 4])],
        )
        made.opset_import.append(helper.make_opsetid("com.microsoft", 1))
        operators = onnx_prepare.unsupported_operators(made, set())
        self.assertEqual(operators[0]["reason"], "onnxruntime-only contrib operator")
        self.assertEqual(
            onnx_prepare.describe(operators[0]), "FusedConv x1 (node(s) fused, an onnxruntime-only contrib operator)"
        )


if __name__ == "__main__":
    unittest.main()
