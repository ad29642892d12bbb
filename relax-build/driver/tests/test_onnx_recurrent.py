"""The LSTM, GRU and RNN converters (relax_driver/onnx_ops/recurrent.py) against
onnxruntime: small graphs imported through onnx_source.load, compiled for llvm and run
on Relax's VM, with the numpy stand-in of the runtime's recurrent kernel."""

import os
import sys
import tempfile
import unittest

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import recurrent_stand_in  # noqa: E402
from relax_driver import onnx_source  # noqa: E402
from relax_driver.onnx_ops import recurrent  # noqa: E402

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def layer_model(op_type, x_shape, hidden, weights=None, inputs=(), outputs=("y", "y_h"), **attrs):
    """A graph of one recurrent layer reading `x` (shape `x_shape`, dims may be names)
    and the extra graph inputs `inputs` [(name, elem_type, shape)], its weights as
    initializers."""
    weights = weights or {}
    present = set(weights) | {name for name, _, _ in inputs}
    optional = ("b", "seq_lens", "h0", "c0", "p") if op_type == "LSTM" else ("b", "seq_lens", "h0")
    node_inputs = ["x", "w", "r"] + [name if name in present else "" for name in optional]
    while node_inputs[-1] == "":
        node_inputs.pop()
    node = helper.make_node(op_type, node_inputs, list(outputs), hidden_size=hidden, **attrs)
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    graph_inputs += [helper.make_tensor_value_info(name, elem, shape) for name, elem, shape in inputs]
    graph_outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs if name]
    initializers = [numpy_helper.from_array(array, name) for name, array in weights.items()]
    graph = helper.make_graph([node], "layer", graph_inputs, graph_outputs, initializers)
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    made.ir_version = 8
    return made


def random_weights(op_type, input_size, hidden, directions, rng, bias=True, peepholes=False):
    width = GATES[op_type] * hidden
    weights = {
        "w": rng.uniform(-0.5, 0.5, (directions, width, input_size)).astype(np.float32),
        "r": rng.uniform(-0.5, 0.5, (directions, width, hidden)).astype(np.float32),
    }
    if bias:
        weights["b"] = rng.uniform(-0.5, 0.5, (directions, 2 * width)).astype(np.float32)
    if peepholes:
        weights["p"] = rng.uniform(-0.5, 0.5, (directions, 3 * hidden)).astype(np.float32)
    return weights


def compiled(model):
    """The model through onnx_source.load (with the preparation step), on Relax's VM."""
    import tvm
    from tvm import relax

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "model.onnx")
        onnx.save(model, path)
        module, _, _ = onnx_source.load({"source": path, "inputs": [], "onnx_prepare": True, "weights_mode": "embed"})
    machine = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())

    def run(*arrays):
        result = machine["main"](*[tvm.runtime.tensor(array) for array in arrays])
        return [result.numpy()] if hasattr(result, "numpy") else [item.numpy() for item in result]

    return run


def reference(model, *arrays):
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [value.name for value in session.get_inputs()]
    return session.run(None, dict(zip(names, arrays)))


