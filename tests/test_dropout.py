"""Random layers: the loop and the vectorized engine draw the same dropout masks from each client's stream,
so a model with dropout trains to the same numbers on both (multi-step LocalSGD cohorts and the one-gradient
and single-step fast paths); BatchNorm is refused or trained correctly, never silently wrong."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedsample import recipes
from fedsample.messages import TrainPayload
from fedsample.data.types import Dataset
from fedsample.evaluation import evaluate
from fedsample.federation.simulator import Simulator
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.models import initial_parameters
from fedsample.sampling.data import AllSamples, BernoulliSamples
from fedsample.simulation import simulate
from fedsample.training.local import LocalSGD, OneGradient
from fedsample.training.random_layers import RandomLayers, client_generator, kept_units
from helpers import blobs, federate
from fedsample.simulation import Engine

SIZES = [1, 3, 7, 12, 20, 33, 2, 9, 0, 15]


def dropout_mlp(p: float = 0.5) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(6, 16), nn.ReLU(), nn.Dropout(p), nn.Linear(16, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3))


def image_blobs(n: int = 160, test: int = 40) -> Dataset:
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, n + test)
    x = (rng.normal(0, 1, size=(n + test, 2, 5, 5)) + y[:, None, None, None]).astype(np.float32)
    return Dataset("images", x[:n], y[:n], x[n:], y[n:], 3)


def dropout_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Dropout2d(0.3), nn.Flatten(), nn.Linear(36, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3)
    )


def close(a: dict, b: dict, tol: float = 2e-5) -> None:
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=tol, atol=tol)


def reports_match(loop: list, vec: list) -> None:
    assert [r is None for r in loop] == [v is None for v in vec]
    for r, v in zip(loop, vec):
        if r is not None:
            assert r.steps == v.steps
            assert v.loss == pytest.approx(r.loss, rel=1e-5, abs=1e-6)
            close(r.update, v.update)


SOLVERS = {
    "sgd_multi_step_momentum": LocalSGD(lr=0.1, epochs=2, batch_size=4, momentum=0.9, weight_decay=1e-3, prox_mu=0.1),
    "sgd_single_step": LocalSGD(lr=0.1, epochs=None, steps=1, batch_size=None, momentum=0.5),
    "one_gradient": OneGradient(K=40),
}


@pytest.mark.parametrize("plan", [AllSamples(), BernoulliSamples(0.7)], ids=["all", "bernoulli"])
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("make", [dropout_mlp, dropout_cnn], ids=["mlp", "cnn"])
def test_dropout_reports_equal_on_both_engines(make, solver, plan):
    fed = federate(blobs(n=200), SIZES) if make is dropout_mlp else federate(image_blobs(), [4, 9, 1, 17, 0, 6, 30])
    module = make()
    params = initial_parameters(module, 0)
    payload = TrainPayload(params=params, plan=plan, solver=SOLVERS[solver], round=3)
    ids = np.arange(fed.num_clients)
    loop = Simulator(fed, module, seed=4).run(ids, payload, 3)
    vec = VectorizedSimulator(fed, module, seed=4).run(ids, payload, 3)
    reports_match(loop, vec)
    # the masks matter: without dropout (p = 0 everywhere) the updates are different
    plain = Simulator(fed, _without_dropout(module), seed=4).run(ids, payload, 3)
    moved = [float((r.update[k] - q.update[k]).abs().max()) for r, q in zip(loop, plain) if r is not None for k in r.update]
    assert max(moved) > 1e-3


def _without_dropout(module: nn.Module) -> nn.Module:
    import copy

    out = copy.deepcopy(module)
    for m in out.modules():
        if isinstance(m, (nn.Dropout, nn.Dropout2d)):
            m.p = 0.0
    return out


def test_masks_do_not_depend_on_chunking_or_cohort():
    fed = federate(blobs(n=200), SIZES)
    module = dropout_mlp()
    payload = TrainPayload(params=initial_parameters(module, 1), plan=AllSamples(), solver=SOLVERS["sgd_multi_step_momentum"], round=0)
    one = VectorizedSimulator(fed, module, seed=2, memory_budget=2**40).run(np.arange(10), payload, 0)
    tiny = VectorizedSimulator(fed, module, seed=2, memory_budget=1).run(np.arange(10), payload, 0)
    reports_match(one, tiny)
    alone = VectorizedSimulator(fed, module, seed=2).run(np.array([5]), payload, 0)[0]
    close(alone.update, one[5].update, tol=1e-6)


def test_same_seed_same_numbers_and_seeds_differ():
    fed = federate(blobs(n=200), SIZES)
    module = dropout_mlp()
    payload = TrainPayload(params=initial_parameters(module, 1), plan=AllSamples(), solver=SOLVERS["sgd_multi_step_momentum"], round=0)
    a = Simulator(fed, module, seed=7).run(np.array([4]), payload, 0)[0]
    torch.manual_seed(123)  # the global generator plays no part
    b = Simulator(fed, module, seed=7).run(np.array([4]), payload, 0)[0]
    c = Simulator(fed, module, seed=8).run(np.array([4]), payload, 0)[0]
    for k in a.update:
        assert torch.equal(a.update[k], b.update[k])
    assert any(not torch.allclose(a.update[k], c.update[k]) for k in a.update)


@pytest.mark.parametrize(
    "make", [lambda: recipes.fedavg(clients_per_round=5, lr=0.1, batch_size=4), lambda: recipes.fedsampling(K=40, epsilon=2.0, M=30, server_lr=0.2)],
    ids=["fedavg", "fedsampling"],
)
def test_simulate_with_dropout_agrees_across_backends_and_evaluates_without_dropout(make):
    fed = federate(blobs(n=200), [n or 4 for n in SIZES])
    module = dropout_mlp()
    runs = {b: simulate(make(), fed, module, rounds=3, seed=1, eval_every=3, engine=Engine(backend=b)) for b in ("loop", "vectorized")}
    close(runs["loop"].params, runs["vectorized"].params, tol=1e-4)
    x, y = torch.as_tensor(fed.dataset.x_test), torch.as_tensor(fed.dataset.y_test)
    again = evaluate(module, runs["loop"].params, x, y, "classification", 3)
    assert again["loss"] == pytest.approx(runs["loop"].history[-1]["loss"], rel=1e-6)  # deterministic: dropout off
    assert module.training  # evaluation restores the training flag


def test_batchnorm_with_running_statistics_is_refused_with_the_remedy():
    fed = federate(blobs(n=200), SIZES)
    module = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    for engine in (Simulator, VectorizedSimulator):
        with pytest.raises(ValueError, match=r"layer '1' \(BatchNorm1d\) keeps running statistics.*GroupNorm"):
            engine(fed, module, seed=0)


def test_batchnorm_without_running_statistics_trains_per_client_on_both_engines():
    """Batch statistics of each client's real minibatch: the vectorized engine trains such a model through
    the loop (padding rows or a union batch would change the statistics)."""
    fed = federate(blobs(n=200), SIZES)
    module = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8, track_running_stats=False), nn.ReLU(), nn.Linear(8, 3))
    params = initial_parameters(module, 0)
    for solver in ("sgd_multi_step_momentum", "one_gradient"):
        payload = TrainPayload(params=params, plan=AllSamples(), solver=SOLVERS[solver], round=0)
        ids = np.array([1, 2, 3, 4])  # no minibatch of one sample (batch statistics need two)
        loop = Simulator(fed, module, seed=0).run(ids, payload, 0)
        vec = VectorizedSimulator(fed, module, seed=0)
        assert "normalises over the batch" in vec.needs_loop()
        reports_match(loop, vec.run(ids, payload, 0))
        alone = Simulator(fed, module, seed=0).run(ids[2:3], payload, 0)[0]
        close(alone.update, loop[2].update, tol=0)


class NoisyMLP(nn.Module):
    """Gaussian noise on the hidden layer via torch.randn_like: a random op outside nn.Dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        return self.b(h + 0.5 * torch.randn_like(h))


