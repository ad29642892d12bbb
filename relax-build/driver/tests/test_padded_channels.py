"""Unit tests of channels padded to whole blocks (padded_channels.py; these need TVM:
tests/driver_python.rs runs them with the toolchain's Python).

    python -m unittest discover -s relax-build/driver/tests
"""

import os
import sys
import tempfile
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tvm  # noqa: E402
from tvm import relax  # noqa: E402

from relax_driver import blocked_layout, offload, onnx_source, padded_channels  # noqa: E402

X86 = {"kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu"}

# name -> shape: a MobileNetV3-like stage of 24 channels (expansion to 200, depthwise 3x3,
# a squeeze-excitation of 8 with a hard sigmoid, projection back to 24 and the residual),
# a max pool, a 3x3 convolution to 40 channels, a sigmoid (0.5 in padded channels), then
# both a 1x1 convolution and a concatenation (which reads its inputs sliced back) with its
# own 1x1 convolution, added.
WEIGHTS = {
    "w_in": [24, 32, 1, 1],
    "b_in": [24],
    "w_expand": [200, 24, 1, 1],
    "b_expand": [200],
    "w_depthwise": [200, 1, 3, 3],
    "b_depthwise": [200],
    "w_squeeze": [8, 200, 1, 1],
    "b_squeeze": [8],
    "w_excite": [200, 8, 1, 1],
    "b_excite": [200],
    "w_project": [24, 200, 1, 1],
    "b_project": [24],
    "w_wide": [40, 24, 3, 3],
    "b_wide": [40],
    "w_mix": [32, 40, 1, 1],
    "w_out": [32, 80, 1, 1],
}


