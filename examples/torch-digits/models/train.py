"""Trains DigitsCnn on the 8x8 digits of scikit-learn, on the quickstart's training
split (its held-out 360 digits, examples/quickstart/data/test_digits.safetensors, are
never seen), and writes models/cnn.safetensors. Seeded: a rerun writes the same file.

    python models/train.py     # needs torch, numpy and scikit-learn
"""

import json
import os
import struct
import sys

import numpy as np
import torch
from sklearn.datasets import load_digits

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cnn import DigitsCnn  # noqa: E402


def save_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, tensor in tensors.items():
        data = tensor.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(encoded)) + encoded + b"".join(chunks))


def main():
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(digits.target, dtype=torch.int64)
    # The quickstart's split (fixtures/train_digits.py): the first 360 of this order are held out.
    order = np.random.default_rng(0).permutation(len(x))
    test, train = torch.tensor(order[:360]), torch.tensor(order[360:])
    torch.manual_seed(0)
    model = DigitsCnn()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    for _ in range(30):
        for batch in train[torch.randperm(len(train))].split(32):
            probabilities = model(x[batch])
            loss = torch.nn.functional.nll_loss(torch.log(probabilities + 1e-9), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        accuracy = (model(x[test]).argmax(1) == y[test]).float().mean().item()
    print(f"held-out accuracy with eager PyTorch: {accuracy:.4f} on {len(test)} digits")
    save_safetensors(os.path.join(HERE, "cnn.safetensors"), model.state_dict())


if __name__ == "__main__":
    main()