def test_other_random_ops_are_seeded_per_client_and_engines_agree():
    fed = federate(blobs(n=200), SIZES)
    module = NoisyMLP()
    payload = TrainPayload(params=initial_parameters(module, 0), plan=AllSamples(), solver=SOLVERS["sgd_multi_step_momentum"], round=2)
    ids = np.array([2, 3, 4, 9])
    loop = Simulator(fed, module, seed=3).run(ids, payload, 2)
    vec = VectorizedSimulator(fed, module, seed=3)
    assert "outside nn.Dropout" in vec.needs_loop()
    reports_match(loop, vec.run(ids, payload, 2))
    reordered = Simulator(fed, module, seed=3).run(ids[::-1], payload, 2)[::-1]
    for a, b in zip(loop, reordered):
        close(a.update, b.update, tol=0)


def test_masks_keep_each_unit_with_probability_one_minus_p_and_average_one():
    """Monte Carlo: 400,000 units at p = 0.3 are kept at rate 0.7 within 5 standard errors (0.0036), and the mask
    (kept units scaled by 1/0.7) averages 1 within the same; p = 0 keeps all, p = 1 drops all."""
    g = torch.Generator().manual_seed(11)
    mask = kept_units(g, (400, 1000), 0.3, torch.float32)
    n, se = mask.numel(), (0.7 * 0.3 / 400_000) ** 0.5
    assert mask.unique().tolist() == [0.0, pytest.approx(1 / 0.7)]
    assert abs((mask > 0).double().mean().item() - 0.7) < 5 * se
    assert abs(mask.double().mean().item() - 1.0) < 5 * se / 0.7
    assert n == 400_000
    assert torch.equal(kept_units(g, (50,), 0.0, torch.float32), torch.ones(50))
    assert torch.equal(kept_units(g, (50,), 1.0, torch.float32), torch.zeros(50))


