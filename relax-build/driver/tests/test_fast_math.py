"""Unit tests of the fast forms of exp, sigmoid, tanh and erf (fast_math.py) through the
driver's backend pipeline (these need TVM: tests/driver_python.rs runs them with the
toolchain's Python).

    python -m unittest discover -s relax-build/driver/tests
"""

import itertools
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

import compiled_models  # noqa: E402,F401  (registers relax_runtime.output for the VM)
from host_cpu import VECTOR_CPU  # noqa: E402
from relax_driver import build  # noqa: E402

TARGET = {"kind": "llvm", "mcpu": VECTOR_CPU}
# The default x86-64 target (SSE2): no vector floor, so `floor` would be a libm call too.
BASELINE = {"kind": "llvm"}

OPS = {
    "exp": (relax.op.exp, np.exp),
    "sigmoid": (relax.op.sigmoid, lambda x: 1 / (1 + np.exp(-x.astype(np.float64)))),
    "tanh": (relax.op.tanh, np.tanh),
    "erf": (relax.op.erf, np.vectorize(math.erf)),
}


def unary(op, shape, dtype):
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with builder.function("main", [x]):
        with builder.dataflow():
            output = builder.emit_output(op(x))
        builder.emit_func_output(output)
    return builder.get()


def compiled(module, target=TARGET):
    return build.compile_module(module, tvm.target.Target(target), {"pipeline": "zero", "opt_level": 3})


def llvm_source(executable, kind="ll"):
    """The LLVM IR (or, with "asm", the assembly) of the executable's compiled loops."""
    return "\n".join(module.inspect_source(kind) for module in executable.mod.imports)


class FastForms(unittest.TestCase):
    def test_each_op_vectorizes_without_libm_calls_and_matches_numpy(self):
        # Over float32's whole useful range: tails, zero, and 2 * 16 * 31 values.
        x = np.concatenate([np.linspace(-30, 30, 2 * 16 * 31 - 3), [-87.0, 0.0, 87.0]]).astype(np.float32)
        for (name, (op, reference)), target in itertools.product(OPS.items(), (TARGET, BASELINE)):
            with self.subTest(op=name, target=target):
                executable = compiled(unary(op, list(x.shape), "float32"), target)
                source = llvm_source(executable)
                for libm in ("@expf", "@tanhf", "@erff", "@llvm.exp."):
                    self.assertFalse(libm in source, f"{name} still calls {libm}")
                assembly = llvm_source(executable, "asm")
                for libm in ("expf", "tanhf", "erff", "floorf"):
                    self.assertFalse(libm in assembly, f"{name} calls {libm} on {target}")
                vm = relax.VirtualMachine(executable, tvm.cpu())
                got = vm["main"](tvm.runtime.tensor(x)).numpy()
                want = reference(x.astype(np.float64))
                np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7, err_msg=name)

    def test_cosh_and_sinh_build_vectorized_and_match_numpy(self):
        # TVM's LLVM backend had no lowering of a vectorized cosh ("unknown intrinsic").
        x = np.concatenate([np.linspace(-20, 20, 61), [-0.49, -1e-4, 0.0, 3e-5, 0.5]]).astype(np.float32)
        for (name, op, reference), dtype in itertools.product(
            (("cosh", relax.op.cosh, np.cosh), ("sinh", relax.op.sinh, np.sinh)), ("float32", "float64")
        ):
            with self.subTest(op=name, dtype=dtype):
                executable = compiled(unary(op, list(x.shape), dtype))
                got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x.astype(dtype))).numpy()
                want = reference(x.astype(np.float64))
                # Relative to each value (sinh near 0 is its series, not a cancellation).
                np.testing.assert_allclose(got, want, rtol=4e-6 if dtype == "float32" else 1e-13, atol=0, err_msg=name)

    def test_other_dtypes_keep_tvm_s_own_legalization(self):
        x = np.linspace(-5, 5, 64).astype(np.float64)
        executable = compiled(unary(relax.op.sigmoid, [64], "float64"))
        got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        np.testing.assert_allclose(got, 1 / (1 + np.exp(-x)), rtol=1e-14)
        self.assertTrue("@llvm.exp." in llvm_source(executable), "float64 sigmoid: no llvm.exp")


if __name__ == "__main__":
    unittest.main()
