"""Unit tests of the build-time evaluation of what is computed from weights alone
(weight_transforms.py). These need TVM: tests/driver_python.rs runs them with the
toolchain's Python.

    python -m unittest discover -s relax-build/driver/tests
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

from relax_driver import weight_transforms  # noqa: E402

RNG = np.random.default_rng(7)


def module_with_weights(body):
    """`main(x: [2, 3], w: [2, 4, 3], b: [2, 8], v: [3, 5])` (`num_input` 1) returning
    `body(builder, x, w, b, v)`, and seeded values for w, b and v."""
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([2, 3], "float32"))
    w = relax.Var("w", relax.TensorType([2, 4, 3], "float32"))
    b = relax.Var("b", relax.TensorType([2, 8], "float32"))
    v = relax.Var("v", relax.TensorType([3, 5], "float32"))
    with builder.function("main", [x, w, b, v], attrs={"num_input": 1}):
        with builder.dataflow():
            output = builder.emit_output(body(builder, x, w, b, v))
        builder.emit_func_output(output)
    arrays = [RNG.standard_normal(shape).astype(np.float32) for shape in ([2, 4, 3], [2, 8], [3, 5])]
    return builder.get(), arrays


def lstm_like(builder, x, w, b, v):
    """x @ take(w, 1)^T + strided_slice(take(b, 0), 4..8), concatenated with x @ v: what
    an importer writes for one direction of a recurrent layer, beside a plain weight."""
    weight = builder.emit(relax.op.permute_dims(relax.op.take(w, relax.const(1, "int64"), axis=0), [1, 0]))
    bias = builder.emit(relax.op.strided_slice(relax.op.take(b, relax.const(0, "int64"), axis=0), [0], [4], [8]))
    projected = builder.emit(relax.op.add(relax.op.matmul(x, weight), bias))
    return relax.op.concat([projected, relax.op.matmul(x, v)], axis=1)


def run(ir_module, inputs):
    executable = tvm.compile(ir_module, target=tvm.target.Target({"kind": "llvm"}))
    machine = relax.VirtualMachine(executable, tvm.cpu())
    return machine["main"](*[tvm.runtime.tensor(value) for value in inputs]).numpy()


class Precomputed(unittest.TestCase):
    def test_weight_only_computations_become_weights_with_the_same_results(self):
        module, arrays = module_with_weights(lstm_like)
        x = RNG.standard_normal((2, 3)).astype(np.float32)
        expected = run(module, [x] + arrays)
        lifted, values, names = weight_transforms.precomputed(module, arrays)
        self.assertEqual(names, ["v", "w:1", "b:1"])
        weights = [param.name for param in lifted["main"].params][1:]
        self.assertEqual(weights, names)
        np.testing.assert_array_equal(values[0], arrays[2])
        np.testing.assert_array_equal(values[1], arrays[0][1].T)
        np.testing.assert_array_equal(values[2], arrays[1][0][4:8])
        self.assertNotIn("take", lifted["main"].script())
        np.testing.assert_allclose(run(lifted, [x] + values), expected, rtol=1e-6)

    def test_weights_used_as_they_are_leave_the_module_unchanged(self):
        module, arrays = module_with_weights(lambda builder, x, w, b, v: relax.op.matmul(x, v))
        same, values, names = weight_transforms.precomputed(module, arrays)
        self.assertTrue(same.same_as(module))
        self.assertEqual(names, ["w", "b", "v"])
        self.assertIs(values, arrays)

    def test_a_computation_that_would_grow_the_weights_is_left_to_run(self):
        def broadcast(builder, x, w, b, v):
            return relax.op.matmul(x, relax.op.broadcast_to(v, [64, 3, 5]))

        module, arrays = module_with_weights(broadcast)
        same, values, _ = weight_transforms.precomputed(module, arrays)
        self.assertTrue(same.same_as(module))
        self.assertIs(values, arrays)

    def test_a_reshaped_weight_stays_the_weight_it_is_a_view_of(self):
        def reshaped(builder, x, w, b, v):
            bias = builder.emit(relax.op.reshape(relax.op.take(b, relax.const(0, "int64"), axis=0), [1, 8]))
            return relax.op.add(relax.op.matmul(x, relax.op.reshape(v, [3, 5])), relax.op.sum(bias))

        module, arrays = module_with_weights(reshaped)
        x = RNG.standard_normal((2, 3)).astype(np.float32)
        lifted, values, names = weight_transforms.precomputed(module, arrays)
        self.assertEqual(names, ["v", "b:1"])
        np.testing.assert_array_equal(values[0], arrays[2])
        self.assertEqual(values[1].shape, ())
        np.testing.assert_allclose(run(lifted, [x] + values), run(module, [x] + arrays), rtol=1e-6)

    def test_computed_names_are_unique_and_never_a_weight_s_own(self):
        self.assertEqual(
            weight_transforms.unique_names([["b"], ["b"], ["a", "b"], []], ["a", "b"]),
            ["b:1", "b:2", "a+b:1", "computed:1"],
        )
        self.assertEqual(weight_transforms.unique_names([["b"]], ["b:1", "b"]), ["b:2"])


if __name__ == "__main__":
    unittest.main()
