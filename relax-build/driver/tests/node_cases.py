"""Runs ONNX's node test suite (onnx.backend.test) through the driver's ONNX import and
a plain `tvm.compile` for the CPU, and reports which cases pass.

A test helper, not a unit test: `python tests/node_cases.py PREFIX [PREFIX ...] [-v]`
prints one line per failing case (with -v, per case) and a count per prefix.

The suite feeds operator parameters that real exports hold as constants (a Resize's
sizes and scales, a reduction's axes) as graph inputs. TVM needs them as constants, as
the driver's preparation step makes them in real graphs, so the inputs in those slots
(SHAPE_LIKE_SLOTS) become initializers holding the data set's values.
"""

import os
import sys
import tempfile
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relax_driver import onnx_source  # noqa: E402

REDUCTIONS = (
    "ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 "
    "ReduceLogSum ReduceLogSumExp ReduceSumSquare"
).split()
# Operator -> the input positions whose graph inputs become constants.
SHAPE_LIKE_SLOTS = {"Resize": (1, 2, 3), **{name: (1,) for name in REDUCTIONS}}


def constants_in_shape_slots(model, inputs):
    """Moves the graph inputs feeding SHAPE_LIKE_SLOTS into initializers, in place.
    Returns the values of the graph inputs that remain, in order."""
    from onnx import numpy_helper

    graph = model.graph
    names = [value.name for value in graph.input]
    values = dict(zip(names, inputs))
    frozen = set()
    for node in graph.node:
        for slot in SHAPE_LIKE_SLOTS.get(node.op_type, ()):
            if slot < len(node.input) and node.input[slot] in values:
                frozen.add(node.input[slot])
    for name in frozen:
        graph.initializer.append(numpy_helper.from_array(np.asarray(values[name]), name))
    kept = [value for value in graph.input if value.name not in frozen]
    del graph.input[:]
    graph.input.extend(kept)
    return [values[value.name] for value in kept]


def as_array(value):
    """A data set's value as a numpy array (some are stored as TensorProtos)."""
    import onnx

    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    return np.asarray(value)


def run_case(case):
    """None when `case` passes, else a one-line reason."""
    import onnx
    import tvm
    from tvm import relax

    for inputs, expected in case.data_sets:
        model = onnx.ModelProto()
        model.CopyFrom(case.model)
        feeds = constants_in_shape_slots(model, [as_array(value) for value in inputs])
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "model.onnx")
            onnx.save(model, path)
            request = {"source": path, "inputs": [], "onnx_prepare": True, "weights_mode": "embed"}
            ir_module, _, _ = onnx_source.load(request)
        executable = tvm.compile(ir_module, target="llvm")
        vm = relax.VirtualMachine(executable, tvm.cpu())
        result = vm["main"](*[tvm.runtime.tensor(value) for value in feeds])
        outputs = flatten(result)
        if len(outputs) < len(expected):
            return f"{len(outputs)} outputs for {len(expected)} expected"
        for index, (got, want) in enumerate(zip(outputs, expected)):
            want = as_array(want)
            if got.shape != want.shape:
                return f"output {index}: shape {got.shape}, expected {want.shape}"
            if want.dtype == object or want.dtype.kind in "biuU":
                same = np.array_equal(got.astype(want.dtype), want)
            else:
                same = np.allclose(
                    got.astype(np.float64), want.astype(np.float64), rtol=case.rtol, atol=case.atol, equal_nan=True
                )
            if not same:
                worst = np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))) if got.size else 0
                return f"output {index}: values differ (max abs diff {worst:.3g})"
    return None


def flatten(result):
    """The VM's result as a list of numpy arrays (a tuple's fields in order)."""
    import tvm

    if isinstance(result, (tvm.runtime.Tensor,)):
        return [result.numpy()]
    arrays = []
    for field in result:
        arrays.extend(flatten(field))
    return arrays


def main(arguments):
    import onnx.backend.test.case.node as node

    verbose = "-v" in arguments
    prefixes = [argument for argument in arguments if argument != "-v"]
    cases = node.collect_testcases(None)
    totals = {}
    for case in sorted(cases, key=lambda case: case.name):
        prefix = next((prefix for prefix in prefixes if case.name.startswith(prefix)), None)
        if prefix is None:
            continue
        try:
            reason = run_case(case)
        except Exception as error:  # the report names the failure; the run goes on
            lines = [line for line in str(error).splitlines() if line.strip()]
            reason = f"{type(error).__name__}: {(lines[-1] if lines else '')[:200]}"
            if verbose:
                traceback.print_exc(limit=-2)
        passed, total = totals.get(prefix, (0, 0))
        totals[prefix] = (passed + (reason is None), total + 1)
        if reason is not None or verbose:
            print(f"{case.name}: {reason or 'ok'}", flush=True)
    for prefix, (passed, total) in totals.items():
        print(f"{prefix}: {passed}/{total}")


if __name__ == "__main__":
    main(sys.argv[1:])
