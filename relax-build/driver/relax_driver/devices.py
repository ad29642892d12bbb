"""Devices behind TVM's RPC tracker (`--rpc HOST:PORT:KEY`): a session with a free one,
within a bounded wait, and an error naming the devices there are when none comes.

TVM's own `TrackerSession.request` waits forever for a device and, when its socket
fails, reconnects and asks again: a board that left the tracker would hang a tuning run.
Here every step has a deadline. Used by the tuning run (`tune.py`, and meta-schedule's
runner workers, which import this module by name) and by `cargo relax bench --rpc`
(cargo-relax's client imports it from the installed driver).

When `RELAX_RPC_TOKEN` is set, every session presents it to the device
(`-token=SECRET` in the key of TVM's handshake), as a relax-rpc-server started with a
token requires; TVM's tracker never sees it.
"""

import json
import os
import socket
import struct
import time

# The shared secret a relax-rpc-server may require (see its --token-file).
TOKEN_VARIABLE = "RELAX_RPC_TOKEN"

# How the error of a request that found no free device begins: the tuning run's failure
# reporter looks for it in the runner's messages.
NO_FREE_DEVICE = "no device of key"

# TVM's tracker protocol (tvm/rpc/base.py): a magic number each way, then
# length-prefixed JSON lists whose first item is a code.
TRACKER_MAGIC = 0x2F271
SUCCESS, REQUEST, SUMMARY = 0, 4, 6
POLL_SECONDS = 0.5


class DeviceError(Exception):
    """A device could not be reached; the message says why and what to do."""


class Tracker:
    """A connection to TVM's tracker at `host:port`."""

    def __init__(self, host, port, timeout_seconds=10):
        self.host, self.port = host, port
        try:
            self.socket = socket.create_connection((host, port), timeout=timeout_seconds)
        except OSError as error:
            raise DeviceError(
                f"cannot reach the tracker at {host}:{port}: {error}; start one with `cargo relax tracker`"
            ) from error
        try:
            self.socket.sendall(struct.pack("<i", TRACKER_MAGIC))
            magic = struct.unpack("<i", self._receive_exactly(4))[0]
        except OSError:
            magic = None
        if magic != TRACKER_MAGIC:
            self.close()
            raise DeviceError(f"{host}:{port} is not a TVM tracker (it did not answer the tracker's handshake)")

    def close(self):
        self.socket.close()

    def _receive_exactly(self, size):
        data = b""
        while len(data) < size:
            chunk = self.socket.recv(size - len(data))
            if not chunk:
                raise ConnectionError("the tracker closed the connection")
            data += chunk
        return data

    def _ask(self, message, timeout_seconds):
        self.socket.settimeout(timeout_seconds)
        payload = json.dumps(message).encode()
        self.socket.sendall(struct.pack("<i", len(payload)) + payload)
        size = struct.unpack("<i", self._receive_exactly(4))[0]
        answer = json.loads(self._receive_exactly(size).decode())
        if answer[0] != SUCCESS:
            raise ConnectionError(f"the tracker answered {answer!r}")
        return answer[1]

    def summary(self):
        """The tracker's summary: "queue_info" (free and pending per key), "server_info"."""
        return self._ask([SUMMARY], 10)

    def wait_for_free_device(self, key, wait_seconds):
        """Returns once a device of `key` is free; raises DeviceError after `wait_seconds`."""
        deadline = time.monotonic() + wait_seconds
        while True:
            summary = self.summary()
            queue = summary.get("queue_info", {}).get(key) or {}
            if queue.get("free", 0) > 0:
                return
            if time.monotonic() > deadline:
                raise DeviceError(
                    f"{NO_FREE_DEVICE} `{key}` became free at the tracker {self.host}:{self.port} within "
                    f"{wait_seconds} s (the devices it knows: {known_keys(summary)}); start "
                    f"`relax-rpc-server --tracker {self.host}:{self.port} --key {key}` on the device, or wait "
                    "longer with --wait SECONDS"
                )
            time.sleep(POLL_SECONDS)

    def request(self, key, wait_seconds):
        """The address and match key of a device of `key` the tracker hands out, waiting
        `wait_seconds` at most (the device seen free may be taken, or leave, first)."""
        try:
            return self._ask([REQUEST, key, "", 1], wait_seconds)
        except socket.timeout as error:
            raise DeviceError(
                f"{NO_FREE_DEVICE} `{key}` was handed out by the tracker at {self.host}:{self.port} within "
                f"{wait_seconds} s; start `relax-rpc-server --tracker {self.host}:{self.port} --key {key}` on "
                "the device, or wait longer with --wait SECONDS"
            ) from error


def known_keys(summary):
    """The keys of the devices registered in a tracker's summary, for messages."""
    keys = sorted(
        {
            server["key"][len("server:") :]
            for server in summary.get("server_info", [])
            if server.get("key", "").startswith("server:")
        }
    )
    return ", ".join(f"`{key}`" for key in keys) or "none"


def client_key(match_key=""):
    """The key to connect to a device with: the tracker's match key (empty for a device
    reached directly), and the token of RELAX_RPC_TOKEN when it is set."""
    token = os.environ.get(TOKEN_VARIABLE, "").strip()
    if not token:
        return match_key
    if any(character.isspace() for character in token):
        raise DeviceError(f"{TOKEN_VARIABLE} holds spaces: set it to the device's token alone")
    return f"{match_key} -token={token}"


def without_token(error):
    """An error's text with the token of RELAX_RPC_TOKEN masked (TVM's client repeats
    the key it sent)."""
    text, token = str(error), os.environ.get(TOKEN_VARIABLE, "").strip()
    return text.replace(token, "<RELAX_RPC_TOKEN>") if token else text


def session(host, port, key, wait_seconds, session_timeout=0):
    """An RPC session with a free device of `key` at the tracker `host:port`, waiting
    `wait_seconds` at most for one; or, with `key` None, with the server at `host:port`."""
    # Imported first: a device handed out waits a few seconds for its client only, and
    # importing TVM takes one to several.
    from tvm import rpc

    if key is None:
        try:
            return rpc.connect(host, port, client_key(), session_timeout=session_timeout)
        except Exception as error:
            raise DeviceError(
                f"cannot connect to the device at {host}:{port}: {without_token(error)}; start relax-rpc-server there "
                f"(--port), or pass the tracker's HOST:PORT:KEY (a device that requires a token refuses "
                f"a client without the right {TOKEN_VARIABLE})"
            ) from error
    tracker = Tracker(host, port)
    try:
        tracker.wait_for_free_device(key, wait_seconds)
        address, device_port, match_key = tracker.request(key, wait_seconds)
    finally:
        tracker.close()
    try:
        return rpc.connect(address, device_port, client_key(match_key), session_timeout=session_timeout)
    except Exception as error:
        raise DeviceError(
            f"the device of key `{key}` at {address}:{device_port}, handed out by the tracker, did not answer: {without_token(error)} "
            f"(a device that requires a token refuses a client without the right {TOKEN_VARIABLE})"
        ) from error


def runner_session(wait_seconds, config):
    """meta-schedule's RPC runner's `f_create_session` (`functools.partial` over the
    wait): a session as `session` gives it, for the runner's tracker and key."""
    return session(
        config.tracker_host,
        int(config.tracker_port),
        config.tracker_key,
        wait_seconds,
        session_timeout=config.session_timeout_sec,
    )
