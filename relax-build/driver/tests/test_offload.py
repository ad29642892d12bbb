"""Unit tests of the driver's choice of weight layouts for relax-runtime's kernels (these
need TVM: tests/driver_python.rs runs them with the toolchain's Python).

    python -m unittest discover -s relax-build/driver/tests
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tvm  # noqa: E402
from tvm import relax  # noqa: E402

from relax_driver import offload  # noqa: E402


def convolutions(weights, uses, groups=1):
    """A function of one input per size in `uses` and one weight per `weights` entry
    (`(filters, channels per group)`), whose bindings are 3x3, stride-1, padding-1
    convolution kernel calls in `groups` groups: `uses` is a list of (weight index, input
    size)."""
    sizes = sorted({size for _, size in uses})
    channels_of = {size: {weights[w][1] for w, s in uses if s == size} for size in sizes}
    inputs = {}
    for size in sizes:
        (channels,) = channels_of[size]
        inputs[size] = relax.Var(f"x{size}", relax.TensorType([1, channels * groups, size, size], "float32"))
    params = [relax.Var(f"w{index}", relax.TensorType([filters, channels, 3, 3], "float32")) for index, (filters, channels) in enumerate(weights)]
    bindings = []
    for index, (weight, size) in enumerate(uses):
        out_ty = relax.TensorType([1, weights[weight][0], size, size], "float32")
        # strides, padding (4), dilation, groups, epilogue
        ints = [offload.int_value(value) for value in (1, 1, 1, 1, 1, 1, 1, 1, groups, 0)]
        call = offload.packed("relax_runtime.conv2d", [inputs[size], params[weight], *ints], out_ty)
        bindings.append(relax.VarBinding(relax.Var(f"y{index}", out_ty), call))
    body = relax.SeqExpr([relax.DataflowBlock(bindings)], bindings[-1].var)
    function = relax.Function([*inputs.values(), *params], body, bindings[-1].var.ty)
    return function.with_attr("num_input", len(inputs))


class FilterPanels(unittest.TestCase):
    def test_convolutions_onto_small_planes_with_many_filters_take_them(self):
        function, chosen = offload.filter_panel_weights(convolutions([(512, 512), (128, 16)], [(0, 7), (1, 8)]))
        self.assertEqual(chosen, {2: ("filter_panels", 512), 3: ("filter_panels", 128)})
        self.assertEqual([int(d) for d in offload.dims(function.params[2])], [8, 512, 3, 3, 64])
        self.assertEqual([int(d) for d in offload.dims(function.params[3])], [2, 16, 3, 3, 64])

    def test_other_convolutions_keep_their_kernel(self):
        for weights, uses, groups in [
            ([(64, 512)], [(0, 7)], 1),  # one panel: one of two threads would idle
            ([(160, 512)], [(0, 7)], 1),  # a partial panel
            ([(192, 512)], [(0, 7)], 1),  # 3 panels
            ([(512, 512)], [(0, 9)], 1),  # 81 pixels: strips fill their lanes well enough
            ([(512, 512)], [(0, 3)], 1),  # 9 pixels: matrix-vector products
            ([(512, 512)], [(0, 7), (0, 14)], 1),  # also used onto a 14x14 plane
            ([(256, 8)], [(0, 7)], 2),  # two groups
        ]:
            function, chosen = offload.filter_panel_weights(convolutions(weights, uses, groups))
            self.assertEqual(chosen, {}, (weights, uses, groups))
            self.assertEqual(len(offload.dims(function.params[-1])), 4)


class Winograd(unittest.TestCase):
    def layout(self, filters, channels, size):
        _, chosen = offload.winograd_weights(convolutions([(filters, channels)], [(0, size)]))
        return chosen.get(1)

    def test_each_variant_where_it_measured_best(self):
        # ResNet-50's 3x3 layers, then ones below each threshold.
        self.assertEqual(self.layout(64, 64, 56), "winograd4")
        self.assertEqual(self.layout(128, 128, 28), "winograd")
        self.assertEqual(self.layout(256, 256, 14), "winograd")
        self.assertIsNone(self.layout(512, 512, 7))
        self.assertIsNone(self.layout(32, 32, 56))
        self.assertIsNone(self.layout(64, 64, 28))
        self.assertIsNone(self.layout(16, 3, 224))

    def test_the_weight_becomes_its_transform(self):
        function, chosen = offload.winograd_weights(convolutions([(128, 64)], [(0, 56)]))
        self.assertEqual(chosen, {1: "winograd4"})
        self.assertEqual([int(d) for d in offload.dims(function.params[1])], [36, 64, 128])

    def test_a_weight_whose_convolutions_want_different_variants_stays_stored(self):
        # The same 128 x 128 kernel over 56x56 (F(4x4)) and over 28x28 (F(2x2)).
        function, chosen = offload.winograd_weights(convolutions([(128, 128)], [(0, 56), (0, 28)]))
        self.assertEqual(chosen, {})
        self.assertEqual([int(d) for d in offload.dims(function.params[2])], [128, 128, 3, 3])





def onnx_conv_clip(low, high, weights):
    """Conv (with bias) then Clip(low, high) with 0-d Constant bounds, as ONNX: imported
    by TVM's importer with its weights as parameters (`weights="external"`) or not."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from tvm.relax.frontend.onnx import from_onnx

    from relax_driver import onnx_source

    generator = np.random.default_rng(0)
    initializers = [
        numpy_helper.from_array(generator.standard_normal((8, 4, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(generator.standard_normal(8).astype(np.float32), "b"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])]
    for name, value in (("low", low), ("high", high)):
        nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.float32))))
    nodes.append(helper.make_node("Clip", ["c", "low", "high"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "conv_clip",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if weights == "external":
        # As the ONNX preparation step leaves them: the Constant bounds as initializers.
        for node in [node for node in model.graph.node if node.op_type == "Constant"]:
            tensor = numpy_helper.to_array(node.attribute[0].t)
            model.graph.initializer.append(numpy_helper.from_array(tensor, node.output[0]))
            model.graph.node.remove(node)
        module = from_onnx(model, keep_params_in_input=True)
        module, params = relax.frontend.detach_params(module)
        module, values = onnx_source.scalars_bound(module, [value.numpy() for value in params["main"]])
        return module, values
    return from_onnx(model, keep_params_in_input=False), None


def kernel_calls(module):
    calls = []
    for block in module["main"].body.blocks:
        for binding in block.bindings:
            name = offload.packed_name(binding.value)
            if name is not None:
                calls.append((name, int(binding.value.args[1].fields[-1].value)))
    return calls


class Clamps(unittest.TestCase):
    def test_relu6_folds_into_the_convolution_as_the_importer_writes_clip(self):
        for weights in ("embedded", "external"):
            with self.subTest(weights=weights):
                module, values = onnx_conv_clip(0.0, 6.0, weights)
                rewritten, _ = offload.rewrite(module, None)
                self.assertEqual(kernel_calls(rewritten), [("relax_runtime.conv2d_bias", offload.RELU6)])
                bindings = rewritten["main"].body.blocks[0].bindings
                self.assertEqual(len(bindings), 2, rewritten["main"])  # the call and the output
                if values is not None:
                    # The bounds were bound as constants; the kernel and bias stay weights.
                    self.assertEqual([value.shape for value in values], [(8, 4, 3, 3), (8,)])

    def test_weights_that_do_not_match_the_parameters_are_an_import_error(self):
        from relax_driver import onnx_source
        from relax_driver.errors import DriverError

        x = relax.Var("x", relax.TensorType([2], "float32"))
        w = relax.Var("w", relax.TensorType([2], "float32"))
        builder = relax.BlockBuilder()
        with builder.function("main", [x, w], attrs={"num_input": 1}):
            with builder.dataflow():
                output = builder.emit_output(relax.op.add(x, w))
            builder.emit_func_output(output)
        with self.assertRaises(DriverError) as raised:
            onnx_source.scalars_bound(builder.get(), [])
        self.assertIn("TVM's ONNX importer returned 0 weights for 1 weight parameters", str(raised.exception))

    def test_other_bounds_fold_only_as_far_as_relu(self):
        module, _ = onnx_conv_clip(0.0, 5.0, "embedded")
        rewritten, _ = offload.rewrite(module, None)
        self.assertEqual(kernel_calls(rewritten), [("relax_runtime.conv2d_bias", offload.RELU)])
        module, _ = onnx_conv_clip(-1.0, 6.0, "embedded")
        rewritten, _ = offload.rewrite(module, None)
        self.assertEqual(kernel_calls(rewritten), [("relax_runtime.conv2d_bias", 0)])

    def test_relax_clip_and_relu6_ops_fold(self):
        for activation in (lambda y: relax.op.clip(y, 0.0, 6.0), relax.op.nn.relu6):
            rewritten, _ = offload.rewrite(conv_then(activation), None)
            self.assertEqual(kernel_calls(rewritten), [("relax_runtime.conv2d", offload.RELU6)])


def conv_then(activation):
    """A function returning `activation(conv2d(x, w))`, a 3x3 convolution of 4 channels
    into 8."""
    x = relax.Var("x", relax.TensorType([1, 4, 8, 8], "float32"))
    w = relax.Var("w", relax.TensorType([8, 4, 3, 3], "float32"))
    builder = relax.BlockBuilder()
    with builder.function("main", [x, w]):
        with builder.dataflow():
            conv = builder.emit(relax.op.nn.conv2d(x, w, padding=1))
            output = builder.emit_output(activation(conv))
        builder.emit_func_output(output)
    return builder.get()


class Silu(unittest.TestCase):
    def folded(self, activation):
        rewritten, _ = offload.rewrite(conv_then(activation), None)
        return kernel_calls(rewritten), len(rewritten["main"].body.blocks[0].bindings)

    def test_sigmoid_then_multiply_folds_into_the_convolution(self):
        for name, activation in {
            "x * sigmoid(x)": lambda y: relax.op.multiply(y, relax.op.sigmoid(y)),
            "sigmoid(x) * x": lambda y: relax.op.multiply(relax.op.sigmoid(y), y),
            "silu op": relax.op.nn.silu,
        }.items():
            with self.subTest(name):
                # The kernel call alone is left, bound to the output.
                self.assertEqual(self.folded(activation), ([("relax_runtime.conv2d", offload.SILU)], 1))

    def test_a_sigmoid_or_a_product_of_another_value_stays(self):
        y_times_other_sigmoid = lambda y: relax.op.multiply(y, relax.op.sigmoid(relax.op.negative(y)))  # noqa: E731
        y_squared = lambda y: relax.op.multiply(y, y)  # noqa: E731
        # The sigmoid is also an output: the convolution's value is still needed as is.
        both = lambda y: relax.Tuple([relax.op.multiply(y, relax.op.sigmoid(y)), y])  # noqa: E731
        for activation in (y_times_other_sigmoid, y_squared, both):
            calls, _ = self.folded(activation)
            self.assertEqual(calls, [("relax_runtime.conv2d", 0)])


def hard_swish(y, clip=lambda y: relax.op.clip(y, 0, 6), three=3.0, six=6.0):
    """`y * (clip(y + 3, 0, 6) / 6)`, as TVM imports ONNX's HardSwish and PyTorch's."""
    gate = relax.op.divide(clip(relax.op.add(y, relax.const(three, "float32"))), relax.const(six, "float32"))
    return relax.op.multiply(y, gate)


def extrema(y):
    """The clip of `hard_swish` as the blocked layout's rewrite writes it."""
    return relax.op.minimum(relax.op.maximum(y, relax.const(0.0, "float32")), relax.const(6.0, "float32"))


class HardSwish(unittest.TestCase):
    def folded(self, activation):
        rewritten, _ = offload.rewrite(conv_then(activation), None)
        return kernel_calls(rewritten), len(rewritten["main"].body.blocks[0].bindings)

    def test_the_imported_hard_swish_folds_into_the_convolution(self):
        for name, activation in {
            "clip": hard_swish,
            "maximum then minimum": lambda y: hard_swish(y, clip=extrema),
            "gate first": lambda y: relax.op.multiply(hard_swish(y).args[1], y),
        }.items():
            with self.subTest(name):
                # The kernel call alone is left, bound to the output.
                self.assertEqual(self.folded(activation), ([("relax_runtime.conv2d", offload.HARD_SWISH)], 1))

    def test_other_gates_stay(self):
        for name, activation in {
            "shifted by 2": lambda y: hard_swish(y, three=2.0),
            "divided by 5": lambda y: hard_swish(y, six=5.0),
            "clipped to 5": lambda y: hard_swish(y, clip=lambda y: relax.op.clip(y, 0, 5)),
            "the sum also an output": lambda y: relax.Tuple([hard_swish(y), relax.op.add(y, y)]),
        }.items():
            with self.subTest(name):
                calls, _ = self.folded(activation)
                self.assertEqual(calls, [("relax_runtime.conv2d", 0)])


def hard_sigmoid(y, slope=0.2, offset=0.5, low=0.0, high=1.0, extrema=False):
    """`clip(slope * y + offset, 0, 1)`, as TVM imports ONNX's HardSigmoid (with
    `extrema`, the clip as the blocked layout's rewrite writes it)."""
    scaled = relax.op.multiply(relax.const(slope, "float32"), y)
    shifted = relax.op.add(scaled, relax.const(offset, "float32"))
    if extrema:
        lower = relax.op.maximum(shifted, relax.const(low, "float32"))
        return relax.op.minimum(lower, relax.const(high, "float32"))
    return relax.op.clip(shifted, low, high)


class HardSigmoid(unittest.TestCase):
    def folded(self, activation):
        rewritten, _ = offload.rewrite(conv_then(activation), None)
        return kernel_calls(rewritten), len(rewritten["main"].body.blocks[0].bindings)

    def test_the_imported_hard_sigmoid_folds_into_the_convolution(self):
        for name, (activation, code) in {
            "ONNX's default slope": (hard_sigmoid, offload.HARD_SIGMOID),
            "PyTorch's 1/6": (lambda y: hard_sigmoid(y, slope=1.0 / 6.0), offload.HARD_SIGMOID_SIXTH),
            "PaddlePaddle's 0.1666667": (lambda y: hard_sigmoid(y, slope=0.1666667), offload.HARD_SIGMOID_SIXTH),
            "maximum then minimum": (lambda y: hard_sigmoid(y, extrema=True), offload.HARD_SIGMOID),
            "slope second": (
                lambda y: relax.op.clip(relax.op.add(relax.op.multiply(y, relax.const(0.2, "float32")), relax.const(0.5, "float32")), 0.0, 1.0),
                offload.HARD_SIGMOID,
            ),
        }.items():
            with self.subTest(name):
                # The kernel call alone is left, bound to the output.
                self.assertEqual(self.folded(activation), ([("relax_runtime.conv2d", code)], 1))

    def test_other_gates_stay(self):
        for name, activation in {
            "slope 0.5": lambda y: hard_sigmoid(y, slope=0.5),
            "offset 0.6": lambda y: hard_sigmoid(y, offset=0.6),
            "clipped to 6": lambda y: hard_sigmoid(y, high=6.0),
            "maximum then minimum to 6": lambda y: hard_sigmoid(y, high=6.0, extrema=True),
            "the product also an output": lambda y: relax.Tuple([hard_sigmoid(y), relax.op.multiply(y, y)]),
        }.items():
            with self.subTest(name):
                calls, _ = self.folded(activation)
                self.assertEqual(calls, [("relax_runtime.conv2d", 0)])


def resized(layout="NCHW", dtype="float32", **attributes):
    """A function returning `image.resize2d` of an `[N, 32, H, W]` tensor (symbolic N, H
    and W; in NHWC and blocked in NCHW16c) to twice its height and width."""
    from tvm import tirx

    n, h, w = (tirx.Var(name, "int64") for name in "nhw")
    shape = {"NCHW": [n, 32, h, w], "NHWC": [n, h, w, 32], "NCHW16c": [n, 2, h, w, 16]}[layout]
    x = relax.Var("x", relax.TensorType(shape, dtype))
    builder = relax.BlockBuilder()
    with builder.function("main", [x]):
        with builder.dataflow():
            output = builder.emit_output(relax.op.image.resize2d(x, (h * 2, w * 2), layout=layout, **attributes))
        builder.emit_func_output(output)
    return builder.get()


class Resize(unittest.TestCase):
    def codes(self, module):
        """(method, coordinates, rounding) of the module's resize kernel call, or None."""
        rewritten, _ = offload.rewrite(module, None)
        for binding in rewritten["main"].body.blocks[0].bindings:
            if offload.packed_name(binding.value) == "relax_runtime.resize2d":
                return tuple(int(code.value) for code in binding.value.args[1].fields[1:])
        return None

    def test_nearest_and_bilinear_resizes_run_on_the_kernel(self):
        for attributes, codes in [
            (dict(method="nearest_neighbor", coordinate_transformation_mode="asymmetric", rounding_method="floor"), (0, 2, 1)),
            # TVM's default rounding: floor, but round with aligned corners.
            (dict(method="nearest_neighbor", coordinate_transformation_mode="half_pixel", rounding_method=""), (0, 0, 1)),
            (dict(method="nearest_neighbor", coordinate_transformation_mode="align_corners", rounding_method=""), (0, 1, 0)),
            (dict(method="nearest_neighbor", coordinate_transformation_mode="tf_half_pixel_for_nn", rounding_method="round_prefer_ceil"), (0, 4, 4)),
            (dict(method="linear", coordinate_transformation_mode="pytorch_half_pixel"), (1, 3, 0)),
        ]:
            for layout in ("NCHW", "NCHW16c"):
                with self.subTest(attributes=attributes, layout=layout):
                    self.assertEqual(self.codes(resized(layout, **attributes)), codes)

    def test_other_resizes_stay_with_tvm(self):
        for name, module in {
            "cubic": resized(method="cubic"),
            "crop and resize": resized(method="linear", coordinate_transformation_mode="tf_crop_and_resize"),
            "float16": resized(dtype="float16", method="linear"),
            "NHWC": resized(layout="NHWC", method="linear"),
        }.items():
            with self.subTest(name):
                self.assertIsNone(self.codes(module))


class UnusedBindings(unittest.TestCase):
    def test_a_match_cast_giving_dims_their_values_stays(self):
        # As the importer writes a Squeeze of axes known at run time: the cast's variable
        # is unused, its dims are what the reshape takes.
        from tvm import tirx

        x = relax.Var("x", relax.TensorType([1, 3, 4], "float32"))
        dims = relax.Var("dims", relax.TensorType([2], "int64"))
        rows, columns = tirx.Var("rows", "int64"), tirx.Var("columns", "int64")
        shape = relax.DataflowVar("shape", relax.ShapeType(ndim=2))
        cast = relax.DataflowVar("cast", relax.ShapeType([rows, columns]))
        unused = relax.DataflowVar("unused", relax.TensorType([2], "int64"))
        out = relax.Var("out", relax.TensorType([rows, columns], "float32"))
        bindings = [
            relax.VarBinding(unused, relax.op.add(dims, dims)),
            relax.VarBinding(shape, relax.op.tensor_to_shape(dims)),
            relax.MatchCast(cast, shape, relax.ShapeType([rows, columns])),
            relax.VarBinding(out, relax.op.reshape(x, relax.ShapeExpr([rows, columns]))),
        ]
        function = relax.Function([x, dims], relax.SeqExpr([relax.DataflowBlock(bindings)], out), out.ty)
        kept = offload.without_unused_bindings(function)
        names = [binding.var.name for binding in kept.body.blocks[0].bindings]
        self.assertEqual(names, ["shape", "cast", "out"])


if __name__ == "__main__":
    unittest.main()


def gru_model(hidden=8, inputs=5):
    """A GRU layer over x [T, 1, inputs] (T symbolic), its weights as initializers."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = {
        "w": rng.standard_normal((1, 3 * hidden, inputs)).astype(np.float32),
        "r": rng.standard_normal((1, 3 * hidden, hidden)).astype(np.float32),
        "b": rng.standard_normal((1, 6 * hidden)).astype(np.float32),
    }
    node = helper.make_node("GRU", ["x", "w", "r", "b"], ["y"], hidden_size=hidden)
    graph = helper.make_graph(
        [node],
        "gru",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", 1, inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["T", 1, 1, hidden])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


class RecurrentWeights(unittest.TestCase):
    def test_a_recurrence_weight_parameter_is_taken_transposed_at_load(self):
        from tvm.relax.frontend.onnx import from_onnx

        from relax_driver import onnx_ops

        with onnx_ops.registered():
            module = from_onnx(gru_model(), keep_params_in_input=True)
        module, layouts = offload.rewrite(module, None)
        function = module["main"]
        taken = layouts["main"]
        (index,) = [index for index, layout in taken.items() if layout == {"layout": "transposed"}]
        # Stored [1, 3 * 8, 8]; taken [1, 8, 3 * 8], straight into the kernel's call.
        self.assertEqual([int(dim) for dim in function.params[index].ty.shape.values], [1, 8, 24])
        calls = [
            binding.value
            for block in function.body.blocks
            for binding in block.bindings
            if offload.packed_name(binding.value) == "relax_runtime.recurrent"
        ]
        self.assertEqual(len(calls), 1)
        self.assertTrue(calls[0].args[1].fields[1].same_as(function.params[index]))
        ops = {offload.op_name(binding.value) for block in function.body.blocks for binding in block.bindings}
        self.assertNotIn("relax.permute_dims", ops)


class InsideIfBranches(unittest.TestCase):
    """TVM's importer, as the driver lends it (onnx_ops/control_flow.py), converts each
    If branch into a scope of its own: the offload rewrites the bindings there too."""

    def test_a_matmul_in_a_branch_becomes_a_kernel_call_and_its_bias_folds(self):
        normalize = relax.BlockBuilder().normalize
        x = relax.Var("x", relax.TensorType([2, 8], "float32"))
        w = relax.Var("w", relax.TensorType([8, 4], "float32"))
        b = relax.Var("b", relax.TensorType([4], "float32"))
        flag = relax.Var("flag", relax.TensorType([], "bool"))
        product = relax.DataflowVar("product", relax.TensorType([2, 4], "float32"))
        biased = relax.Var("biased", relax.TensorType([2, 4], "float32"))
        branch = relax.SeqExpr(
            [relax.DataflowBlock([
                relax.VarBinding(product, normalize(relax.op.matmul(x, w))),
                relax.VarBinding(biased, normalize(relax.op.add(product, b))),
            ])],
            biased,
        )
        chosen = relax.Var("chosen", relax.TensorType([2, 4], "float32"))
        choice = relax.If(flag, branch, relax.SeqExpr([], x))
        body = relax.SeqExpr([relax.BindingBlock([relax.VarBinding(chosen, choice)])], chosen)
        function = relax.Function([x, w, b, flag], body, relax.TensorType(ndim=2, dtype="float32"))
        rewritten = offload.rewrite_function(function, None)
        text = str(rewritten)
        self.assertIn("relax_runtime.dense_bias", text)
        self.assertNotIn("R.matmul", text)
        self.assertNotIn("R.add", text)


class TrailingReductions(unittest.TestCase):
    def rewritten(self, op, axis):
        normalize = relax.BlockBuilder().normalize
        x = relax.Var("x", relax.TensorType([2, 5, 7], "float32"))
        reduced = normalize(op(x, axis=axis))
        y = relax.Var("y", reduced.ty)
        body = relax.SeqExpr([relax.DataflowBlock([relax.VarBinding(y, reduced)])], y)
        return str(offload.rewrite_function(relax.Function([x], body, reduced.ty), None))

    def test_max_and_min_over_trailing_axes_go_to_the_kernel_with_their_codes(self):
        self.assertIn('"relax_runtime.reduce_trailing", (x, 1, 2)', self.rewritten(relax.op.max, [2]))
        self.assertIn('"relax_runtime.reduce_trailing", (x, 2, 3)', self.rewritten(relax.op.min, [1, 2]))
        self.assertIn('"relax_runtime.reduce_trailing", (x, 1, 1)', self.rewritten(relax.op.mean, [-1]))

    def test_a_max_over_a_leading_axis_stays(self):
        self.assertIn("R.max", self.rewritten(relax.op.max, [1]))


def linear_model(also_used=False):
    """x [4, 7] · wᵀ + b, `w` [5, 7] as nn.Linear stores it (a weight parameter); with
    `also_used`, the weight is also added to an input of its shape."""
    import tvm

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([4, 7], "float32"))
    other = relax.Var("other", relax.TensorType([5, 7], "float32"))
    w = relax.Var("w", relax.TensorType([5, 7], "float32"))
    b = relax.Var("b", relax.TensorType([5], "float32"))
    inputs = [x, other] if also_used else [x]
    with bb.function("main", [*inputs, w, b], attrs={"num_input": len(inputs)}):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, relax.op.permute_dims(w)))
            z = bb.emit(relax.op.add(y, b))
            if also_used:
                z = bb.emit(relax.op.sum(relax.op.add(w, other)) + relax.op.sum(z))
            out = bb.emit_output(z)
        bb.emit_func_output(out)
    return bb.get()


class Bf16Precision(unittest.TestCase):
    def dense_calls(self, module):
        return [
            offload.packed_name(binding.value)
            for block in module["main"].body.blocks
            for binding in block.bindings
            if (offload.packed_name(binding.value) or "").startswith("relax_runtime.dense")
        ]

    def test_a_dense_weight_is_taken_in_bf16_panels_and_its_call_goes_to_the_bf16_kernel(self):
        module, layouts = offload.rewrite(linear_model(), None, "bf16")
        # Stored [5, 7]: one panel of ceil(7 / 2) = 4 rows of pairs, K given beside N.
        self.assertEqual(layouts["main"], {1: {"layout": "bf16_transposed_panels", "columns": 5, "depth": 7}})
        self.assertEqual([int(d) for d in module["main"].params[1].ty.shape.values], [1, 4, 64])
        self.assertEqual(self.dense_calls(module), ["relax_runtime.dense_bf16_bias"])

    def test_float32_is_the_default_and_unchanged(self):
        module, layouts = offload.rewrite(linear_model(), None)
        self.assertEqual(layouts["main"], {1: {"layout": "transposed_panels", "columns": 5}})
        self.assertEqual([int(d) for d in module["main"].params[1].ty.shape.values], [1, 7, 64])
        self.assertEqual(self.dense_calls(module), ["relax_runtime.dense_bias"])

    def test_a_weight_also_used_otherwise_stays_stored_and_float32(self):
        module, layouts = offload.rewrite(linear_model(also_used=True), None, "bf16")
        self.assertNotIn("main", layouts)
        self.assertEqual(self.dense_calls(module), ["relax_runtime.dense_bias"])
        (warning,) = offload.precision_warnings(module)
        self.assertIn('precision = "bf16": 0 dense layers and 0 convolutions run in bf16', warning)
        self.assertIn("1 dense layers whose weight is computed or also used otherwise", warning)

    def test_a_build_where_every_product_went_to_bf16_hears_nothing(self):
        module, _ = offload.rewrite(linear_model(), None, "bf16")
        self.assertEqual(offload.precision_warnings(module), [])

    def test_a_constant_weight_is_packed_now_as_relax_runtime_packs_a_parameter(self):
        import numpy as np

        rng = np.random.default_rng(0)
        weight = rng.standard_normal((5, 7)).astype(np.float32)
        weight[0, 0] = 1.0 + 1.0 / 256.0  # a tie: to bf16's even neighbour, 1
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType([4, 7], "float32"))
        with bb.function("main", [x], attrs={"num_input": 1}):
            with bb.dataflow():
                y = bb.emit(relax.op.matmul(x, relax.op.permute_dims(relax.const(weight))))
                out = bb.emit_output(y)
            bb.emit_func_output(out)
        module, layouts = offload.rewrite(bb.get(), None, "bf16")
        self.assertNotIn("main", layouts)
        (call,) = [
            binding.value
            for block in module["main"].body.blocks
            for binding in block.bindings
            if (offload.packed_name(binding.value) or "").startswith("relax_runtime.dense")
        ]
        self.assertEqual(offload.packed_name(call), "relax_runtime.dense_bf16")
        fields = call.args[1].fields
        self.assertEqual(int(fields[2].value), 0, "transpose_w is 0: the panels are as read")
        words = fields[1].value.numpy().view(np.uint32)
        self.assertEqual(words.shape, (1, 4, 64))
        # Word (p, n): rows 2p and 2p + 1 of column n of the [K, N] matrix (wᵀ), low first.
        def bf16(value):
            return float(np.array([np.uint32(value) << 16]).view(np.float32)[0])

        for p in range(4):
            for n in range(5):
                low, high = int(words[0, p, n]) & 0xFFFF, int(words[0, p, n]) >> 16
                self.assertAlmostEqual(bf16(low), weight[n, 2 * p], delta=abs(weight[n, 2 * p]) / 128)
                expected_high = weight[n, 2 * p + 1] if 2 * p + 1 < 7 else 0.0
                self.assertAlmostEqual(bf16(high), expected_high, delta=abs(expected_high) / 128)
        self.assertEqual(int(words[0, 0, 0]) & 0xFFFF, 0x3F80, "1 + 2^-8 rounds to even: 1.0")
        self.assertTrue((words[0, :, 5:] == 0).all())


def blocked_convolution_model(filters, channels, kernel, size, weight=None):
    """One blocked convolution kernel call with a bias (`[1, C/16, size, size, 16]` in and
    out, stride 1, same padding), its kernel a parameter or the constant `weight`."""
    x = relax.Var("x", relax.TensorType([1, channels // 16, size, size, 16], "float32"))
    b = relax.Var("b", relax.TensorType([filters], "float32"))
    if weight is None:
        w = relax.Var("w", relax.TensorType([filters, channels, kernel, kernel], "float32"))
        params = [x, w, b]
    else:
        w = relax.const(weight)
        params = [x, b]
    pad = kernel // 2
    out_ty = relax.TensorType([1, filters // 16, size, size, 16], "float32")
    ints = [offload.int_value(value) for value in (1, 1, pad, pad, pad, pad, 1, 1, 1, 1)]
    call = offload.packed("relax_runtime.conv2d_bias", [x, w, b, *ints], out_ty)
    binding = relax.VarBinding(relax.Var("y", out_ty), call)
    body = relax.SeqExpr([relax.DataflowBlock([binding])], binding.var)
    function = relax.Function(params, body, out_ty).with_attr("num_input", 1)
    return tvm.IRModule({"main": function})


class Bf16Convolutions(unittest.TestCase):
    def conv_calls(self, module):
        return [
            offload.packed_name(binding.value)
            for block in module["main"].body.blocks
            for binding in block.bindings
            if (offload.packed_name(binding.value) or "").startswith("relax_runtime.conv2d")
        ]

    def test_a_blocked_kernel_is_taken_in_bf16_filter_panels_and_its_call_goes_to_the_bf16_kernel(self):
        module, layouts = offload.rewrite(blocked_convolution_model(80, 32, 1, 7), None, "bf16")
        self.assertEqual(layouts["main"], {1: {"layout": "bf16_filter_panels", "columns": 80, "depth": 32}})
        self.assertEqual([int(d) for d in module["main"].params[1].ty.shape.values], [2, 16, 1, 1, 64])
        self.assertEqual(self.conv_calls(module), ["relax_runtime.conv2d_bf16_bias"])
        self.assertEqual(offload.precision_warnings(module), [])

    def test_float32_keeps_filter_panels(self):
        module, layouts = offload.rewrite(blocked_convolution_model(80, 32, 1, 7), None)
        self.assertEqual(layouts["main"], {1: {"layout": "filter_panels", "columns": 80}})
        self.assertEqual(self.conv_calls(module), ["relax_runtime.conv2d_bias"])

    def test_a_3x3_layer_that_winograd_computes_faster_stays_float32_and_is_said(self):
        module, layouts = offload.rewrite(blocked_convolution_model(64, 64, 3, 56), None, "bf16")
        self.assertEqual(layouts["main"][1]["layout"], "blocked_winograd4")
        self.assertEqual(self.conv_calls(module), ["relax_runtime.conv2d_bias"])
        (warning,) = offload.precision_warnings(module)
        self.assertIn("0 dense layers and 0 convolutions run in bf16", warning)
        self.assertIn("1 convolutions (depthwise, transposed, from an NCHW input, or 3x3 ones Winograd", warning)

    def test_with_amx_tiles_no_3x3_layer_stays_winograd(self):
        module, layouts = offload.rewrite(blocked_convolution_model(64, 64, 3, 56), None, "bf16", True)
        self.assertEqual(layouts["main"][1]["layout"], "bf16_filter_panels")
        self.assertEqual(self.conv_calls(module), ["relax_runtime.conv2d_bf16_bias"])
        self.assertEqual(offload.precision_warnings(module), [])

    def test_a_3x3_layer_of_few_filters_or_over_a_small_plane_runs_bf16_instead_of_winograd(self):
        for filters, channels, size in [(32, 96, 120), (256, 256, 14), (512, 512, 7)]:
            module, layouts = offload.rewrite(blocked_convolution_model(filters, channels, 3, size), None, "bf16")
            self.assertEqual(layouts["main"][1]["layout"], "bf16_filter_panels", (filters, channels, size))
            self.assertEqual(self.conv_calls(module), ["relax_runtime.conv2d_bf16_bias"])
            # float32 takes Winograd for the first two.
            _, layouts = offload.rewrite(blocked_convolution_model(filters, channels, 3, size), None)
            self.assertEqual(layouts["main"][1]["layout"] != "filter_panels", size != 7, (filters, channels, size))

    def test_the_report_counts_the_calls_in_an_if_s_branches(self):
        # The float32 Winograd call of a bf16 build, moved into an If's branch.
        module, _ = offload.rewrite(blocked_convolution_model(64, 64, 3, 56), None, "bf16")
        main = module["main"]
        (binding,) = [binding for block in main.body.blocks for binding in block.bindings]
        condition = relax.Var("c", relax.TensorType([], "bool"))
        taken = relax.SeqExpr([relax.BindingBlock([binding])], binding.var)
        other = relax.SeqExpr([], relax.op.zeros(binding.var.ty.shape, "float32"))
        y = relax.Var("y", binding.var.ty)
        body = relax.SeqExpr([relax.BindingBlock([relax.VarBinding(y, relax.If(condition, taken, other))])], y)
        function = relax.Function([main.params[0], condition, *main.params[1:]], body, binding.var.ty)
        (warning,) = offload.precision_warnings(tvm.IRModule({"main": function}))
        self.assertIn("0 dense layers and 0 convolutions run in bf16", warning)
        self.assertIn("1 convolutions (depthwise", warning)

    def test_a_constant_kernel_is_packed_now_as_relax_runtime_packs_a_parameter(self):
        import numpy as np

        weight = np.random.default_rng(1).standard_normal((80, 32, 3, 3)).astype(np.float32)
        weight[3, 4, 1, 2] = 1.0 + 1.0 / 256.0  # a tie: to bf16's even neighbour, 1
        module, layouts = offload.rewrite(blocked_convolution_model(80, 32, 3, 7, weight), None, "bf16")
        self.assertNotIn("main", layouts)
        self.assertEqual(self.conv_calls(module), ["relax_runtime.conv2d_bf16_bias"])
        (call,) = [binding.value for block in module["main"].body.blocks for binding in block.bindings]
        words = call.args[1].fields[1].value.numpy().view(np.uint32)
        self.assertEqual(words.shape, (2, 16, 3, 3, 64))
        expected = offload.bf16_values(weight).astype(np.uint32)
        # Word (panel, pair, ky, kx, lane): filter 64 panel + lane, channels 2 pair (low)
        # and 2 pair + 1 (high).
        for panel, pair, ky, kx, lane in [(0, 0, 0, 0, 0), (0, 2, 1, 2, 3), (1, 15, 2, 1, 15), (0, 7, 0, 1, 63)]:
            filter_index = panel * 64 + lane
            word = int(words[panel, pair, ky, kx, lane])
            low, high = expected[filter_index, 2 * pair, ky, kx], expected[filter_index, 2 * pair + 1, ky, kx]
            self.assertEqual(word, int(low) | (int(high) << 16), (panel, pair, ky, kx, lane))
        self.assertEqual(int(words[0, 2, 1, 2, 3]) & 0xFFFF, 0x3F80, "1 + 2^-8 rounds to even: 1.0")
        self.assertTrue((words[1, :, :, :, 16:] == 0).all(), "filters past 80 are zero")
