"""Shared by the test_onnx_ops_* unit tests: small ONNX graphs built with
onnx.helper, imported by the driver (onnx_source.load) and compiled for the CPU,
against onnxruntime on the same inputs."""

import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relax_driver import onnx_source  # noqa: E402


def graph_model(node, inputs, outputs, initializers=(), opset=23, extra_opsets=()):
    """A model of one node (or a list of nodes). `inputs`: {name: array} (graph inputs); `outputs`: names
    (float32) or {name: numpy dtype}; `initializers`: {name: array}."""
    values = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)
              for name, array in inputs.items()]
    if not isinstance(outputs, dict):
        outputs = {name: np.float32 for name in outputs}
    results = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), None)
               for name, dtype in outputs.items()]
    graph = helper.make_graph(node if isinstance(node, list) else [node], "g", values, results,
                              [numpy_helper.from_array(array, name) for name, array in dict(initializers).items()])
    opsets = [helper.make_opsetid("", opset), *[helper.make_opsetid(domain, v) for domain, v in extra_opsets]]
    made = helper.make_model(graph, opset_imports=opsets)
    made.ir_version = 10
    return made


def run_driver(made, feeds):
    """The model's outputs, imported by the driver and run by TVM's VM."""
    import tvm
    from tvm import relax

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        onnx.save(made, path)
        ir_module, _, _ = onnx_source.load({"source": path, "inputs": [], "onnx_prepare": True, "weights_mode": "embed"})
    vm = relax.VirtualMachine(tvm.compile(ir_module, target="llvm"), tvm.cpu())
    result = vm["main"](*[tvm.runtime.tensor(value) for value in feeds.values()])
    if isinstance(result, tvm.runtime.Tensor):
        return [result.numpy()]
    return [field.numpy() for field in result]


def run_onnxruntime(made, feeds):
    import onnxruntime

    # Without graph optimizations: onnxruntime would fuse QDQ graphs into its integer
    # operators, which round differently from the graph as written.
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(made.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_matches(test, made, feeds, rtol=1e-5, atol=1e-5, expected=None):
    """The driver's outputs equal onnxruntime's (or `expected`), output by output."""
    got = run_driver(made, feeds)
    want = expected if expected is not None else run_onnxruntime(made, feeds)
    test.assertGreaterEqual(len(got), len(want))
    for index, (mine, theirs) in enumerate(zip(got, want)):
        test.assertEqual(mine.shape, theirs.shape, f"output {index}")
        if theirs.dtype.kind in "biu":
            np.testing.assert_array_equal(mine, theirs, err_msg=f"output {index}")
        else:
            np.testing.assert_allclose(mine, theirs, rtol=rtol, atol=atol, err_msg=f"output {index}")
