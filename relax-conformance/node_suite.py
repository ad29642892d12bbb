"""Writes ONNX's node test suite, which the `onnx` package generates (1,884 cases for
onnx 1.23.2: `onnx.backend.test.case.node.collect_testcases`), in the backend-test
layout relax-conformance reads: `OUT/<case>/model.onnx` and
`OUT/<case>/test_data_set_<i>/{input,output}_<j>.pb`.

    python relax-conformance/node_suite.py OUT [PREFIX ...]

With prefixes, only the cases whose names start with one of them are written.
"""

import os
import sys
import warnings

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.case.node import collect_testcases


def proto(value, name):
    """A data set value as the protobuf the backend-test layout stores: a TensorProto,
    or a SequenceProto / OptionalProto for the cases that take or return those."""
    if isinstance(value, (onnx.TensorProto, onnx.SequenceProto, onnx.OptionalProto, onnx.MapProto)):
        return value  # some cases give protobufs already (types numpy cannot hold)
    if isinstance(value, np.ndarray) or np.isscalar(value):
        return numpy_helper.from_array(np.asarray(value), name)
    if isinstance(value, list):
        return numpy_helper.from_list(value, name)
    return numpy_helper.from_optional(value, name)


def write_case(case, out):
    folder = os.path.join(out, case.name)
    os.makedirs(folder, exist_ok=True)
    onnx.save(case.model, os.path.join(folder, "model.onnx"))
    graph = case.model.graph
    initializers = {init.name for init in graph.initializer}
    inputs = [value for value in graph.input if value.name not in initializers]
    for index, (input_values, output_values) in enumerate(case.data_sets):
        data_set = os.path.join(folder, f"test_data_set_{index}")
        os.makedirs(data_set, exist_ok=True)
        for kind, values, infos in (("input", input_values, inputs), ("output", output_values, list(graph.output))):
            for position, value in enumerate(values):
                name = infos[position].name if position < len(infos) else f"{kind}_{position}"
                with open(os.path.join(data_set, f"{kind}_{position}.pb"), "wb") as handle:
                    handle.write(proto(value, name).SerializeToString())


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out, prefixes = sys.argv[1], tuple(sys.argv[2:])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    written = 0
    for case in cases:
        if prefixes and not case.name.startswith(prefixes):
            continue
        try:
            write_case(case, out)
            written += 1
        except Exception as error:  # a value onnx cannot serialize: the case is left out, and said so
            print(f"skipped {case.name}: {type(error).__name__}: {error}", file=sys.stderr)
    print(f"wrote {written} of {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
