"""numpy reference for the quickstart: the same weights and held-out digits, predictions printed.

    python examples/quickstart/reference.py     # prints "accuracy: A" and "predictions: ..."
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "fixtures"))
import safetensors_numpy  # noqa: E402

weights = safetensors_numpy.load(os.path.join(HERE, "models", "digits.safetensors"))
test_set = safetensors_numpy.load(os.path.join(HERE, "data", "test_digits.safetensors"))
hidden = np.maximum(test_set["x"] @ weights["fc1.weight"].T + weights["fc1.bias"], 0)
logits = hidden @ weights["fc2.weight"].T + weights["fc2.bias"]
predictions = logits.argmax(axis=1)
print(f"accuracy: {(predictions == test_set['y']).mean():.4f}")
print("predictions: " + " ".join(str(p) for p in predictions))
