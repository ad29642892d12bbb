"""onnxruntime's per-node profile of a model, to set beside relax-runtime's
(`RELAX_PROFILE=shapes`): the time of each operator type and output shape, per call.

    target/test-python/bin/python relax-bench/ort_profile.py MODEL.onnx 1,3,224,224 [--calls N]

relax-bench's generated models are under target/release/build/relax-bench-*/out/models/.
The model's one input gets seeded normal values of the given shape; onnxruntime runs on 2
threads, as in relax-bench, 20 calls of warm-up, then N (200) profiled calls. onnxruntime's
profiler costs each node a few microseconds: compare the totals printed with the model's
unprofiled time in relax-bench.
"""

import argparse
import collections
import json
import os

import numpy as np
import onnxruntime

WARMUP = 20


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("shape", help="the input's shape, as 1,3,224,224")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    options.enable_profiling = True
    session = onnxruntime.InferenceSession(
        args.model, options, providers=["CPUExecutionProvider"]
    )
    inputs = session.get_inputs()
    if len(inputs) != 1:
        raise SystemExit(f"{args.model}: {len(inputs)} inputs; this script feeds models of one input")
    shape = [int(size) for size in args.shape.split(",")]
    feed = {inputs[0].name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    for _ in range(WARMUP + args.calls):
        session.run(None, feed)
    trace = session.end_profiling()
    with open(trace) as file:
        events = json.load(file)
    os.remove(trace)

    calls = WARMUP + args.calls
    rows = collections.defaultdict(lambda: [0, 0.0])
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            node = event["args"]
            shapes = [list(output.values())[0] for output in node.get("output_type_shape", [])]
            row = rows[(node["op_name"], str(shapes))]
            row[0] += 1
            row[1] += event["dur"]
    total = sum(row[1] for row in rows.values()) / calls
    print(f"onnxruntime profile of {args.model}: {total:.1f} us a call (profiled)")
    print(f"{'us a call':>10} {'nodes':>5}  operator, output shapes")
    for (operator, shapes), (count, micros) in sorted(rows.items(), key=lambda item: -item[1][1]):
        print(f"{micros / calls:10.1f} {count // calls:5d}  {operator} {shapes}")


if __name__ == "__main__":
    main()
