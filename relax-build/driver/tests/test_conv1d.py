"""One-dimensional convolutions as two-dimensional ones (conv1d.py), against onnxruntime,
and the imported functions' dataflow blocks that the rewrite (like the offload) works on."""

import os
import sys
import unittest

import numpy as np
import tvm
from onnx import TensorProto, helper
from onnx_ops_cases import run_onnxruntime
from test_real_export_shapes import imported, symbolic_model

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relax_driver import conv1d  # noqa: E402

RNG = np.random.default_rng(1)


def conv_model(**attributes):
    groups = attributes.get("group", 1)
    weight = RNG.standard_normal((6, 4 // groups, 3)).astype(np.float32)
    bias = RNG.standard_normal(6).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attributes)
    return symbolic_model([node], {"x": (TensorProto.FLOAT, ["batch", 4, "length"])}, ["y"], {"w": weight, "b": bias})


def run_rewritten(made, feeds):
    from tvm import relax

    ir_module, _, _ = imported(made)
    rewritten = conv1d.as_conv2d(ir_module)
    text = str(rewritten)
    vm = relax.VirtualMachine(tvm.compile(rewritten, target="llvm"), tvm.cpu())
    result = vm["main"](*[tvm.runtime.tensor(value) for value in feeds.values()])
    return text, result.numpy()


class Conv1dAsConv2d(unittest.TestCase):
    def test_strides_pads_dilation_and_groups_match_onnxruntime(self):
        cases = [
            {"kernel_shape": [3]},
            {"kernel_shape": [3], "strides": [2], "pads": [1, 2]},
            {"kernel_shape": [3], "dilations": [2], "pads": [2, 2]},
            {"kernel_shape": [3], "group": 2, "strides": [3]},
        ]
        for attributes in cases:
            with self.subTest(**attributes):
                made = conv_model(**attributes)
                feeds = {"x": RNG.standard_normal((2, 4, 17)).astype(np.float32)}
                text, got = run_rewritten(made, feeds)
                self.assertNotIn("conv1d", text)
                self.assertIn("conv2d", text)
                want = run_onnxruntime(made, feeds)[0]
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

    def test_a_function_with_an_if_has_its_other_bindings_in_dataflow_blocks(self):
        from tvm import relax

        branch = helper.make_graph(
            [helper.make_node("Identity", ["y"], ["out"])], "branch", [],
            [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        )
        nodes = [
            helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3]),
            helper.make_node("Relu", ["y"], ["activated"]),
            helper.make_node("If", ["condition"], ["z"], then_branch=branch, else_branch=branch),
        ]
        inputs = {"x": (TensorProto.FLOAT, ["batch", 4, "length"]), "condition": (TensorProto.BOOL, [])}
        weight = RNG.standard_normal((6, 4, 3)).astype(np.float32)
        made = symbolic_model(nodes, inputs, ["z", "activated"], {"w": weight})
        ir_module, _, _ = imported(made)
        blocks = ir_module["main"].body.blocks
        dataflow = [block for block in blocks if isinstance(block, relax.DataflowBlock)]
        self.assertTrue(any("conv1d" in str(binding.value) for block in dataflow for binding in block.bindings))


if __name__ == "__main__":
    unittest.main()
