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


def float_value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def branch(name, op_type, output):
    """A branch graph computing `op_type(x, x)` on the outer scope's x."""
    return helper.make_graph([helper.make_node(op_type, ["x", "x"], [output])], name, [], [float_value(output, [2, 3])])


def if_model(condition_node=None):
    """y = x + x if cond else x * x; cond an input, or the output of `condition_node`."""
    node = helper.make_node(
        "If", ["cond"], ["y"], then_branch=branch("then", "Add", "sum"), else_branch=branch("else", "Mul", "product")
    )
    inputs = [float_value("x", [2, 3])]
    if condition_node is None:
        inputs.insert(0, helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    nodes = ([condition_node] if condition_node is not None else []) + [node]
    return make_model(nodes, inputs, [float_value("y", [2, 3])])


class ControlFlow(unittest.TestCase):
    def test_an_if_on_an_input_scalar_takes_either_branch(self):
        model = if_model()
        module, weights, _ = load(model)
        x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
        for cond in (True, False):
            got = run(module, weights, np.array(cond), x)
            np.testing.assert_allclose(got[0], reference(model, np.array(cond), x)[0])

    def test_an_if_on_a_constant_is_folded_to_its_branch(self):
        model = if_model(constant("cond", False, np.bool_))
        module, weights, _ = load(model)
        self.assertNotIn("if ", str(module["main"]))
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        np.testing.assert_allclose(run(module, weights, x)[0], x * x)

    def test_a_scan_with_reversed_input_and_output_is_unrolled(self):
        body = helper.make_graph(
            [
                helper.make_node("Add", ["sum_in", "next"], ["sum_out"]),
                helper.make_node("Mul", ["sum_out", "next"], ["scan_out"]),
            ],
            "body",
            [float_value("sum_in", [2]), float_value("next", [2])],
            [float_value("sum_out", [2]), float_value("scan_out", [2])],
        )
        node = helper.make_node(
            "Scan", ["initial", "x"], ["y", "z"], body=body, num_scan_inputs=1,
            scan_input_axes=[1], scan_input_directions=[1], scan_output_directions=[1],
        )
        model = make_model([node], [float_value("initial", [2]), float_value("x", [2, 4])], [float_value("y", [2]), float_value("z", [4, 2])])
        module, weights, _ = load(model)
        initial = np.array([1, -1], np.float32)
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        for g, w in zip(run(module, weights, initial, x), reference(model, initial, x)):
            np.testing.assert_allclose(g, w)

    def test_a_loop_with_a_constant_trip_count_is_unrolled(self):
        body = helper.make_graph(
            [
                helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                helper.make_node("Cast", ["i"], ["i_float"], to=TensorProto.FLOAT),
                helper.make_node("Add", ["y_in", "i_float"], ["y_out"]),
                helper.make_node("Identity", ["y_out"], ["scan_out"]),
            ],
            "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), float_value("y_in", [2])],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), float_value("y_out", [2]), float_value("scan_out", [2])],
        )
        nodes = [
            constant("trip_count", 4),
            constant("cond", True, np.bool_),
            helper.make_node("Loop", ["trip_count", "cond", "y"], ["y_final", "ys"], body=body),
        ]
        model = make_model(nodes, [float_value("y", [2])], [float_value("y_final", [2]), float_value("ys", [4, 2])])
        module, weights, _ = load(model)
        y = np.array([0.5, 1.5], np.float32)
        for g, w in zip(run(module, weights, y), reference(model, y)):
            np.testing.assert_allclose(g, w)


    def test_a_loop_with_a_trip_count_and_condition_known_at_run_time_recurses(self):
        # A while loop: y doubles, plus the outer x, until its sum passes the limit or
        # the trip count (an input) is reached; each step's y is stacked.
        body = helper.make_graph(
            [
                helper.make_node("Mul", ["y_in", "two"], ["doubled"]),
                helper.make_node("Add", ["doubled", "x"], ["y_out"]),
                helper.make_node("ReduceSum", ["y_out"], ["total"], keepdims=0),
                helper.make_node("Less", ["total", "limit"], ["cond_out"]),
                helper.make_node("Identity", ["y_out"], ["scan_out"]),
            ],
            "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), float_value("y_in", [2])],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), float_value("y_out", [2]), float_value("scan_out", [2])],
            [numpy_helper.from_array(np.array(2, np.float32), "two")],
        )
        nodes = [helper.make_node("Loop", ["trip_count", "cond", "y"], ["y_final", "ys"], body=body)]
        inputs = [
            helper.make_tensor_value_info("trip_count", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            float_value("y", [2]),
            float_value("x", [2]),
            helper.make_tensor_value_info("limit", TensorProto.FLOAT, []),
        ]
        model = make_model(nodes, inputs, [float_value("y_final", [2]), float_value("ys", ["steps", 2])])
        module, weights, _ = load(model)
        self.assertIn("onnx_loop", [gv.name_hint for gv in module.functions])
        y, x = np.array([0.5, 1.5], np.float32), np.array([1, -0.5], np.float32)
        # Stopped by the condition (after 3 steps), by the trip count, never entered.
        for trip, cond, limit in ((10, True, 20.0), (2, True, 1e9), (5, False, 1e9)):
            with self.subTest(trip=trip, cond=cond, limit=limit):
                arrays = (np.array(trip, np.int64), np.array(cond), y, x, np.array(limit, np.float32))
                got, want = run(module, weights, *arrays), reference(model, *arrays)
                self.assertEqual([g.shape for g in got], [w.shape for w in want])
                for g, w in zip(got, want):
                    np.testing.assert_allclose(g, w)

    def test_a_run_time_loop_refuses_a_scan_output_of_unknown_shape(self):
        # The scan output is a slice at run-time offsets, and the body declares no shape.
        body = helper.make_graph(
            [
                helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                helper.make_node("Unsqueeze", ["i", "zero"], ["start"]),
                helper.make_node("Add", ["start", "one"], ["end"]),
                helper.make_node("Slice", ["table", "start", "end"], ["scan_out"]),
                helper.make_node("Identity", ["y_in"], ["y_out"]),
            ],
            "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), float_value("y_in", [2])],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), float_value("y_out", [2]),
             helper.make_tensor_value_info("scan_out", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(np.array([0], np.int64), "zero"), numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.arange(5, dtype=np.float32), "table")],
        )
        nodes = [helper.make_node("Loop", ["trip_count", "", "y"], ["y_final", "ys"], body=body)]
        inputs = [helper.make_tensor_value_info("trip_count", TensorProto.INT64, []), float_value("y", [2])]
        model = make_model(nodes, inputs, [float_value("y_final", [2]), float_value("ys", None)])
        from relax_driver.errors import DriverError

        with self.assertRaises(DriverError) as raised:
            load(model)
        self.assertIn("Loop: scan output scan_out is of type", raised.exception.message)
        self.assertIn("the body declares no static shape for it", raised.exception.message)


if __name__ == "__main__":
    unittest.main()
