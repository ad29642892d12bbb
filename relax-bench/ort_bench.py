"""relax-bench's side harness: onnxruntime on the same .onnx files (and the same inputs),
and numpy's matmul (OpenBLAS), with the same thread count. Reads a JSON spec on its first
line of stdin:

    {"threads": 2, "warmup": 10, "seconds": 1.0, "min_iterations": 20, "mode": "time",
     "cases": [{"name": "mlp_b1", "model": "models/mlp_b1.onnx",
                "inputs": {"x": {"shape": [1, 784], "dtype": "float32", "data": [...]}}}],
     "matmul": 1024}

With "mode": "serve" (how relax-bench times, interleaved with its own runs): prints
{"blas": "..."} once the sessions are ready, then answers each request line
{"time": NAME} (a case's name, or "numpy_matmul") with {"seconds": median}, until
stdin closes. With "mode": "outputs", prints {"outputs": {name: [flat output values]}}.
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


def feeds_of(case):
    return {
        name: np.asarray(spec["data"], dtype=spec["dtype"]).reshape(spec["shape"])
        for name, spec in case["inputs"].items()
    }


def session(path, threads):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def main():
    spec = json.loads(sys.stdin.readline())
    threads = spec["threads"]
    if spec.get("mode") == "outputs":
        outputs = {}
        for case in spec["cases"]:
            result = session(case["model"], threads).run(None, feeds_of(case))[0]
            outputs[case["name"]] = np.asarray(result, dtype=np.float64).ravel().tolist()
        print(json.dumps({"outputs": outputs}))
        return
    timing = (spec["warmup"], spec["seconds"], spec["min_iterations"])
    runners = {case["name"]: (session(case["model"], threads), feeds_of(case)) for case in spec["cases"]}
    size = spec["matmul"]
    rng = np.random.default_rng(0)
    a = rng.random((size, size), dtype=np.float32)
    b = rng.random((size, size), dtype=np.float32)
    with threadpool_limits(limits=threads):
        blas = ", ".join(
            f"{info.get('internal_api')} {info.get('version')} ({info.get('architecture')}, {info.get('num_threads')} threads)"
            for info in threadpool_info()
            if info.get("user_api") == "blas"
        )
        print(json.dumps({"blas": blas}), flush=True)
        for line in sys.stdin:
            name = json.loads(line)["time"]
            if name == "numpy_matmul":
                seconds = median_seconds(lambda: a @ b, *timing)
            else:
                runner, feeds = runners[name]
                seconds = median_seconds(lambda: runner.run(None, feeds), *timing)
            print(json.dumps({"seconds": seconds}), flush=True)


if __name__ == "__main__":
    main()