def stage():
    """The model (ONNX), its weights initializers."""
    rng = np.random.default_rng(3)
    values = {name: rng.standard_normal(shape).astype(np.float32) * 0.3 for name, shape in WEIGHTS.items()}
    nodes = [
        helper.make_node("Conv", ["x", "w_in", "b_in"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "w_expand", "b_expand"], ["e"]),
        helper.make_node("HardSwish", ["e"], ["e_hs"]),
        helper.make_node("Conv", ["e_hs", "w_depthwise", "b_depthwise"], ["d"], group=200, pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["d"], ["m"]),
        helper.make_node("Conv", ["m", "w_squeeze", "b_squeeze"], ["s"]),
        helper.make_node("Relu", ["s"], ["s_relu"]),
        helper.make_node("Conv", ["s_relu", "w_excite", "b_excite"], ["g"]),
        helper.make_node("HardSigmoid", ["g"], ["gate"], alpha=1.0 / 6, beta=0.5),
        helper.make_node("Mul", ["d", "gate"], ["excited"]),
        helper.make_node("Conv", ["excited", "w_project", "b_project"], ["p"]),
        helper.make_node("Add", ["p", "c"], ["residual"]),
        helper.make_node("MaxPool", ["residual"], ["pooled"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pooled", "w_wide", "b_wide"], ["wide"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["wide"], ["wide_sigmoid"]),
        helper.make_node("Concat", ["wide_sigmoid", "wide_sigmoid"], ["both"], axis=1),
        helper.make_node("Conv", ["wide_sigmoid", "w_mix"], ["mixed"]),
        helper.make_node("Conv", ["both", "w_out"], ["out"]),
        helper.make_node("Add", ["out", "mixed"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "stage",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 20, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 10, 10])],
        [numpy_helper.from_array(value, name) for name, value in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def loaded(weights_mode):
    """(IRModule, weight values or None) as relax-build's ONNX source loads the stage with
    its weights `embed`ded (as constants) or `external` (parameters)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "stage.onnx")
        onnx.save(stage(), path)
        ir_module, weights, _ = onnx_source.load({"source": path, "inputs": None, "weights_mode": weights_mode})
    return ir_module, weights


def run(ir_module, x, weights):
    """`main(x, *weights)` as TVM compiles the module for this CPU."""
    executable = tvm.compile(ir_module, target="llvm")
    machine = relax.VirtualMachine(executable, tvm.cpu())
    arguments = [tvm.runtime.tensor(x)] + [tvm.runtime.tensor(value) for value in weights or []]
    return machine["main"](*arguments).numpy()


def ops(function):
    """The names of the ops and kernels the function calls, in order."""
    names = []

    def visit(expr):
        name = offload.packed_name(expr) or offload.op_name(expr)
        if name is not None:
            names.append((name, offload.rank(expr)))

    relax.analysis.post_order_visit(function.body, visit)
    return names


class PaddedChannels(unittest.TestCase):
    def test_padded_channels_compute_the_same_values(self):
        x = np.random.default_rng(5).standard_normal([1, 32, 20, 20]).astype(np.float32)
        for weights_mode in ("embed", "external"):
            ir_module, weights = loaded(weights_mode)
            self.assertEqual(weights is not None, weights_mode == "external")
            prepared = blocked_layout.prepared(ir_module)
            padded, padded_weights, _ = padded_channels.padded(prepared, weights, None)
            self.assertNotEqual(ops(padded["main"]), ops(prepared["main"]), weights_mode)
            reference = run(ir_module, x, weights)
            np.testing.assert_allclose(run(padded, x, padded_weights), reference, rtol=1e-5, atol=1e-5)

    def test_a_stage_of_24_and_40_channels_stays_blocked_with_its_weights_padded(self):
        ir_module, weights = loaded("external")
        names = [str(param.name) for param in ir_module["main"].params[1:]]
        module, converted, (new_weights, new_names) = blocked_layout.convert(ir_module, X86, None, (weights, names))
        self.assertTrue(converted)
        module, _ = offload.rewrite(module, None)
        function = module["main"]
        calls = ops(function)
        # Every convolution on blocked tensors (the squeeze-excitation's too); the input
        # goes to blocks, the concatenation's input and the output back: no other
        # transform, and one slice (the concatenation's input, sliced once).
        convolutions = [rank for name, rank in calls if name.startswith("relax_runtime.conv2d")]
        self.assertEqual(convolutions, [5] * 9)
        self.assertEqual([rank for name, rank in calls if name == "relax_runtime.layout_blocked"].count(4), 2)
        self.assertEqual([name for name, _ in calls].count("relax.strided_slice"), 1)
        # Each padded weight is a new parameter beside the others, its padding zero (a
        # kernel's) or neutral; the weights it replaces are no longer taken.
        params = function.params[1:]
        self.assertEqual(len(params), len(new_weights))
        self.assertEqual(new_names, [str(param.name) for param in params])
        by_name = dict(zip(new_names, new_weights))
        self.assertNotIn("w_in", by_name)
        self.assertEqual(by_name["w_in:padded"].shape, (32, 32, 1, 1))
        self.assertEqual(by_name["w_expand:padded"].shape, (208, 32, 1, 1))
        self.assertEqual(by_name["w_depthwise:padded"].shape, (208, 1, 3, 3))
        self.assertEqual(by_name["w_squeeze:padded"].shape, (16, 208, 1, 1))
        self.assertFalse(by_name["w_expand:padded"][200:].any() or by_name["w_expand:padded"][:, 24:].any())
        self.assertFalse(by_name["b_in:padded"][24:].any())
        np.testing.assert_array_equal(by_name["w_expand:padded"][:200, :24], weights[names.index("w_expand")])
        # The last convolution reads the concatenation, whose channels are whole blocks.
        self.assertIn("w_out", by_name)

    def test_a_padded_tensor_broadcast_along_the_channels_is_read_sliced(self):
        # A gate of one channel (padded to 16: one pixel) added to 24 channels (padded to
        # 32): the sum broadcasts the gate's real channel, not its padding.
        rng = np.random.default_rng(9)
        x = relax.Var("x", relax.TensorType([1, 32, 8, 8], "float32"))
        builder = relax.BlockBuilder()
        with builder.function("main", [x]):
            with builder.dataflow():
                wide = builder.emit(relax.op.nn.conv2d(x, relax.const(rng.standard_normal([24, 32, 1, 1]).astype("float32"))))
                mean = builder.emit(relax.op.mean(x, axis=[2, 3], keepdims=True))
                gate = builder.emit(relax.op.nn.conv2d(mean, relax.const(rng.standard_normal([1, 32, 1, 1]).astype("float32"))))
                total = builder.emit(relax.op.add(wide, gate))
                out = builder.emit_output(relax.op.nn.relu(total))
            builder.emit_func_output(out)
        module = builder.get()
        padded, _, _ = padded_channels.padded(module)
        self.assertNotEqual(ops(padded["main"]), ops(module["main"]))
        values = rng.standard_normal([1, 32, 8, 8]).astype(np.float32)
        np.testing.assert_allclose(run(padded, values, None), run(module, values, None), rtol=1e-5, atol=1e-5)

    def test_weights_of_unknown_values_keep_their_convolutions_channels(self):
        ir_module, weights = loaded("external")
        self.assertIsNotNone(weights)
        prepared = blocked_layout.prepared(ir_module)
        padded, padded_weights, names = padded_channels.padded(prepared, None, None)
        self.assertTrue(padded["main"].same_as(prepared["main"]) or ops(padded["main"]) == ops(prepared["main"]))
        self.assertIsNone(padded_weights)
        self.assertIsNone(names)


if __name__ == "__main__":
    unittest.main()
