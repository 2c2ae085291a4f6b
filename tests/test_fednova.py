"""FedNova (Wang et al. 2020): the aggregation formula, equality with FedAvg for equal steps, the fixed point
on a quadratic problem with unequal local steps, and its weights under non-uniform client sampling."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedsample import recipes
from fedsample.messages import TrainReport
from fedsample.data.types import Dataset, FederatedData
from fedsample.sampling.clients import AllClients, Cohort, SizeProportional
from fedsample.simulation import simulate
from fedsample.privacy.sizes import SizeInfo
from fedsample.strategy import RoundContext
from fedsample.training.aggregate import FedNova, WeightedMean

from helpers import blobs, federate


class FakeFederation:
    def __init__(self, n: int) -> None:
        self.num_clients = n


def context(sizes: np.ndarray, round: int = 0) -> RoundContext:
    ids = np.arange(len(sizes))
    info = SizeInfo(ids=ids, reports=np.asarray(sizes), total=float(np.sum(sizes)), exact=True)
    return RoundContext(FakeFederation(len(sizes)), {}, round, seed=0, state={}, sizes=info)


def report(update: list[float], steps: int, norm: float | None = None) -> TrainReport:
    return TrainReport(update={"w": torch.tensor(update, dtype=torch.float64)}, steps=steps, loss=0.0, norm_steps=norm)


def test_fednova_formula_by_hand():
    """p = (1/4, 3/4) by size, a = (2, 6): tau_eff = 0.5 + 4.5 = 5;
    Delta = 5 * (1/4 * u1/2 + 3/4 * u2/6) = (5/8) u1 + (5/8) u2."""
    cohort = Cohort(np.array([0, 1]), np.ones(2), 2)
    ctx = context(np.array([10, 30]))
    u1, u2 = [1.0, 0.0], [0.0, 2.0]
    out = FedNova("size").combine([report(u1, 2), report(u2, 6)], cohort, ctx)
    np.testing.assert_allclose(out["w"].numpy(), [5 / 8, 10 / 8], atol=1e-12)
    assert ctx.log["tau_eff"] == pytest.approx(5.0)
    # a reported norm_steps (momentum) is used instead of the step count; a None report is skipped
    out = FedNova("uniform").combine([report(u1, 2, norm=4.0), None, report(u2, 2, norm=1.0)], Cohort(np.arange(3), np.ones(3), 3), ctx)
    tau_eff = 0.5 * 4 + 0.5 * 1
    np.testing.assert_allclose(out["w"].numpy(), tau_eff * (0.5 * np.array(u1) / 4 + 0.5 * np.array(u2) / 1), atol=1e-12)


@pytest.mark.parametrize("by", ["uniform", "size", "inverse_inclusion"])
def test_equal_steps_is_weighted_mean(by):
    rng = np.random.default_rng(0)
    cohort = Cohort(np.array([0, 2, 3]), np.array([0.5, 0.5, 0.5]), 4, multiplicity=np.array([1, 2, 1]))
    ctx = context(np.array([5, 7, 9, 11]))
    reports = [report(list(rng.normal(size=3)), 5, norm=7.3) for _ in range(3)]
    nova = FedNova(by).combine(reports, cohort, ctx)
    mean = WeightedMean(by).combine(reports, cohort, ctx)
    torch.testing.assert_close(nova["w"], mean["w"], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_fednova_recipe_equals_fedavg_when_steps_are_equal(momentum):
    """Every client takes 3 steps: FedNova's run is FedAvg's, with and without local momentum."""
    fed = federate(blobs(), [30, 50, 40, 60])
    common = dict(clients_per_round=2, steps=3, batch_size=8, local_momentum=momentum)
    a = simulate(recipes.fednova(**common), fed, nn.Linear(6, 3), rounds=2, seed=3)
    b = simulate(recipes.fedavg(**common), fed, nn.Linear(6, 3), rounds=2, seed=3)
    for k in a.params:
        torch.testing.assert_close(a.params[k], b.params[k], rtol=1e-5, atol=1e-6)


# --- objective inconsistency on a quadratic problem (Wang et al. 2020, §3) ------------------------------------


class Scalar(nn.Module):
    """Predicts one learned constant; with squared error, client k's objective is (b - c_k)^2 + const."""

    def __init__(self) -> None:
        super().__init__()
        self.b = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b.expand(len(x))


