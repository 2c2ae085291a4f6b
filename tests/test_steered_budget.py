"""FedSampling's default samples what it says (issue 38, item 1): on every partition family the library ships
(shards, Dirichlet, log-normal sizes up to sigma = 4, natural users) the realised samples per round stay in
[0.67 K, 1.5 K] in every round, the total N^ released by the secure sum of the clients' sizes before the first draw;
with the paper's size reports (``total_from="reports"``) steering keeps them there from the second round on, the
first round follows N~ and the run says so where it left the range. Monte Carlo over seeds with the tolerance each
test states."""

import math

import numpy as np
import pytest

from fedsample import recipes
from fedsample.budget import BUDGET_RANGE
from fedsample.data.partition import Dirichlet, LogNormalSizes, Natural, Shards, partition
from fedsample.models import LogisticRegression
from fedsample.sampling.data import FedSamplingData
from fedsample.simulation import simulate
from helpers import blobs

K = 2048
ROWS = 60_000
DATA = blobs(n=ROWS, d=4, classes=10, test=100, seed=7)


def natural_ids() -> np.ndarray:
    """Users with Zipf-like row counts (a few heavy writers, many light ones), as natural splits have."""
    rng = np.random.default_rng(11)
    return np.minimum(rng.zipf(1.6, size=ROWS), 500)  # about 500 users of very unequal size


FAMILIES = {
    "shards (100 x 600)": Shards(600, 1),
    "dirichlet alpha 0.3": Dirichlet(100, 0.3),
    "log-normal sigma 4": LogNormalSizes(mean=2.0, sigma=4.0),
    "log-normal sigma 3, mean 600": LogNormalSizes(mean=600.0, sigma=3.0),
    "natural (zipf users)": Natural(ids=natural_ids()),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_default_realises_K_in_every_round(family):
    """The default: N^ = N + N(0, 5^2) from the secure sum of the sizes, so each round's count is Binomial(N, K/N^),
    K +- sqrt(K), far inside [0.67 K, 1.5 K]; over 3 seeds x 4 rounds every one must be inside (the first too), and
    their mean within 5% of K; no round steers (the summed total is the round's ``summed_total``)."""
    fed = partition(DATA, FAMILIES[family], seed=0)
    realised = []
    for seed in range(3):
        run = simulate(recipes.fedsampling(K=K), federated_data=fed, model=LogisticRegression(), rounds=4, seed=seed, eval_every=4)
        assert all("summed_total" in r and "steered_total" not in r and "clamped" not in r for r in run.history)
        realised += [r["realised_samples"] for r in run.history]
    low, high = BUDGET_RANGE
    assert all(low * K <= s <= high * K for s in realised), (family, realised)
    assert abs(np.mean(realised) / K - 1) < 0.05, (family, np.mean(realised))


@pytest.mark.parametrize("family", ["shards (100 x 600)", "log-normal sigma 3, mean 600"])
def test_the_steered_reports_realise_K_from_the_second_round_on(family):
    """With the paper's size reports (``total_from="reports"``, steered): given p_t, S~_t ~ Binomial(N, p_t) + N(0, 5^2):
    with N^ within a few % of N (sd of one S~_t / p_t is sqrt(N p (1 - p) + 25) / p, 2.2% of N at p = K / N), each
    round's count is K N / N^ +- sqrt(K), far inside [0.67 K, 1.5 K]; over 3 seeds x 5 steered rounds every one must
    be inside, and their mean within 5% of K."""
    fed = partition(DATA, FAMILIES[family], seed=0)
    realised = []
    for seed in range(3):
        run = simulate(recipes.fedsampling(K=K, total_from="reports"), federated_data=fed, model=LogisticRegression(), rounds=6,
                       seed=seed, eval_every=6)
        steered = [r["realised_samples"] for r in run.history[1:]]
        assert all("steered_total" in r for r in run.history[1:]) and "steered_total" not in run.history[0]
        realised += steered
    low, high = BUDGET_RANGE
    assert all(low * K <= s <= high * K for s in realised), (family, realised)
    assert abs(np.mean(realised) / K - 1) < 0.05, (family, np.mean(realised))


def test_the_steered_total_is_the_mean_of_S_over_p():
    data = FedSamplingData(100, count_drawn=True, steer=True)
    state: dict = {}
    assert data.steered_total(state, 10) is None  # no drawn count yet: the size reports' N~
    data.observe_drawn(state, 120.0, 0.1)  # N^_1 = 1200
    data.observe_drawn(state, 90.0, 0.05)  # N^_2 = 1800
    assert data.steered_total(state, 10) == pytest.approx(1500.0)
    assert data.steered_total(state, 5000) == 5000.0  # floored at the number of clients
    FedSamplingData(100, count_drawn=True).observe_drawn(state := {}, 120.0, 0.1)
    assert state == {}  # not steered: nothing kept


def test_steering_needs_the_drawn_count():
    with pytest.raises(ValueError, match="steer"):
        FedSamplingData(100, steer=True)
    with pytest.raises(ValueError, match="steer"):
        recipes.fedsampling(protocol="paper", steer=True)
    assert not recipes.fedsampling(protocol="paper").data.steer  # the paper's Algorithm 1 is left as it is
    assert not recipes.fedsampling(sizes="exact").data.steer  # exact sizes need no steering
    assert recipes.fedsampling(total_from="reports").data.steer  # the reports' N~ is steered by the drawn count
    assert not recipes.fedsampling().data.steer  # the summed total N^ needs no steering


def test_unsteered_reports_on_shards_take_every_row():
    """The failure issue 38 reported, kept visible: with the size reports and without steering, M from the size prior
    makes N~ far too small on shards and K/N~ >= 1 keeps every row (about 29 K) in every round."""
    fed = partition(DATA, Shards(600, 1), seed=0)
    run = simulate(recipes.fedsampling(K=K, total_from="reports", steer=False), federated_data=fed, model=LogisticRegression(), rounds=2, seed=0)
    assert all(r["clamped"]["ratio"] >= 1 and math.isclose(r["realised_samples"], ROWS, abs_tol=30) for r in run.history)


def test_the_privacy_summary_says_what_S_reveals_at_user_level():
    """The ledger's default unit is one user without a bound k: S is unprotected, and the summary says why."""
    fed = partition(DATA, Shards(600, 1), seed=0)
    run = simulate(recipes.fedsampling(K=K), federated_data=fed, model=LogisticRegression(), rounds=1, seed=0)
    assert run.privacy["unit"] == "user" and "drawn count S" in run.privacy["unprotected"]
    why = run.privacy["unprotected_why"]["drawn count S"]
    assert "move S by as many as it holds" in why and "keep probability times its size" in why
    total = "total size N (the clients' sizes, summed)"  # the summed sizes: a user moves N by its whole size
    assert total in run.privacy["unprotected"] and "move N by as many as it holds" in run.privacy["unprotected_why"][total]
