"""Writes the real-model corpus's data sets: for each `OUT/<name>/model.onnx` (fetched by
`tests/corpus.rs` through relax-build) of a model in corpus.toml, its seeded inputs,
onnxruntime's outputs as the expected ones (`test_data_set_0/`), onnxruntime's median
time per call with two threads (`onnxruntime.json`), the model's tolerance
(`tolerance`) and its manifest lines beside `source` (`declaration.toml`, when it has
them), in the layout relax-conformance reads:

    python relax-conformance/corpus.py CORPUS_TOML OUT [NAME ...]
"""

import json
import os
import sys
import time
import tomllib

import numpy as np
import onnx
import onnxruntime
from onnx import numpy_helper

SEED = 2026
# Time each model for about this long, after a warm-up call.
TIMING_SECONDS = 1.0

NUMPY_TYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def values(spec, shape, dtype, rng):
    words = spec["values"].split()
    kind, args = words[0], [float(word) for word in words[1:]]
    if kind == "uniform":
        return rng.uniform(args[0], args[1], shape).astype(dtype)
    if kind == "integers":
        return rng.integers(int(args[0]), int(args[1]), shape).astype(dtype)
    if kind == "zeros":
        return np.zeros(shape, dtype)
    if kind == "constant":
        return np.full(shape, args[0], dtype)
    raise SystemExit(f"{spec['name']}: unknown values {spec['values']!r}")


def median_time_us(session, feeds):
    session.run(None, feeds)
    times = []
    deadline = time.perf_counter() + TIMING_SECONDS
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < 1000):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e6)


def write_case(entry, folder):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        os.path.join(folder, "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    rng = np.random.default_rng(SEED)
    declared = {spec["name"]: spec for spec in entry["inputs"]}
    graph_inputs = session.get_inputs()
    missing = [i.name for i in graph_inputs if i.name not in declared]
    if missing:
        raise SystemExit(f"{entry['name']}: corpus.toml gives no values for inputs {missing}")
    feeds = {}
    for graph_input in graph_inputs:
        spec = declared[graph_input.name]
        feeds[graph_input.name] = values(spec, spec["shape"], NUMPY_TYPES[graph_input.type], rng)
    outputs = session.run(None, feeds)
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    for index, graph_input in enumerate(graph_inputs):
        tensor = numpy_helper.from_array(feeds[graph_input.name], graph_input.name)
        with open(os.path.join(data, f"input_{index}.pb"), "wb") as out:
            out.write(tensor.SerializeToString())
    for index, (output, value) in enumerate(zip(session.get_outputs(), outputs)):
        tensor = numpy_helper.from_array(np.asarray(value), output.name)
        with open(os.path.join(data, f"output_{index}.pb"), "wb") as out:
            out.write(tensor.SerializeToString())
    with open(os.path.join(folder, "tolerance"), "w") as out:
        out.write(f"{entry.get('tolerance', 1e-4)}\n")
    if "declaration" in entry:
        with open(os.path.join(folder, "declaration.toml"), "w") as out:
            out.write(entry["declaration"] + "\n")
    with open(os.path.join(folder, "onnxruntime.json"), "w") as out:
        json.dump({"time_us": median_time_us(session, feeds), "threads": 2}, out)
    with open(os.path.join(folder, "summary.json"), "w") as out:
        json.dump(summary(os.path.join(folder, "model.onnx")), out)


def summary(path):
    """The graph's opset, node count (subgraphs included), operator types by count, and
    its inputs' dims, symbolic ones by name."""
    model = onnx.load(path, load_external_data=False)
    counts = {}

    def walk(graph):
        for node in graph.node:
            name = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"
            counts[name] = counts.get(name, 0) + 1
            for attribute in node.attribute:
                if attribute.g.node:
                    walk(attribute.g)
                for subgraph in attribute.graphs:
                    walk(subgraph)

    walk(model.graph)
    initializers = {i.name for i in model.graph.initializer}
    inputs = []
    for graph_input in model.graph.input:
        if graph_input.name in initializers:
            continue
        dims = [d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?")
                for d in graph_input.type.tensor_type.shape.dim]
        inputs.append(f"{graph_input.name}[{', '.join(dims)}]")
    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return {
        "opset": opset,
        "nodes": sum(counts.values()),
        "operators": sorted(counts.items(), key=lambda item: -item[1]),
        "inputs": inputs,
    }


def main():
    corpus_path, out = sys.argv[1:3]
    names = set(sys.argv[3:])
    with open(corpus_path, "rb") as corpus:
        entries = tomllib.load(corpus)["model"]
    for entry in entries:
        folder = os.path.join(out, entry["name"])
        if names and entry["name"] not in names or not os.path.isfile(os.path.join(folder, "model.onnx")):
            continue
        write_case(entry, folder)
        print(entry["name"])


if __name__ == "__main__":
    main()
