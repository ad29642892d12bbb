"""Eager PyTorch on the first N held-out digits: the reference the tests compare the
example's `--json N` with. python reference.py N"""

import json
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "models"))

from cnn import DigitsCnn  # noqa: E402


def read_safetensors(path):
    with open(path, "rb") as handle:
        data = handle.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    body = data[8 + length :]
    dtypes = {"F32": "<f4", "I64": "<i8"}
    return {
        name: np.frombuffer(body[entry["data_offsets"][0] : entry["data_offsets"][1]], dtype=dtypes[entry["dtype"]])
        .reshape(entry["shape"])
        .copy()
        for name, entry in header.items()
        if name != "__metadata__"
    }


count = int(sys.argv[1])
model = DigitsCnn()
weights = read_safetensors(os.path.join(HERE, "models", "cnn.safetensors"))
model.load_state_dict({name: torch.from_numpy(value) for name, value in weights.items()}, strict=True)
images = read_safetensors(os.path.join(HERE, "..", "quickstart", "data", "test_digits.safetensors"))["x"]
with torch.no_grad():
    probabilities = model.eval()(torch.from_numpy(images[:count]).reshape(count, 1, 8, 8))
print(json.dumps({"shape": list(probabilities.shape), "data": probabilities.reshape(-1).tolist()}))
