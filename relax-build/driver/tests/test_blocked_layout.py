"""Unit tests of the driver's channel-blocked layout for CNNs (these need TVM:
tests/driver_python.rs runs them with the toolchain's Python).

    python -m unittest discover -s relax-build/driver/tests
"""

import collections
import os
import sys
import unittest
import unittest.mock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402
from tvm.script import relax as R  # noqa: E402

from relax_driver import blocked_layout, offload  # noqa: E402

X86 = {"kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu"}


@tvm.script.ir_module
class Residual:
    """A ResNet block: 3x3 convolution, bias, ReLU, then a 1x1 convolution, its bias and
    the block's input added, ReLU; weights bound at load (after `num_input`)."""

    @R.function
    def main(
        x: R.Tensor((1, 64, 14, 14), "float32"),
        w1: R.Tensor((240, 64, 3, 3), "float32"),
        b1: R.Tensor((240,), "float32"),
        w2: R.Tensor((64, 240, 1, 1), "float32"),
        b2: R.Tensor((64,), "float32"),
    ):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            y = R.nn.conv2d(x, w1, padding=[1, 1, 1, 1])
            y1 = R.add(y, R.reshape(b1, [1, 240, 1, 1]))
            y2 = R.nn.relu(y1)
            z = R.nn.conv2d(y2, w2)
            z1 = R.add(z, R.reshape(b2, [1, 64, 1, 1]))
            z2 = R.add(z1, x)
            out = R.nn.relu(z2)
            R.output(out)
        return out


@tvm.script.ir_module
class Grouped:
    """A ResNeXt-like block: 1x1, a 3x3 of 2 groups (stays NCHW: groups of 32 channels
    that are neither one channel nor the whole input), 1x1."""

    @R.function
    def main(
        x: R.Tensor((1, 32, 28, 28), "float32"),
        w1: R.Tensor((64, 32, 1, 1), "float32"),
        w2: R.Tensor((64, 32, 3, 3), "float32"),
        w3: R.Tensor((32, 64, 1, 1), "float32"),
    ):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            y = R.nn.relu(R.nn.conv2d(x, w1))
            z = R.nn.relu(R.nn.conv2d(y, w2, padding=[1, 1, 1, 1], groups=2))
            out = R.nn.conv2d(z, w3)
            R.output(out)
        return out


def mobilenet_block(channels):
    """A MobileNetV2 block as ONNX's importer gives it (its Clips as call_tirs of max and
    min against scalar bounds): 1x1 expansion to `2 * channels`, ReLU6, depthwise 3x3,
    ReLU6, 1x1 projection, the input added; biases; weights after `num_input`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from tvm.relax.frontend.onnx import from_onnx

    wide = 2 * channels
    rng = np.random.default_rng(0)

    def initializer(name, *dims):
        return numpy_helper.from_array(rng.standard_normal(dims).astype("float32"), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["y"], kernel_shape=[1, 1]),
        helper.make_node("Clip", ["y", "low", "high"], ["y6"]),
        helper.make_node("Conv", ["y6", "w2", "b2"], ["z"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=wide),
        helper.make_node("Clip", ["z", "low", "high"], ["z6"]),
        helper.make_node("Conv", ["z6", "w3", "b3"], ["p"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["p", "x"], ["out"]),
    ]
    initializers = [
        initializer("w1", wide, channels, 1, 1),
        initializer("b1", wide),
        initializer("w2", wide, 1, 3, 3),
        initializer("b2", wide),
        initializer("w3", channels, wide, 1, 1),
        initializer("b3", channels),
        numpy_helper.from_array(np.array(0.0, dtype="float32"), "low"),
        numpy_helper.from_array(np.array(6.0, dtype="float32"), "high"),
    ]
    shape = [1, channels, 28, 28]
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    module = from_onnx(model, keep_params_in_input=True)
    module, _ = relax.frontend.detach_params(module)
    # The Clip bounds bound as constants, as the driver binds one-value weights.
    function = module["main"]
    weights = list(function.params)[int(function.attrs["num_input"]) :]
    bounds = {var: np.array(value, dtype="float32") for var, value in zip(weights[-2:], (0.0, 6.0))}
    return relax.transform.BindParams("main", bounds)(module)


def stem_module(size, also_returned=False, channels=3):
    """A network's stem: a 3x3 convolution at stride 2 of an image's 3 channels (or
    `channels`) over `size` x `size` onto 32 filters, its bias and ReLU6, then a 3x3
    convolution onto 64 filters (blocked); with `also_returned`, the stem's output is a
    result too."""
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, channels, size, size], "float32"))
    w1 = relax.Var("w1", relax.TensorType([32, channels, 3, 3], "float32"))
    b1 = relax.Var("b1", relax.TensorType([32], "float32"))
    w2 = relax.Var("w2", relax.TensorType([64, 32, 3, 3], "float32"))
    with builder.function("main", [x, w1, b1, w2], attrs={"num_input": 1}):
        with builder.dataflow():
            y = builder.emit(relax.op.nn.conv2d(x, w1, strides=[2, 2], padding=[1, 1, 1, 1]))
            y = builder.emit(relax.op.add(y, relax.op.reshape(b1, [1, 32, 1, 1])))
            y = builder.emit(relax.op.clip(y, relax.prim_value(0.0), relax.prim_value(6.0)))
            z = builder.emit(relax.op.nn.conv2d(y, w2, padding=[1, 1, 1, 1]))
            out = builder.emit_output(relax.Tuple([z, y]) if also_returned else z)
        builder.emit_func_output(out)
    return builder.get()


LAYOUT_KERNEL = "relax_runtime.layout_blocked"


def kernel_calls(function):
    """{kernel name: [output rank, ...]} of the function's kernel calls but layout
    transforms, and how many layout transforms it has (TVM's or the layout kernel's)."""
    calls = collections.defaultdict(list)
    transforms = []

    def visit(expr):
        name = offload.packed_name(expr)
        if name == LAYOUT_KERNEL:
            transforms.append(expr)
        elif name is not None:
            calls[name].append(offload.rank(expr))
        elif offload.op_name(expr) == "relax.layout_transform":
            transforms.append(expr)

    relax.analysis.post_order_visit(function.body, visit)
    return dict(calls), len(transforms)


def all_calls(function):
    """The function's calls, in order."""
    calls = []
    relax.analysis.post_order_visit(function.body, lambda expr: calls.append(expr) if isinstance(expr, relax.Call) else None)
    return calls


