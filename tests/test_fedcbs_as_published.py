"""Fed-CBS's conventions (issue 40, item 2): QCID as the paper computes it from the clients' inner products, the
exploration bonus under each reading of T_i against hand-computed values, the limit of an infinite bonus, and the
draw's inclusion probabilities against the exact sum over ordered sequences by Monte Carlo.

Monte Carlo tolerance: an inclusion frequency over R draws lies within Z = 4.5 binomial standard errors
sqrt(pi (1 - pi) / R) of the exact pi (a chance failure below 1e-4 per test).
"""

from __future__ import annotations

import numpy as np
import pytest

from fedsample.sampling import fedcbs
from fedsample.sampling.fedcbs import FedCBSClients
from test_published_designs import HIST, assert_frequencies, fedcbs_exact_inclusion


def test_qcid_equals_the_papers_inner_product_form():
    """QCID(S) = sum_{i,j in S} n_i n_j alpha_i . alpha_j / (sum n)^2 - 1/B (what the server learns under encryption):
    clients [10,0,0] and [5,5,0] pool to [15,5,0]/20: sum alpha^2 = 0.625, minus 1/3 = 0.2916...; by inner products
    (100 + 2*50 + 50) / 400 - 1/3 the same."""
    H = np.array([[10.0, 0, 0], [5, 5, 0]])
    n = H.sum(axis=1)
    alpha = H / n[:, None]
    inner = float(np.sum(np.outer(n, n) * (alpha @ alpha.T)) / n.sum() ** 2 - 1 / 3)
    assert inner == pytest.approx(0.625 - 1 / 3, abs=1e-15)
    assert fedcbs.qcid(H) == pytest.approx(inner, abs=1e-15)


def test_the_exploration_bonus_under_each_count_rule_by_hand():
    """lambda = 2, t = 10, selections 0, 1, 4: T = 0, 1, 4 (the bonus of the never-selected infinite), 1, 2, 5, or
    1, 1, 4; in round 1 (ln 1 = 0) nobody has a bonus."""
    c = 2 * np.sqrt(3 * np.log(10) / 2)
    counts = [0, 1, 4]
    np.testing.assert_allclose(fedcbs.exploration_bonus(counts, 10, 2.0), [np.inf, c, c / 2])
    np.testing.assert_allclose(fedcbs.exploration_bonus(counts, 10, 2.0, "plus_one"), [c, c / np.sqrt(2), c / np.sqrt(5)])
    np.testing.assert_allclose(fedcbs.exploration_bonus(counts, 10, 2.0, "floor_one"), [c, c, c / 2])
    np.testing.assert_array_equal(fedcbs.exploration_bonus(counts, 1, 2.0), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(fedcbs.exploration_bonus(counts, 10, 0.0), [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="count_rule"):
        fedcbs.exploration_bonus(counts, 10, 2.0, "zero")  # type: ignore[arg-type]


def test_an_infinite_bonus_makes_the_first_step_uniform_over_the_never_selected():
    """Clients 1 and 3 never selected (t = 4): the first step picks one of them, each with 1/2, whatever QCID says;
    with plus_one every client keeps a finite weight 1/QCID^1 + bonus."""
    counts, t = np.array([2.0, 0, 5, 0, 1]), 4
    bonus = fedcbs.exploration_bonus(counts, t, 1.0)
    np.testing.assert_array_equal(fedcbs.step_probabilities(HIST, [], 1.0, bonus), [0, 0.5, 0, 0.5, 0])
    finite = fedcbs.exploration_bonus(counts, t, 1.0, "plus_one")
    q = np.array([fedcbs.qcid(HIST[i]) for i in range(5)])
    w = 1 / q + finite
    np.testing.assert_allclose(fedcbs.step_probabilities(HIST, [], 1.0, finite), w / w.sum())


@pytest.mark.parametrize("count_rule", ["selections", "plus_one", "floor_one"])
def test_fedcbs_draws_match_the_exact_sequential_probabilities(count_rule):
    """R = 3000 replays of m = 3 of 5 against the exact sum over ordered sequences of the step probabilities, with
    one never-selected client (counts 0, 3, 1, 2, 5; t = 4, lambda = 0.5)."""
    counts, t, lam, m, R = np.array([0.0, 3, 1, 2, 5]), 4, 0.5, 3, 3000
    bonus = fedcbs.exploration_bonus(counts, t, lam, count_rule)
    exact = fedcbs_exact_inclusion(HIST, m, bonus, fedcbs.step_exponents(m))
    assert abs(exact.sum() - m) < 1e-12
    est = fedcbs.estimate_inclusion(HIST, m, R, np.random.default_rng(23), t=t, counts=counts, lam=lam, count_rule=count_rule)
    assert_frequencies(est, exact, R, f"fed-cbs ({count_rule})")
    assert (exact[0] > 1 - 1e-12) == (count_rule == "selections")  # the never-selected client is drawn first, surely


def test_the_sampler_passes_its_count_rule():
    state = fedcbs.FedCBSState(HIST, np.array([0, 3, 1, 2, 5]), 4)
    for rule in ("selections", "plus_one"):
        replayed = FedCBSClients(m=3, lam=0.5, count_rule=rule).replay(state, draws=500, seed=1)
        assert (replayed[0] == 1.0) == (rule == "selections")
    with pytest.raises(ValueError):
        FedCBSClients(count_rule="zero")  # type: ignore[arg-type]
