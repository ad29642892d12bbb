"""The quickstart's digit classifier: 64 pixels -> 32 hidden (ReLU) -> 10 logits.

Its weights (models/digits.safetensors) were trained by fixtures/train_digits.py.
"""

from tvm.relax.frontend import nn


class DigitsMLP(nn.Module):
    def __init__(self):
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(nn.relu(self.fc1(x)))
