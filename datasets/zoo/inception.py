"""Inception-v3 (Szegedy et al. 2016) without the auxiliary head, in plain torch, on 3 x 299 x 299 images.

Follows torchvision's layer shapes: 23,834,568 learned parameters without the aux classifier (torchvision's
27,161,264 minus the aux head's 3,326,696). `scale` divides every channel count for the tiny CI variant.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class BasicConv2d(nn.Module):
    """Conv (no bias) -> BatchNorm (eps 1e-3) -> ReLU."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size, stride=1, padding=0):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, kernel_size, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(out_ch, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class InceptionA(nn.Module):
    """35x35 block: 1x1 | 1x1-5x5 | 1x1-3x3-3x3 | avgpool-1x1 branches, concatenated."""

    def __init__(self, in_ch: int, pool_features: int, s: int = 1):
        super().__init__()
        self.branch1x1 = BasicConv2d(in_ch, 64 // s, 1)
        self.branch5x5_1 = BasicConv2d(in_ch, 48 // s, 1)
        self.branch5x5_2 = BasicConv2d(48 // s, 64 // s, 5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(in_ch, 64 // s, 1)
        self.branch3x3dbl_2 = BasicConv2d(64 // s, 96 // s, 3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96 // s, 96 // s, 3, padding=1)
        self.branch_pool = BasicConv2d(in_ch, pool_features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.branch1x1(x)
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        bp = self.branch_pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([b1, b5, b3, bp], 1)


class InceptionB(nn.Module):
    """Grid reduction 35 -> 17: 3x3/2 | 1x1-3x3-3x3/2 | maxpool/2."""

    def __init__(self, in_ch: int, s: int = 1):
        super().__init__()
        self.branch3x3 = BasicConv2d(in_ch, 384 // s, 3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(in_ch, 64 // s, 1)
        self.branch3x3dbl_2 = BasicConv2d(64 // s, 96 // s, 3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96 // s, 96 // s, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3(x)
        bd = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([b3, bd, F.max_pool2d(x, 3, stride=2)], 1)


class InceptionC(nn.Module):
    """17x17 block with factorised 7x7 convolutions (1x7 and 7x1)."""

    def __init__(self, in_ch: int, c7: int, s: int = 1):
        super().__init__()
        self.branch1x1 = BasicConv2d(in_ch, 192 // s, 1)
        self.branch7x7_1 = BasicConv2d(in_ch, c7, 1)
        self.branch7x7_2 = BasicConv2d(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7_3 = BasicConv2d(c7, 192 // s, (7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = BasicConv2d(in_ch, c7, 1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = BasicConv2d(c7, 192 // s, (1, 7), padding=(0, 3))
        self.branch_pool = BasicConv2d(in_ch, 192 // s, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.branch1x1(x)
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        bd = self.branch7x7dbl_1(x)
        for conv in (self.branch7x7dbl_2, self.branch7x7dbl_3, self.branch7x7dbl_4, self.branch7x7dbl_5):
            bd = conv(bd)
        bp = self.branch_pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([b1, b7, bd, bp], 1)


class InceptionD(nn.Module):
    """Grid reduction 17 -> 8: 1x1-3x3/2 | 1x1-1x7-7x1-3x3/2 | maxpool/2."""

    def __init__(self, in_ch: int, s: int = 1):
        super().__init__()
        self.branch3x3_1 = BasicConv2d(in_ch, 192 // s, 1)
        self.branch3x3_2 = BasicConv2d(192 // s, 320 // s, 3, stride=2)
        self.branch7x7x3_1 = BasicConv2d(in_ch, 192 // s, 1)
        self.branch7x7x3_2 = BasicConv2d(192 // s, 192 // s, (1, 7), padding=(0, 3))
        self.branch7x7x3_3 = BasicConv2d(192 // s, 192 // s, (7, 1), padding=(3, 0))
        self.branch7x7x3_4 = BasicConv2d(192 // s, 192 // s, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        b7 = self.branch7x7x3_4(self.branch7x7x3_3(self.branch7x7x3_2(self.branch7x7x3_1(x))))
        return torch.cat([b3, b7, F.max_pool2d(x, 3, stride=2)], 1)


class InceptionE(nn.Module):
    """8x8 block with expanded 1x3 / 3x1 branches."""

    def __init__(self, in_ch: int, s: int = 1):
        super().__init__()
        self.branch1x1 = BasicConv2d(in_ch, 320 // s, 1)
        self.branch3x3_1 = BasicConv2d(in_ch, 384 // s, 1)
        self.branch3x3_2a = BasicConv2d(384 // s, 384 // s, (1, 3), padding=(0, 1))
        self.branch3x3_2b = BasicConv2d(384 // s, 384 // s, (3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = BasicConv2d(in_ch, 448 // s, 1)
        self.branch3x3dbl_2 = BasicConv2d(448 // s, 384 // s, 3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(384 // s, 384 // s, (1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = BasicConv2d(384 // s, 384 // s, (3, 1), padding=(1, 0))
        self.branch_pool = BasicConv2d(in_ch, 192 // s, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.branch1x1(x)
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        bd = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        bd = torch.cat([self.branch3x3dbl_3a(bd), self.branch3x3dbl_3b(bd)], 1)
        bp = self.branch_pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([b1, b3, bd, bp], 1)


class InceptionV3(nn.Module):
    """Inception-v3 trunk (no aux head): stem, 3 x A, B, 4 x C, D, 2 x E, global average, dropout, FC."""

    def __init__(self, num_classes: int = 1000, s: int = 1):
        super().__init__()
        self.Conv2d_1a_3x3 = BasicConv2d(3, 32 // s, 3, stride=2)
        self.Conv2d_2a_3x3 = BasicConv2d(32 // s, 32 // s, 3)
        self.Conv2d_2b_3x3 = BasicConv2d(32 // s, 64 // s, 3, padding=1)
        self.Conv2d_3b_1x1 = BasicConv2d(64 // s, 80 // s, 1)
        self.Conv2d_4a_3x3 = BasicConv2d(80 // s, 192 // s, 3)
        a_out = lambda pool: (64 + 64 + 96) // s + pool  # noqa: E731
        self.Mixed_5b = InceptionA(192 // s, 32 // s, s)
        self.Mixed_5c = InceptionA(a_out(32 // s), 64 // s, s)
        self.Mixed_5d = InceptionA(a_out(64 // s), 64 // s, s)
        b_in = a_out(64 // s)
        self.Mixed_6a = InceptionB(b_in, s)
        c_in = (384 + 96) // s + b_in
        self.Mixed_6b = InceptionC(c_in, 128 // s, s)
        self.Mixed_6c = InceptionC(4 * (192 // s), 160 // s, s)
        self.Mixed_6d = InceptionC(4 * (192 // s), 160 // s, s)
        self.Mixed_6e = InceptionC(4 * (192 // s), 192 // s, s)
        d_in = 4 * (192 // s)
        self.Mixed_7a = InceptionD(d_in, s)
        e_in = 320 // s + 192 // s + d_in
        self.Mixed_7b = InceptionE(e_in, s)
        e_out = 320 // s + 4 * (384 // s) + 192 // s
        self.Mixed_7c = InceptionE(e_out, s)
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(e_out, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))
        x = F.max_pool2d(x, 3, stride=2)
        x = self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x))
        x = F.max_pool2d(x, 3, stride=2)
        for block in (self.Mixed_5b, self.Mixed_5c, self.Mixed_5d, self.Mixed_6a, self.Mixed_6b,
                      self.Mixed_6c, self.Mixed_6d, self.Mixed_6e, self.Mixed_7a, self.Mixed_7b,
                      self.Mixed_7c):
            x = block(x)
        x = self.dropout(torch.mean(x, dim=(2, 3)))
        return self.fc(x)


def inception_v3() -> nn.Module:
    """Inception-v3 without aux head, 23,834,568 learned parameters, input 3 x 299 x 299."""
    return InceptionV3()


def inception_tiny() -> nn.Module:
    """Inception-v3 structure with every channel count divided by 16, 10 classes (input 3 x 75 x 75)."""
    return InceptionV3(num_classes=10, s=16)
