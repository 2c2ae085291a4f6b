"""Channels-last training (fedsample.training.layout): the max-pool that keeps its gradient's layout gives torch's
numbers to the bit; the rule picks channels-last only for multi-channel convolutional models it can run so; the
engines' training copy converts its inputs, leaves the user's model alone, and trains to the contiguous
layout's numbers up to float rounding."""

from __future__ import annotations

import copy
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedsample import models
from fedsample.data.types import Dataset
from fedsample.federation.simulator import Simulator
from fedsample.messages import TrainPayload
from fedsample.models import initial_parameters
from fedsample.sampling.data import AllSamples
from fedsample.training import layout, random_layers
from fedsample.training.local import LocalSGD
from helpers import federate

GEOMETRIES = [  # kernel, stride, padding, dilation, ceil_mode
    (2, 2, 0, 1, False), (3, 2, 1, 1, False), (3, 1, 1, 1, False), (2, 2, 0, 1, True), (3, 2, 0, 2, True), (2, 1, 0, 1, False),
]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[str(g) for g in GEOMETRIES])
@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels-last"])
def test_layout_keeping_max_pool_is_torchs_to_the_bit(geometry, channels_last):
    """Values, and input gradients for a contiguous incoming gradient (what a Flatten after the pool sends), equal
    nn.MaxPool2d's on inputs full of ties, a NaN and -inf, overlapping windows included."""
    k, s, p, d, ceil = geometry
    g = torch.Generator().manual_seed(sum(geometry[:4]))
    x = torch.randint(-2, 3, (3, 5, 13, 11), generator=g).float()
    x[0, 0, 0, 0], x[1, 2, 3, 4] = float("nan"), float("-inf")
    x = x.contiguous(memory_format=torch.channels_last) if channels_last else x
    ours, theirs = layout.LayoutKeepingMaxPool2d(k, s, p, d, ceil_mode=ceil), nn.MaxPool2d(k, s, p, d, ceil_mode=ceil)
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    ya, yb = ours(a), theirs(b)
    grad = torch.randn(ya.shape, generator=g)
    (ga,), (gb,) = torch.autograd.grad(ya, a, grad), torch.autograd.grad(yb, b, grad)
    assert torch.equal(ya.nan_to_num(), yb.nan_to_num()) and torch.equal(ya.isnan(), yb.isnan())
    assert torch.equal(ga, gb)


def test_layout_keeping_max_pool_falls_back_for_indices_and_unbatched_inputs():
    x = torch.randn(2, 6, 6)
    assert torch.equal(layout.LayoutKeepingMaxPool2d(2)(x), nn.MaxPool2d(2)(x))
    out, idx = layout.LayoutKeepingMaxPool2d(2, return_indices=True)(x[None])
    ref, ref_idx = nn.MaxPool2d(2, return_indices=True)(x[None])
    assert torch.equal(out, ref) and torch.equal(idx, ref_idx)


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels-last"])
def test_pool_before_relu_gives_the_same_numbers_to_the_bit(channels_last):
    """Outputs, input gradients and parameter gradients of conv -> ReLU -> max-pool -> linear equal those of the
    swapped copy, on inputs full of ties, zeros, windows of negatives only, and a NaN."""
    g = torch.Generator().manual_seed(5)
    original = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))
    with torch.no_grad():  # integer weights: many ties and exact zeros after the convolution
        for p in original.parameters():
            p.copy_(torch.randint(-1, 2, p.shape, generator=g).float())
    swapped = copy.deepcopy(original)
    assert layout.pool_before_relu(swapped) == 1
    assert [type(m) for m in swapped][:3] == [nn.Conv2d, nn.MaxPool2d, nn.ReLU]
    x = torch.randint(-2, 3, (6, 3, 8, 8), generator=g).float()
    x[5, 0, 2, 3] = float("nan")
    x = x.contiguous(memory_format=torch.channels_last) if channels_last else x
    results = []
    for model in (original, swapped):
        xi = x.clone().requires_grad_(True)
        out = model(xi)
        grads = torch.autograd.grad(out.nan_to_num().sum() + out[:5].pow(2).sum(), [xi, *model.parameters()])
        results.append([out, *grads])
    for a, b in zip(*results):
        assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


def test_pool_before_relu_leaves_hooked_and_other_layers_alone():
    relu = nn.ReLU()
    relu.register_forward_hook(lambda *args: None)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), relu, nn.MaxPool2d(2), nn.Tanh(), nn.MaxPool2d(2), nn.ReLU(), nn.AvgPool2d(2))
    assert layout.pool_before_relu(model) == 0


