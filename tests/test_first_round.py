"""FedSampling's first round, before any drawn count is seen: E[S]/K = N min(1, K/N~)/K
(:func:`fedsample.privacy.size_estimate.first_round_budget`), and what no choice of M can fix (issue 38, item 1;
benchmarks/first_round.py, docs/size-estimate.md "The first round")."""

import numpy as np
import pytest

from fedsample.budget import BUDGET_RANGE
from fedsample.privacy.size_estimate import best_M, first_round_budget

K = 2048
SHARDS = np.full(100, 600)  # the label-sorted shards of Fashion-MNIST: 100 clients x 600 rows


def test_the_first_round_budget_by_hand():
    """At eps = 60 every report is true (1 - alpha ~ 1e-24), so N~ is the clipped total: with M = 601 nothing is
    clipped, N~ = N and E[S] = K exactly; with M = 9 (the default's size prior on shards) N~ = 100 * 8 = 800,
    K/N~ > 1 keeps every row and E[S]/K = 60,000/2048 = 29.30."""
    rng = np.random.default_rng(0)
    assert first_round_budget(SHARDS, 60.0, 601, K, 5, rng) == pytest.approx(np.ones(5))
    assert first_round_budget(SHARDS, 60.0, 9, K, 5, rng) == pytest.approx(np.full(5, 60_000 / K))
    # N~ is floored at the number of clients: one client of 10 rows, M = 2 (N~ = 1) and K = 4: min(1, 4/1) * 10/4
    assert first_round_budget(np.array([10]), 60.0, 2, 4, 3, rng) == pytest.approx(np.full(3, 2.5))


def test_no_threshold_keeps_the_first_round_in_range_on_shards():
    """Even the oracle (true sizes read, no privacy spent on choosing) cannot choose an M for which the first round's
    E[S] is in [0.67 K, 1.5 K] in most draws at eps = 3 on 100 clients: the Eq. 2 noise at the M that removes the
    clipping is about N itself. Over every M on a geometric grid to 601, the best share in range is below 0.6
    (measured 0.47 at 1,000 draws; the standard error of a share is at most 0.016, so 0.6 is 8 se away)."""
    rng = np.random.default_rng(1)
    low, high = BUDGET_RANGE
    grid = np.unique(np.round(np.geomspace(2, 601, 30)).astype(int))
    shares = [np.mean((b >= low) & (b <= high)) for b in (first_round_budget(SHARDS, 3.0, int(M), K, 1000, rng) for M in grid)]
    assert max(shares) < 0.6, dict(zip(grid.tolist(), shares))
    oracle = first_round_budget(SHARDS, 3.0, best_M(SHARDS, 3.0), K, 1000, rng)
    assert np.mean((oracle >= low) & (oracle <= high)) < 0.6
