"""A small CNN for 8x8 digits, written in PyTorch: two 3x3 convolutions, a max pool, a
linear layer and a softmax. Its weights are trained by train.py."""

import torch
from torch import nn


class DigitsCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, images):
        x = torch.relu(self.conv1(images))
        x = self.pool(torch.relu(self.conv2(x)))
        return torch.softmax(self.fc(x.flatten(1)), dim=-1)
