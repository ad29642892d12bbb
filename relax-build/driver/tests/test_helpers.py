"""Unit tests of the driver's helpers that need no TVM (run by tests/driver_python.rs).

    python -m unittest discover -s relax-build/driver/tests
"""

import json
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import main  # noqa: E402
from relax_driver import build, errors, files, signature, tune  # noqa: E402
from relax_driver.errors import DriverError  # noqa: E402


class Files(unittest.TestCase):
    def test_atomic_writes_leave_only_the_file(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "signature.json")
            files.write_atomically(path, "one")
            files.write_atomically(path, b"two")
            self.assertEqual(os.listdir(folder), ["signature.json"])
            with open(path) as handle:
                self.assertEqual(handle.read(), "two")

    def test_a_0d_array_keeps_its_empty_shape(self):
        import numpy as np

        data = files.safetensors_bytes([("low", np.array(6.0, np.float32))])
        (length,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + length])
        self.assertEqual(header["low"], {"dtype": "F32", "shape": [], "data_offsets": [0, 4]})
        self.assertEqual(np.frombuffer(data[8 + length :], np.float32).tolist(), [6.0])

    def test_safetensors_round_trip_through_the_header(self):
        import numpy as np

        data = files.safetensors_bytes([("w", np.arange(6, dtype=np.float32).reshape(2, 3)), ("b", np.ones(2, np.int64))])
        (length,) = struct.unpack("<Q", data[:8])
        self.assertEqual(length % 8, 0)
        header = json.loads(data[8 : 8 + length])
        self.assertEqual(header["w"], {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]})
        self.assertEqual(header["b"]["data_offsets"], [24, 40])
        body = data[8 + length :]
        self.assertEqual(np.frombuffer(body[:24], np.float32).tolist(), [0, 1, 2, 3, 4, 5])


class Tracebacks(unittest.TestCase):
    def test_frames_are_trimmed_to_the_model_source(self):
        with tempfile.TemporaryDirectory() as folder:
            source = os.path.join(folder, "model.py")
            with open(source, "w") as handle:
                handle.write("def build():\n    return 1 // 0\n")
            scope = {}
            exec(compile(open(source).read(), source, "exec"), scope)
            try:
                scope["build"]()
            except ZeroDivisionError:
                text = errors.user_traceback(source)
        self.assertIn("trimmed to the model source", text)
        self.assertIn('model.py", line 2, in build', text)
        self.assertNotIn("test_helpers.py", text)
        self.assertTrue(text.endswith("ZeroDivisionError: integer division or modulo by zero"))


class Protocol(unittest.TestCase):
    def test_another_protocol_is_refused(self):
        with self.assertRaises(DriverError) as caught:
            main.check_request({"protocol": main.PROTOCOL + 1})
        self.assertEqual(caught.exception.kind, "protocol")
        main.check_request({"protocol": main.PROTOCOL})


def function(name, *shapes):
    return {
        "name": name,
        "inputs": [{"name": f"x{i}", "dtype": "float32", "shape": shape} for i, shape in enumerate(shapes)],
        "weights": [],
        "outputs": [],
        "returns_tuple": False,
    }


class Tuning(unittest.TestCase):
    def test_symbolic_dims_are_listed_once_in_order(self):
        functions = [function("f", ["batch", 8], ["batch", "seq"]), function("g", [4])]
        self.assertEqual(signature.symbolic_dims(functions), ["batch", "seq"])

    def test_tuning_a_symbolic_model_is_refused_naming_the_dims(self):
        with self.assertRaises(DriverError) as caught:
            tune.refuse_symbolic_dims([function("forward", ["batch", 64])], "digits")
        self.assertEqual(caught.exception.kind, "tuning_symbolic")
        self.assertIn("symbolic dims batch (in forward(x0))", caught.exception.message)
        tune.refuse_symbolic_dims([function("forward", [32, 64])], "digits")

    def test_records_lose_blank_lines_and_a_bad_line_names_the_file(self):
        with tempfile.TemporaryDirectory() as records, tempfile.TemporaryDirectory() as output:
            for name in ("database_workload.json", "database_tuning_record.json"):
                with open(os.path.join(records, name), "w") as handle:
                    handle.write('["a"]\n\n["b"]')
            copied = build.checked_records_copy(records, output)
            with open(os.path.join(copied, "database_workload.json")) as handle:
                self.assertEqual(handle.read(), '["a"]\n["b"]\n')
            with open(os.path.join(records, "database_tuning_record.json"), "a") as handle:
                handle.write("\n{not json\n")
            with self.assertRaises(DriverError) as caught:
                build.checked_records_copy(records, output)
            self.assertEqual(caught.exception.kind, "tuning_records")
            self.assertIn("database_tuning_record.json line 4 is not valid JSON", caught.exception.message)


if __name__ == "__main__":
    unittest.main()
