"""The small models: logistic regression, MLP, McMahan et al.'s CNN and pfl-research's CIFAR-10 CNN."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from fedsample import checks
from fedsample.models.common import DROPOUTS, WIDTHS, outputs, pair

__all__ = ["CNN", "LogisticRegression", "MLP", "PflCNN"]


@dataclass(frozen=True)
class LogisticRegression:
    """Multinomial logistic regression (a single linear layer on flattened inputs); linear regression
    when the task is regression."""

    name: ClassVar[str] = "logreg"

    def build(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), outputs(num_classes)))


@dataclass(frozen=True)
@checks.constrained(hidden=checks.COUNT, layers=checks.COUNT)
class MLP:
    """Fully connected network with ReLU hidden layers of width ``hidden`` (``layers`` of them)."""

    hidden: int = 64
    layers: int = 1
    name: ClassVar[str] = "mlp"

    def build(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        width = math.prod(input_shape)
        modules: list[nn.Module] = [nn.Flatten()]
        for _ in range(self.layers):
            modules += [nn.Linear(width, self.hidden), nn.ReLU()]
            width = self.hidden
        modules.append(nn.Linear(width, outputs(num_classes)))
        return nn.Sequential(*modules)


@dataclass(frozen=True)
@checks.constrained(channels=WIDTHS, hidden=checks.COUNT)
class CNN:
    """The two-convolution CNN of McMahan et al. 2017: 5x5 conv (32) → 2x2 max-pool → 5x5 conv (64) →
    2x2 max-pool → fully connected (512, ReLU) → output. Padding 2 keeps small inputs (8x8 digits) valid."""

    channels: tuple[int, int] = (32, 64)
    hidden: int = 512
    name: ClassVar[str] = "cnn"

    def __post_init__(self) -> None:
        pair(self, "channels")

    def build(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        if len(input_shape) != 3:
            raise ValueError(f"CNN needs image inputs of shape (C, H, W), got {input_shape}")
        c, h, w = input_shape
        c1, c2 = self.channels
        features = nn.Sequential(
            nn.Conv2d(c, c1, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
        )
        flat = c2 * (h // 4) * (w // 4)
        return nn.Sequential(features, nn.Linear(flat, self.hidden), nn.ReLU(), nn.Linear(self.hidden, outputs(num_classes)))


@dataclass(frozen=True)
@checks.constrained(channels=WIDTHS, hidden=checks.COUNT, dropout=DROPOUTS)
class PflCNN:
    """pfl-research's CIFAR-10 benchmark model: 3x3 conv (32, ReLU) → 3x3 conv (64, ReLU) → 2x2 max-pool →
    dropout 0.25 → flatten → fully connected (128, ReLU) → dropout 0.5 → output. No padding: on 3x32x32
    inputs the flattened features are 64x14x14 = 12,544 and the model has 1,626,442 parameters."""

    channels: tuple[int, int] = (32, 64)
    hidden: int = 128
    dropout: tuple[float, float] = (0.25, 0.5)
    name: ClassVar[str] = "pfl_cnn"

    def __post_init__(self) -> None:
        pair(self, "channels")
        pair(self, "dropout")

    def build(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        if len(input_shape) != 3 or min(input_shape[1:]) < 6:
            raise ValueError(f"PflCNN needs image inputs of shape (C, H, W) with H, W >= 6, got {input_shape}")
        c, h, w = input_shape
        c1, c2 = self.channels
        flat = c2 * ((h - 4) // 2) * ((w - 4) // 2)
        return nn.Sequential(
            nn.Conv2d(c, c1, 3), nn.ReLU(), nn.Conv2d(c1, c2, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(self.dropout[0]),
            nn.Flatten(), nn.Linear(flat, self.hidden), nn.ReLU(), nn.Dropout(self.dropout[1]),
            nn.Linear(self.hidden, outputs(num_classes)),
        )
