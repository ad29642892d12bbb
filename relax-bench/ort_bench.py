"""relax-bench's side harness: onnxruntime on the same .onnx files (and the same inputs),
numpy's matmul (OpenBLAS) and, for the cases that ask, OpenVINO, with the same thread
count. Reads a JSON spec on its first line of stdin:

    {"threads": 2, "warmup": 10, "seconds": 1.0, "min_iterations": 20, "mode": "time",
     "cases": [{"name": "mlp_b1", "model": "models/mlp_b1.onnx", "openvino": false,
                "inputs": {"x": {"shape": [1, 784], "dtype": "float32", "data": [...]}}}],
     "matmul": 1024}

With "mode": "serve" (how relax-bench times, interleaved with its own runs): prints
{"blas": "...", "openvino": "..."} once the sessions are ready, then answers each
request line {"time": NAME, "engine": ENGINE} (a case's name, or "numpy_matmul";
ENGINE "onnxruntime" when absent, "openvino_f32" or "openvino") with {"seconds": median},
until stdin closes. With "mode": "outputs", prints {"outputs": {name: [flat output
values]}}, and {"openvino": {name: {"f32": [...], "default": [...]}}} for the cases that
ask for OpenVINO.

OpenVINO runs each model twice, compiled for latency (one stream, the same threads):
with INFERENCE_PRECISION_HINT=f32, and with its default, which on a CPU with AVX512-BF16
or AMX computes convolutions and matmuls in bf16.
"""

import json
import statistics
import sys
import time

import numpy as np
import onnxruntime
import openvino
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


def openvino_requests(path, threads):
    """The model compiled by OpenVINO for the CPU: {"f32": request, "default": request}."""
    core = openvino.Core()
    requests = {}
    for precision in ("f32", "default"):
        config = {
            "INFERENCE_NUM_THREADS": str(threads),
            "NUM_STREAMS": "1",
            "PERFORMANCE_HINT": "LATENCY",
        }
        if precision == "f32":
            config["INFERENCE_PRECISION_HINT"] = "f32"
        compiled = core.compile_model(core.read_model(path), "CPU", config)
        requests[precision] = compiled.create_infer_request()
    return requests


def openvino_description():
    core = openvino.Core()
    default = core.compile_model(
        _tiny_model(), "CPU", {"INFERENCE_NUM_THREADS": "1"}
    ).get_property("INFERENCE_PRECISION_HINT").get_type_name()
    return f"OpenVINO {openvino.__version__.split('-')[0]} on {core.get_property('CPU', 'FULL_DEVICE_NAME')}, default precision {default}"


def _tiny_model():
    """A one-MatMul model, to ask OpenVINO which precision it picks by default here."""
    from openvino import opset13 as ops

    x = ops.parameter([1, 16], np.float32, name="x")
    weights = ops.constant(np.ones((16, 16), dtype=np.float32))
    return openvino.Model([ops.matmul(x, weights, False, False)], [x], "probe")


def main():
    spec = json.loads(sys.stdin.readline())
    threads = spec["threads"]
    if spec.get("mode") == "outputs":
        outputs = {}
        from_openvino = {}
        for case in spec["cases"]:
            result = session(case["model"], threads).run(None, feeds_of(case))[0]
            outputs[case["name"]] = np.asarray(result, dtype=np.float64).ravel().tolist()
            if case.get("openvino"):
                from_openvino[case["name"]] = {
                    precision: np.asarray(request.infer(feeds_of(case))[0], dtype=np.float64).ravel().tolist()
                    for precision, request in openvino_requests(case["model"], threads).items()
                }
        print(json.dumps({"outputs": outputs, "openvino": from_openvino}))
        return
    timing = (spec["warmup"], spec["seconds"], spec["min_iterations"])
    runners = {case["name"]: (session(case["model"], threads), feeds_of(case)) for case in spec["cases"]}
    openvinos = {
        case["name"]: openvino_requests(case["model"], threads) for case in spec["cases"] if case.get("openvino")
    }
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
        print(json.dumps({"blas": blas, "openvino": openvino_description()}), flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            name = request["time"]
            engine = request.get("engine", "onnxruntime")
            if name == "numpy_matmul":
                seconds = median_seconds(lambda: a @ b, *timing)
            elif engine == "onnxruntime":
                runner, feeds = runners[name]
                seconds = median_seconds(lambda: runner.run(None, feeds), *timing)
            else:
                compiled = openvinos[name]["f32" if engine == "openvino_f32" else "default"]
                feeds = runners[name][1]
                seconds = median_seconds(lambda: compiled.infer(feeds), *timing)
            print(json.dumps({"seconds": seconds}), flush=True)


if __name__ == "__main__":
    main()
