"""Unit tests of argument_checks.py: which of the VM's argument checks the backend
pipeline drops, on a compiled model (these need TVM: tests/driver_python.rs runs them
with the toolchain's Python).

    python -m unittest discover -s relax-build/driver/tests
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

from compiled_models import compiled, main_instructions  # noqa: E402
from relax_driver import argument_checks  # noqa: E402

TARGET = {"kind": "llvm"}


def symbolic_model():
    """`main(x[n, 4], y[n, 4], w[4, 3]) = (x + y) @ w`, w a weight (num_input 2); the
    product goes through a match_cast to a fresh size `m`."""
    builder = relax.BlockBuilder()
    n = tvm.tirx.Var("n", "int64")
    m = tvm.tirx.Var("m", "int64")
    x = relax.Var("x", relax.TensorType([n, 4], "float32"))
    y = relax.Var("y", relax.TensorType([n, 4], "float32"))
    w = relax.Var("w", relax.TensorType([4, 3], "float32"))
    with builder.function("main", [x, y, w], attrs={"num_input": 2}):
        with builder.dataflow():
            product = builder.emit(relax.op.matmul(relax.op.add(x, y), w))
            cast = builder.match_cast(product, relax.TensorType([m, 3], "float32"))
            output = builder.emit_output(relax.op.multiply(cast, relax.const(2.0, "float32")))
        builder.emit_func_output(output)
    return builder.get()


class ArgumentChecks(unittest.TestCase):
    def setUp(self):
        self.executable = compiled(symbolic_model(), tvm.target.Target(TARGET))
        self.instructions = main_instructions(self.executable)

    def calls(self, name):
        return [line for line in self.instructions if line.startswith(f"call  {name} ")]

    def test_what_relax_runtime_checks_is_dropped(self):
        self.assertEqual(self.calls(argument_checks.CHECK_TENSOR_INFO), [], self.instructions)
        parameters_matched = [line.split("in: ")[1].split(",")[0] for line in self.calls(argument_checks.MATCH_SHAPE)]
        # x stores n, y compares its size with the stored n: both stay; w (all sizes
        # constants) is gone.
        self.assertIn("%0", parameters_matched, self.instructions)
        self.assertIn("%1", parameters_matched, self.instructions)
        self.assertNotIn("%2", parameters_matched, self.instructions)

    def test_the_model_still_computes_and_checks_symbolic_sizes(self):
        rng = np.random.default_rng(3)
        x, y = rng.standard_normal((2, 5, 4), dtype=np.float32)
        w = rng.standard_normal((4, 3), dtype=np.float32)
        vm = relax.VirtualMachine(self.executable, tvm.cpu())
        got = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y), tvm.runtime.tensor(w)).numpy()
        np.testing.assert_allclose(got, (x + y) @ w * 2, rtol=1e-5, atol=1e-5)
        # y's rows must equal x's: that check (against the stored n) was kept.
        with self.assertRaises(Exception):
            vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y[:3]), tvm.runtime.tensor(w))


class SizeCodes(unittest.TestCase):
    def test_codes_are_read_from_the_pairs_after_the_rank(self):
        heap = relax.Var("heap", relax.TensorType([1], "int64"))
        value = relax.Var("v", relax.TensorType([2, 3], "float32"))
        arguments = [value, heap, relax.prim_value(2), relax.prim_value(0), relax.prim_value(2), relax.prim_value(1), relax.prim_value(0)]
        call = relax.Call(relax.ExternFunc(argument_checks.MATCH_SHAPE), arguments)
        self.assertEqual(argument_checks.size_codes(call), [0, 1])
        self.assertFalse(argument_checks.checks_only_what_runtime_checks(call, [value]))
        static = relax.Call(relax.ExternFunc(argument_checks.MATCH_SHAPE), arguments[:5] + [relax.prim_value(2), relax.prim_value(0)])
        self.assertTrue(argument_checks.checks_only_what_runtime_checks(static, [value]))
        self.assertFalse(argument_checks.checks_only_what_runtime_checks(static, []))

    def test_a_check_of_a_computed_value_stays(self):
        parameter = relax.Var("x", relax.TensorType([2, 3], "float32"))
        computed = relax.Var("y", relax.TensorType([2, 3], "float32"))
        check = lambda value: relax.Call(  # noqa: E731
            relax.ExternFunc(argument_checks.CHECK_TENSOR_INFO), [value, relax.prim_value(2)]
        )
        self.assertTrue(argument_checks.checks_only_what_runtime_checks(check(parameter), [parameter]))
        self.assertFalse(argument_checks.checks_only_what_runtime_checks(check(computed), [parameter]))

    def test_a_tensor_of_unknown_rank_or_dtype_keeps_its_check(self):
        for ty in (relax.TensorType(ndim=-1, dtype="float32"), relax.TensorType(ndim=2, dtype="void")):
            parameter = relax.Var("x", ty)
            call = relax.Call(relax.ExternFunc(argument_checks.CHECK_TENSOR_INFO), [parameter, relax.prim_value(2)])
            self.assertFalse(argument_checks.checks_only_what_runtime_checks(call, [parameter]), ty)


if __name__ == "__main__":
    unittest.main()
