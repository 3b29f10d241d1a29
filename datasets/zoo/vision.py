"""Image classifiers written in plain torch: VGG-19, ResNet-50/101 (v1.5), a tiny ResNet and a small CNN.

Layer shapes follow torchvision's definitions (no torchvision dependency), so parameter counts match the
published figures: VGG-19 143,667,240; ResNet-50 25,557,032; ResNet-101 44,549,160 (learned parameters;
the ONNX files also hold BatchNorm running statistics, which tag counts as float parameters).
"""

from __future__ import annotations

import torch
from torch import nn

VGG19_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
             512, 512, 512, 512, "M")


class VGG(nn.Module):
    """VGG (configuration E = VGG-19) on 3 x 224 x 224 images: 16 conv 3x3 + ReLU, 5 max-pools, 3 FC."""

    def __init__(self, cfg=VGG19_CFG, num_classes: int = 1000):
        super().__init__()
        layers, channels = [], 3
        for item in cfg:
            if item == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(channels, item, 3, padding=1), nn.ReLU()]
                channels = item
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(4096, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).reshape(-1, 512 * 7 * 7))


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: 1x1 -> 3x3 (stride here) -> 1x1 (x4 channels), BN after each, identity add."""

    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int = 1):
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """ResNet with bottleneck blocks: 7x7/2 stem, max-pool, four stages of `blocks`, global average, FC."""

    def __init__(self, blocks=(3, 4, 6, 3), base_width: int = 64, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, base_width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(base_width)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages, in_ch = [], base_width
        for i, count in enumerate(blocks):
            width = base_width * 2 ** i
            stage = []
            for j in range(count):
                stage.append(Bottleneck(in_ch, width, stride=2 if (j == 0 and i > 0) else 1))
                in_ch = width * Bottleneck.expansion
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(in_ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.mean(x, dim=(2, 3)))


class SmallCNN(nn.Module):
    """A small CNN for 3 x 32 x 32 images: 3 conv 3x3 (+BN, ReLU), 2 max-pools, global average, FC."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU())
        self.fc = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.mean(self.features(x), dim=(2, 3)))


def vgg19() -> nn.Module:
    """VGG-19, 143,667,240 parameters."""
    return VGG()


def resnet50() -> nn.Module:
    """ResNet-50 v1.5, 25,557,032 parameters (+ 53,120 BatchNorm running statistics)."""
    return ResNet((3, 4, 6, 3))


def resnet101() -> nn.Module:
    """ResNet-101 v1.5, 44,549,160 parameters (+ 105,344 BatchNorm running statistics)."""
    return ResNet((3, 4, 23, 3))


def resnet_tiny() -> nn.Module:
    """ResNet structure at CI size: one bottleneck per stage, base width 8, 10 classes (3 x 32 x 32)."""
    return ResNet((1, 1, 1, 1), base_width=8, num_classes=10)


def small_cnn() -> nn.Module:
    """SmallCNN for 3 x 32 x 32 images, 10 classes."""
    return SmallCNN()
