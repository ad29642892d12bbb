"""A one-hot encoding's product by a matrix (one_hot.py) picks the matrix's rows, as the
product does, codes outside the encoding's range included."""

import os
import sys
import tempfile
import unittest

import numpy as np
import onnx
from onnx import helper
from onnx_ops_cases import graph_model, run_onnxruntime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relax_driver import one_hot, onnx_source  # noqa: E402

RNG = np.random.default_rng(11)


def one_hot_model(codes, count=257, columns=64):
    """magika's embedding: `Equal(x[..., None], arange(count))`, cast, by a matrix."""
    nodes = [
        helper.make_node("Unsqueeze", ["x", "axis"], ["column"]),
        helper.make_node("Equal", ["column", "range"], ["hot"]),
        helper.make_node("Cast", ["hot"], ["hot_float"], to=onnx.TensorProto.FLOAT),
        helper.make_node("MatMul", ["hot_float", "w"], ["y"]),
    ]
    initializers = {
        "axis": np.array([2], np.int64),
        "range": np.arange(count, dtype=np.int32).reshape(1, 1, count),
        "w": RNG.standard_normal((count, columns)).astype(np.float32),
    }
    return graph_model(nodes, {"x": codes}, ["y"], initializers, opset=13)


def rewritten(made):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        onnx.save(made, path)
        ir_module, _, _ = onnx_source.load({"source": path, "inputs": [], "weights_mode": "embed"})
    return one_hot.as_rows(ir_module)


def run_rewritten(made, codes):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.compile(rewritten(made), target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(codes)).numpy()


def products_of(made):
    from tvm import relax

    ir_module = rewritten(made)
    found = []

    def visit(expr):
        name = getattr(expr.op, "name", None) if isinstance(expr, relax.Call) else None
        if name in ("relax.matmul", "relax.take"):
            found.append(name)

    relax.analysis.post_order_visit(ir_module["main"].body, visit)
    return found


class OneHotProducts(unittest.TestCase):
    def test_a_one_hot_product_picks_rows_and_zeros_for_codes_out_of_range(self):
        codes = RNG.integers(0, 257, (2, 40)).astype(np.int32)
        codes[0, :4] = [-1, 257, 300, 256]
        made = one_hot_model(codes)
        self.assertEqual(products_of(made), ["relax.take"])
        want = run_onnxruntime(made, {"x": codes})[0]
        np.testing.assert_array_equal(want[0, :3], 0)
        np.testing.assert_array_equal(run_rewritten(made, codes), want)

    def test_an_encoding_of_other_codes_stays_a_product(self):
        # Codes 1..n (not 0..n-1): its rows are not the matrix's by index.
        codes = RNG.integers(0, 257, (1, 8)).astype(np.int32)
        made = one_hot_model(codes)
        for initializer in made.graph.initializer:
            if initializer.name == "range":
                initializer.CopyFrom(onnx.numpy_helper.from_array(np.arange(1, 258, dtype=np.int32).reshape(1, 1, 257), "range"))
        self.assertEqual(products_of(made), ["relax.matmul"])


if __name__ == "__main__":
    unittest.main()
