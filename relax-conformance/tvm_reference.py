"""TVM's own Python path over ONNX backend-test cases, for comparison with relax-conformance.

    python relax-conformance/tvm_reference.py DIR [DIR ...]

For each <case>/model.onnx: tvm.relax.frontend.onnx.from_onnx -> tvm.compile (llvm, host)
-> relax.VirtualMachine, run on every test_data_set_*, compare each output with the
expected one at rtol 1e-3, atol 1e-5. Prints `PASS case`, `FAIL case: reason`, and a
final `N passed, M failed`. Needs the pinned TVM and onnx (the managed toolchain has both).
"""

import glob
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def run_case(case_dir):
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    model = onnx.load(os.path.join(case_dir, "model.onnx"))
    mod = from_onnx(model, keep_params_in_input=False)
    target = tvm.target.Target({"kind": "llvm"})
    mod = relax.get_pipeline("zero")(mod)
    executable = tvm.compile(mod, target, relax_pipeline=relax.get_default_pipeline(target))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    initializers = {init.name for init in model.graph.initializer}
    input_names = [i.name for i in model.graph.input if i.name not in initializers]
    for data_set in sorted(glob.glob(os.path.join(case_dir, "test_data_set_*"))):
        inputs = []
        for index in range(len(input_names)):
            tensor = onnx.TensorProto()
            with open(os.path.join(data_set, f"input_{index}.pb"), "rb") as handle:
                tensor.ParseFromString(handle.read())
            inputs.append(tvm.runtime.tensor(numpy_helper.to_array(tensor)))
        result = vm["main"](*inputs)
        outputs = list(result) if isinstance(result, (list, tuple)) or hasattr(result, "__len__") and not hasattr(result, "numpy") else [result]
        expected_files = sorted(glob.glob(os.path.join(data_set, "output_*.pb")), key=lambda p: int(p.rsplit("_", 1)[1][:-3]))
        if len(outputs) != len(expected_files):
            return f"{len(outputs)} outputs, expected {len(expected_files)}"
        for index, (output, path) in enumerate(zip(outputs, expected_files)):
            tensor = onnx.TensorProto()
            with open(path, "rb") as handle:
                tensor.ParseFromString(handle.read())
            expected = numpy_helper.to_array(tensor)
            actual = output.numpy()
            if actual.shape != expected.shape:
                return f"output {index}: shape {actual.shape}, expected {expected.shape}"
            if not np.allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=1e-3, atol=1e-5, equal_nan=True):
                return f"output {index}: values differ (max abs diff {np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64)))})"
    return None


def main():
    passed = failed = 0
    for root in sys.argv[1:]:
        for case_dir in sorted(glob.glob(os.path.join(root, "*", "model.onnx"))):
            case_dir = os.path.dirname(case_dir)
            name = os.path.basename(case_dir)
            try:
                reason = run_case(case_dir)
            except Exception as error:  # any failure of TVM's own path counts
                reason = f"{type(error).__name__}: {str(error).splitlines()[0][:150] if str(error) else ''}"
            if reason is None:
                passed += 1
                print(f"PASS {name}", flush=True)
            else:
                failed += 1
                print(f"FAIL {name}: {reason}", flush=True)
    print(f"{passed} passed, {failed} failed")


if __name__ == "__main__":
    main()
