"""A ResNet-18-style CNN at half width, as a PyTorch user writes one: a 7x7 stride-2
stem with batch norm, ReLU and max pool, four stages of two basic blocks (3x3
convolution, batch norm, ReLU, twice, with a residual add; the first block of stages
2-4 halves the resolution, its shortcut a 1x1 stride-2 convolution with batch norm),
global average pool and a linear classifier over 1000 classes.

relax-bench compiles it from this file (its weights, seeded random values, are written
by make_models.py, which also exports the same module with the same weights to ONNX) to
compare the two imports of one architecture.
"""

import torch
from torch import nn

WIDTHS = (32, 64, 128, 256)
CLASSES = 1000


class BasicBlock(nn.Module):
    def __init__(self, channels, filters, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, filters, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(filters)
        self.conv2 = nn.Conv2d(filters, filters, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(filters)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or channels != filters:
            self.downsample = nn.Sequential(
                nn.Conv2d(channels, filters, 1, stride, bias=False),
                nn.BatchNorm2d(filters),
            )

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + shortcut)


class TorchCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, WIDTHS[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(WIDTHS[0])
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, channels = [], WIDTHS[0]
        for index, filters in enumerate(WIDTHS):
            stride = 1 if index == 0 else 2
            stages.append(nn.Sequential(BasicBlock(channels, filters, stride), BasicBlock(filters, filters, 1)))
            channels = filters
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(WIDTHS[-1], CLASSES)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))
