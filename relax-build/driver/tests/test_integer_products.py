"""Integer products of 8-bit values computed in float32 (integer_products.py): exact
against numpy's integer arithmetic, and left integer for wider values."""

import os
import sys
import tempfile
import unittest

import numpy as np
import onnx
from onnx import helper
from onnx_ops_cases import graph_model, run_driver

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relax_driver import onnx_source  # noqa: E402

RNG = np.random.default_rng(5)


def products(made):
    """The (op name, output dtype) of each matmul and convolution of the imported model."""
    from tvm import relax

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        onnx.save(made, path)
        ir_module, _, _ = onnx_source.load({"source": path, "inputs": [], "weights_mode": "embed"})
    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", None) in ("relax.matmul", "relax.nn.conv2d"):
            found.append((expr.op.name, str(expr.ty.dtype)))

    relax.analysis.post_order_visit(ir_module["main"].body, visit)
    return found


class IntegerProducts(unittest.TestCase):
    def test_8_bit_products_run_in_float32_and_equal_integer_arithmetic(self):
        # A deep MatMulInteger (600 products a sum, past the 258 that are exact whatever
        # the values) with a zero point per row of A, and a ConvInteger.
        a = RNG.integers(0, 256, (3, 600)).astype(np.uint8)
        b = RNG.integers(-128, 128, (600, 5)).astype(np.int8)
        a_zero = np.array([0, 128, 255], np.uint8)
        node = helper.make_node("MatMulInteger", ["a", "b", "a_zero"], ["y"])
        made = graph_model(node, {"a": a}, {"y": np.int32}, {"b": b, "a_zero": a_zero}, opset=13)
        self.assertEqual(products(made), [("relax.matmul", "float32")])
        expected = (a.astype(np.int64) - a_zero[:, None].astype(np.int64)) @ b.astype(np.int64)
        np.testing.assert_array_equal(run_driver(made, {"a": a})[0], expected)

        x = RNG.integers(0, 256, (1, 4, 6, 6)).astype(np.uint8)
        w = RNG.integers(-128, 128, (8, 4, 3, 3)).astype(np.int8)
        node = helper.make_node("ConvInteger", ["x", "w", "x_zero"], ["y"], pads=[1, 1, 1, 1])
        made = graph_model(node, {"x": x}, {"y": np.int32}, {"w": w, "x_zero": np.array(17, np.uint8)}, opset=13)
        self.assertEqual(products(made), [("relax.nn.conv2d", "float32")])
        padded = np.pad(x.astype(np.int64) - 17, ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
        expected = np.einsum("ncyxij,fcij->nfyx", windows, w.astype(np.int64))
        np.testing.assert_array_equal(run_driver(made, {"x": x})[0], expected)

    def test_products_of_wider_integers_stay_integer(self):
        # int32 values past 2^24, which float32 would round.
        a = RNG.integers(2**25, 2**26, (2, 3)).astype(np.int32)
        b = RNG.integers(-3, 4, (3, 2)).astype(np.int32)
        node = helper.make_node("MatMul", ["a", "b"], ["y"])
        made = graph_model(node, {"a": a}, {"y": np.int32}, {"b": b}, opset=13)
        self.assertEqual(products(made), [("relax.matmul", "int32")])
        np.testing.assert_array_equal(run_driver(made, {"a": a})[0], a.astype(np.int64) @ b.astype(np.int64))


if __name__ == "__main__":
    unittest.main()
