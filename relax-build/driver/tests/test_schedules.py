"""Unit tests of the default CPU schedules (schedules.py) on elementwise chains as the
ONNX importer writes them (these need TVM: tests/driver_python.rs runs them with the
toolchain's Python).

    python -m unittest discover -s relax-build/driver/tests
"""

import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax, s_tir  # noqa: E402
from tvm.relax.backend.cpu_generic import pipeline as cpu  # noqa: E402

import compiled_models  # noqa: E402, F401  (registers relax_runtime.output, which the models call)
from host_cpu import VECTOR_CPU  # noqa: E402
from relax_driver import build, schedules  # noqa: E402

TARGET = {"kind": "llvm", "mcpu": VECTOR_CPU}


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


def block_points(function):
    """The points of each block's iteration domain in a TIR function."""
    sch = s_tir.Schedule(function)
    names = re.findall(r'with T\.sblock\("([^"]+)"\)', function.script())
    points = []
    for name in names:
        extents = [iteration.dom.extent for iteration in sch.get(sch.get_sblock(name)).iter_vars]
        points.append(int(np.prod([int(extent) for extent in extents])) if all(
            isinstance(extent, tvm.tirx.IntImm) for extent in extents) else -1)
    return points


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
        # One loop nest over the tensor: every op over it inlined into the last one; the
        # per-channel parameters (the batch norm's scale and shift) computed once, in a
        # loop over the channels, not again at every point.
        points = block_points(function)
        self.assertEqual(points.count(int(np.prod(shape))), 1, script)
        self.assertTrue(all(count <= shape[1] for count in points if count != np.prod(shape)), script)
        # In parallel only when there is enough to share (a launch costs more).
        if np.prod(shape) >= schedules.MIN_PARALLEL_ITERATIONS:
            self.assertIn("T.parallel", script)
        else:
            self.assertNotIn("T.parallel", script)
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

    def test_symbolic_rows_stay_plain_loops_in_parallel_and_match_numpy(self):
        # Split into vectors, a symbolic row's last vector is guarded lane by lane and the
        # whole row compiles to scalar code; a plain row loop, LLVM vectorizes.
        height, width = tvm.tirx.Var("height", "int64"), tvm.tirx.Var("width", "int64")
        module = norm_scale_relu([1, 8, height, width])
        target = tvm.target.Target(TARGET)
        (function,) = scheduled_functions(module, target)
        script = function.script()
        self.assertIn("T.parallel", script)
        self.assertNotIn("T.where", script)
        # The image's loop nest: no vectors (the per-channel loop before it has them).
        self.assertNotIn("T.vectorized", script[script.index("T.parallel"):])
        self.assertEqual(block_points(function).count(-1), 1, script)

        executable = build.compile_module(module, target, {"pipeline": "zero", "opt_level": 3})
        vm = relax.VirtualMachine(executable, tvm.cpu())
        generator = np.random.default_rng(5)
        for shape in ([1, 8, 5, 37], [1, 8, 3, 16], [1, 8, 2, 1]):
            values = [
                generator.standard_normal(shape).astype(np.float32),
                *(generator.uniform(0.5, 1.5, 8).astype(np.float32) for _ in range(4)),
                generator.uniform(0.5, 1.5, (8, 1, 1)).astype(np.float32),
                generator.uniform(-0.5, 0.5, (8, 1, 1)).astype(np.float32),
            ]
            actual = vm["main"](*[tvm.runtime.tensor(v) for v in values]).numpy()
            np.testing.assert_allclose(actual, reference(*values), rtol=1e-5, atol=1e-5)


def pooled(shape, pool):
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            output = builder.emit_output(pool(x))
        builder.emit_func_output(output)
    return builder.get()


def reference_pool(x, size, stride, pad, is_max):
    """NCHW pooling over the windows' positions inside x (numpy)."""
    n, c, h, w = x.shape
    oh, ow = (h + 2 * pad - size) // stride + 1, (w + 2 * pad - size) // stride + 1
    out = np.zeros((n, c, oh, ow), np.float64)
    for oy in range(oh):
        for ox in range(ow):
            y0, x0 = oy * stride - pad, ox * stride - pad
            window = x[:, :, max(y0, 0) : y0 + size, max(x0, 0) : x0 + size]
            out[:, :, oy, ox] = window.max(axis=(2, 3)) if is_max else window.mean(axis=(2, 3))
    return out


