"""Runs ONNX's node test suite cases through the driver: import (onnx_source.load, with
the preparation step), compile for llvm, run on Relax's VM, compare every data set
within the case's rtol/atol. The recurrent kernel is the numpy stand-in.

    python tests/node_cases_control.py [NAME_PREFIX ...]   (default: the recurrent and
    control-flow families)

Prints one line per case (pass / FAIL with the reason) and counts per family.
"""

import collections
import os
import sys
import tempfile
import traceback
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import recurrent_stand_in  # noqa: E402

FAMILIES = ["test_lstm", "test_gru", "test_rnn", "test_simple_rnn", "test_if", "test_scan", "test_loop11"]


def run_case(case):
    """None when the case passes, else the reason it does not."""
    import onnx
    import tvm
    from tvm import relax

    from relax_driver import onnx_source

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "model.onnx")
        onnx.save(case.model, path)
        request = {"source": path, "inputs": [], "onnx_prepare": True, "weights_mode": "embed"}
        module, _, _ = onnx_source.load(request)
    executable = tvm.compile(module, target="llvm")
    machine = relax.VirtualMachine(executable, tvm.cpu())
    input_names = [value.name for value in case.model.graph.input]
    initializers = {init.name for init in case.model.graph.initializer}
    input_names = [name for name in input_names if name not in initializers]
    for inputs, expected in case.data_sets:
        arguments = [tvm.runtime.tensor(np.asarray(value)) for value in inputs]
        result = machine["main"](*arguments)
        results = flatten(result)
        if len(results) != len(expected):
            return f"{len(results)} outputs, expected {len(expected)}"
        for index, (got, want) in enumerate(zip(results, expected)):
            want = np.asarray(want)
            if got.shape != want.shape:
                return f"output {index}: shape {got.shape}, expected {want.shape}"
            if not np.allclose(got, want, rtol=case.rtol, atol=case.atol):
                return f"output {index}: max abs difference {np.max(np.abs(got - want))}"
    return None


def flatten(result):
    """The VM's result as a list of numpy arrays."""
    if hasattr(result, "numpy"):
        return [result.numpy()]
    arrays = []
    for item in result:
        arrays += flatten(item)
    return arrays


def main(prefixes):
    warnings.simplefilter("ignore")
    from onnx.backend.test.case.node import collect_testcases

    recurrent_stand_in.register()
    counts = collections.defaultdict(lambda: [0, 0])
    for case in collect_testcases(None):
        family = next((prefix for prefix in prefixes if case.name.startswith(prefix)), None)
        if family is None:
            continue
        try:
            reason = run_case(case)
        except Exception as error:  # noqa: BLE001 (a case's failure is reported, not raised)
            lines = [line for line in str(error).splitlines() if line.strip()]
            reason = f"{type(error).__name__}: {lines[-1][:300] if lines else ''}"
            if os.environ.get("TRACE"):
                traceback.print_exc()
        counts[family][1] += 1
        if reason is None:
            counts[family][0] += 1
            print(f"pass {case.name}")
        else:
            print(f"FAIL {case.name}: {reason}")
    for family, (passed, total) in counts.items():
        print(f"{family}: {passed}/{total}")


if __name__ == "__main__":
    main(sys.argv[1:] or FAMILIES)
