"""devices.py against a stand-in tracker that speaks TVM's tracker protocol: every wait
for a device has a deadline, and its errors name the key and the devices there are."""

import json
import os
import socket
import struct
import threading
import time
import unittest

import tvm.rpc  # noqa: F401  (imported by `devices.session`, here once, outside the timed waits)
from relax_driver import devices


class StandInTracker:
    """Answers the handshake and SUMMARY with `summary`; never answers REQUEST (a device
    seen free that left before the tracker handed it out)."""

    def __init__(self, summary):
        self.summary = summary
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.port = self.listener.getsockname()[1]
        self.requests = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.answer, args=(connection,), daemon=True).start()

    def answer(self, connection):
        with connection:
            if connection.recv(4) != struct.pack("<i", devices.TRACKER_MAGIC):
                return
            connection.sendall(struct.pack("<i", devices.TRACKER_MAGIC))
            while True:
                header = connection.recv(4)
                if len(header) < 4:
                    return
                (size,) = struct.unpack("<i", header)
                message = json.loads(connection.recv(size))
                if message[0] == devices.SUMMARY:
                    payload = json.dumps([devices.SUCCESS, self.summary]).encode()
                    connection.sendall(struct.pack("<i", len(payload)) + payload)
                elif message[0] == devices.REQUEST:
                    self.requests.append(message[1])

    def close(self):
        self.listener.close()


class BoundedWaits(unittest.TestCase):
    def test_a_key_without_devices_is_refused_after_the_wait_naming_the_known_ones(self):
        tracker = StandInTracker({"queue_info": {}, "server_info": [{"key": "server:board-a"}, {"key": "server:board-b"}]})
        started = time.monotonic()
        with self.assertRaises(devices.DeviceError) as raised:
            devices.session("127.0.0.1", tracker.port, "board-c", 1)
        self.assertLess(time.monotonic() - started, 5)
        message = str(raised.exception)
        self.assertTrue(message.startswith(devices.NO_FREE_DEVICE), message)
        for part in ("`board-c`", "within 1 s", "`board-a`, `board-b`", "--wait SECONDS"):
            self.assertIn(part, message)
        tracker.close()

    def test_a_device_that_is_never_handed_out_ends_the_request_after_the_wait(self):
        tracker = StandInTracker({"queue_info": {"board": {"free": 1, "pending": 0}}, "server_info": []})
        started = time.monotonic()
        with self.assertRaises(devices.DeviceError) as raised:
            devices.session("127.0.0.1", tracker.port, "board", 1)
        self.assertLess(time.monotonic() - started, 5)
        self.assertIn("no device of key `board` was handed out", str(raised.exception))
        self.assertEqual(tracker.requests, ["board"])
        tracker.close()

    def test_no_tracker_and_a_port_that_is_not_one(self):
        with self.assertRaises(devices.DeviceError) as raised:
            devices.Tracker("127.0.0.1", 1)
        self.assertIn("cannot reach the tracker at 127.0.0.1:1", str(raised.exception))
        self.assertIn("cargo relax tracker", str(raised.exception))
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def wrong_answer():
            connection, _ = listener.accept()
            connection.recv(4)
            connection.sendall(b"HTTP")
            connection.close()

        threading.Thread(target=wrong_answer, daemon=True).start()
        with self.assertRaises(devices.DeviceError) as raised:
            devices.Tracker("127.0.0.1", listener.getsockname()[1])
        self.assertIn("is not a TVM tracker", str(raised.exception))
        listener.close()

    def test_the_token_of_relax_rpc_token_goes_in_the_key_the_device_sees(self):
        saved = os.environ.pop(devices.TOKEN_VARIABLE, None)
        try:
            self.assertEqual(devices.client_key("board:1.2"), "board:1.2")
            self.assertEqual(devices.client_key(), "")
            os.environ[devices.TOKEN_VARIABLE] = "s3cret\n"
            self.assertEqual(devices.client_key("board:1.2"), "board:1.2 -token=s3cret")
            self.assertEqual(devices.client_key(), " -token=s3cret")
            self.assertEqual(
                devices.without_token(RuntimeError("no server matches key=client: -token=s3cret")),
                "no server matches key=client: -token=<RELAX_RPC_TOKEN>",
            )
            os.environ[devices.TOKEN_VARIABLE] = "two words"
            with self.assertRaises(devices.DeviceError) as raised:
                devices.client_key()
            self.assertIn("RELAX_RPC_TOKEN holds spaces", str(raised.exception))
        finally:
            os.environ.pop(devices.TOKEN_VARIABLE, None)
            if saved is not None:
                os.environ[devices.TOKEN_VARIABLE] = saved


if __name__ == "__main__":
    unittest.main()