def test_masks_are_the_same_bits_on_every_processor_and_dtype(monkeypatch):
    """torch's ``bernoulli_`` with a scalar p draws from MKL's generator on Intel processors and from the
    Mersenne twister elsewhere; the masks come from uniform draws instead, so these bits, pinned on an AMD
    processor, hold on every machine (the draw must not reach ``bernoulli_``), in float32 and float64 alike."""

    def refused(*args, **kwargs):
        raise AssertionError("dropout masks must not use Tensor.bernoulli_ (its bits depend on the processor's make)")

    monkeypatch.setattr(torch.Tensor, "bernoulli_", refused)
    layers = RandomLayers(nn.Identity(), [("drop", 0.3, (6,))])
    pinned = [1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0]
    for dtype in (torch.float32, torch.float64):
        mask = layers.draw(client_generator(3, 1, 7), 4, dtype)["drop"]
        assert mask.dtype == dtype
        assert (mask > 0).int().flatten().tolist() == pinned


@pytest.mark.parametrize("p", [0.1, 0.25, 1 / 3, 0.5, 0.9, 0.0, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masks_are_the_bits_of_the_plain_formula(p, dtype):
    """The mask written in place into the uniforms' tensor equals ``(u < 1-p).to(dtype) * (1/(1-p))`` to the bit,
    the same uniforms read from the same generator (thresholds 1-p that float32 cannot hold included: 0.9, 2/3)."""
    shape = (50, 2000)
    u = torch.rand(shape, generator=torch.Generator().manual_seed(5))
    plain = (u < 1.0 - p).to(dtype)
    plain = plain * (1.0 / (1.0 - p)) if 0.0 < p < 1.0 else plain
    got = kept_units(torch.Generator().manual_seed(5), shape, p, dtype)
    assert got.dtype == dtype and torch.equal(got, plain)
    assert 0 < int((got > 0).sum()) < got.numel() or p in (0.0, 1.0)
