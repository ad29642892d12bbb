"""The branches of an `If` on a run-time condition (onnx_ops/control_flow.py's
`branch_scoped`): each converted in a scope of its own, so that only the branch taken
runs; and, with every input dim known, a branch that cannot be built for those dims
built to fail if it is taken (silero-vad's 8 kHz branch given a 16 kHz chunk)."""

import os
import sys
import tempfile
import unittest

import numpy as np
import onnx
import tvm
from onnx import TensorProto, helper
from onnx_ops_cases import run_onnxruntime
from test_real_export_shapes import X86, imported, symbolic_model

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compiled_models import compiled  # noqa: E402
from relax_driver import onnx_source  # noqa: E402
from relax_driver.errors import DriverError  # noqa: E402

RNG = np.random.default_rng(17)


def branch(name, nodes, output):
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)])


def if_model(else_nodes, x_dims):
    """y = If(flag, then: relu(x) * 2, else: `else_nodes` giving `other`)."""
    then_branch = branch(
        "then",
        [helper.make_node("Relu", ["x"], ["positive"]), helper.make_node("Add", ["positive", "positive"], ["doubled"])],
        "doubled",
    )
    nodes = [
        helper.make_node(
            "If", ["flag"], ["y"], name="pick", then_branch=then_branch, else_branch=branch("else", else_nodes, "other")
        )
    ]
    constants = {"axis": np.array([1], np.int64)}
    return symbolic_model(nodes, {"x": (TensorProto.FLOAT, x_dims), "flag": (TensorProto.BOOL, [])}, ["y"], constants)


def loaded(made):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        onnx.save(made, path)
        return onnx_source.load({"source": path, "inputs": [], "onnx_prepare": True, "weights_mode": "embed"})


def run(ir_module, feeds):
    from tvm import relax

    vm = relax.VirtualMachine(compiled(ir_module, tvm.target.Target(X86)), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(value) for value in feeds.values()]).numpy()


class BranchScopes(unittest.TestCase):
    def test_each_branch_computes_inside_its_side_of_the_if(self):
        made = if_model([helper.make_node("Neg", ["x"], ["other"])], ["rows", 3])
        ir_module, _, _ = imported(made)
        body = ir_module["main"].body
        outer = [str(binding.value) for block in body.blocks for binding in block.bindings]
        self.assertFalse(any("R.nn.relu" in value or "R.negative" in value for value in outer if "if " not in value))
        conditional = [binding.value for block in body.blocks for binding in block.bindings
                       if isinstance(binding.value, tvm.relax.If)]
        self.assertEqual(len(conditional), 1)
        self.assertIn("R.nn.relu", str(conditional[0].true_branch))
        self.assertIn("R.negative", str(conditional[0].false_branch))

    def test_either_branch_matches_onnxruntime(self):
        made = if_model([helper.make_node("Neg", ["x"], ["other"])], ["rows", 3])
        ir_module, _, _ = imported(made)
        for flag in (True, False):
            with self.subTest(flag=flag):
                feeds = {"x": RNG.standard_normal((2, 3)).astype(np.float32), "flag": np.array(flag)}
                np.testing.assert_allclose(run(ir_module, feeds), run_onnxruntime(made, feeds)[0], rtol=1e-6)


class UnbuiltBranch(unittest.TestCase):
    # The else branch squeezes axis 1, of 3 rows: no input can take it.
    ELSE = [helper.make_node("Squeeze", ["x", "axis"], ["other"])]

    def test_with_every_dim_known_it_builds_with_a_warning_and_fails_only_if_taken(self):
        ir_module, _, warnings = loaded(if_model(self.ELSE, [2, 3]))
        self.assertEqual(len(warnings), 1, warnings)
        self.assertIn("the else branch of If node `pick` was not built", warnings[0])
        data = RNG.standard_normal((2, 3)).astype(np.float32)
        np.testing.assert_allclose(run(ir_module, {"x": data, "flag": np.array(True)}), 2 * np.maximum(data, 0))
        with self.assertRaisesRegex(Exception, "the else branch of If node `pick` was not built"):
            run(ir_module, {"x": data, "flag": np.array(False)})

    def test_with_a_symbolic_dim_the_error_stands(self):
        with self.assertRaises(DriverError) as raised:
            loaded(if_model(self.ELSE, ["rows", 3]))
        self.assertIn("Squeeze", raised.exception.message)


if __name__ == "__main__":
    unittest.main()
