"""Estimation under missing replies (docs/reliability.md): Monte Carlo at 30% dropout.

Horvitz-Thompson weights and FedSampling's sum divided by the observed response rate stay unbiased;
normalized (ratio) means stay unbiased without adjustment; N~ from the reports received, scaled by
asked/answered, is unbiased with the variance of ``size_estimate.scaled_total_variance``. Tolerances: 4
standard errors of the Monte Carlo mean (a false alarm about once in 15,000 runs)."""

import numpy as np
import pytest
import torch

from fedsample import missing, privacy
from fedsample.privacy import size_estimate
from fedsample.messages import TrainReport
from fedsample.federation.faults import FaultModel, Faulty
from fedsample.federation.simulator import Simulator
from fedsample.models import LogisticRegression
from fedsample.rounds import RoundContext
from fedsample.sampling.clients import AllClients, UniformClients
from fedsample.privacy.sizes import RandomizedSizes
from fedsample.strategy import Strategy
from fedsample.training.aggregate import Sum, WeightedMean
from helpers import blobs, federate

N = 40
VALUES = 1.0 + np.arange(N) % 7 + 0.1 * np.arange(N)  # client k's "update" is the number VALUES[k]
REPS = 1000
DROPOUT = FaultModel(dropout={"train": 0.3})


class Constant:
    """A federation whose client k's update is VALUES[k] (one scalar parameter)."""

    num_clients = N

    def run(self, ids, payload, round):
        return [TrainReport({"w": torch.tensor([VALUES[k]], dtype=torch.float64)}, steps=1, loss=0.0) for k in ids]


def aggregates(strategy: Strategy) -> np.ndarray:
    """The strategy's aggregate in REPS independent rounds (server SGD with lr 1 from w = 0: w_new = -Delta)."""
    out = []
    for seed in range(REPS):
        params = {"w": torch.zeros(1, dtype=torch.float64)}
        new, _ = strategy.round(Faulty(Constant(), DROPOUT, seed), params, strategy.init_state(params), 0, seed)
        out.append(-float(new["w"][0]))
    return np.array(out)


def assert_unbiased(draws: np.ndarray, target: float) -> None:
    se = draws.std(ddof=1) / np.sqrt(len(draws))
    assert abs(draws.mean() - target) < 4 * se, (draws.mean(), target, se)


def test_horvitz_thompson_divided_by_the_response_rate_is_unbiased():
    draws = aggregates(Strategy(clients=UniformClients(m=10), aggregate=WeightedMean("inverse_inclusion")))
    assert_unbiased(draws, VALUES.mean())
    assert draws.mean() > 0.85 * VALUES.mean()  # without the adjustment it would be 0.7 of it


def test_fedsampling_sum_divided_by_the_response_rate_is_unbiased():
    draws = aggregates(Strategy(clients=AllClients(), aggregate=Sum()))
    assert_unbiased(draws, VALUES.sum())


@pytest.mark.parametrize("by", ["uniform"])
def test_normalized_means_need_no_adjustment(by):
    draws = aggregates(Strategy(clients=UniformClients(m=10), aggregate=WeightedMean(by)))
    assert_unbiased(draws, VALUES.mean())


def test_size_total_from_the_reports_received_is_unbiased_at_30_percent_dropout():
    sizes = [3, 9, 14, 20, 6, 30, 11, 25, 8, 17]
    fed = federate(blobs(n=sum(sizes)), sizes)
    module = LogisticRegression().build(fed.dataset.input_shape, fed.dataset.num_classes)
    strategy = Strategy(clients=AllClients(), aggregate=Sum(), sizes=RandomizedSizes(epsilon=2.0, M=20))
    faults = FaultModel(dropout={"report_size": 0.3})
    totals = []
    for seed in range(2000):
        fed_ = Faulty(Simulator(fed, module, seed), faults, seed)
        ctx = RoundContext(fed_, {}, 0, seed, {})
        totals.append(strategy.collect_sizes(ctx, np.arange(len(sizes))).total)
    assert_unbiased(np.array(totals), float(privacy.clip_size(np.array(sizes), 20).sum()))


def test_scaled_total_variance_matches_monte_carlo():
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 40, size=30)
    epsilon, M, answered = 1.5, 30, 21  # 30% of 30 clients missing
    alpha = privacy.alpha_for(epsilon, M)
    estimates = []
    for _ in range(20000):
        kept = rng.choice(len(sizes), answered, replace=False)
        reports = privacy.randomized_response(sizes[kept], epsilon, M, rng)
        estimates.append(size_estimate.scaled_total(privacy.estimate_total(reports, epsilon, M, clamp=False), len(sizes), answered))
    estimates = np.array(estimates)
    assert_unbiased(estimates, float(privacy.clip_size(sizes, M).sum()))
    predicted = size_estimate.scaled_total_variance(sizes, epsilon, M, answered)
    # the sample variance of 20,000 draws is within 5% of the truth with overwhelming probability
    assert estimates.var(ddof=1) == pytest.approx(predicted, rel=0.05), alpha


def test_scaled_total_rejects_nobody_answering_and_bad_counts():
    with pytest.raises(ValueError):
        size_estimate.scaled_total(10.0, 5, 0)
    with pytest.raises(ValueError):
        missing.response_rate(3, 4)
    with pytest.raises(ValueError, match="1-D"):
        size_estimate.scaled_total_variance(np.ones((2, 2)), 1.0, 10, 1)