class SplitHalves(unittest.TestCase):
    def test_a_transpose_split_into_a_whole_and_an_empty_half_builds_and_matches_numpy(self):
        # ONNX's rotary embedding (expanded): a transpose split at its last dim's end, the
        # second half empty. The whole half's copy could go into the transpose, but the
        # empty half reads the transpose's buffer too, which must stay.
        builder = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType([2, 4, 3, 8], "float32"))
        with builder.function("main", [x]):
            with builder.dataflow():
                moved = builder.emit(relax.op.permute_dims(x, [0, 2, 1, 3]))
                halves = builder.emit(relax.op.split(moved, [8], axis=3))
                whole = builder.emit(relax.TupleGetItem(halves, 0))
                empty = builder.emit(relax.TupleGetItem(halves, 1))
                doubled = builder.emit(relax.op.add(whole, whole))
                output = builder.emit_output(relax.Tuple([doubled, empty]))
            builder.emit_func_output(output)
        executable = build.compile_module(builder.get(), tvm.target.Target(TARGET), {"pipeline": "zero", "opt_level": 3})
        vm = relax.VirtualMachine(executable, tvm.cpu())
        value = np.random.default_rng(7).standard_normal((2, 4, 3, 8)).astype(np.float32)
        doubled, empty = vm["main"](tvm.runtime.tensor(value))
        np.testing.assert_array_equal(doubled.numpy(), 2 * value.transpose(0, 2, 1, 3))
        self.assertEqual(empty.numpy().shape, (2, 3, 4, 0))


