"""Image classifiers of the papers: a small ResNet (the FedSampling paper's EMNIST ResNet) and VGG-9 (the
IWDS paper's CIFAR-10 model, as in FedMA).

BatchNorm replaced by GroupNorm (or no normalization): running statistics are not federated-safe (one set of
buffers every client overwrites) and not vmappable, and batch statistics couple the samples of a minibatch;
GroupNorm normalizes each sample on its own, as Hsieh et al. 2020 ("The non-IID data quagmire") do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from fedsample import checks
from fedsample.models.common import DROPOUT, NORM, WIDTHS, as_tuple, outputs

__all__ = ["ResNet", "VGG9"]


def image_shape(spec: object, input_shape: tuple[int, ...], smallest: int) -> tuple[int, int, int]:
    """``(C, H, W)`` with H, W >= ``smallest`` (one ``ValueError`` line otherwise)."""
    if len(input_shape) != 3 or min(input_shape[1:]) < smallest:
        raise ValueError(f"{type(spec).__name__} needs image inputs of shape (C, H, W) with H, W >= {smallest}, got {input_shape}")
    return input_shape[0], input_shape[1], input_shape[2]


def norm_layer(kind: str, channels: int, groups: int) -> nn.Module:
    """GroupNorm with ``groups`` groups over ``channels``, or the identity for ``kind == "none"``."""
    return nn.GroupNorm(groups, channels) if kind == "group" else nn.Identity()


def check_norm(spec: "ResNet | VGG9") -> None:
    """``spec.groups`` divides every width where GroupNorm is used."""
    if spec.norm == "group" and any(w % spec.groups for w in spec.widths):
        raise ValueError(f"{type(spec).__name__}: every width {spec.widths} must be divisible by groups={spec.groups} for GroupNorm")


class BasicBlock(nn.Module):
    """He et al. 2016's basic block: 3x3 conv, norm, ReLU, 3x3 conv, norm, plus the shortcut (a 1x1 conv and
    norm where the shape changes), ReLU."""

    def __init__(self, cin: int, cout: int, stride: int, norm: str, groups: int) -> None:
        super().__init__()
        bias = norm == "none"
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=bias)
        self.norm1 = norm_layer(norm, cout, groups)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=bias)
        self.norm2 = norm_layer(norm, cout, groups)
        changes = stride != 1 or cin != cout
        self.shortcut = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=bias), norm_layer(norm, cout, groups)) if changes else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.norm1(self.conv1(x)))
        return torch.relu(self.norm2(self.conv2(h)) + self.shortcut(x))


class ResNetNet(nn.Module):
    """The ResNet module: see :class:`ResNet`."""

    def __init__(self, channels: int, widths: tuple[int, ...], blocks: int, norm: str, groups: int, classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(channels, widths[0], 3, padding=1, bias=norm == "none"), norm_layer(norm, widths[0], groups), nn.ReLU())
        stages, cin = [], widths[0]
        for i, width in enumerate(widths):
            for j in range(blocks):
                stages.append(BasicBlock(cin, width, 2 if i > 0 and j == 0 else 1, norm, groups))
                cin = width
        self.blocks = nn.Sequential(*stages)
        self.out = nn.Linear(widths[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.out(self.blocks(self.stem(x)).mean(dim=(2, 3)))  # global average pooling
        return logits


@dataclass(frozen=True)
@checks.constrained(widths=WIDTHS, blocks=checks.COUNT, norm=NORM, groups=checks.COUNT)
class ResNet:
    """A CIFAR-style ResNet (He et al. 2016, §4.2) for small images such as 28x28 EMNIST/Fashion-MNIST: a 3x3
    stem, stages of ``blocks`` basic blocks with widths ``widths`` (each stage after the first halves the
    resolution), global average pooling, one linear layer. ``blocks=3`` with widths (16, 32, 64) is ResNet-20.
    BatchNorm replaced by GroupNorm (``groups`` groups; ``norm="none"`` for none): running statistics are not
    federated-safe / not vmappable (as Hsieh et al. 2020 do)."""

    widths: tuple[int, ...] = (16, 32, 64)
    blocks: int = 3
    norm: str = "group"
    groups: int = 2
    name: ClassVar[str] = "resnet"

    def __post_init__(self) -> None:
        as_tuple(self, "widths")
        check_norm(self)

    def build(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        c, _, _ = image_shape(self, input_shape, smallest=2 ** (len(self.widths) - 1))
        return ResNetNet(c, self.widths, self.blocks, self.norm, self.groups, outputs(num_classes))


@dataclass(frozen=True)
@checks.constrained(widths=WIDTHS, hidden=WIDTHS, dropout=DROPOUT, norm=NORM, groups=checks.COUNT)
class VGG9:
    """VGG-9 as federated-learning papers use it (FedMA, Wang et al. 2020; IWDS, Tang et al. 2021): 3x3
    convolutions (padding 1, ReLU) of widths ``widths`` in pairs, each pair followed by a 2x2 max-pool, then
    fully connected layers ``hidden`` (ReLU) and the output; ``dropout`` before each hidden fully connected layer
    (0: none; the layer names do not depend on it). On 3x32x32 inputs with 10 classes it has 3,491,530
    parameters. No normalization by default, as in FedMA; ``norm="group"``: GroupNorm after each convolution
    (BatchNorm replaced by GroupNorm: running statistics are not federated-safe / not vmappable)."""

    widths: tuple[int, ...] = (32, 64, 128, 128, 256, 256)
    hidden: tuple[int, ...] = (512, 512)
    dropout: float = 0.0
    norm: str = "none"
    groups: int = 2
    name: ClassVar[str] = "vgg9"

    def __post_init__(self) -> None:
        as_tuple(self, "widths", "hidden")
        if len(self.widths) % 2:
            raise ValueError(f"VGG9 widths come in pairs (one max-pool after each pair), got {self.widths}")
        check_norm(self)

    def build(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        pools = len(self.widths) // 2
        c, h, w = image_shape(self, input_shape, smallest=2**pools)
        layers: list[nn.Module] = []
        for i, width in enumerate(self.widths):
            layers += [nn.Conv2d(c, width, 3, padding=1), norm_layer(self.norm, width, self.groups), nn.ReLU()]
            layers += [nn.MaxPool2d(2)] if i % 2 else []
            c = width
        layers.append(nn.Flatten())
        features = c * (h >> pools) * (w >> pools)
        for width in self.hidden:
            layers += [nn.Dropout(self.dropout) if self.dropout else nn.Identity(), nn.Linear(features, width), nn.ReLU()]
            features = width
        layers.append(nn.Linear(features, outputs(num_classes)))
        return nn.Sequential(*layers)
