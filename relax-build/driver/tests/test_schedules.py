"""Unit tests of the default CPU schedules (schedules.py) on elementwise chains as the
ONNX importer writes them (these need TVM: tests/driver_python.rs runs them with the
toolchain's Python).

    python -m unittest discover -s relax-build/driver/tests
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402
from tvm.relax.backend.cpu_generic import pipeline as cpu  # noqa: E402

from relax_driver import build, schedules  # noqa: E402

TARGET = {"kind": "llvm", "mcpu": "x86-64-v4"}


def norm_scale_relu(shape):
    """`relu(batch_norm(x) * scale + shift)` over an NCHW tensor of `shape`, with every
    per-channel value a function parameter: a pre-activation block's elementwise part."""
    channels = shape[1]
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    per_channel = [relax.Var(name, relax.TensorType([channels], "float32")) for name in ("gamma", "beta", "mean", "var")]
    scale, shift = (relax.Var(name, relax.TensorType([channels, 1, 1], "float32")) for name in ("scale", "shift"))
    with builder.function("main", [x, *per_channel, scale, shift]):
        with builder.dataflow():
            normed = builder.emit(relax.op.nn.batch_norm(x, *per_channel, axis=1, epsilon=1e-5, training=False)[0])
            scaled = builder.emit(relax.op.add(relax.op.multiply(normed, scale), shift))
            output = builder.emit_output(relax.op.nn.relu(scaled))
        builder.emit_func_output(output)
    return builder.get()


def reference(x, gamma, beta, mean, var, scale, shift):
    column = lambda v: v.reshape(1, -1, 1, 1)  # noqa: E731
    normed = (x - column(mean)) / np.sqrt(column(var) + 1e-5) * column(gamma) + column(beta)
    return np.maximum(normed * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1), 0)


def scheduled_functions(module, target):
    """The module's TIR functions after fusion and the default schedules."""
    with target, tvm.transform.PassContext(opt_level=3):
        module = relax.get_pipeline("zero")(module)
        passes = cpu.legalize_passes(target) + [schedules.default_schedule_pass(target)]
        module = tvm.transform.Sequential(passes)(module)
    return [module[gv] for gv in module.get_global_vars() if isinstance(module[gv], tvm.tirx.PrimFunc)]


class ElementwiseChains(unittest.TestCase):
    def check(self, shape):
        module = norm_scale_relu(shape)
        target = tvm.target.Target(TARGET)
        (function,) = scheduled_functions(module, target)
        script = function.script()
        # One loop nest: every op of the chain inlined into the last one.
        blocks = [line for line in script.splitlines() if line.strip().startswith("with T.sblock(")]
        self.assertEqual(len(blocks), 1, script)
        self.assertIn("T.parallel", script)
        self.assertIn("T.vectorized", script)

        request = {"pipeline": "zero", "opt_level": 3}
        executable = build.compile_module(module, target, request)
        vm = relax.VirtualMachine(executable, tvm.cpu())
        generator = np.random.default_rng(3)
        channels = shape[1]
        values = [
            generator.standard_normal(shape).astype(np.float32),
            generator.uniform(0.5, 1.5, channels).astype(np.float32),
            generator.uniform(-0.5, 0.5, channels).astype(np.float32),
            generator.uniform(-0.5, 0.5, channels).astype(np.float32),
            generator.uniform(0.5, 1.5, channels).astype(np.float32),
            generator.uniform(0.5, 1.5, (channels, 1, 1)).astype(np.float32),
            generator.uniform(-0.5, 0.5, (channels, 1, 1)).astype(np.float32),
        ]
        actual = vm["main"](*[tvm.runtime.tensor(v) for v in values]).numpy()
        np.testing.assert_allclose(actual, reference(*values), rtol=1e-5, atol=1e-5)
        return script

    def test_rows_that_are_a_multiple_of_the_vector_width_stay_rows(self):
        script = self.check([1, 32, 4, 64])
        self.assertNotIn("T.where", script)

    def test_a_plane_of_ragged_rows_is_vectorized_whole(self):
        # 28 is no multiple of 16, 28 x 28 = 49 x 16 is: no guarded (scalar) lanes.
        script = self.check([1, 192, 28, 28])
        self.assertNotIn("T.where", script)

    def test_small_planes_are_vectorized_across_channels(self):
        # 7 x 7 = 49: only channels x 49 is a multiple of 16.
        script = self.check([1, 64, 7, 7])
        self.assertNotIn("T.where", script)

    def test_a_tensor_no_vector_divides_is_still_right(self):
        self.check([1, 3, 7, 7])


if __name__ == "__main__":
    unittest.main()
