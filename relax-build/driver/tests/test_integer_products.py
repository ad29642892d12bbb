"""Integer products of 8-bit values computed in float32 (integer_products.py): exact
against numpy's integer arithmetic, and left integer for wider values."""

import os
import sys
import tempfile
import unittest

import numpy as np
import onnx
from onnx import helper
from onnx_ops_cases import graph_model, run_driver, run_onnxruntime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relax_driver import blocked_layout, offload, onnx_source  # noqa: E402

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


def dense_kernels(made, fast_bf16):
    """The relax-runtime kernels the offload calls for the model's products."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        onnx.save(made, path)
        ir_module, _, _ = onnx_source.load({"source": path, "inputs": [], "weights_mode": "embed"})
    ir_module, _ = offload.rewrite(ir_module, None, "f32", False, fast_bf16)
    return kernel_names(ir_module, "relax_runtime.dense")


def kernel_names(ir_module, prefix):
    """The relax-runtime kernels `main` calls whose names start with `prefix`."""
    return [offload.packed_name(call) for call in kernel_calls(ir_module, prefix)]


def kernel_calls(ir_module, prefix):
    """The calls of `main` to relax-runtime kernels whose names start with `prefix`."""
    return main_calls(ir_module, lambda call: (offload.packed_name(call) or "").startswith(prefix))


def op_count(ir_module, name):
    """How many calls of the op `name` `main` makes."""
    return len(main_calls(ir_module, lambda call: getattr(call.op, "name", None) == name))


def main_calls(ir_module, wanted):
    from tvm import relax

    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and wanted(expr):
            found.append(expr)

    relax.analysis.post_order_visit(ir_module["main"].body, visit)
    return found


class ExactBf16Products(unittest.TestCase):
    """A dense layer's integer products of 8-bit values by a constant weight go to the
    bf16 kernels for a CPU where bf16 beats float32: bf16 holds both operands exactly."""

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


def qdq_conv(channels, filters, external=False):
    """A QDQ layer as onnxruntime's static quantizer writes one: a uint8 activation per
    tensor, int8 weights per filter, an int32 bias, a ReLU and the output quantized."""
    w = RNG.integers(-128, 128, (filters, channels, 3, 3)).astype(np.int8)
    initializers = {
        "x_scale": np.array(0.02, np.float32), "x_zero": np.array(131, np.uint8),
        "w": w, "w_scale": RNG.uniform(0.001, 0.004, filters).astype(np.float32),
        "w_zero": np.zeros(filters, np.int8),
        "b": RNG.integers(-2000, 2000, filters).astype(np.int32),
        "y_scale": np.array(0.05, np.float32), "y_zero": np.array(3, np.uint8),
    }
    initializers["b_scale"] = (initializers["w_scale"] * np.float32(0.02)).astype(np.float32)
    initializers["b_zero"] = np.zeros(filters, np.int32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zero"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["b", "b_scale", "b_zero"], ["bd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "y_scale", "y_zero"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zero"], ["y"]),
    ]
    x = RNG.uniform(-2.5, 2.5, (1, channels, 12, 12)).astype(np.float32)
    return graph_model(nodes, {"x": x}, ["y"], initializers, opset=13), {"x": x}


def imported_ops(made, weights_mode="embed"):
    from tvm import relax

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        onnx.save(made, path)
        ir_module, _, _ = onnx_source.load({"source": path, "inputs": [], "weights_mode": weights_mode})
    found = []

    def visit(expr):
        name = getattr(expr.op, "name", None) if isinstance(expr, relax.Call) else None
        if name is not None:
            found.append((name, str(expr.ty.dtype) if isinstance(expr.ty, relax.TensorType) else None))
        if name == "relax.nn.conv2d":
            kernel = expr.args[1]
            values = kernel.value.numpy() if hasattr(kernel, "value") and hasattr(kernel.value, "numpy") else None
            integers = values is not None and np.array_equal(values, np.round(values)) and np.abs(values).max() <= 128
            found.append(("kernel of 8-bit values", integers))

    relax.analysis.post_order_visit(ir_module["main"].body, visit)
    return ir_module, found


class DequantizedProducts(unittest.TestCase):
    """A QDQ layer's convolution runs on the 8-bit values less their zero points (its
    weight a constant of integers), its scales applied after."""

    def test_a_qdq_convolution_runs_on_its_8_bit_values(self):
        for weights_mode in ("embed", "external"):
            made, feeds = qdq_conv(4, 8)
            _, found = imported_ops(made, weights_mode)
            names = [name for name, _ in found]
            # Per-tensor quantization is elementwise ops; only the int32 bias's
            # dequantization (constants, folded when built) is left.
            self.assertNotIn("relax.quantize", names)
            self.assertEqual(names.count("relax.dequantize"), 1)
            self.assertIn(("relax.nn.conv2d", "float32"), found)
            self.assertIn(("kernel of 8-bit values", True), found)
        # onnxruntime without its graph optimizations computes the graph as written,
        # in float32 on the dequantized values: an output may land a step apart.
        got = run_driver(made, feeds)[0]
        want = run_onnxruntime(made, feeds)[0]
        steps = np.abs(got - want) / 0.05
        self.assertLessEqual(steps.max(), 1.0 + 1e-4)
        self.assertLess(np.mean(steps > 0.5), 0.01)

    def test_on_a_cpu_where_bf16_beats_float32_blocked_qdq_convolutions_take_the_bf16_kernels(self):
        made, _ = qdq_conv(32, 64)
        for fast_bf16, expected in ((True, "relax_runtime.conv2d_bf16_bn"), (False, "relax_runtime.conv2d_bn")):
            ir_module = blocked_qdq_layer(made, fast_bf16)
            self.assertEqual(kernel_names(ir_module, "relax_runtime.conv2d"), [expected])

    def test_a_qdq_layer_s_scales_bias_relu_and_quantization_fold_into_its_kernel(self):
        # The output quantized by zero point 3 after a ReLU: integers in [0, 255 - 3].
        ir_module = blocked_qdq_layer(qdq_conv(32, 64)[0], True)
        calls = kernel_calls(ir_module, "relax_runtime.conv2d_bf16_bn")
        self.assertEqual(len(calls), 1)
        code = int(calls[0].args[1].fields[-1].value)
        self.assertEqual(offload.quantize_bounds(code), (0, 252))
        gamma, beta, mean, variance = (calls[0].args[1].fields[i].value.numpy() for i in range(2, 6))
        self.assertTrue(np.all(mean == 0) and np.all(variance == 1))
        # The scale per filter: the activation's by the weight's, over the output's.
        self.assertEqual(gamma.shape, (64,))
        self.assertTrue(np.all(gamma > 0))
        # Nothing elementwise is left between the layer's input and its output but the
        # input's own quantization.
        self.assertEqual(op_count(ir_module, "relax.round"), 1)


def blocked_qdq_layer(made, fast_bf16):
    """`made` imported, channel-blocked and offloaded as for an x86-64 CPU."""
    ir_module, _ = imported_ops(made)
    ir_module, _, _ = blocked_layout.convert(ir_module, {"kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu"}, [], (None, None))
    ir_module, _ = offload.rewrite(ir_module, None, "f32", False, fast_bf16)
    return ir_module


if __name__ == "__main__":
    unittest.main()