def quadratic_federation(sizes=(10, 40), targets=(0.0, 1.0)) -> FederatedData:
    y = np.concatenate([np.full(n, c, dtype=np.float32) for n, c in zip(sizes, targets)])
    x = np.zeros((len(y), 1), dtype=np.float32)
    ds = Dataset("quadratic", x, y, x[:2], y[:2], num_classes=0, task="regression")
    bounds = np.cumsum((0,) + tuple(sizes))
    return FederatedData.from_client_indices(ds, [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])])


@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_fednova_removes_the_objective_inconsistency(momentum):
    """Clients hold 10 and 40 samples with targets 0 and 1; batches of 2 give tau = (5, 20) local steps. The
    global objective sum_k (n_k/n) (b - c_k)^2 is minimized at b* = 0.2*0 + 0.8*1 = 0.8.

    Each local GD step on (b - c)^2 is b <- b - 2*eta*(b - c), so after tau steps Delta_k = s_k (b - c_k),
    s_k = 1 - (1 - 2 eta)^tau_k. FedAvg stops where sum p_k s_k (b - c_k) = 0: b = sum p s c / sum p s,
    biased toward the client with more steps. FedNova divides by tau_k: b = sum p (s/tau) c / sum p (s/tau),
    which tends to b* as eta -> 0 (the paper's claim). A server lr of 20 only speeds up the fixed-point
    iteration; it does not move the fixed point."""
    eta, tau, p, c = 0.002, np.array([5, 20]), np.array([0.2, 0.8]), np.array([0.0, 1.0])
    fed = quadratic_federation()
    server_lr = 20.0 * (1 - momentum)  # momentum lengthens the local steps by about 1/(1 - momentum)
    common = dict(clients=AllClients(), lr=eta, epochs=1, batch_size=2, server_lr=server_lr, local_momentum=momentum)
    runs = [simulate(make(**common), fed, Scalar(), rounds=rounds, seed=0, eval_every=rounds).params["b"].item()
            for make in (recipes.fedavg, recipes.fednova) for rounds in (24, 25)]
    avg, nova = runs[1], runs[3]
    assert abs(runs[0] - avg) < 1e-5 and abs(runs[2] - nova) < 1e-5  # both have converged
    assert 0.9 < avg < 1.0  # FedAvg's fixed point is biased toward the 20-step client
    assert abs(nova - 0.8) < 0.01
    if momentum == 0:
        s = 1 - (1 - 2 * eta) ** tau
        assert avg == pytest.approx(np.sum(p * s * c) / np.sum(p * s), abs=1e-4)
        assert nova == pytest.approx(np.sum(p * s / tau * c) / np.sum(p * s / tau), abs=1e-4)


# --- weights under non-uniform client sampling -------------------------------------------------------------


def test_fednova_under_size_proportional_sampling_is_unbiased_for_both_sums():
    """Clients drawn with replacement with p_k = n_k/n, FedNova('uniform') weights draws 1/m: over many rounds
    the mean of tau_eff is sum_k p_k a_k and the mean of the normalized update (Delta / tau_eff) is
    sum_k p_k Delta_k / a_k (within 4 standard errors)."""
    sizes = np.array([5, 10, 20, 40, 25])
    a = np.array([1.0, 2.0, 4.0, 8.0, 5.0])
    updates = np.array([[1.0, -1.0], [2.0, 0.5], [-1.0, 3.0], [0.5, 0.5], [4.0, -2.0]])
    p = sizes / sizes.sum()
    sampler, nova = SizeProportional(3), FedNova("uniform")
    taus, normalized = [], []
    for t in range(3000):
        ctx = context(sizes, round=t)
        cohort = sampler.select(ctx)
        reports = [report(list(updates[k]), int(a[k])) for k in cohort.ids]
        delta = nova.combine(reports, cohort, ctx)["w"].numpy()
        taus.append(ctx.log["tau_eff"])
        normalized.append(delta / ctx.log["tau_eff"])
    taus, normalized = np.array(taus), np.array(normalized)
    assert abs(taus.mean() - p @ a) < 4 * taus.std() / np.sqrt(len(taus))
    target = p @ (updates / a[:, None])
    se = normalized.std(axis=0) / np.sqrt(len(normalized))
    assert np.all(np.abs(normalized.mean(axis=0) - target) < 4 * se)


def test_fednova_rejects_bad_weighting():
    with pytest.raises(ValueError, match="uniform, size, inverse_inclusion or size_inverse_inclusion"):
        FedNova("sizes")
