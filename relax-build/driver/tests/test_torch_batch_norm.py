"""Unit tests of the folding of a PyTorch import's batch norms into its convolutions
(torch_source.fold_batch_norms; these need TVM but not torch: tests/driver_python.rs
runs them with the toolchain's Python).

    python -m unittest discover -s relax-build/driver/tests
"""

import collections
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402
from tvm.script import relax as R  # noqa: E402

from relax_driver.torch_source import fold_batch_norms  # noqa: E402


@tvm.script.ir_module
class ConvBatchNorm:
    """As TVM imports `relu(bn(conv(x)))` of a torch module in eval mode: the weights
    after `num_input`, the running statistics (buffers) as constants; then a max pool's
    unused indices, as torch.export decomposes one."""

    @R.function
    def main(
        x: R.Tensor((1, 3, 8, 8), "float32"),
        w: R.Tensor((4, 3, 3, 3), "float32"),
        gamma: R.Tensor((4,), "float32"),
        beta: R.Tensor((4,), "float32"),
    ):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            y = R.nn.conv2d(x, w, padding=[1, 1, 1, 1], out_dtype="float32")
            n = R.nn.batch_norm(
                y,
                gamma,
                beta,
                R.const(np.array([0.1, -0.2, 0.0, 0.3], "float32")),
                R.const(np.array([0.5, 1.5, 1.0, 2.0], "float32")),
                axis=1,
                epsilon=1e-5,
                training=False,
            )
            z = n[0]
            r = R.nn.relu(z)
            indices = R.zeros_like(r)
            pair = (r, indices)
            out = pair[0]
            R.output(out)
        return out


@tvm.script.ir_module
class SharedConv:
    """The convolution's output read by its batch norm and by an add: not folded."""

    @R.function
    def main(
        x: R.Tensor((1, 3, 8, 8), "float32"),
        w: R.Tensor((4, 3, 3, 3), "float32"),
        gamma: R.Tensor((4,), "float32"),
        beta: R.Tensor((4,), "float32"),
    ):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            y = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            n = R.nn.batch_norm(y, gamma, beta, R.const(np.zeros(4, "float32")), R.const(np.ones(4, "float32")), axis=1)
            out = R.add(n[0], y)
            R.output(out)
        return out


def operators(function):
    counts = collections.Counter()

    def visit(expr):
        if isinstance(expr, relax.Call) and hasattr(expr.op, "name"):
            counts[expr.op.name] += 1

    relax.analysis.post_order_visit(function.body, visit)
    return counts


def run(function, inputs):
    executable = tvm.compile(tvm.IRModule({"main": function.without_attr("num_input")}), target="llvm")
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(value) for value in inputs]).numpy()


class FoldBatchNorms(unittest.TestCase):
    def test_a_batch_norm_after_a_convolution_becomes_its_weights_and_a_bias(self):
        generator = np.random.default_rng(0)
        x = generator.standard_normal((1, 3, 8, 8)).astype("float32")
        weights = [
            generator.standard_normal((4, 3, 3, 3)).astype("float32"),
            generator.uniform(0.5, 1.0, 4).astype("float32"),
            generator.uniform(-0.1, 0.1, 4).astype("float32"),
        ]
        function = ConvBatchNorm["main"]
        weight_vars = list(function.params)[1:]
        targets = {"w": "conv1.weight", "gamma": "bn1.weight", "beta": "bn1.bias"}
        folded, folded_vars, values = fold_batch_norms(function, weight_vars, weights, targets)
        self.assertEqual(
            operators(folded),
            {"relax.nn.conv2d": 1, "relax.add": 1, "relax.reshape": 1, "relax.nn.relu": 1},
        )
        self.assertEqual([targets[str(var.name)] for var in folded_vars], ["conv1.weight", "conv1.bias"])
        np.testing.assert_allclose(run(folded, [x, *values]), run(function, [x, *weights]), rtol=1e-5, atol=1e-5)

    def test_a_convolution_whose_output_is_also_used_otherwise_keeps_its_batch_norm(self):
        function = SharedConv["main"]
        weights = [np.ones((4, 3, 3, 3), "float32"), np.ones(4, "float32"), np.zeros(4, "float32")]
        folded, folded_vars, _ = fold_batch_norms(function, list(function.params)[1:], weights, {})
        self.assertEqual(operators(folded)["relax.nn.batch_norm"], 1)
        self.assertEqual(len(folded_vars), 3)

if __name__ == "__main__":
    unittest.main()
