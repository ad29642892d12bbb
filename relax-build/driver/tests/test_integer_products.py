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

from relax_driver import offload, onnx_source  # noqa: E402

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


def dense_kernels(made, bf16_instructions):
    """The relax-runtime kernels the offload calls for the model's products."""
    from tvm import relax

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        onnx.save(made, path)
        ir_module, _, _ = onnx_source.load({"source": path, "inputs": [], "weights_mode": "embed"})
    ir_module, _ = offload.rewrite(ir_module, None, "f32", False, bf16_instructions)
    found = []

    def visit(expr):
        name = offload.packed_name(expr) if isinstance(expr, relax.Call) else None
        if name is not None and name.startswith("relax_runtime.dense"):
            found.append(name)

    relax.analysis.post_order_visit(ir_module["main"].body, visit)
    return found


class ExactBf16Products(unittest.TestCase):
    """A dense layer's integer products of 8-bit values by a constant weight go to the
    bf16 kernels for a CPU with bf16 instructions: bf16 holds both operands exactly."""

    def test_constant_8_bit_weights_take_the_bf16_kernels_where_the_cpu_has_them(self):
        a = RNG.integers(0, 256, (3, 40)).astype(np.uint8)
        for weight_type, low in ((np.uint8, 0), (np.int8, -128)):
            b = RNG.integers(low, low + 256, (40, 70)).astype(weight_type)
            node = helper.make_node("MatMulInteger", ["a", "b", "a_zero", "b_zero"], ["y"])
            zeros = {"a_zero": np.array(255, np.uint8), "b_zero": np.array(low + 255, weight_type)}
            made = graph_model(node, {"a": a}, {"y": np.int32}, {"b": b, **zeros}, opset=13)
            self.assertEqual(dense_kernels(made, True), ["relax_runtime.dense_bf16"])
            self.assertEqual(dense_kernels(made, False), ["relax_runtime.dense"])

    def test_float_products_stay_float32(self):
        # A float32 weight of integers, but an input that is not 8-bit values: bf16
        # would round the input.
        x = RNG.standard_normal((3, 40)).astype(np.float32)
        w = RNG.integers(-3, 4, (40, 70)).astype(np.float32)
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
        made = graph_model(node, {"x": x}, {"y": np.float32}, {"w": w}, opset=13)
        self.assertEqual(dense_kernels(made, True), ["relax_runtime.dense"])


if __name__ == "__main__":
    unittest.main()
