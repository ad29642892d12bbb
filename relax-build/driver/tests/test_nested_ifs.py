"""Ifs nested in the branches of an If whose condition is known only at run time, their
own conditions computed from shapes there (silero-vad's 16/8 kHz branches, each with
Ifs on the rank and length of its tensors): with the input's dims pinned, the
preparation step folds the `Shape`s in the branches (ONNX's shape inference), inlines the
nested Ifs and does it again while any is inlined; and `Size` of a shape is its rank."""

import os
import sys
import unittest

import numpy as np
from onnx import TensorProto, helper
from onnx_ops_cases import run_driver, run_onnxruntime
from test_real_export_shapes import assert_close, symbolic_model

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relax_driver import onnx_prepare  # noqa: E402

RNG = np.random.default_rng(16)
INT64 = TensorProto.INT64


def ifs(graph):
    """The If nodes of `graph` and of the graphs in it."""
    found = []
    for node in graph.node:
        if node.op_type == "If":
            found.append(node)
        for subgraph in onnx_prepare.subgraphs_of(node):
            found.extend(ifs(subgraph))
    return found


def branch(name, nodes, output):
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)])


class NestedIfsOnShapes(unittest.TestCase):
    def model(self):
        # then (run time): if x's width is 1, squeeze it (as torch's squeeze(-1) exports),
        # else 2 * x; in either case its rank decides (Shape -> Size -> Equal -> If) whether
        # to add a leading axis back. else: -x.
        squeezed = branch("squeezed", [helper.make_node("Squeeze", ["x", "last"], ["narrow"])], "narrow")
        doubled = branch("doubled", [helper.make_node("Add", ["x", "x"], ["wide"])], "wide")
        ranked = branch("ranked", [helper.make_node("Unsqueeze", ["picked", "first"], ["lifted"])], "lifted")
        kept = branch("kept", [helper.make_node("Identity", ["picked"], ["same"])], "same")
        then_nodes = [
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Gather", ["shape", "one"], ["width"], axis=0),
            helper.make_node("Equal", ["width", "one"], ["is_one"]),
            helper.make_node("If", ["is_one"], ["picked"], then_branch=squeezed, else_branch=doubled),
            helper.make_node("Shape", ["picked"], ["picked_shape"]),
            helper.make_node("Size", ["picked_shape"], ["rank"]),
            helper.make_node("Equal", ["rank", "one"], ["is_vector"]),
            helper.make_node("If", ["is_vector"], ["y_then"], then_branch=ranked, else_branch=kept),
        ]
        then_branch = branch("then", then_nodes, "y_then")
        else_branch = branch("else", [helper.make_node("Neg", ["x"], ["y_else"])], "y_else")
        nodes = [helper.make_node("If", ["flag"], ["y"], then_branch=then_branch, else_branch=else_branch)]
        constants = {"one": np.array(1, np.int64), "last": np.array([1], np.int64), "first": np.array([0], np.int64)}
        inputs = {"x": (TensorProto.FLOAT, ["rows", "width"]), "flag": (TensorProto.BOOL, [])}
        return symbolic_model(nodes, inputs, ["y"], constants)

    @staticmethod
    def pinned(made, rows, width):
        for graph_input in made.graph.input:
            if graph_input.name == "x":
                dims = graph_input.type.tensor_type.shape.dim
                dims[0].dim_value, dims[1].dim_value = rows, width
        return made

    def test_pinned_the_nested_ifs_are_inlined_in_the_run_time_branch(self):
        for width in (1, 3):
            with self.subTest(width=width):
                prepared, _ = onnx_prepare.prepare(self.pinned(self.model(), 4, width))
                self.assertEqual(len(ifs(prepared.graph)), 1)

    def test_pinned_it_builds_and_matches_onnxruntime_either_way(self):
        for width in (1, 3):
            for flag in (True, False):
                with self.subTest(width=width, flag=flag):
                    feeds = {"x": RNG.standard_normal((4, width)).astype(np.float32), "flag": np.array(flag)}
                    got = run_driver(self.pinned(self.model(), 4, width), feeds)[0]
                    # (onnxruntime's type inference refuses the pinned graph: the squeeze
                    # of the branch not taken; the graph as exported runs.)
                    want = run_onnxruntime(self.model(), feeds)[0]
                    np.testing.assert_allclose(got, want, rtol=1e-6)


class SizeOfAShape(unittest.TestCase):
    def test_is_the_rank(self):
        nodes = [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Size", ["shape"], ["rank"])]
        made = symbolic_model(nodes, {"x": (TensorProto.FLOAT, ["rows", 3, "depth"])}, [], {})
        made.graph.output.append(helper.make_tensor_value_info("rank", INT64, []))
        data = RNG.standard_normal((2, 3, 5)).astype(np.float32)
        self.assertEqual(int(run_onnxruntime(made, {"x": data})[0]), 3)
        assert_close(self, made, {"x": data})


if __name__ == "__main__":
    unittest.main()
