"""Graphs TVM's ONNX importer needs the driver's help with: If/Loop/Scan
(relax_driver/onnx_ops/control_flow.py), and a shape compared with a tensor after the
preparation step (the BERT attention-mask pattern), with onnx_source.load's fallback to
the unprepared graph. Small onnx.helper graphs against onnxruntime."""

import os
import sys
import tempfile
import unittest
from unittest import mock

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relax_driver import onnx_ops, onnx_source  # noqa: E402


def make_model(nodes, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    made.ir_version = 8
    return made


def constant(name, values, dtype=np.int64):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(values, dtype)))


def load(model, weights_mode="embed"):
    """onnx_source.load on `model` (with the preparation step): (module, weights, warnings)."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "model.onnx")
        onnx.save(model, path)
        return onnx_source.load({"source": path, "inputs": [], "onnx_prepare": True, "weights_mode": weights_mode})


def run(module, weights, *arrays):
    """`main` of the module on Relax's VM, the weights after the inputs."""
    import tvm
    from tvm import relax

    machine = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
    arguments = [tvm.runtime.tensor(np.asarray(array)) for array in list(arrays) + list(weights or [])]
    result = machine["main"](*arguments)
    return [result.numpy()] if hasattr(result, "numpy") else [item.numpy() for item in result]


def reference(model, *arrays):
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [value.name for value in session.get_inputs()]
    return session.run(None, dict(zip(names, arrays)))


def bert_mask_model():
    """The attention-mask expansion exporters write: the Shape of a symbolic input
    compared with -1s (a Constant node, which the preparation step makes an initializer),
    then Where and Expand."""
    dims = ["batch_size", "sequence_length"]
    nodes = [
        helper.make_node("Shape", ["input_ids"], ["shape"]),
        constant("minus_ones", [-1, -1]),
        helper.make_node("Equal", ["shape", "minus_ones"], ["is_minus_one"]),
        helper.make_node("Where", ["is_minus_one", "minus_ones", "shape"], ["target"]),
        helper.make_node("Expand", ["attention_mask", "target"], ["mask"]),
    ]
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, dims) for name in ("input_ids", "attention_mask")]
    outputs = [
        helper.make_tensor_value_info("mask", TensorProto.INT64, None),
        helper.make_tensor_value_info("is_minus_one", TensorProto.BOOL, None),
    ]
    return make_model(nodes, inputs, outputs)


class ShapeComparedWithTensor(unittest.TestCase):
    def check(self, module, weights):
        ids = np.zeros((2, 3), np.int64)
        mask = np.array([[1, 1, 0], [1, 0, 0]], np.int64)
        got = run(module, weights, ids, mask)
        for g, w in zip(got, reference(bert_mask_model(), ids, mask)):
            np.testing.assert_array_equal(g, w)

    def test_the_prepared_bert_mask_imports_with_external_weights(self):
        module, weights, warnings = load(bert_mask_model(), "external")
        self.assertEqual(warnings, [])
        self.check(module, weights)

    def test_a_prepared_graph_that_fails_to_import_falls_back_to_the_graph_as_it_was(self):
        # Without the driver's Equal, TVM's refuses the prepared graph (the regression).
        without_equal = {name: converter for name, converter in onnx_ops.CONVERTERS.items() if name != "Equal"}
        with mock.patch.dict(onnx_ops.CONVERTERS, without_equal, clear=True):
            module, weights, warnings = load(bert_mask_model(), "external")
        self.assertEqual(len(warnings), 1)
        self.assertIn("preparation step was undone", warnings[0])
        self.assertIn("Equal", warnings[0])
        self.check(module, weights)


if __name__ == "__main__":
    unittest.main()
