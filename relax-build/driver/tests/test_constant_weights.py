"""Weights written as graph constants (`Constant` nodes, or computed from constants such
as `ConstantOfShape`, as in the `onnx` package's light models) reach the kernels as
initializers do: the same kernel calls and the same load-time layouts (these need TVM:
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

from tvm import relax  # noqa: E402

from relax_driver import blocked_layout, offload, onnx_source  # noqa: E402

# name -> shape: a 3x3 convolution Winograd takes (128 channels over 56x56), a 1x1 one,
# and a dense layer the kernels pack in panels; 1.6 MB in all, so that the weights are
# parameters (over 1 MiB), which relax-runtime packs at load.
WEIGHTS = {
    "w3x3": [128, 128, 3, 3],
    "b3x3": [128],
    "w1x1": [128, 128, 1, 1],
    "fc": [128, 2048],
    "fc_bias": [2048],
}


def cnn(weights_as):
    """The CNN with its weights as `initializers`, `constants` (Constant nodes) or
    `constant_of_shape` (each weight a ConstantOfShape of a shape initializer)."""
    rng = np.random.default_rng(7)
    values = {name: rng.standard_normal(shape).astype(np.float32) * 0.05 for name, shape in WEIGHTS.items()}
    nodes, initializers = [], []
    for name, value in values.items():
        if weights_as == "initializers":
            initializers.append(numpy_helper.from_array(value, name))
        elif weights_as == "constants":
            nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name)))
        else:
            shape = f"{name}_shape"
            initializers.append(numpy_helper.from_array(np.array(value.shape, np.int64), shape))
            fill = numpy_helper.from_array(np.array([0.01], np.float32), "fill")
            nodes.append(helper.make_node("ConstantOfShape", [shape], [name], value=fill))
    nodes += [
        helper.make_node("Conv", ["x", "w3x3", "b3x3"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w1x1"], ["c2"]),
        helper.make_node("GlobalAveragePool", ["c2"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("MatMul", ["flat", "fc"], ["logits"]),
        helper.make_node("Add", ["logits", "fc_bias"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, 56, 56])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2048])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def kernel_calls(ir_module):
    """The relax_runtime kernels the module calls, in order."""
    calls = []
    for function in ir_module.functions.values():
        if isinstance(function, relax.Function):
            relax.analysis.post_order_visit(
                function.body, lambda expr: calls.append(offload.packed_name(expr)) if offload.packed_name(expr) else None
            )
    return calls


def built(weights_as, folder):
    """(kernel calls, weight layouts, parameter count, weight shapes) of the CNN as
    relax-build's pipeline takes it, weights external."""
    path = os.path.join(folder, f"{weights_as}.onnx")
    onnx.save(cnn(weights_as), path)
    request = {"source": path, "inputs": None, "weights_mode": "auto"}
    ir_module, weights, _warnings = onnx_source.load(request)
    ir_module, _, _ = blocked_layout.convert(ir_module, {"kind": "llvm"})
    ir_module, layouts = offload.rewrite(ir_module, None)
    main = ir_module["main"]
    shapes = sorted(tuple(int(dim) for dim in offload.dims(param)) for param in main.params[1:])
    return kernel_calls(ir_module), layouts, weights is not None, shapes


class ConstantWeights(unittest.TestCase):
    def test_constant_weights_get_the_kernel_calls_and_layouts_of_initializers(self):
        with tempfile.TemporaryDirectory() as folder:
            reference = built("initializers", folder)
            calls, layouts, external, shapes = reference
            self.assertIn("relax_runtime.conv2d_bias", calls)
            self.assertIn("relax_runtime.dense_bias", calls)
            self.assertTrue(layouts, "the initializers' model takes some weights packed")
            self.assertTrue(external, "weights over 1 MiB are external parameters")
            for weights_as in ("constants", "constant_of_shape"):
                self.assertEqual(built(weights_as, folder), reference, weights_as)


if __name__ == "__main__":
    unittest.main()
