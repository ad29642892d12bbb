"""`cargo relax bench --rpc`: times compiled models on a device running relax-rpc-server.

    python rpc_bench.py REQUEST.json

The request: {"host", "port", "key" (null: connect to the device directly; else ask the
tracker at host:port for a device of that key), "wait" (seconds to wait for a free
device), "models": [{"name", "dir" (library.so, signature.json, weights.safetensors),
"dims": {...}}], "warmup", "repeat"}. Prints one JSON line per model: the device's
answer to `relax_rpc.time_model` with "device" added. Errors go to stderr, exit 1.
Runs with relax-build's driver importable (its `devices` module reaches the device).
"""

import json
import os
import sys


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def session(request):
    """A session with the device, and a description of it."""
    from relax_driver.devices import DeviceError, session as device_session

    host, port, key = request["host"], request["port"], request["key"]
    try:
        remote = device_session(host, port, key, request["wait"])
    except DeviceError as error:
        fail(str(error))
    return remote, (f"{host}:{port}" if key is None else f"`{key}` via {host}:{port}")


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
