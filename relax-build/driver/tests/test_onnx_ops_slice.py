"""`Slice` to the end of a symbolic dim (onnx_ops/shape_values.py's `sliced_to_the_end`):
exporters write "to the end" as a huge end (jax2tf 10**9 in magika's model, PyTorch
INT64_MAX), which TVM's converter kept as `min(end, n)`; TVM's memory planning then
allocated for the bound (std::bad_alloc when the model ran)."""

import os
import sys
import unittest

import numpy as np
from onnx import TensorProto, helper
from test_real_export_shapes import assert_close, imported, symbolic_model

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RNG = np.random.default_rng(9)


class SliceToTheEnd(unittest.TestCase):
    def model(self):
        nodes = [
            # jax2tf's end on the batch axis, PyTorch's on the second from a start of 2.
            helper.make_node("Slice", ["x", "zero", "jax_end", "axis0"], ["head"]),
            helper.make_node("Slice", ["head", "two", "torch_end", "axis1"], ["tail"]),
            helper.make_node("Relu", ["tail"], ["y"]),
        ]
        constants = {
            "zero": np.array([0], np.int64),
            "two": np.array([2], np.int64),
            "jax_end": np.array([10**9], np.int64),
            "torch_end": np.array([np.iinfo(np.int64).max], np.int64),
            "axis0": np.array([0], np.int64),
            "axis1": np.array([1], np.int64),
        }
        return symbolic_model(nodes, {"x": (TensorProto.FLOAT, ["batch", "width"])}, ["y"], constants)

    def test_the_sliced_dims_are_the_inputs_dims(self):
        ir_module, _, _ = imported(self.model())
        returned = str(ir_module["main"].ret_ty)
        self.assertNotIn("min", returned)
        self.assertIn("batch", returned)
        self.assertIn("width - 2", returned)

    def test_matches_onnxruntime(self):
        for batch, width in [(1, 5), (3, 2)]:
            with self.subTest(batch=batch, width=width):
                data = RNG.standard_normal((batch, width)).astype(np.float32)
                assert_close(self, self.model(), {"x": data})


if __name__ == "__main__":
    unittest.main()