def kernel_call_list(function):
    """The function's kernel calls but layout transforms, in order."""
    kernels = []
    relax.analysis.post_order_visit(
        function.body,
        lambda expr: kernels.append(expr) if offload.packed_name(expr) not in (None, LAYOUT_KERNEL) else None,
    )
    return kernels


def layout_kernel_ranks(function):
    """(input rank, output rank) of each of the function's layout kernel calls, and how
    many of TVM's layout transforms it has left."""
    ranks, left = [], []

    def visit(expr):
        if offload.packed_name(expr) == LAYOUT_KERNEL:
            ranks.append((offload.rank(expr.args[1].fields[0]), offload.rank(expr)))
        elif offload.op_name(expr) == "relax.layout_transform":
            left.append(expr)

    relax.analysis.post_order_visit(function.body, visit)
    return ranks, len(left)


class Blocked(unittest.TestCase):
    def test_a_residual_block_runs_on_blocked_tensors_with_everything_folded(self):
        module, converted, _ = blocked_layout.convert(Residual, X86)
        self.assertTrue(converted)
        module, layouts = offload.rewrite(module, None)
        calls, transforms = kernel_calls(module["main"])
        # The biases, the residual and the ReLUs fold into the two kernel calls, whose
        # outputs are [1, F / 16, 14, 14, 16].
        self.assertEqual(calls, {"relax_runtime.conv2d_bias": [5], "relax_runtime.conv2d_bias_add": [5]})
        # Only the input goes to blocks, once for both the convolution and the residual
        # (ConvertLayout writes a transform per consumer), and the output back, both by
        # the layout kernel.
        self.assertEqual(transforms, 2)
        self.assertEqual(layout_kernel_ranks(module["main"]), ([(4, 5), (5, 4)], 0))
        # Both kernels are taken in filter panels, packed at load.
        self.assertEqual(
            layouts["main"], {1: {"layout": "filter_panels", "columns": 240}, 3: {"layout": "filter_panels", "columns": 64}}
        )
        self.assertEqual([int(d) for d in offload.dims(module["main"].params[1])], [4, 64, 3, 3, 64])

    def test_a_kernel_also_used_otherwise_is_packed_by_relax_ops(self):
        # `w1` is also an output: it stays a stored OIHW weight, and the blocked kernel,
        # which reads only filter panels, gets it packed by ops on every call.
        @tvm.script.ir_module
        class Shared:
            @R.function
            def main(
                x: R.Tensor((1, 64, 14, 14), "float32"),
                w1: R.Tensor((240, 64, 3, 3), "float32"),
                w2: R.Tensor((64, 240, 1, 1), "float32"),
            ):
                R.func_attr({"num_input": 1})
                with R.dataflow():
                    y = R.nn.relu(R.nn.conv2d(x, w1, padding=[1, 1, 1, 1]))
                    z = R.nn.conv2d(y, w2)
                    total = R.sum(w1)
                    R.output(z, total)
                return (z, total)

        module, converted, _ = blocked_layout.convert(Shared, X86)
        self.assertTrue(converted)
        module, layouts = offload.rewrite(module, None)
        self.assertEqual(layouts["main"], {2: {"layout": "filter_panels", "columns": 64}})
        convolutions = []
        relax.analysis.post_order_visit(
            module["main"].body,
            lambda expr: convolutions.append(expr)
            if (offload.packed_name(expr) or "").startswith("relax_runtime.conv2d")
            else None,
        )
        self.assertEqual([offload.rank(call.args[1].fields[1]) for call in convolutions], [5, 5])
        # The ops pack as relax-runtime does: compare on values.
        weight = np.random.default_rng(0).standard_normal((80, 16, 3, 3)).astype("float32")
        builder = relax.BlockBuilder()
        with builder.function("main", []):
            builder.emit_func_output(builder.emit(offload.filter_panels_expr(relax.const(weight))))
        packed = tvm.compile(builder.get(), target="llvm")
        vm = relax.VirtualMachine(packed, tvm.cpu())
        np.testing.assert_array_equal(vm["main"]().numpy(), offload.filter_panels_of(weight))

    def test_a_3x3_kernel_over_a_mid_sized_plane_is_taken_in_blocked_winograd_form(self):
        # 128 channels onto 144 filters: over 14x14 (49 2x2 tiles, 16 of 4x4) Winograd
        # F(2x2, 3x3), its transform in panels of 64 filters; over 7x7 (16 tiles) filter
        # panels. 64 onto 64 over 28x28 (49 4x4 tiles): F(4x4, 3x3).
        @tvm.script.ir_module
        class Planes:
            @R.function
            def main(
                x: R.Tensor((1, 128, 14, 14), "float32"),
                y: R.Tensor((1, 128, 7, 7), "float32"),
                z: R.Tensor((1, 64, 28, 28), "float32"),
                w1: R.Tensor((144, 128, 3, 3), "float32"),
                w2: R.Tensor((144, 128, 3, 3), "float32"),
                w3: R.Tensor((64, 64, 3, 3), "float32"),
            ):
                R.func_attr({"num_input": 3})
                with R.dataflow():
                    a = R.nn.relu(R.nn.conv2d(x, w1, padding=[1, 1, 1, 1]))
                    b = R.nn.relu(R.nn.conv2d(y, w2, padding=[1, 1, 1, 1]))
                    c = R.nn.relu(R.nn.conv2d(z, w3, padding=[1, 1, 1, 1]))
                    R.output(a, b, c)
                return (a, b, c)

        module, converted, _ = blocked_layout.convert(Planes, X86)
        self.assertTrue(converted)
        module, layouts = offload.rewrite(module, None)
        self.assertEqual(
            layouts["main"],
            {
                3: {"layout": "blocked_winograd", "columns": 144},
                4: {"layout": "filter_panels", "columns": 144},
                5: {"layout": "blocked_winograd4", "columns": 64},
            },
        )
        params = module["main"].params
        self.assertEqual([int(d) for d in offload.dims(params[3])], [16, 3, 128, 64])
        self.assertEqual([int(d) for d in offload.dims(params[4])], [3, 128, 3, 3, 64])
        self.assertEqual([int(d) for d in offload.dims(params[5])], [36, 1, 64, 64])
        kernels = kernel_call_list(module["main"])
        # Each convolution takes its parameter as it is (nothing packed per call).
        self.assertEqual([call.args[1].fields[1] for call in kernels], [params[3], params[4], params[5]])

    def test_a_3x3_kernel_over_a_plane_sized_at_run_time_is_taken_in_blocked_winograd_form(self):
        # A detector's FPN layers over a symbolic plane (its tiles unknown when built):
        # F(4x4, 3x3) from 16 channels and filters.
        @tvm.script.ir_module
        class Fpn:
            @R.function
            def main(
                x: R.Tensor((1, 32, "h", "w"), "float32"),
                w1: R.Tensor((16, 32, 3, 3), "float32"),
                w2: R.Tensor((32, 16, 3, 3), "float32"),
            ):
                R.func_attr({"num_input": 1})
                with R.dataflow():
                    a = R.nn.relu(R.nn.conv2d(x, w1, padding=[1, 1, 1, 1]))
                    b = R.nn.relu(R.nn.conv2d(a, w2, padding=[1, 1, 1, 1]))
                    R.output(b)
                return b

        module, converted, _ = blocked_layout.convert(Fpn, X86)
        self.assertTrue(converted)
        module, layouts = offload.rewrite(module, None)
        self.assertEqual(
            layouts["main"],
            {
                1: {"layout": "blocked_winograd4", "columns": 16},
                2: {"layout": "blocked_winograd4", "columns": 32},
            },
        )
        params = module["main"].params
        self.assertEqual([int(d) for d in offload.dims(params[1])], [36, 1, 32, 64])

    def test_a_convolution_of_a_blocked_input_to_filters_not_whole_blocks_pads_its_kernel(self):
        # 128 filters (whole blocks), then 40 (two and a half), as SqueezeNet's last layer.
        @tvm.script.ir_module
        class Classifier:
            @R.function
            def main(
                x: R.Tensor((1, 64, 14, 14), "float32"),
                w1: R.Tensor((128, 64, 3, 3), "float32"),
                w2: R.Tensor((40, 128, 1, 1), "float32"),
                b2: R.Tensor((40,), "float32"),
            ):
                R.func_attr({"num_input": 1})
                with R.dataflow():
                    y = R.nn.relu(R.nn.conv2d(x, w1, padding=[1, 1, 1, 1]))
                    z = R.add(R.nn.conv2d(y, w2), R.reshape(b2, [1, 40, 1, 1]))
                    out = R.nn.relu(z)
                    R.output(out)
                return out

        module, converted, _ = blocked_layout.convert(Classifier, X86)
        self.assertTrue(converted)
        # (Its values: SqueezeNet's last layer is one, checked against onnxruntime by
        # tests/bench_outputs.rs; TVM's own CPU lowering has no blocked convolution.)
        module, layouts = offload.rewrite(module, None)
        kernels = kernel_call_list(module["main"])
        # Both on the blocked kernel; the second onto 3 blocks, sliced to 40 filters.
        self.assertEqual([offload.rank(call) for call in kernels], [5, 5])
        self.assertEqual([int(d) for d in offload.dims(kernels[1])], [1, 3, 14, 14, 16])
        self.assertEqual(layouts["main"][2], {"layout": "filter_panels", "columns": 40})
        slices = []
        relax.analysis.post_order_visit(
            module["main"].body,
            lambda expr: slices.append(offload.dims(expr)) if offload.op_name(expr) == "relax.strided_slice" else None,
        )
        self.assertEqual([[int(d) for d in dims] for dims in slices], [[1, 40, 14, 14]])

    def test_a_per_channel_operand_of_rank_3_is_reshaped_to_rank_4(self):
        # How ONNX writes a batch norm's scale: ConvertLayout would keep the product NCHW.
        x = relax.Var("x", relax.TensorType([1, 32, 8, 8], "float32"))
        scale = relax.Var("scale", relax.TensorType([32, 1, 1], "float32"))
        row = relax.Var("row", relax.TensorType([8], "float32"))
        builder = relax.BlockBuilder()
        with builder.function("main", [x, scale, row]):
            with builder.dataflow():
                y = builder.emit(relax.op.multiply(x, scale))
                z = builder.emit_output(relax.op.add(y, row))  # along W: stays as it is
            builder.emit_func_output(z)
        function = blocked_layout.prepared(builder.get())["main"]
        operands = []
        relax.analysis.post_order_visit(
            function.body,
            lambda expr: operands.append([offload.rank(arg) for arg in expr.args])
            if offload.op_name(expr) in ("relax.multiply", "relax.add")
            else None,
        )
        self.assertEqual(operands, [[4, 4], [4, 1]])

    def test_negative_axes_of_squeeze_and_expand_dims_do_not_stop_the_layout(self):
        # TVM 0.27's ConvertLayout fails (std::bad_alloc) on a negative axis: silero-vad's
        # decoder squeezes axis -1 after its convolutions.
        x = relax.Var("x", relax.TensorType([1, 64, 14, 14], "float32"))
        w = relax.Var("w", relax.TensorType([64, 64, 3, 3], "float32"))
        builder = relax.BlockBuilder()
        with builder.function("main", [x, w], attrs={"num_input": 1}):
            with builder.dataflow():
                y = builder.emit(relax.op.nn.conv2d(x, w, padding=[1, 1, 1, 1]))
                z = builder.emit(relax.op.nn.conv2d(y, w, padding=[1, 1, 1, 1]))
                pooled = builder.emit(relax.op.mean(z, axis=[3], keepdims=True))
                squeezed = builder.emit(relax.op.squeeze(pooled, axis=[-1]))
                out = builder.emit_output(relax.op.expand_dims(squeezed, axis=[-1]))
            builder.emit_func_output(out)
        warnings = []
        module, converted, _ = blocked_layout.convert(builder.get(), X86, warnings)
        self.assertEqual(warnings, [])
        self.assertTrue(converted)
        axes = []
        relax.analysis.post_order_visit(
            module["main"].body,
            lambda expr: axes.extend(int(axis) for axis in expr.attrs.axis)
            if offload.op_name(expr) in ("relax.squeeze", "relax.expand_dims")
            else None,
        )
        self.assertEqual(axes, [3, 3])

    def test_a_convolution_between_blocked_ones_that_stays_nchw_keeps_the_module_nchw(self):
        module, converted, _ = blocked_layout.convert(Grouped, X86)
        self.assertFalse(converted)
        self.assertTrue(module.same_as(Grouped))

    def test_a_mobilenet_block_runs_blocked_end_to_end_with_its_depthwise_kernel_oihw(self):
        # 128 channels: enough multiply-adds per value that the input and output move.
        block = mobilenet_block(128)
        clamps = [expr for expr in all_calls(block["main"]) if offload.op_name(expr) == "relax.call_tir"]
        self.assertEqual(len(clamps), 4)
        module, converted, _ = blocked_layout.convert(block, X86)
        self.assertTrue(converted)
        module, layouts = offload.rewrite(module, None)
        calls, transforms = kernel_calls(module["main"])
        # Every convolution blocked, the depthwise one too, with its bias and ReLU6 (and
        # the projection's residual) folded: no call_tir, no clamp left.
        self.assertEqual(calls, {"relax_runtime.conv2d_bias": [5, 5], "relax_runtime.conv2d_bias_add": [5]})
        self.assertEqual(
            [op for op in map(offload.op_name, all_calls(module["main"])) if op in ("relax.call_tir", "relax.maximum", "relax.minimum")],
            [],
        )
        # The input to blocks and the output back: nothing between the convolutions.
        self.assertEqual(transforms, 2)
        def groups_and_epilogue(call):
            fields = call.args[1].fields
            at = len(fields) + offload.epilogue_index(offload.packed_name(call))
            return int(fields[at - 1].value), int(fields[at].value)

        depthwise = [call for call in kernel_call_list(module["main"]) if groups_and_epilogue(call)[0] > 1]
        self.assertEqual(len(depthwise), 1)
        # The OIHW weight itself (a parameter), groups = channels, ReLU6.
        weight = depthwise[0].args[1].fields[1]
        self.assertEqual([int(d) for d in offload.dims(weight)], [256, 1, 3, 3])
        self.assertIn(weight, list(module["main"].params))
        self.assertEqual(groups_and_epilogue(depthwise[0]), (256, offload.RELU6))
        # Only the pointwise kernels are packed in filter panels at load.
        self.assertEqual(sorted(entry["layout"] for entry in layouts["main"].values()), ["filter_panels"] * 2)

    def test_a_depthwise_convolution_over_channels_that_are_not_whole_blocks_stays_nchw(self):
        # 24 channels, 48 after expansion: the 1x1 layers are not whole blocks either,
        # and nothing is blocked; the clamps still fold into the NCHW kernels.
        module, converted, _ = blocked_layout.convert(mobilenet_block(12), X86)
        self.assertFalse(converted)
        module, _ = offload.rewrite(module, None)
        calls, transforms = kernel_calls(module["main"])
        self.assertEqual(calls, {"relax_runtime.conv2d_bias": [4, 4], "relax_runtime.conv2d_bias_add": [4]})
        self.assertEqual(transforms, 0)

    def test_only_the_blocked_index_map_of_float32_tensors_goes_to_the_layout_kernel(self):
        def transform(dtype, index_map):
            x = relax.Var("x", relax.TensorType([1, 32, 5, 7], dtype))
            builder = relax.BlockBuilder()
            with builder.function("main", [x]):
                with builder.dataflow():
                    blocked = builder.emit(relax.op.layout_transform(x, index_map=index_map))
                    back = builder.emit_output(
                        relax.op.layout_transform(blocked, index_map=lambda n, c, h, w, b: (n, c * 16 + b, h, w))
                    )
                builder.emit_func_output(back)
            return builder.get()["main"]

        def rewritten(function):
            module = tvm.IRModule({"main": offload.layout_kernel_calls(function)})
            return relax.transform.Normalize()(module)["main"]

        blocked = transform("float32", lambda n, c, h, w: (n, c // 16, h, w, c % 16))
        self.assertEqual(layout_kernel_ranks(rewritten(blocked)), ([(4, 5), (5, 4)], 0))
        # The same shapes, the channels dealt out otherwise: that map stays TVM's (the
        # way back is still the blocked map, which the kernel computes whatever its
        # input holds).
        shuffled = transform("float32", lambda n, c, h, w: (n, c % 2, h, w, c // 2))
        self.assertEqual(layout_kernel_ranks(rewritten(shuffled)), ([(5, 4)], 1))
        half = transform("float16", lambda n, c, h, w: (n, c // 16, h, w, c % 16))
        self.assertEqual(layout_kernel_ranks(rewritten(half)), ([], 2))

    def test_a_transposed_convolution_after_blocked_layers_takes_its_input_back_in_nchw(self):
        # A detector's head: blocked convolutions, then a ConvTranspose (ConvertLayout
        # fails on one asked for no layout whose input is blocked).
        @tvm.script.ir_module
        class Head:
            @R.function
            def main(
                x: R.Tensor((1, 64, 28, 28), "float32"),
                w1: R.Tensor((256, 64, 1, 1), "float32"),
                w2: R.Tensor((256, 256, 1, 1), "float32"),
                w3: R.Tensor((256, 1, 2, 2), "float32"),
            ):
                R.func_attr({"num_input": 1})
                with R.dataflow():
                    y = R.clip(R.nn.conv2d(x, w1), 0, 6)
                    z = R.nn.relu(R.nn.conv2d(y, w2))
                    out = R.nn.conv2d_transpose(z, w3, strides=[2, 2], kernel_layout="IOHW")
                    R.output(out)
                return out

        warnings = []
        module, converted, _ = blocked_layout.convert(Head, X86, warnings)
        self.assertTrue(converted)
        self.assertEqual(warnings, [])
        module, _ = offload.rewrite(module, None)
        calls, transforms = kernel_calls(module["main"])
        # The clip folds as a ReLU6; the transposed convolution takes NCHW.
        self.assertEqual(calls, {"relax_runtime.conv2d": [5, 5], "relax_runtime.conv2d_transpose": [4]})
        self.assertEqual(transforms, 2)

    def test_a_model_convert_layout_fails_on_stays_nchw_with_a_warning(self):
        # Asked for blocked layouts on every op (as before the transposed convolution
        # had its own), ConvertLayout fails on the head above: the module is kept.
        @tvm.script.ir_module
        class Head:
            @R.function
            def main(
                x: R.Tensor((1, 64, 28, 28), "float32"),
                w1: R.Tensor((256, 64, 1, 1), "float32"),
                w2: R.Tensor((256, 1, 2, 2), "float32"),
            ):
                R.func_attr({"num_input": 1})
                with R.dataflow():
                    y = R.nn.relu(R.nn.conv2d(x, w1))
                    out = R.nn.conv2d_transpose(y, w2, strides=[2, 2], kernel_layout="IOHW")
                    R.output(out)
                return out

        warnings = []
        with unittest.mock.patch.object(blocked_layout, "desired_layouts", lambda call: blocked_layout.BLOCKED_LAYOUTS):
            module, converted, _ = blocked_layout.convert(Head, X86, warnings)
        self.assertFalse(converted)
        self.assertTrue(module.same_as(Head))
        self.assertEqual(len(warnings), 1)
        self.assertIn("stay NCHW", warnings[0])
        self.assertIn("ConvertLayout failed", warnings[0])

    def test_a_convolution_over_dims_unknown_when_compiling_stays_nchw_with_a_warning(self):
        # TVM 0.27's ConvertLayout raises RuntimeError ("Back optional access"), not its
        # InternalError, on a convolution over a tensor of unknown dims (a recognizer's
        # concatenation once made one): that too keeps the module NCHW.
        @tvm.script.ir_module
        class Unknown:
            @R.function
            def main(
                x: R.Tensor((1, 32, 8, 8), "float32"),
                w1: R.Tensor((32, 32, 1, 1), "float32"),
                w2: R.Tensor((32, 32, 1, 3), "float32"),
            ):
                R.func_attr({"num_input": 1})
                with R.dataflow():
                    y = R.nn.conv2d(x, w1)
                    z = R.call_pure_packed("vm.builtin.copy", y, ty_args=(R.Tensor(ndim=4, dtype="float32"),))
                    out = R.nn.conv2d(z, w2, padding=[0, 1, 0, 1])
                    R.output(out)
                return out

        warnings = []
        module, converted, _ = blocked_layout.convert(Unknown, X86, warnings)
        self.assertFalse(converted)
        self.assertTrue(module.same_as(Unknown))
        self.assertEqual(len(warnings), 1)
        self.assertIn("Back optional access", warnings[0])

    def test_an_fpn_resize_between_blocked_layers_runs_blocked(self):
        # A coarse level upsampled and added to a fine one, over symbolic planes: the
        # resize is NCHW to ConvertLayout, and its sum's operands are aligned by a copy and
        # a match_cast (onnx_ops/broadcast.py); all of it stays blocked.
        import tempfile

        import onnx
        from onnx import TensorProto, helper, numpy_helper

        from relax_driver import onnx_source

        rng = np.random.default_rng(2)

        def initializer(name, *dims):
            return numpy_helper.from_array(rng.standard_normal(dims).astype("float32"), name)

        nodes = [
            helper.make_node("Conv", ["x", "w_coarse"], ["coarse"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
            helper.make_node("Conv", ["x", "w_fine"], ["fine"], kernel_shape=[1, 1]),
            helper.make_node("Resize", ["coarse", "", "scales"], ["up"], mode="nearest"),
            helper.make_node("Add", ["fine", "up"], ["sum"]),
            helper.make_node("Conv", ["sum", "w_out"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        ]
        initializers = [
            initializer("w_coarse", 128, 64, 3, 3),
            initializer("w_fine", 128, 64, 1, 1),
            initializer("w_out", 64, 128, 3, 3),
            numpy_helper.from_array(np.array([1, 1, 2, 2], dtype="float32"), "scales"),
        ]
        graph = helper.make_graph(
            nodes,
            "fpn",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, "height", "width"])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, "height", "width"])],
            initializers,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "fpn.onnx")
            onnx.save(model, path)
            ir_module, weights, _ = onnx_source.load({"source": path, "inputs": None, "weights_mode": "external"})
        names = [str(param.name) for param in ir_module["main"].params[1:]]
        module, converted, _ = blocked_layout.convert(ir_module, X86, None, (weights, names))
        self.assertTrue(converted)
        module, _ = offload.rewrite(module, None)
        calls, transforms = kernel_calls(module["main"])
        self.assertEqual(calls.get("relax_runtime.resize2d"), [5])
        # The input to blocks and the output back: none around the resize.
        self.assertEqual(transforms, 2)

    def test_a_stem_from_an_image_stores_its_output_blocked(self):
        # 3 channels (not a block: ConvertLayout leaves the stem NCHW) onto 32 filters,
        # its bias and ReLU6 folded, then blocked layers: the stem's kernel call writes
        # blocks itself, its kernel stays an OIHW parameter, and only the output goes back.
        module, converted, _ = blocked_layout.convert(stem_module(64), X86)
        self.assertTrue(converted)
        module, layouts = offload.rewrite(module, None)
        calls, transforms = kernel_calls(module["main"])
        self.assertEqual(calls, {"relax_runtime.conv2d_bias": [5], "relax_runtime.conv2d": [5]})
        self.assertEqual(layout_kernel_ranks(module["main"]), ([(5, 4)], 0))
        stem = kernel_call_list(module["main"])[0]
        x, w = stem.args[1].fields[:2]
        self.assertEqual(offload.rank(x), 4)
        self.assertEqual([int(d) for d in offload.dims(w)], [32, 3, 3, 3])
        self.assertIn(w, list(module["main"].params))
        fields = stem.args[1].fields
        self.assertEqual(int(fields[len(fields) + offload.epilogue_index(offload.packed_name(stem))].value), offload.RELU6)
        # Only the blocked layer's kernel is packed at load (its 32 channels over 32x32,
        # 64 tiles of 4x4, as Winograd F(4x4, 3x3)'s transform).
        self.assertEqual(list(layouts["main"].values()), [{"layout": "blocked_winograd4", "columns": 64}])
        # So does a convolution of 8 channels (a DBNet's after its NCHW layers).
        module, converted, _ = blocked_layout.convert(stem_module(64, channels=8), X86)
        self.assertTrue(converted)
        module, _ = offload.rewrite(module, None)
        self.assertEqual(layout_kernel_ranks(module["main"]), ([(5, 4)], 0))
        first = kernel_call_list(module["main"])[0]
        self.assertEqual((offload.rank(first.args[1].fields[0]), offload.rank(first)), (4, 5))
        # So does a stem onto rows of 8 (narrow rows: a keyword spotter's are 5 wide).
        module, converted, _ = blocked_layout.convert(stem_module(16), X86)
        self.assertTrue(converted)
        module, _ = offload.rewrite(module, None)
        self.assertEqual(layout_kernel_ranks(module["main"]), ([(5, 4)], 0))

    def test_a_stem_onto_narrow_rows_or_also_read_in_nchw_keeps_its_transform(self):
        # Output rows of 2 (the direct sums take 3 or more): the transform stays.
        module, converted, _ = blocked_layout.convert(stem_module(4), X86)
        self.assertTrue(converted)
        module, _ = offload.rewrite(module, None)
        self.assertEqual(layout_kernel_ranks(module["main"]), ([(4, 5), (5, 4)], 0))
        # The stem's NCHW output also a result of the function.
        module, converted, _ = blocked_layout.convert(stem_module(64, also_returned=True), X86)
        self.assertTrue(converted)
        module, _ = offload.rewrite(module, None)
        ranks, left = layout_kernel_ranks(module["main"])
        self.assertIn((4, 5), ranks)
        self.assertEqual(offload.rank(kernel_call_list(module["main"])[0]), 4)

    def test_other_targets_keep_nchw(self):
        aarch64 = {"kind": "llvm", "mtriple": "aarch64-unknown-linux-gnu", "mattr": ["+neon"]}
        module, converted, _ = blocked_layout.convert(Residual, aarch64)
        self.assertFalse(converted)
        self.assertTrue(module.same_as(Residual))
        # The host (no triple) is x86-64 here.
        self.assertTrue(blocked_layout.converts({"kind": "llvm"}))

    def test_a_constant_kernel_is_packed_in_filter_panels_when_compiling(self):
        weight = np.arange(144 * 128 * 3 * 3, dtype="float32").reshape(144, 128, 3, 3)
        packed = offload.filter_panels_of(weight)
        self.assertEqual(packed.shape, (3, 128, 3, 3, 64))
        # Filter f's (c, ky, kx) at [f // 64, c, ky, kx, f % 64]; past 80, zeros.
        self.assertEqual(packed[1, 5, 2, 1, 3], weight[67, 5, 2, 1])
        self.assertEqual(packed[0, 15, 0, 2, 63], weight[63, 15, 0, 2])
        self.assertEqual(packed[2, 127, 2, 2, 15], weight[143, 127, 2, 2])
        self.assertTrue((packed[2, :, :, :, 16:] == 0).all())
        builder = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType([1, 128, 8, 8], "float32"))
        with builder.function("main", [x]):
            with builder.dataflow():
                y = builder.emit_output(relax.op.nn.conv2d(x, relax.const(weight), padding=[1, 1, 1, 1]))
            builder.emit_func_output(y)
        module, converted, _ = blocked_layout.convert(builder.get(), X86)
        self.assertTrue(converted)
        module, layouts = offload.rewrite(module, None)
        kernels = kernel_call_list(module["main"])
        (kernel,) = kernels
        constant = kernel.args[1].fields[1]
        self.assertIsInstance(constant, tvm.ir.Constant)
        np.testing.assert_array_equal(constant.value.numpy(), packed)
        self.assertEqual(layouts, {})


if __name__ == "__main__":
    unittest.main()


@tvm.script.ir_module
class StackedStatistics:
    """A convolution whose output's spatial variance, clamped at 0 by a `max` over a
    `stack` with zeros (as jax2tf writes layer norms: magika's model), scales it."""

    @R.function
    def main(x: R.Tensor((1, 16, 14, 14), "float32"), w: R.Tensor((32, 16, 3, 3), "float32")):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            y = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            variance = R.variance(y, axis=[2, 3], keepdims=True)
            stacked = R.stack((R.zeros_like(variance), variance), axis=0)
            clamped = R.max(stacked, axis=[0])
            out = R.divide(y, R.add(clamped, R.const(1.0, "float32")))
            R.output(out)
        return out


class Stacks(unittest.TestCase):
    def test_a_stack_no_longer_keeps_the_module_nchw(self):
        warnings = []
        converted, blocked, _ = blocked_layout.convert(StackedStatistics, X86, warnings)
        self.assertEqual(warnings, [])
        self.assertNotIn("R.stack", str(blocked_layout.prepared(StackedStatistics)))

    def test_its_values_are_the_stacks(self):
        prepared = blocked_layout.prepared(StackedStatistics)
        x = np.random.default_rng(3).standard_normal((1, 16, 14, 14)).astype(np.float32)
        w = np.random.default_rng(4).standard_normal((32, 16, 3, 3)).astype(np.float32)
        results = []
        for module in (StackedStatistics, prepared):
            vm = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
            results.append(vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w)).numpy())
        np.testing.assert_allclose(results[1], results[0], rtol=1e-6)


@tvm.script.ir_module
class SplitChannels:
    """YOLOv8's C2f: a convolution's channels split in two halves (and in sections of
    equal size), each half convolved again, the results concatenated."""

    @R.function
    def main(
        x: R.Tensor(("batch", 16, "height", "width"), "float32"),
        w: R.Tensor((32, 16, 1, 1), "float32"),
        w2: R.Tensor((16, 16, 3, 3), "float32"),
    ):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            y = R.nn.conv2d(x, w)
            halves = R.split(y, indices_or_sections=[16], axis=1)
            z = R.nn.conv2d(halves[1], w2, padding=[1, 1, 1, 1])
            quarters = R.split(y, indices_or_sections=2, axis=1)
            out = R.concat((halves[0], z, quarters[0]), axis=1)
            R.output(out)
        return out


class Splits(unittest.TestCase):
    def test_a_channel_split_no_longer_keeps_the_module_nchw(self):
        warnings = []
        blocked_layout.convert(SplitChannels, X86, warnings)
        self.assertEqual(warnings, [])
        self.assertNotIn("R.split", str(blocked_layout.prepared(SplitChannels)))

    def test_its_slices_are_the_splits(self):
        prepared = blocked_layout.prepared(SplitChannels)
        rng = np.random.default_rng(5)
        arguments = [rng.standard_normal(shape).astype(np.float32) for shape in ((2, 16, 5, 7), (32, 16, 1, 1), (16, 16, 3, 3))]
        results = []
        for module in (SplitChannels, prepared):
            vm = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
            results.append(vm["main"](*[tvm.runtime.tensor(a) for a in arguments]).numpy())
        np.testing.assert_allclose(results[1], results[0], rtol=1e-6)
