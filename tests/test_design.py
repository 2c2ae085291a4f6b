"""Tests for fedsample.sampling.design.

Monte Carlo checks use fixed seeds and a tolerance of 4 standard errors per unit: for a unit with declared
inclusion probability pi over R independent draws, |freq - pi| <= 4 * sqrt(pi * (1 - pi) / R). Units with
pi in {0, 1} must match exactly.
"""

from __future__ import annotations


import numpy as np
import pytest

from fedsample.sampling import design as d

MC_DRAWS = 5000  # Monte Carlo repetitions per design: 4 SE is at most 0.028 in probability

# ----------------------------------------------------------------------------------------------------
# helpers


def assert_frequencies(counts: np.ndarray, pi: np.ndarray, R: int, what: str) -> None:
    freq = counts / R
    se = np.sqrt(pi * (1 - pi) / R)
    bad = np.abs(freq - pi) > 4 * se + 1e-12
    assert not np.any(bad), (
        f"{what}: empirical inclusion frequencies off by more than 4 SE at units {np.flatnonzero(bad)}: "
        f"freq={freq[bad]}, pi={pi[bad]}"
    )


def monte_carlo(draw, N: int, pi: np.ndarray, R: int, seed: int) -> np.ndarray:
    """Run ``draw(rng)`` R times; check each Sample is well-formed and declares pi[ids]; count inclusions."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(N)
    for _ in range(R):
        s = draw(rng)
        assert s.ids.dtype == np.int64 and s.inclusion.dtype == np.float64 and s.multiplicity.dtype == np.int64
        assert np.all(np.diff(s.ids) > 0), "ids must be sorted ascending and distinct"
        assert np.max(np.abs(s.inclusion - pi[s.ids]), initial=0.0) <= 1e-12, (s.ids, s.inclusion)
        counts[s.ids] += 1
    return counts


def reference_inclusion(w: np.ndarray, n: float) -> np.ndarray:
    """The textbook iterative rule, written as plainly as possible (test oracle)."""
    w = np.asarray(w, dtype=float)
    pi = np.zeros_like(w)
    certain = np.zeros(w.size, dtype=bool)
    while True:
        free = ~certain & (w > 0)
        pi[free] = (n - certain.sum()) * w[free] / w[free].sum()
        pi[certain] = 1.0
        over = free & (pi > 1)
        if not over.any():
            return pi
        certain |= over


# ----------------------------------------------------------------------------------------------------
# inclusion_probabilities


def test_inclusion_probabilities_hand_computed_capping():
    np.testing.assert_allclose(d.inclusion_probabilities(np.array([10.0, 1, 1, 1, 1]), 2), [1, 0.25, 0.25, 0.25, 0.25])


def test_inclusion_probabilities_capping_needs_two_rounds():
    # 3*100/154 > 1 -> certain; then 2*50/54 > 1 -> certain; then 1 unit over four equal weights.
    pi = d.inclusion_probabilities(np.array([100.0, 50, 1, 1, 1, 1]), 3)
    np.testing.assert_allclose(pi, [1, 1, 0.25, 0.25, 0.25, 0.25])


def test_inclusion_probabilities_no_capping_zero_weights_and_fractional_n():
    w = np.array([1.0, 0.0, 2.0, 3.0, 0.0, 4.0])
    pi = d.inclusion_probabilities(w, 1.5)
    np.testing.assert_allclose(pi, 1.5 * w / w.sum())
    assert pi[1] == 0 and pi[4] == 0
    np.testing.assert_array_equal(d.inclusion_probabilities(w, 4), [1, 0, 1, 1, 0, 1])  # n == #positive
    np.testing.assert_array_equal(d.inclusion_probabilities(w, 0), np.zeros(6))


@pytest.mark.parametrize("seed", range(5))
def test_inclusion_probabilities_matches_iterative_reference(seed):
    rng = np.random.default_rng(seed)
    w = rng.lognormal(0, 2.5, size=200)
    w[rng.random(200) < 0.2] = 0.0
    for n in [1, 3.5, 17, 60, 100]:
        pi = d.inclusion_probabilities(w, n)
        np.testing.assert_allclose(pi, reference_inclusion(w, n), rtol=1e-9, atol=1e-12)
        assert pi.max() <= 1.0 and abs(pi.sum() - n) < 1e-9


def test_inclusion_probabilities_geometric_weights_cap_one_at_a_time():
    w = 2.0 ** -np.arange(40)
    pi = d.inclusion_probabilities(w, 6)
    np.testing.assert_allclose(pi, reference_inclusion(w, 6), rtol=1e-9)
    np.testing.assert_array_equal(pi[:5], 1.0)
    assert pi[5] < 1 and abs(pi.sum() - 6) < 1e-12


# ----------------------------------------------------------------------------------------------------
# Monte Carlo: every design's empirical inclusion frequencies match its declared pi


def test_simple_random_inclusion_mc():
    N, m, R = 12, 5, MC_DRAWS
    pi = np.full(N, m / N)
    counts = monte_carlo(lambda rng: d.simple_random(N, m, rng), N, pi, R, seed=1)
    assert counts.sum() == m * R  # fixed size
    assert_frequencies(counts, pi, R, "simple_random")


def test_bernoulli_inclusion_mc():
    N, q, R = 10, 0.3, MC_DRAWS
    counts = monte_carlo(lambda rng: d.bernoulli(N, q, rng), N, np.full(N, q), R, seed=2)
    assert_frequencies(counts, np.full(N, q), R, "bernoulli")


def test_poisson_inclusion_mc():
    probs = np.array([0.0, 1.0, 0.05, 0.2, 0.5, 0.8, 0.95, 0.33])
    R = MC_DRAWS
    counts = monte_carlo(lambda rng: d.poisson(probs, rng), probs.size, probs, R, seed=3)
    assert_frequencies(counts, probs, R, "poisson")


SYS_PI = np.array([0.0, 0.35, 1.0, 0.2, 0.65, 0.0, 0.9, 0.45, 1.0, 0.15, 0.3])  # sums to 5


def test_systematic_inclusion_mc_and_fixed_size():
    L, R = 5, MC_DRAWS
    assert abs(SYS_PI.sum() - L) < 1e-12
    rng = np.random.default_rng(4)
    counts = np.zeros(SYS_PI.size)
    for _ in range(R):
        ids = d.systematic(SYS_PI, rng)
        assert ids.dtype == np.int64 and ids.size == L and np.all(np.diff(ids) > 0)
        counts[ids] += 1
    assert counts[2] == R and counts[8] == R  # pi = 1: always
    assert counts[0] == 0 and counts[5] == 0  # pi = 0: never
    assert_frequencies(counts, SYS_PI, R, "systematic")


@pytest.mark.parametrize("seed", range(3))
def test_systematic_exact_size_distinct_certain_and_impossible_units(seed):
    rng = np.random.default_rng(100 + seed)
    for _ in range(300):
        N = int(rng.integers(1, 60))
        w = rng.lognormal(0, 2, N) * (rng.random(N) < 0.8)
        positive = int(np.count_nonzero(w))
        if positive == 0:
            continue
        L = int(rng.integers(0, positive + 1))
        pi = d.inclusion_probabilities(w, L)
        ids = d.systematic(pi, rng)
        assert ids.size == L and np.unique(ids).size == L
        assert set(np.flatnonzero(pi == 1)) <= set(ids.tolist())
        assert np.all(pi[ids] > 0)


def test_systematic_keeps_given_order_joint_probabilities_depend_on_it():
    # Progressive totals 0.5, 1, 1.5, 2: units 0 and 1 share [0, 1), so they are never chosen together;
    # units 0 and 2 are exactly one apart, so they are always chosen together.
    rng = np.random.default_rng(5)
    pi = np.full(4, 0.5)
    seen = {tuple(d.systematic(pi, rng).tolist()) for _ in range(200)}
    assert seen == {(0, 2), (1, 3)}


def test_systematic_accepts_sum_within_tolerance_only():
    rng = np.random.default_rng(6)
    pi = np.array([0.3, 0.3, 0.4 - 5e-7, 1.0])
    for _ in range(200):
        ids = d.systematic(pi, rng)
        assert ids.size == 2 and 3 in ids
    with pytest.raises(ValueError, match="sum to an integer"):
        d.systematic(np.array([0.3, 0.3, 0.399, 1.0]), rng)


def test_systematic_sample_inclusion_mc_with_capping():
    w = np.array([40.0, 1, 2, 3, 0, 5, 8, 13, 21, 0.5])
    n, R = 4, MC_DRAWS
    pi = d.inclusion_probabilities(w, n)
    assert pi[0] == 1.0 and pi[4] == 0.0  # the case exercises capping and a zero weight
    counts = monte_carlo(lambda rng: d.systematic_sample(w, n, rng), w.size, pi, R, seed=7)
    assert counts.sum() == n * R
    assert_frequencies(counts, pi, R, "systematic_sample")


def test_pps_with_replacement_inclusion_and_multiplicity_mc():
    p = np.array([0.5, 0.2, 0.15, 0.1, 0.05, 0.0])
    m, R = 3, MC_DRAWS
    pi = 1 - (1 - p) ** m
    rng = np.random.default_rng(8)
    counts = np.zeros(p.size)
    mult = np.zeros(p.size)
    for _ in range(R):
        s = d.pps_with_replacement(p, m, rng)
        assert np.all(np.diff(s.ids) > 0) and s.multiplicity.sum() == m and np.all(s.multiplicity >= 1)
        assert np.max(np.abs(s.inclusion - pi[s.ids]), initial=0.0) <= 1e-12, (s.ids, s.inclusion)
        counts[s.ids] += 1
        mult[s.ids] += s.multiplicity
    assert_frequencies(counts, pi, R, "pps_with_replacement inclusion")
    se = np.sqrt(m * p * (1 - p) / R)  # multiplicity of unit k is Binomial(m, p_k)
    assert np.all(np.abs(mult / R - m * p) <= 4 * se + 1e-12), (mult / R, m * p)


def test_pps_with_replacement_normalizes_weights_and_allows_m_above_N():
    rng = np.random.default_rng(9)
    s = d.pps_with_replacement(np.array([2.0, 6.0]), 10, rng)
    assert s.multiplicity.sum() == 10
    np.testing.assert_allclose(s.inclusion, (1 - (1 - np.array([0.25, 0.75])) ** 10)[s.ids])


STRATA = np.array([0, 1, 0, 2, 1, 0, 2, 2, 0, 1, 3, 0, 2])  # stratum 3 has one unit, allocation 0 below
ALLOC = np.array([2, 1, 3, 0])


def test_stratified_srswor_inclusion_mc():
    R = MC_DRAWS
    sizes = np.bincount(STRATA)
    pi = (ALLOC / sizes)[STRATA]
    counts = monte_carlo(lambda rng: d.stratified(STRATA, ALLOC, rng), STRATA.size, pi, R, seed=10)
    assert_frequencies(counts, pi, R, "stratified (SRSWOR)")


def test_stratified_weighted_inclusion_mc_and_allocation_respected():
    w = np.array([9.0, 1, 1, 2, 3, 1, 4, 1, 1, 5, 1, 2, 0])
    R = MC_DRAWS
    pi = np.zeros(STRATA.size)
    for h, m_h in enumerate(ALLOC):
        units = np.flatnonzero(STRATA == h)
        pi[units] = d.inclusion_probabilities(w[units], m_h)
    assert np.any(pi == 1.0)  # unit 0 is capped inside stratum 0
    rng = np.random.default_rng(11)
    counts = np.zeros(STRATA.size)
    for _ in range(R):
        s = d.stratified(STRATA, ALLOC, rng, weights=w)
        assert np.all(np.diff(s.ids) > 0)
        assert np.array_equal(np.bincount(STRATA[s.ids], minlength=4), ALLOC)
        assert np.max(np.abs(s.inclusion - pi[s.ids]), initial=0.0) <= 1e-12, (s.ids, s.inclusion)
        counts[s.ids] += 1
    assert_frequencies(counts, pi, R, "stratified (weighted)")


# ----------------------------------------------------------------------------------------------------
# Horvitz-Thompson unbiasedness


def _ht_mean_and_se(draw, y: np.ndarray, R: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    est = np.empty(R)
    for r in range(R):
        s = draw(rng)
        est[r] = np.sum(y[s.ids] / s.inclusion)
    return float(est.mean()), float(est.std(ddof=1) / np.sqrt(R))


def test_horvitz_thompson_unbiased_systematic_and_naive_pi_is_not():
    rng = np.random.default_rng(12)
    w = rng.lognormal(0, 1.5, 40)
    y = 3 * w + rng.normal(0, 2, 40) + 5
    total = y.sum()
    n, R = 8, MC_DRAWS
    mean, se = _ht_mean_and_se(lambda g: d.systematic_sample(w, n, g), y, R, seed=13)
    assert abs(mean - total) <= 4 * se, (mean, total, se)
    # The same draws weighted by the uncapped n * w / sum(w) are biased: the test above can detect it.
    naive = n * w / w.sum()
    assert naive.max() > 1
    mean_naive, se_naive = _ht_mean_and_se(
        lambda g: (lambda s: d.Sample(s.ids, naive[s.ids], s.multiplicity))(d.systematic_sample(w, n, g)),
        y, R, seed=13,
    )
    assert abs(mean_naive - total) > 4 * se_naive


def test_horvitz_thompson_unbiased_stratified_and_ignoring_strata_is_not():
    rng = np.random.default_rng(14)
    strata = np.repeat([0, 1, 2], [30, 50, 20])
    y = np.array([1.0, 10.0, 30.0])[strata] + rng.normal(0, 1, strata.size)
    total = y.sum()
    alloc = d.allocate_neyman(np.bincount(strata), np.array([1.0, 1.0, 8.0]), 12)
    R = MC_DRAWS
    for weights in (None, rng.uniform(0.5, 2, strata.size)):
        mean, se = _ht_mean_and_se(lambda g: d.stratified(strata, alloc, g, weights=weights), y, R, seed=15)
        assert abs(mean - total) <= 4 * se, (weights is None, mean, total, se)
    # Using the overall sampling fraction m / N instead of the within-stratum pi is detectably biased.
    frac = alloc.sum() / strata.size
    mean_bad, se_bad = _ht_mean_and_se(
        lambda g: (lambda s: d.Sample(s.ids, np.full(len(s), frac), s.multiplicity))(d.stratified(strata, alloc, g)),
        y, R, seed=15,
    )
    assert abs(mean_bad - total) > 4 * se_bad


# ----------------------------------------------------------------------------------------------------
# allocation


def test_neyman_hand_computed():
    np.testing.assert_array_equal(d.allocate_neyman(np.array([100, 100]), np.array([1.0, 3.0]), 8), [2, 6])
    # shares 100*2, 200*1, 100*4 = 200:200:400 of 12 -> 3, 3, 6
    np.testing.assert_array_equal(d.allocate_neyman(np.array([100, 200, 100]), np.array([2.0, 1, 4]), 12), [3, 3, 6])


def test_allocation_capping_redistributes_surplus():
    # Neyman shares 200:100 would give 6.67 : 3.33, but stratum 0 only has 2 units.
    np.testing.assert_array_equal(d.allocate_neyman(np.array([2, 100]), np.array([100.0, 1.0]), 10), [2, 8])
    # Surplus from the capped stratum is split proportionally among the others: targets 3 (cap) then 7 in 1:3.
    np.testing.assert_array_equal(d.allocate_neyman(np.array([3, 100, 100]), np.array([100.0, 1, 3]), 10), [3, 2, 5])
    # Only zero-share strata have room left: they absorb the rest in proportion to size.
    np.testing.assert_array_equal(d.allocate_neyman(np.array([100, 5]), np.array([0.0, 1.0]), 50), [45, 5])


def test_allocation_largest_remainder_minimum_one_and_empty_strata():
    np.testing.assert_array_equal(d.allocate_proportional(np.array([30, 30, 40]), 10), [3, 3, 4])
    # 2, 3.5, 4.5: floors 2, 3, 4 and the tie on .5 goes to the lower index
    np.testing.assert_array_equal(d.allocate_proportional(np.array([20, 35, 45]), 10), [2, 4, 4])
    # 0.7 would round to 0: raised to 1, the rest shared 1.333 : 2 : 2.667 -> 1, 2, 3
    np.testing.assert_array_equal(d.allocate_proportional(np.array([10, 20, 30, 40]), 7), [1, 1, 2, 3])
    np.testing.assert_array_equal(d.allocate_proportional(np.array([0, 5, 7, 0]), 4), [0, 2, 2, 0])
    np.testing.assert_array_equal(d.allocate_proportional(np.array([3, 4]), 7), [3, 4])  # m == sum(N_h)


def test_neyman_all_zero_sd_falls_back_to_proportional_and_zero_sd_gets_one():
    N_h = np.array([10, 20, 30, 40])
    np.testing.assert_array_equal(d.allocate_neyman(N_h, np.zeros(4), 7), d.allocate_proportional(N_h, 7))
    np.testing.assert_array_equal(d.allocate_neyman(np.array([50, 50]), np.array([0.0, 2.0]), 10), [1, 9])


@pytest.mark.parametrize("seed", range(10))
def test_allocation_invariants_random(seed):
    rng = np.random.default_rng(200 + seed)
    H = int(rng.integers(1, 12))
    N_h = rng.integers(0, 30, H) * (rng.random(H) < 0.85)
    nonempty = int(np.count_nonzero(N_h))
    if N_h.sum() == 0:
        N_h[0] = 5
        nonempty = 1
    S_h = rng.exponential(1, H) * (rng.random(H) < 0.8)
    for m in {nonempty, int(rng.integers(nonempty, N_h.sum() + 1)), int(N_h.sum())}:
        for alloc, shares in ((d.allocate_proportional(N_h, m), N_h * 1.0), (d.allocate_neyman(N_h, S_h, m), N_h * S_h)):
            assert alloc.dtype == np.int64 and alloc.sum() == m
            assert np.all(alloc[N_h == 0] == 0)
            assert np.all((alloc[N_h > 0] >= 1) & (alloc[N_h > 0] <= N_h[N_h > 0]))
            # Strata strictly inside their bounds got floor or ceil of lam * share for one common lam, so
            # (m_i - 1) / s_i < lam < (m_j + 1) / s_j for every pair of them.
            free = (alloc >= 2) & (alloc < N_h) & (shares > 0)
            if free.any():
                assert np.max((alloc[free] - 1) / shares[free]) < np.min((alloc[free] + 1) / shares[free])


# ----------------------------------------------------------------------------------------------------
# bad input


BAD_INPUTS = [
    (lambda: d.inclusion_probabilities(np.array([1.0, np.nan]), 1), "NaN"),
    (lambda: d.inclusion_probabilities(np.array([1.0, -1.0]), 1), "negative"),
    (lambda: d.inclusion_probabilities(np.zeros(3), 1), "all weights are zero"),
    (lambda: d.inclusion_probabilities(np.array([1.0, 0, 2]), 3), "exceeds the number of positive weights"),
    (lambda: d.inclusion_probabilities(np.ones(3), -1), "n must be >= 0"),
    (lambda: d.inclusion_probabilities(np.ones((2, 2)), 1), "1-D"),
    (lambda: d.simple_random(5, 6, np.random.default_rng()), "exceeds the population size"),
    (lambda: d.simple_random(5, -1, np.random.default_rng()), "m must be >= 0"),
    (lambda: d.simple_random(5, 2.5, np.random.default_rng()), "m must be an integer"),
    (lambda: d.bernoulli(5, 1.5, np.random.default_rng()), "q must be a probability"),
    (lambda: d.poisson(np.array([0.5, 1.2]), np.random.default_rng()), "must be <= 1"),
    (lambda: d.poisson(np.array([0.5, np.inf]), np.random.default_rng()), "NaN or infinite"),
    (lambda: d.systematic(np.array([0.5, 0.7]), np.random.default_rng()), "sum to an integer"),
    (lambda: d.systematic(np.array([1.5, 0.5]), np.random.default_rng()), "must be <= 1"),
    (lambda: d.systematic(np.array([-0.5, 1.5]), np.random.default_rng()), "negative"),
    (lambda: d.systematic_sample(np.array([1.0, 0.0, 0.0]), 2, np.random.default_rng()), "exceeds the number of positive"),
    (lambda: d.systematic_sample(np.ones(3), 1.5, np.random.default_rng()), "n must be an integer"),
    (lambda: d.pps_with_replacement(np.zeros(4), 2, np.random.default_rng()), "all zero"),
    (lambda: d.pps_with_replacement(np.array([0.5, np.nan]), 2, np.random.default_rng()), "NaN"),
    (lambda: d.allocate_proportional(np.array([3, 4]), 8), "exceeds the population size"),
    (lambda: d.allocate_proportional(np.array([3, 4, 5]), 2), "smaller than the number of non-empty strata"),
    (lambda: d.allocate_proportional(np.array([3, -4]), 2), "negative"),
    (lambda: d.allocate_proportional(np.array([3.5, 4]), 2), "must hold integers"),
    (lambda: d.allocate_neyman(np.array([3, 4]), np.array([1.0]), 2), "S_h has length 1 but N_h has length 2"),
    (lambda: d.allocate_neyman(np.array([3, 4]), np.array([1.0, np.nan]), 2), "NaN"),
    (lambda: d.allocate_neyman(np.array([3, 4]), np.array([1.0, -2.0]), 2), "negative"),
    (lambda: d.stratified(np.array([0, 1, 2]), np.array([1, 1]), np.random.default_rng()), r"labels must lie in \[0, 2\)"),
    (lambda: d.stratified(np.array([0, 0, 1]), np.array([3, 1]), np.random.default_rng()), r"allocation\[0\] = 3 exceeds"),
    (lambda: d.stratified(np.array([0, 0, 1]), np.array([1, 1]), np.random.default_rng(), np.ones(2)), "weights has length 2"),
    (lambda: d.stratified(np.array([0, 0, 1]), np.array([2, 1]), np.random.default_rng(), np.array([1.0, 0, 1])), "stratum 0 has 1 units with positive weight"),
    (lambda: d.stratified(np.array([0, -1]), np.array([1, 1]), np.random.default_rng()), "negative"),
    (lambda: d.Sample(np.array([1, 2]), np.array([0.5]), np.array([1, 1])), "same length"),
]


@pytest.mark.parametrize("call, message", BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_raises_value_error_naming_the_problem(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_rng_must_be_a_generator():
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        d.simple_random(5, 2, 0)


# ----------------------------------------------------------------------------------------------------
# determinism and speed


DESIGNS = {
    "simple_random": lambda rng: d.simple_random(1000, 50, rng),
    "bernoulli": lambda rng: d.bernoulli(1000, 0.05, rng),
    "poisson": lambda rng: d.poisson(np.linspace(0, 1, 1000), rng),
    "systematic_sample": lambda rng: d.systematic_sample(np.arange(1000.0), 50, rng),
    "pps_with_replacement": lambda rng: d.pps_with_replacement(np.arange(1000.0), 50, rng),
    "stratified": lambda rng: d.stratified(np.arange(1000) % 7, np.full(7, 5), rng),
    "stratified_weighted": lambda rng: d.stratified(np.arange(1000) % 7, np.full(7, 5), rng, np.arange(1000.0)),
}


@pytest.mark.parametrize("name", DESIGNS)
def test_same_seed_same_sample_different_seed_different_sample(name):
    draw = DESIGNS[name]
    a, b, c = draw(np.random.default_rng(42)), draw(np.random.default_rng(42)), draw(np.random.default_rng(43))
    for field in ("ids", "inclusion", "multiplicity"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.ids, c.ids)


def test_systematic_same_seed_same_ids():
    pi = d.inclusion_probabilities(np.arange(1.0, 101.0), 10)
    np.testing.assert_array_equal(d.systematic(pi, np.random.default_rng(1)), d.systematic(pi, np.random.default_rng(1)))
