"""`cargo relax bench --rpc`: times compiled models on a device running relax-rpc-server.

    python rpc_bench.py REQUEST.json

The request: {"host", "port", "key" (null: connect to the device directly; else ask the
tracker at host:port for a device of that key), "wait" (seconds to wait for a free
device), "models": [{"name", "dir" (library.so, signature.json, weights.safetensors),
"dims": {...}}], "warmup", "repeat"}. Prints one JSON line per model: the device's
answer to `relax_rpc.time_model` with "device" added. Errors go to stderr, exit 1.
"""

import json
import os
import sys
import time


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def free_devices(summary, key):
    queue = summary.get("queue_info", {}).get(key)
    return queue.get("free", 0) if queue else 0


def known_keys(summary):
    keys = sorted({server["key"][len("server:"):] for server in summary.get("server_info", [])
                   if server.get("key", "").startswith("server:")})
    return ", ".join(f"`{key}`" for key in keys) or "none"


def session(request):
    """A session with the device, and a description of it."""
    from tvm import rpc

    host, port, key = request["host"], request["port"], request["key"]
    if key is None:
        try:
            return rpc.connect(host, port, session_timeout=0), f"{host}:{port}"
        except Exception as error:
            fail(f"cannot connect to the device at {host}:{port}: {error}\n"
                 "Fix: start relax-rpc-server there (--port), or pass the tracker's HOST:PORT:KEY")
    try:
        tracker = rpc.connect_tracker(host, port)
    except Exception as error:
        fail(f"cannot reach the tracker at {host}:{port}: {error}\nFix: start one with `cargo relax tracker`")
    deadline = time.monotonic() + request["wait"]
    while True:
        summary = tracker.summary()
        if free_devices(summary, key) > 0:
            break
        if time.monotonic() > deadline:
            fail(f"no device of key `{key}` became free at the tracker {host}:{port} within {request['wait']} s "
                 f"(the devices it knows: {known_keys(summary)})\n"
                 f"Fix: start `relax-rpc-server --tracker {host}:{port} --key {key}` on the device, or wait longer "
                 "with --wait SECONDS")
        time.sleep(0.5)
    try:
        return tracker.request(key, priority=1, session_timeout=0), f"`{key}` via {host}:{port}"
    except Exception as error:
        fail(f"the tracker at {host}:{port} could not hand out a device of key `{key}`: {error}")


def main():
    with open(sys.argv[1]) as file:
        request = json.load(file)
    remote, device = session(request)
    time_model = remote.get_function("relax_rpc.time_model")
    for model in request["models"]:
        names = {}
        for file_name in ("library.so", "signature.json", "weights.safetensors"):
            path = os.path.join(model["dir"], file_name)
            if os.path.exists(path):
                names[file_name] = f"{model['name']}.{file_name}"
                remote.upload(path, target=names[file_name])
        command = {
            "library": names["library.so"],
            "signature": names["signature.json"],
            "weights": names.get("weights.safetensors"),
            "dims": model["dims"],
            "warmup": request["warmup"],
            "repeat": request["repeat"],
        }
        try:
            answer = json.loads(time_model(json.dumps(command)))
        except Exception as error:
            message = str(error)
            fail(f"model `{model['name']}` on {device}: {message.split('Error caught from RPC call:')[-1].strip()}")
        answer["device"] = device
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
