"""onnxruntime reference for the onnx-classifier: the first N held-out digits through
models/digits.onnx, printed as JSON like `onnx-classifier --json N`.

    python examples/onnx-classifier/reference.py N    # needs numpy and onnxruntime
"""

import json
import os
import sys

import numpy as np
import onnxruntime

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "fixtures"))
import safetensors_numpy  # noqa: E402

count = int(sys.argv[1])
pixels = safetensors_numpy.load(os.path.join(HERE, "..", "quickstart", "data", "test_digits.safetensors"))["x"][:count]
session = onnxruntime.InferenceSession(os.path.join(HERE, "models", "digits.onnx"), providers=["CPUExecutionProvider"])
logits, probabilities = session.run(["logits", "probabilities"], {"pixels": np.ascontiguousarray(pixels, np.float32)})
print(json.dumps({
    "logits": {"shape": list(logits.shape), "data": logits.ravel().tolist()},
    "probabilities": {"shape": list(probabilities.shape), "data": probabilities.ravel().tolist()},
}))