class ViewCNN(nn.Module):
    """A model whose forward needs contiguous activations (``.view`` after a convolution)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4 * 6 * 6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.conv(x)).view(x.shape[0], -1))


@pytest.mark.parametrize("case, suits", [
    ("pfl_cnn rgb", True), ("resnet rgb", True), ("cnn one channel", False), ("view after conv", False),
    ("mlp on images", False), ("rgb as float64", True), ("integer images", False), ("torch's own dropout", False),
])
def test_the_rule_picks_channels_last_for_multichannel_convolutional_models_it_can_run_so(case, suits):
    x = torch.randn(2, 3, 8, 8)
    module = {
        "pfl_cnn rgb": lambda: models.PflCNN().build((3, 8, 8), 4).eval(),  # dropout off (as in the training copy)
        "resnet rgb": lambda: models.ResNet().build((3, 8, 8), 4),
        "cnn one channel": lambda: models.CNN().build((1, 8, 8), 4),
        "view after conv": ViewCNN,
        "mlp on images": lambda: nn.Sequential(nn.Flatten(), nn.Linear(3 * 64, 4)),
        "rgb as float64": lambda: models.PflCNN().build((3, 8, 8), 4).double().eval(),
        "torch's own dropout": lambda: models.PflCNN().build((3, 8, 8), 4),  # its masks land elsewhere in the other layout
        "integer images": lambda: models.PflCNN().build((3, 8, 8), 4),
    }[case]()
    sample = {"cnn one channel": torch.randn(2, 1, 8, 8), "view after conv": x, "rgb as float64": x.double(),
              "integer images": torch.randint(0, 255, (2, 3, 8, 8))}.get(case, x)
    assert layout.channels_last_suits(module, sample) is suits


def image_data(channels: int = 3, n: int = 120) -> Dataset:
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, n + 20)
    x = (rng.normal(0, 1, size=(n + 20, channels, 10, 10)) + y[:, None, None, None]).astype(np.float32)
    return Dataset("rgb-blobs", x[:n], y[:n], x[n:], y[n:], 3)


def first_conv_layouts(module: nn.Module) -> list[bool]:
    """Records, for each forward, whether the first convolution received a channels-last input."""
    seen: list[bool] = []
    conv = next(m for m in module.modules() if isinstance(m, nn.Conv2d))
    conv.register_forward_pre_hook(lambda m, args: seen.append(args[0].is_contiguous(memory_format=torch.channels_last)
                                                               and not args[0].is_contiguous()))
    return seen


def test_the_training_copy_trains_channels_last_and_leaves_the_users_model_alone():
    module = models.PflCNN(dropout=(0.25, 0.5)).build((3, 10, 10), 3)
    prepared = random_layers.prepare(module, torch.randn(1, 3, 10, 10))
    assert prepared.module is not module
    assert not module._forward_pre_hooks and all(type(m) is not layout.LayoutKeepingMaxPool2d for m in module.modules())
    assert any(type(m) is layout.LayoutKeepingMaxPool2d for m in prepared.module.modules())
    kinds = [type(m) for m in prepared.module]
    assert kinds[3:5] == [layout.LayoutKeepingMaxPool2d, nn.ReLU] and [type(m) for m in module][3:5] == [nn.ReLU, nn.MaxPool2d]
    seen = first_conv_layouts(prepared.module)
    prepared.module(torch.randn(4, 3, 10, 10))
    assert seen == [True]


def test_channels_last_training_agrees_with_the_contiguous_layout(monkeypatch):
    """A round of LocalSGD (one epoch of batch 5) on a CNN with dropout: the channels-last loop's updates equal the contiguous
    layout's within float rounding (rtol 1e-5), and its convolutions did receive channels-last inputs."""
    real_prepare = random_layers.prepare
    fed = federate(image_data(), [10, 25, 7, 40, 18, 20])
    module = models.PflCNN(channels=(4, 6), hidden=8).build((3, 10, 10), 3)
    payload = TrainPayload(params=initial_parameters(module, 0), plan=AllSamples(), solver=LocalSGD(lr=0.1, epochs=1, batch_size=5), round=0)
    ids = np.arange(fed.num_clients)
    fast = Simulator(fed, module, seed=2)
    seen = first_conv_layouts(fast.train_module)
    updates = [r.update for r in fast.run(ids, payload, 0)]
    assert seen and all(seen)
    monkeypatch.setattr(random_layers, "prepare", lambda m, s: real_prepare(m, s, channels_last=False))
    plain = Simulator(fed, module, seed=2)
    seen = first_conv_layouts(plain.train_module)
    reference = [r.update for r in plain.run(ids, payload, 0)]
    assert seen and not any(seen)
    for u, r in zip(updates, reference):
        for k in r:
            torch.testing.assert_close(u[k], r[k], rtol=1e-5, atol=1e-6)


def test_a_model_that_keeps_its_layout_and_has_no_dropout_is_trained_as_it_is():
    """No copy where nothing changes: a convolutional model the probe refuses (a ``.view`` after a convolution)."""
    module = ViewCNN()
    assert random_layers.prepare(module, torch.randn(1, 3, 8, 8)).module is module