class Pools(unittest.TestCase):
    def test_a_pool_with_few_rows_inlines_its_padding_and_matches_numpy(self):
        # 3 planes of 4 output rows: too few to run in parallel without a row's outputs,
        # whose loop would then be fused with the rows' (ONNX's test_MaxPool2d).
        shape = [1, 3, 7, 7]
        module = pooled(shape, lambda x: relax.op.nn.max_pool2d(x, (3, 3), (2, 2), (1, 1)))
        target = tvm.target.Target(TARGET)
        (function,) = scheduled_functions(module, target)
        self.assertNotIn('T.sblock("pad_temp")', function.script())
        x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
        executable = build.compile_module(module, target, {"pipeline": "zero", "opt_level": 3})
        actual = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        np.testing.assert_allclose(actual, reference_pool(x, 3, 2, 1, True), rtol=1e-5, atol=1e-6)

    def test_pools_run_row_by_row_and_match_numpy(self):
        # 32 channels: enough iterations for the strided max pool to run in parallel.
        shape = [1, 32, 14, 14]
        cases = [
            (lambda x: relax.op.nn.avg_pool2d(x, (3, 3), (1, 1), (1, 1)), 3, 1, 1, False),
            (lambda x: relax.op.nn.max_pool2d(x, (3, 3), (2, 2), (1, 1)), 3, 2, 1, True),
        ]
        target = tvm.target.Target(TARGET)
        x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
        for pool, size, stride, pad, is_max in cases:
            module = pooled(shape, pool)
            script = "\n".join(function.script() for function in scheduled_functions(module, target))
            # Not one parallel iteration per output value (dlight's `Reduction`, with the
            # padded window computed in each): rows of outputs, the window inside.
            outputs = 32 * ((14 + 2 * pad - size) // stride + 1) ** 2
            self.assertNotIn(f"T.parallel(T.int64({outputs}))", script)
            self.assertIn("T.parallel", script)
            if is_max:
                # Its padding (a block of its own; the average pool's sum reads through
                # a bounds check) is computed per row of outputs, the rows its windows
                # read, not inlined as a bounds check on every value read.
                self.assertRegex(script, r"T\.parallel\(T\.int64\(\d+\)\):\n\s+for ax0, ax1 in T\.grid\(T\.int64\(3\), ")
                self.assertLess(script.index("T.parallel"), script.index('T.sblock("pad_temp")'))
            executable = build.compile_module(module, target, {"pipeline": "zero", "opt_level": 3})
            actual = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
            np.testing.assert_allclose(actual, reference_pool(x, size, stride, pad, is_max), rtol=1e-5, atol=1e-6)

    def test_pools_on_blocked_tensors_sum_16_channels_at_a_time_and_match_numpy(self):
        # [N, C/16, H, W, 16]: the window's loops go outside the 16 channels of a pixel,
        # which are the innermost loop (LLVM vectorizes it), its initial zeros a vector.
        shape = [1, 2, 14, 14, 16]
        cases = [
            (lambda x: relax.op.nn.avg_pool2d(x, (3, 3), (1, 1), (1, 1), layout="NCHW16c"), 3, 1, 1, False),
            (lambda x: relax.op.nn.max_pool2d(x, (3, 3), (2, 2), (1, 1), layout="NCHW16c"), 3, 2, 1, True),
        ]
        target = tvm.target.Target(TARGET)
        x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
        nchw = x.transpose(0, 1, 4, 2, 3).reshape(1, 32, 14, 14)
        for pool, size, stride, pad, is_max in cases:
            module = pooled(shape, pool)
            (reduction,) = [
                function for function in scheduled_functions(module, target) if "T.axis.remap(\"SRR\"" in function.script()
            ]
            script = reduction.script()
            self.assertIn("for ax3_init in T.vectorized(T.int64(16))", script)  # the initial values
            self.assertRegex(script, r"for ax4, ax5, ax3 in T.grid\(T.int64\(3\), T.int64\(3\), T.int64\(16\)\)")
            executable = build.compile_module(module, target, {"pipeline": "zero", "opt_level": 3})
            actual = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
            expected = reference_pool(nchw, size, stride, pad, is_max)
            expected = expected.reshape(1, 2, 16, *expected.shape[2:]).transpose(0, 1, 3, 4, 2)
            np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


class PlaneMeans(unittest.TestCase):
    def test_a_blocked_planes_mean_sums_16_channels_a_step_in_parallel_over_blocks(self):
        # A squeeze-excitation's pool on [N, C/16, H, W, 16]: not one parallel iteration
        # per channel reading one value of each cache line (dlight's `Reduction`), but
        # the blocks in parallel, each summing its plane 16 channels at a time.
        target = tvm.target.Target(TARGET)
        generator = np.random.default_rng(8)
        for shape in ([1, 2, 30, 40, 16], [2, 3, 7, 5, 16]):
            module = pooled(shape, lambda x: relax.op.mean(x, axis=[2, 3], keepdims=True))
            (function,) = scheduled_functions(module, target)
            script = function.script()
            blocks = shape[0] * shape[1]
            if np.prod(shape) >= schedules.MIN_PARALLEL_ITERATIONS:
                self.assertIn(f"T.parallel(T.int64({blocks}))", script)
            else:
                self.assertNotIn("T.parallel", script)
            self.assertRegex(script, r"for ax\d+_init in T.vectorized\(T.int64\(16\)\)")
            self.assertRegex(script, rf"for ax\d+, ax\d+, ax\d+ in T.grid\(T.int64\({shape[2]}\), T.int64\({shape[3]}\), T.int64\(16\)\)")
            x = generator.standard_normal(shape).astype(np.float32)
            executable = build.compile_module(module, target, {"pipeline": "zero", "opt_level": 3})
            actual = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
            np.testing.assert_allclose(actual, x.astype(np.float64).mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)

    def test_a_mean_along_rows_is_left_to_dlight(self):
        # The innermost index of what it reads is the reduction's: not a sum of vectors.
        module = pooled([1, 32, 7, 20], lambda x: relax.op.mean(x, axis=[3], keepdims=True))
        script = "\n".join(function.script() for function in scheduled_functions(module, tvm.target.Target(TARGET)))
        self.assertNotRegex(script, r"_init in T.vectorized")


if __name__ == "__main__":
    unittest.main()
