"""Unit tests of the float16 matmul and softmax legalizations that accumulate in float32
(half_precision.py), through the driver's backend pipeline. These need TVM:
tests/driver_python.rs runs them with the toolchain's Python.

    python -m unittest discover -s relax-build/driver/tests
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

import compiled_models  # noqa: E402,F401  (registers relax_runtime.output for the VM)
from relax_driver import build  # noqa: E402

RNG = np.random.default_rng(3)


def compiled(inputs, body):
    """`main(*inputs)` returning `body(*vars)`, compiled with the driver's pipeline."""
    builder = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(list(value.shape), str(value.dtype))) for i, value in enumerate(inputs)]
    with builder.function("main", params):
        with builder.dataflow():
            output = builder.emit_output(body(*params))
        builder.emit_func_output(output)
    executable = build.compile_module(builder.get(), tvm.target.Target({"kind": "llvm"}), {"pipeline": "zero"})
    machine = relax.VirtualMachine(executable, tvm.cpu())
    return machine["main"](*[tvm.runtime.tensor(value) for value in inputs]).numpy()


class Float16(unittest.TestCase):
    def test_a_float16_matmul_is_the_float32_product_rounded_once(self):
        # 512-long dot products of values near 1: a float16 running sum loses the low
        # bits of each term once it passes 256.
        a = (1 + RNG.random((2, 3, 512)) / 8).astype(np.float16)
        b = (1 + RNG.random((512, 5)) / 8).astype(np.float16)
        got = compiled([a, b], relax.op.matmul)
        want = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
        self.assertEqual(got.dtype, np.float16)
        np.testing.assert_array_equal(got, want)

    def test_float16_softmaxes_sum_in_float32(self):
        x = (RNG.standard_normal((4, 1000)) * 2).astype(np.float16)
        wide = x.astype(np.float32)
        exps = np.exp(wide - wide.max(axis=1, keepdims=True))
        for op, reference in (
            (relax.op.nn.softmax, exps / exps.sum(axis=1, keepdims=True)),
            (relax.op.nn.log_softmax, np.log(exps / exps.sum(axis=1, keepdims=True))),
        ):
            with self.subTest(op=op.__name__):
                got = compiled([x], op)
                self.assertEqual(got.dtype, np.float16)
                ulps = np.abs(got.astype(np.float64) - reference) / np.spacing(np.abs(reference.astype(np.float16)))
                self.assertLessEqual(ulps.max(), 1.0)

    def test_other_dtypes_keep_tvm_s_legalization(self):
        a = RNG.standard_normal((3, 7)).astype(np.float32)
        b = RNG.standard_normal((7, 2)).astype(np.float32)
        np.testing.assert_allclose(compiled([a, b], relax.op.matmul), a @ b, rtol=1e-5)


if __name__ == "__main__":
    unittest.main()
