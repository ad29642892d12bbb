"""Unit tests of outputs.py: which allocations the backend pipeline hands to
relax-runtime's `relax_runtime.output` (these need TVM: tests/driver_python.rs runs them
with the toolchain's Python; relax-runtime's own function is exercised by every model the
integration tests and relax-bench --check run).

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
from relax_driver import outputs  # noqa: E402


def tuple_model(rows):
    """`main(x[rows, 8]) = (exp(x) + 1, reshape(exp(x), [rows, 2, 4]) * 3)`: two returned
    tensors computed, and exp(x), an intermediate, in between. `rows` is an int or a
    symbolic size's name."""
    builder = relax.BlockBuilder()
    n = tvm.tirx.Var(rows, "int64") if isinstance(rows, str) else rows
    x = relax.Var("x", relax.TensorType([n, 8], "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            exp = builder.emit(relax.op.exp(x))
            first = builder.emit(relax.op.add(exp, relax.const(1.0, "float32")))
            reshaped = builder.emit(relax.op.reshape(exp, [n, 2, 4]))
            second = builder.emit(relax.op.multiply(reshaped, relax.const(3.0, "float32")))
            output = builder.emit_output(relax.Tuple([first, second]))
        builder.emit_func_output(output)
    return builder.get()


def instructions_of(rows):
    return main_instructions(compiled(tuple_model(rows), tvm.target.Target({"kind": "llvm"})))


def calls_of(instructions, name):
    return [line for line in instructions if line.startswith(f"call  {name} ")]


class Outputs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.executable = compiled(tuple_model(3), tvm.target.Target({"kind": "llvm"}))
        cls.instructions = main_instructions(cls.executable)

    def test_returned_tensors_come_from_relax_runtime_and_intermediates_from_the_pool(self):
        self.assertEqual(len(calls_of(self.instructions, outputs.OUTPUT)), 2, self.instructions)
        self.assertEqual(len(calls_of(self.instructions, "vm.builtin.alloc_storage")), 1, self.instructions)

    def test_the_model_computes_with_its_outputs_so_allocated(self):
        x = np.random.default_rng(5).standard_normal((3, 8), dtype=np.float32)
        vm = relax.VirtualMachine(self.executable, tvm.cpu())
        first, second = vm["main"](tvm.runtime.tensor(x))
        np.testing.assert_allclose(first.numpy(), np.exp(x) + 1, rtol=1e-5)
        np.testing.assert_allclose(second.numpy(), np.exp(x).reshape(3, 2, 4) * 3, rtol=1e-5)

    def test_large_and_symbolic_outputs_stay_with_tvm(self):
        # 512 x 8 float32 values are exactly the limit; 513 rows are over it.
        self.assertEqual(512 * 8 * 4, outputs.LARGEST_OUTPUT)
        self.assertEqual(len(calls_of(instructions_of(512), outputs.OUTPUT)), 2)
        for rows in (513, "n"):
            instructions = instructions_of(rows)
            self.assertEqual(calls_of(instructions, outputs.OUTPUT), [], instructions)
            self.assertEqual(len(calls_of(instructions, "vm.builtin.alloc_storage")), 3, instructions)


if __name__ == "__main__":
    unittest.main()
