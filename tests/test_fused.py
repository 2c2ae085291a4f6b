"""Fused SGD steps of inner linear layers (:mod:`fedsample.training.fused`): the loop's local SGD with the wide
layer's step taken as one in-place product gives the updates of autograd's step within float rounding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsample import models
from fedsample.data.types import Dataset
from fedsample.federation.simulator import Simulator
from fedsample.messages import TrainPayload
from fedsample.models import initial_parameters
from fedsample.sampling.data import AllSamples
from fedsample.training import fused
from fedsample.training.local import LocalSGD
from helpers import federate


def image_data() -> Dataset:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 3, 10, 10)).astype(np.float32)
    y = rng.integers(0, 3, 120)
    return Dataset("images", x, y, x[:10], y[:10], 3)


def round_updates(monkeypatch, solver: LocalSGD, smallest: int) -> tuple[list, int]:
    """The cohort's updates of one loop round of a small CNN with dropout (inner linear layers of 54 x 8 and
    8 x 3 weights) with layers of at least ``smallest`` weights fused, and how many steps fused a layer."""
    monkeypatch.setattr(fused, "FUSED_MIN_WEIGHTS", smallest)
    calls = []
    real_step = fused.FusedLinears.step_
    monkeypatch.setattr(fused.FusedLinears, "step_", lambda self, *a: (calls.append(len(self.kept)), real_step(self, *a))[1])
    fed = federate(image_data(), [10, 25, 7, 40, 18, 20])
    module = models.PflCNN(channels=(4, 6), hidden=8).build((3, 10, 10), 3)
    payload = TrainPayload(params=initial_parameters(module, 0), plan=AllSamples(), solver=solver, round=0)
    sim = Simulator(fed, module, seed=2)
    updates = [r.update for r in sim.run(np.arange(fed.num_clients), payload, 0)]
    assert not any(m._forward_hooks for m in sim.train_module.modules())  # the hooks are removed after each client
    return updates, sum(calls)


@pytest.mark.parametrize("block", [fused.FUSED_BLOCK_COLUMNS, 7], ids=["one-block", "blocks-of-7-columns"])
@pytest.mark.parametrize("solver", [LocalSGD(lr=0.1, epochs=2, batch_size=5), LocalSGD(lr=0.2, epochs=1, batch_size=4, weight_decay=0.01)])
def test_fused_steps_give_autograds_updates_within_float_rounding(monkeypatch, solver, block):
    """Six clients of 7-40 rows, 2-10 steps each: every update within rtol 1e-5 (atol 1e-6) of the unfused
    loop's, where both inner layers were fused (every step after a client's first fused something), with W
    stepped in one block or in blocks of 7 columns (the 54-column layer in 8 blocks, the last one short)."""
    monkeypatch.setattr(fused, "FUSED_BLOCK_COLUMNS", block)
    got, fused_layers = round_updates(monkeypatch, solver, 0)
    reference, none = round_updates(monkeypatch, solver, 2**62)
    assert fused_layers > 0 and none == 0
    for u, r in zip(got, reference):
        for k in r:
            torch.testing.assert_close(u[k], r[k], rtol=1e-5, atol=1e-6)


def test_only_inner_layers_called_once_are_fused():
    """A layer fed the data itself (no gradient reaches its input) and a layer called twice stay with autograd."""
    class Twice(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.shared = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.shared(self.shared(self.first(x)))

    chain = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    for module, expected in ((chain, ["2.weight", "2.bias"]), (Twice(), [])):
        weights = {k: v.detach().clone().requires_grad_(True) for k, v in module.named_parameters()}
        with pytest.MonkeyPatch.context() as m:
            m.setattr(fused, "FUSED_MIN_WEIGHTS", 0)
            hooks = fused.FusedLinears(module, weights, 0.1, 0.0)
            torch.func.functional_call(module, weights, (torch.randn(2, 4),))
            assert hooks.found() == expected
            hooks.close()


def test_a_fused_step_is_the_sgd_step():
    """One fused step of a layer equals W - lr * (delta^T h + weight_decay * W) and b - lr * (sum delta + wd * b)
    computed by hand (rtol 1e-6)."""
    torch.manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.Linear(6, 2))
    weights = {k: v.detach().clone().requires_grad_(True) for k, v in layer.named_parameters()}
    before = {k: v.detach().clone() for k, v in weights.items()}
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fused, "FUSED_MIN_WEIGHTS", 0)
        hooks = fused.FusedLinears(layer, weights, 0.1, 0.5)
        x = torch.randn(4, 3)
        torch.func.functional_call(layer, weights, (x,))
        assert hooks.found() == ["1.weight", "1.bias"]
        weights["1.weight"].requires_grad_(False)
        weights["1.bias"].requires_grad_(False)
        out = torch.func.functional_call(layer, weights, (x,))
        out.pow(2).sum().backward()
        h = (x @ before["0.weight"].T + before["0.bias"]).detach()
        delta = 2 * out.detach()
        with torch.no_grad():
            hooks.step_()
        hooks.close()
    torch.testing.assert_close(weights["1.weight"], before["1.weight"] - 0.1 * (delta.T @ h + 0.5 * before["1.weight"]), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(weights["1.bias"], before["1.bias"] - 0.1 * (delta.sum(0) + 0.5 * before["1.bias"]), rtol=1e-6, atol=1e-7)
