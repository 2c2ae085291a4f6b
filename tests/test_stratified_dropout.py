"""The stratified Horvitz-Thompson mean under dropout whose rate differs between strata (docs/reliability.md):
each stratum's weights are divided by that stratum's response rate, which keeps the estimate unbiased; one
overall response rate does not. Monte Carlo with stated tolerances."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsample.messages import TrainReport
from fedsample.rounds import Cohort, Failed, Replies, RoundContext
from fedsample.training.aggregate import StratifiedMean, WeightedMean

STRATA = np.repeat([0, 1, 2], 12)                  # N = 36 clients, 12 per stratum
PER_STRATUM = 6                                      # simple random sampling of 6 of 12 in each: pi_k = 1/2
DROPOUT = np.array([0.0, 0.3, 0.6])                  # per-stratum probability that a chosen client fails
REPS = 6000


def values() -> np.ndarray:
    """Updates whose level differs by stratum (1, 4, 9 plus noise), so a wrong stratum weight shows."""
    rng = np.random.default_rng(11)
    return np.array([1.0, 4.0, 9.0])[STRATA] + rng.normal(0, 0.5, len(STRATA))


def one_round(rng: np.random.Generator, v: np.ndarray) -> tuple[float, float] | None:
    """(stratum-rate estimate, overall-rate estimate) of one round; None when a stratum had no answer."""
    ids = np.sort(np.concatenate([rng.choice(np.flatnonzero(STRATA == h), PER_STRATUM, replace=False) for h in range(3)]))
    cohort = Cohort(ids, np.full(len(ids), PER_STRATUM / 12), len(STRATA), strata=STRATA[ids],
                    info={"stratum_sizes": np.array([12, 12, 12]), "allocation": np.array([PER_STRATUM] * 3)})
    fails = rng.random(len(ids)) < DROPOUT[STRATA[ids]]
    if any(fails[STRATA[ids] == h].all() for h in range(3)):
        return None
    reports = Replies([Failed(int(k), "train", "dropped out") if f else
                       TrainReport(update={"w": torch.tensor([v[k]], dtype=torch.float64)}, steps=1, loss=0.0)
                       for k, f in zip(ids, fails)])
    ctx = RoundContext(None, {}, 0, 0, {}, response_rate=float(1 - fails.mean()))
    by_stratum = float(StratifiedMean().combine(reports, cohort, ctx)["w"])
    overall = float(WeightedMean("inverse_inclusion").combine(reports, cohort, ctx)["w"])
    return by_stratum, overall


def test_stratum_response_rates_keep_the_stratified_mean_unbiased_under_per_stratum_dropout():
    """6,000 rounds at dropout 0 / 30% / 60% by stratum, conditional on an answer in every stratum (rounds
    without one, 1 - (1 - 0.6^6)(1 - 0.3^6) = 4.7% here, are left out: no estimator can weight a stratum nobody answered in). The
    stratum-rate estimate's mean is within 4 standard errors of the full mean (1/N) sum_k v_k; the
    overall-rate estimate (the adjustment before issue 27) is more than 8 standard errors off."""
    rng = np.random.default_rng(2027)
    v = values()
    draws = np.array([d for d in (one_round(rng, v) for _ in range(REPS)) if d is not None])
    assert 0.93 * REPS < len(draws) < 0.97 * REPS
    truth = v.mean()
    se = draws.std(axis=0, ddof=1) / np.sqrt(len(draws))
    assert abs(draws[:, 0].mean() - truth) < 4 * se[0]
    assert abs(draws[:, 1].mean() - truth) > 8 * se[1]


def test_without_failures_the_stratum_rates_change_nothing():
    ids = np.arange(6)
    cohort = Cohort(ids, np.array([0.5, 0.5, 0.25, 0.25, 1.0, 1.0]), 12, strata=np.array([0, 0, 1, 1, 2, 2]))
    reports = [TrainReport(update={"w": torch.tensor([float(k + 1)], dtype=torch.float64)}, steps=1, loss=0.0) for k in ids]
    ctx = RoundContext(None, {}, 0, 0, {})
    expected = (1 / 0.5 + 2 / 0.5 + 3 / 0.25 + 4 / 0.25 + 5 + 6) / 12
    assert float(StratifiedMean().combine(reports, cohort, ctx)["w"]) == pytest.approx(expected)


def test_a_failure_reweights_only_its_own_stratum_by_hand():
    """Stratum 0 loses one of its two clients (r_0 = 1/2), stratum 1 keeps both (r_1 = 1): the survivor of
    stratum 0 counts twice, stratum 1 as without failures."""
    ids = np.arange(4)
    cohort = Cohort(ids, np.full(4, 0.5), 8, strata=np.array([0, 0, 1, 1]))
    reports = Replies([TrainReport(update={"w": torch.tensor([2.0], dtype=torch.float64)}, steps=1, loss=0.0),
                       Failed(1, "train", "dropped out"),
                       TrainReport(update={"w": torch.tensor([3.0], dtype=torch.float64)}, steps=1, loss=0.0),
                       TrainReport(update={"w": torch.tensor([5.0], dtype=torch.float64)}, steps=1, loss=0.0)])
    ctx = RoundContext(None, {}, 0, 0, {}, response_rate=0.75)
    expected = (2 / (0.5 * 0.5) + 3 / 0.5 + 5 / 0.5) / 8
    assert float(StratifiedMean().combine(reports, cohort, ctx)["w"]) == pytest.approx(expected)
