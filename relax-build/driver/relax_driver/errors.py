"""The driver's error type and the trimming of tracebacks to the user's code."""

import os
import sys
import traceback


class DriverError(Exception):
    """A failure of a kind that relax-build maps to a manifest key (driver::FailureKind)."""

    def __init__(self, kind, message, detail="", subject=None, operators=None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.detail = detail
        self.subject = subject
        self.operators = operators or []


def failure_reason(error):
    """`Type: first line of the message` (at most 300 characters of it), for errors."""
    first_line = str(error).splitlines()[0][:300] if str(error) else ""
    return f"{type(error).__name__}: {first_line}"


def user_traceback(source_path, exc_info=None):
    """The current exception's traceback, trimmed to the frames in the user's file.

    The frames of this driver and of importlib say nothing useful to a user; the last
    frames inside TVM are kept when the error was raised there, since they name the
    operator or pass that failed.
    """
    exc_type, exc_value, exc_tb = exc_info or sys.exc_info()
    frames = traceback.extract_tb(exc_tb)
    source_path = os.path.realpath(source_path)
    user_indices = [i for i, f in enumerate(frames) if os.path.realpath(f.filename) == source_path]
    if user_indices:
        kept = [frames[i] for i in user_indices] + frames[user_indices[-1] + 1 :][-2:]
    else:
        kept = frames[-3:]
    lines = ["Traceback (most recent call last, trimmed to the model source):\n"]
    lines += traceback.format_list(kept)
    lines += traceback.format_exception_only(exc_type, exc_value)
    return "".join(lines).rstrip()