class Recurrent(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        recurrent_stand_in.register()

    def check(self, model, *arrays):
        got = compiled(model)(*arrays)
        want = reference(model, *arrays)
        self.assertEqual(len(got), len(want))
        for g, w in zip(got, want):
            self.assertEqual(g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)

    def test_an_lstm_with_a_symbolic_time_dim_runs_at_two_lengths(self):
        rng = np.random.default_rng(0)
        weights = random_weights("LSTM", 3, 4, 1, rng, peepholes=True)
        model = layer_model("LSTM", ["T", 2, 3], 4, weights=weights, outputs=("y", "y_h", "y_c"))
        run = compiled(model)
        for steps in (5, 2):
            x = rng.standard_normal((steps, 2, 3)).astype(np.float32)
            for g, w in zip(run(x), reference(model, x)):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)

    def test_a_gru_with_sequence_lens_and_an_initial_state(self):
        rng = np.random.default_rng(1)
        weights = random_weights("GRU", 3, 5, 1, rng)
        inputs = [("seq_lens", TensorProto.INT32, [3]), ("h0", TensorProto.FLOAT, [1, 3, 5])]
        for linear_before_reset in (0, 1):
            model = layer_model("GRU", [4, 3, 3], 5, weights=weights, inputs=inputs, linear_before_reset=linear_before_reset)
            x = rng.standard_normal((4, 3, 3)).astype(np.float32)
            h0 = rng.standard_normal((1, 3, 5)).astype(np.float32)
            self.check(model, x, np.array([4, 2, 1], np.int32), h0)

    def test_a_bidirectional_lstm_with_clip_and_sequence_lens(self):
        rng = np.random.default_rng(2)
        weights = random_weights("LSTM", 3, 4, 2, rng, peepholes=True)
        inputs = [("seq_lens", TensorProto.INT32, [2])]
        model = layer_model(
            "LSTM", [5, 2, 3], 4, weights=weights, inputs=inputs, outputs=("y", "y_h", "y_c"),
            direction="bidirectional", clip=0.7,
        )
        x = rng.standard_normal((5, 2, 3)).astype(np.float32) * 3
        self.check(model, x, np.array([5, 3], np.int32))

    def test_layout_1_with_only_the_last_state_used(self):
        rng = np.random.default_rng(3)
        weights = random_weights("RNN", 3, 4, 2, rng)
        model = layer_model("RNN", [2, 5, 3], 4, weights=weights, outputs=("", "y_h"), direction="bidirectional", layout=1)
        got = compiled(model)(rng.standard_normal((2, 5, 3)).astype(np.float32))
        self.assertEqual(got[0].shape, (2, 2, 4))
        # onnxruntime has no layout 1: the same layer in layout 0 on the transposed input.
        x = rng.standard_normal((2, 5, 3)).astype(np.float32)
        got = compiled(model)(x)[0]
        plain = layer_model("RNN", [5, 2, 3], 4, weights=weights, outputs=("", "y_h"), direction="bidirectional")
        want = reference(plain, np.ascontiguousarray(x.transpose(1, 0, 2)))[0]
        np.testing.assert_allclose(got, want.transpose(1, 0, 2), rtol=1e-4, atol=1e-5)

    def test_activations_with_alpha_and_beta_and_input_forget(self):
        rng = np.random.default_rng(4)
        weights = random_weights("LSTM", 3, 4, 1, rng, bias=False)
        model = layer_model(
            "LSTM", [3, 2, 3], 4, weights=weights, outputs=("y", "y_h", "y_c"),
            activations=["HardSigmoid", "LeakyRelu", "ScaledTanh"],
            activation_alpha=[0.3, 0.05, 1.5], activation_beta=[0.4, 0.8], input_forget=1,
        )
        self.check(model, rng.standard_normal((3, 2, 3)).astype(np.float32))

    def test_rnn_activations_per_direction(self):
        rng = np.random.default_rng(5)
        weights = random_weights("RNN", 3, 4, 2, rng)
        model = layer_model(
            "RNN", [3, 2, 3], 4, weights=weights, direction="bidirectional", activations=["ScaledTanh", "Affine"],
            activation_alpha=[0.7, 0.5], activation_beta=[1.5, 0.1],
        )
        self.check(model, rng.standard_normal((3, 2, 3)).astype(np.float32))

    def test_activations_without_alpha_or_beta_take_onnx_defaults(self):
        # (onnxruntime reads 0 for a missing alpha, so this is checked on the prim values.)
        values = recurrent.activation_values(["LeakyRelu", "HardSigmoid", "Elu", "Tanh"], (), ())
        triples = [tuple(value.value for value in values[i : i + 3]) for i in range(0, len(values), 3)]
        self.assertEqual(triples, [(4, 0.01, 0.0), (7, 0.2, 0.5), (8, 1.0, 0.0), (1, 0.0, 0.0)])

if __name__ == "__main__":
    unittest.main()
