"""relax-bench's side harness: times onnxruntime on the same .onnx files, and numpy's
matmul (OpenBLAS), with the same thread count. Reads a JSON spec on stdin:

    {"threads": 2, "warmup": 10, "seconds": 1.0, "min_iterations": 20,
     "cases": [{"name": "mlp_b1", "model": "models/mlp_b1.onnx", "inputs": {"x": [1, 784]}}],
     "matmul": 1024}

and prints {"ort": {name: median seconds}, "numpy_matmul": median seconds, "blas": "..."}.
"""

import json
import statistics
import sys
import time

import numpy as np
import onnxruntime
from threadpoolctl import threadpool_info, threadpool_limits


def median_seconds(run, warmup, seconds, min_iterations):
    """Same rule as the Rust side: at least `seconds` and `min_iterations` calls."""
    for _ in range(warmup):
        run()
    times = []
    deadline = time.perf_counter() + seconds
    while len(times) < min_iterations or time.perf_counter() < deadline:
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    spec = json.load(sys.stdin)
    threads = spec["threads"]
    timing = (spec["warmup"], spec["seconds"], spec["min_iterations"])
    rng = np.random.default_rng(0)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    ort = {}
    for case in spec["cases"]:
        session = onnxruntime.InferenceSession(case["model"], options, providers=["CPUExecutionProvider"])
        feeds = {name: rng.random(shape, dtype=np.float32) for name, shape in case["inputs"].items()}
        ort[case["name"]] = median_seconds(lambda: session.run(None, feeds), *timing)
    size = spec["matmul"]
    a = rng.random((size, size), dtype=np.float32)
    b = rng.random((size, size), dtype=np.float32)
    with threadpool_limits(limits=threads):
        matmul = median_seconds(lambda: a @ b, *timing)
        blas = ", ".join(
            f"{info.get('internal_api')} {info.get('version')} ({info.get('architecture')}, {info.get('num_threads')} threads)"
            for info in threadpool_info()
            if info.get("user_api") == "blas"
        )
    print(json.dumps({"ort": ort, "numpy_matmul": matmul, "blas": blas}))


if __name__ == "__main__":
    main()
