"""`cargo relax tracker`: runs TVM's RPC tracker and prints the devices that register.

    python tracker.py HOST PORT

The tracker (tvm.rpc.tracker, which needs tornado) runs in its own process, as
`python -m tvm.exec.rpc_tracker` runs it; this process asks it for its summary every
second and prints each device that comes or goes, until interrupted.
"""

import sys
import time


def devices(summary):
    """{(key, address): count} of the registered devices."""
    found = {}
    for server in summary.get("server_info", []):
        key = server.get("key", "")
        if not key.startswith("server:"):
            continue
        host, port = server.get("addr", [None, None])
        name = (key[len("server:"):], f"{host}:{port}")
        found[name] = found.get(name, 0) + 1
    return found


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    from tvm import rpc
    from tvm.rpc.tracker import Tracker

    tracker = Tracker(host, port=port, port_end=port + 1, silent=True)
    print(f"tracker listening on {host}:{tracker.port}; devices register with "
          f"`relax-rpc-server --tracker {host}:{tracker.port} --key KEY` (Ctrl-C stops it)", flush=True)
    known = {}
    try:
        while True:
            time.sleep(1)
            try:
                current = devices(rpc.connect_tracker(host, tracker.port).summary())
            except (OSError, RuntimeError) as error:
                print(f"asking the tracker for its devices failed: {error}", flush=True)
                continue
            for (key, address), count in sorted(current.items()):
                if known.get((key, address)) != count:
                    print(f"device `{key}` at {address} registered", flush=True)
            for (key, address) in sorted(set(known) - set(current)):
                print(f"device `{key}` at {address} left", flush=True)
            known = current
    except KeyboardInterrupt:
        pass
    finally:
        tracker.terminate()


if __name__ == "__main__":
    main()
