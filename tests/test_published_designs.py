"""Tests for the published client samplers' selection procedures and inclusion probabilities
(fedsample.sampling: clustered, power_of_choice, optimal, delta, fedcbs, fedcor, divfl, oort) and the helpers
they add to fedsample.sampling.design (successive sampling, replay).

Monte Carlo tolerance, stated once: with a fixed seed and R independent draws, an empirical frequency (or
mean) must lie within Z = 4.5 standard errors of the declared value, the standard error being
sqrt(pi (1 - pi) / R) for an inclusion frequency and the declared (or, where stated, the sample's own)
standard deviation / sqrt(R) for a mean. Units with pi in {0, 1} must match exactly. With about 30 units
per test, a 4.5 SE band fails by chance with probability below 2e-4 per test.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedsample.sampling import clustered, delta, design, divfl, fedcbs, fedcor, oort, optimal, power_of_choice

Z = 4.5


def assert_frequencies(freq: np.ndarray, pi: np.ndarray, R: int, what: str) -> None:
    se = np.sqrt(pi * (1 - pi) / R)
    bad = np.abs(freq - pi) > Z * se + 1e-12
    assert not np.any(bad), f"{what}: units {np.flatnonzero(bad)} off by > {Z} SE: freq={freq[bad]}, pi={pi[bad]}"


def count_inclusions(draw, N: int, R: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = np.zeros(N)
    for _ in range(R):
        counts[draw(rng).ids] += 1
    return counts / R


def test_every_module_declares_probability_kind_and_what_the_server_learns():
    vocabulary = {
        "sizes", "losses", "minibatch_losses", "stale_losses", "update_norms", "update_norm_sums", "gradients",
        "local_variances", "label_histograms", "participation_counts", "participation",
    }
    for module in (clustered, power_of_choice, optimal, delta, fedcbs, fedcor, divfl, oort):
        kinds, learns = module.PROBABILITY_KIND, module.SERVER_LEARNS
        assert kinds and set(kinds) == set(learns), module.__name__
        assert set(kinds.values()) <= {"exact", "estimated", "degenerate"}, module.__name__
        for needs in learns.values():
            assert set(needs) <= vocabulary, (module.__name__, needs)


# ----------------------------------------------------------------------------------------------------
# design helpers: successive sampling and replay


def test_successive_sampling_inclusion_hand_computed():
    p = np.array([0.5, 0.3, 0.2])
    np.testing.assert_allclose(design.successive_sampling_inclusion(p, 1), p)
    # pi_i(2) = p_i + sum_{j != i} p_j p_i / (1 - p_j)
    hand = [
        0.5 + 0.3 * 0.5 / 0.7 + 0.2 * 0.5 / 0.8,
        0.3 + 0.5 * 0.3 / 0.5 + 0.2 * 0.3 / 0.8,
        0.2 + 0.5 * 0.2 / 0.5 + 0.3 * 0.2 / 0.7,
    ]
    np.testing.assert_allclose(design.successive_sampling_inclusion(p, 2), hand, rtol=1e-12)
    np.testing.assert_allclose(design.successive_sampling_inclusion(p, 3), 1.0)
    members, probs = design.successive_sampling_sets(np.array([1.0, 0.0, 1.0, 2.0]), 2)
    assert abs(probs.sum() - 1) < 1e-12 and np.all(members.sum(axis=1) == 2)
    assert probs[members[:, 1]].sum() == 0  # a unit with p = 0 is never drawn


def test_successive_sampling_inclusion_matches_numpy_choice_mc():
    p = np.array([0.3, 0.25, 0.15, 0.1, 0.1, 0.05, 0.03, 0.02])
    n, R = 3, 6000
    pi = design.successive_sampling_inclusion(p, n)
    assert abs(pi.sum() - n) < 1e-12 and not np.allclose(pi, n * p)
    rng = np.random.default_rng(11)
    counts = np.zeros(p.size)
    for _ in range(R):
        counts[rng.choice(p.size, size=n, replace=False, p=p)] += 1
    assert_frequencies(counts / R, pi, R, "successive sampling")


def test_design_helpers_reject_bad_input():
    with pytest.raises(ValueError, match="limited to 20"):
        design.successive_sampling_sets(np.ones(21), 2)
    with pytest.raises(ValueError, match="n = 3 exceeds"):
        design.successive_sampling_inclusion(np.array([1.0, 0.0, 1.0]), 3)
    with pytest.raises(ValueError, match="draws"):
        design.replay_inclusion(lambda g: np.array([0]), 3, 0, np.random.default_rng(0))


# ----------------------------------------------------------------------------------------------------
# clustered sampling (Fraboni et al. 2021)

SIZES4 = np.array([40.0, 30, 20, 10])  # p = .4 .3 .2 .1; with m = 3 the masses are 1.2 .9 .6 .3
R4 = np.array([[1.0, 0.0, 0.0, 0.0], [0.2, 0.8, 0.0, 0.0], [0.0, 0.1, 0.6, 0.3]])


def test_algorithm1_matrix_hand_computed():
    r = clustered.size_distributions(SIZES4, 3)
    np.testing.assert_allclose(r, R4, atol=1e-15)
    # P(i in S) = 1 - prod_k (1 - r_ki): client 1 = 1 - 1 * 0.2 * 0.9
    np.testing.assert_allclose(clustered.inclusion_from_distributions(r), [1.0, 0.82, 0.6, 0.3], atol=1e-15)
    # Var(omega_i) = sum_k r(1 - r) / m^2 against MD's m p (1 - p) / m^2
    np.testing.assert_allclose(clustered.aggregation_weight_variance(r) * 9, [0.16, 0.25, 0.24, 0.21], atol=1e-14)
    md = clustered.aggregation_weight_variance(clustered.md_distributions(SIZES4, 3)) * 9
    np.testing.assert_allclose(md, 3 * np.array([0.4 * 0.6, 0.3 * 0.7, 0.2 * 0.8, 0.1 * 0.9]), atol=1e-14)


def test_algorithm1_rows_columns_and_straddling_on_random_sizes():
    rng = np.random.default_rng(0)
    sizes = rng.lognormal(3, 1.5, 60).round() + 1
    for m in (1, 5, 17):
        r = clustered.size_distributions(sizes, m)
        p = sizes / sizes.sum()
        np.testing.assert_allclose(r.sum(axis=1), 1.0, atol=1e-12)
        np.testing.assert_allclose(r.sum(axis=0), m * p, atol=1e-12)
        assert np.all((r > 0).sum(axis=0) <= np.ceil(m * p) + 1)  # a client straddles consecutive rows only
        # poured largest first: row k holds a run of the descending order that ends where row k + 1's begins
        rank = np.empty(p.size, dtype=int)
        rank[np.argsort(-p, kind="stable")] = np.arange(p.size)
        runs = [rank[row > 1e-12] for row in r]
        assert all(np.ptp(run) + 1 == run.size for run in runs)
        assert all(a.max() <= b.min() for a, b in zip(runs, runs[1:]))


def test_clustered_draws_match_declared_inclusion_and_expected_draws_mc():
    # one client with m p_i > 1 (pi = 1 exactly) and one with p = 0
    sizes = np.array([300.0, 80, 60, 40, 40, 30, 20, 15, 10, 5, 0])
    m, R = 4, 6000
    r = clustered.size_distributions(sizes, m)
    pi = clustered.inclusion_from_distributions(r)
    assert pi[0] == 1.0 and pi[-1] == 0.0
    rng = np.random.default_rng(21)
    inc, draws = np.zeros(sizes.size), np.zeros((R, sizes.size))
    for t in range(R):
        s = clustered.draw_from_distributions(r, rng)
        assert s.multiplicity.sum() == m and np.all(np.abs(s.inclusion - pi[s.ids]) < 1e-15)
        inc[s.ids] += 1
        draws[t, s.ids] = s.multiplicity
    assert_frequencies(inc / R, pi, R, "clustered inclusion")
    p = sizes / sizes.sum()
    var = clustered.aggregation_weight_variance(r) * m**2  # Var(number of draws)
    mean_se = np.sqrt(var / R)
    assert np.all(np.abs(draws.mean(axis=0) - m * p) <= Z * mean_se + 1e-12)
    # the sample variance of omega = draws / m against the exact formula, SE from the sample's 4th moment
    omega = draws / m
    centred = omega - omega.mean(axis=0)
    s2 = (centred**2).mean(axis=0)
    se = np.sqrt(np.maximum((centred**4).mean(axis=0) - s2**2, 0) / R)
    assert np.all(np.abs(s2 - clustered.aggregation_weight_variance(r)) <= Z * se + 1e-12)


def test_clustered_weight_variance_never_exceeds_md_same_expectation():
    rng = np.random.default_rng(1)
    sizes = rng.lognormal(3, 1.0, 40).round() + 1
    G = rng.normal(size=(40, 6))
    for m in (3, 8):
        md = clustered.aggregation_weight_variance(clustered.md_distributions(sizes, m))
        for r in (clustered.size_distributions(sizes, m), clustered.similarity_distributions(sizes, G, m)):
            np.testing.assert_allclose(r.sum(axis=0) / m, sizes / sizes.sum(), atol=1e-12)  # E[omega] = p
            assert np.all(clustered.aggregation_weight_variance(r) <= md + 1e-15)
        assert clustered.aggregation_weight_variance(clustered.size_distributions(sizes, m)).sum() < md.sum()


def _grouped_gradients(rng: np.random.Generator) -> np.ndarray:
    centres = np.array([[5.0, 0, 0], [0, 5.0, 0], [0, 0, 5.0]])
    return np.repeat(centres, 4, axis=0) + rng.normal(0, 0.05, (12, 3))


@pytest.mark.parametrize("similarity", ["L2", "L1", "arccos"])
@pytest.mark.parametrize("linkage_input", ["embedded", "reference"])
def test_algorithm2_groups_similar_clients_and_keeps_the_column_sums(similarity, linkage_input):
    rng = np.random.default_rng(2)
    G = _grouped_gradients(rng)
    sizes = np.full(12, 10.0)  # every group holds mass 1/3 exactly: m = 3 gives one distribution per group
    r = clustered.similarity_distributions(sizes, G, 3, similarity, linkage_input)
    np.testing.assert_allclose(r.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(r.sum(axis=0), 3 * np.full(12, 1 / 12), atol=1e-12)
    rows = {tuple(np.flatnonzero(row > 0)) for row in r}
    assert rows == {(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11)}


def test_algorithm2_cut_pours_small_clusters_and_big_clients():
    rng = np.random.default_rng(3)
    sizes = np.array([500.0] + [10.0] * 9)  # client 0: m p = 3.39 > 1
    G = rng.normal(size=(10, 3))
    r = clustered.similarity_distributions(sizes, G, 4)
    np.testing.assert_allclose(r.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(r.sum(axis=0), 4 * sizes / sizes.sum(), atol=1e-12)
    assert clustered.inclusion_from_distributions(r)[0] == 1.0
    p = sizes / sizes.sum()
    labels = clustered.mass_clusters(clustered.similarity_linkage(G), p, 4)
    masses = np.bincount(labels, weights=p)
    multi = np.bincount(labels) > 1
    assert np.all(masses[multi] <= 0.25 + 1e-12)  # every cluster of several clients weighs at most 1/m


def test_algorithm2_exact_inclusion_mc():
    rng = np.random.default_rng(4)
    sizes = rng.integers(5, 60, 20).astype(float)
    G = rng.normal(size=(20, 4))
    r = clustered.similarity_distributions(sizes, G, 5, "arccos")
    pi = clustered.inclusion_from_distributions(r)
    R = 5000
    freq = count_inclusions(lambda g: clustered.draw_from_distributions(r, g), 20, R, seed=5)
    assert_frequencies(freq, pi, R, "algorithm 2")


def test_similarity_linkage_inputs():
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import pdist

    rng = np.random.default_rng(6)
    G = rng.normal(size=(6, 4))
    G[3] = 3 * G[1]  # same direction: arccos distance 0, so they merge first at height 0
    Z = clustered.similarity_linkage(G, "arccos")
    assert set(Z[0, :2].astype(int)) == {1, 3} and Z[0, 2] < 1e-12
    U = G / np.linalg.norm(G, axis=1, keepdims=True)
    theta = np.arccos(np.clip(U @ U.T, -1, 1))[np.triu_indices(6, 1)]
    # chord = 2 sin(theta / 2), increasing in the angle (arccos loses precision near 0: atol 1e-7)
    np.testing.assert_allclose(pdist(U), 2 * np.sin(theta / 2), atol=1e-7)
    np.testing.assert_allclose(clustered.similarity_linkage(G, "L1"), linkage(np.sqrt(pdist(G, "cityblock")), "ward"))
    with pytest.raises(ValueError, match="zero"):
        clustered.similarity_linkage(np.vstack([G, np.zeros(4)]), "arccos")
    with pytest.raises(ValueError, match="similarity"):
        clustered.similarity_linkage(G, "cosine")


def test_md_sampling_is_pps_with_replacement():
    a = clustered.md_sampling(SIZES4, 3, np.random.default_rng(7))
    b = design.pps_with_replacement(SIZES4 / SIZES4.sum(), 3, np.random.default_rng(7))
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.multiplicity, b.multiplicity)


def test_clustered_rejects_bad_input():
    with pytest.raises(ValueError, match="sizes"):
        clustered.size_distributions(np.array([1.0, -1.0]), 2)
    with pytest.raises(ValueError, match="m must be"):
        clustered.size_distributions(SIZES4, 0)
    with pytest.raises(ValueError, match="row 0 sums"):
        clustered.draw_from_distributions(np.array([[0.5, 0.4]]), np.random.default_rng(0))


# ----------------------------------------------------------------------------------------------------
# power-of-choice (Cho, Wang & Joshi 2022)


def pow_d_exact_inclusion(sizes: np.ndarray, losses: np.ndarray, d: int, m: int) -> np.ndarray:
    """Test oracle: enumerate every candidate set with its successive-sampling probability, keep its top m."""
    members, probs = design.successive_sampling_sets(sizes, d)
    pi = np.zeros(sizes.size)
    for row, prob in zip(members, probs):
        pi[power_of_choice.highest_losses(np.flatnonzero(row), losses, m)] += prob
    return pi


def test_power_of_choice_keeps_the_highest_losses_of_the_candidates():
    losses = np.array([0.1, 0.9, 0.5, 0.5, 2.0, np.nan])
    np.testing.assert_array_equal(power_of_choice.highest_losses(np.array([0, 2, 3, 4]), losses, 2), [2, 4])
    np.testing.assert_array_equal(power_of_choice.highest_losses(np.array([0, 1, 2, 3]), losses, 3), [1, 2, 3])
    with pytest.raises(ValueError, match="NaN"):
        power_of_choice.highest_losses(np.array([4, 5]), losses, 1)


def test_power_of_choice_estimate_matches_enumeration_and_sums_to_m():
    sizes = np.array([50.0, 30, 20, 20, 10, 10, 5])
    losses = np.array([0.2, 0.5, 0.9, 0.1, 1.5, 0.7, 0.3])
    d, m, R = 4, 2, 5000
    exact = pow_d_exact_inclusion(sizes, losses, d, m)
    assert abs(exact.sum() - m) < 1e-12
    est = power_of_choice.estimate_inclusion(sizes, losses, d, m, R, np.random.default_rng(8))
    assert abs(est.sum() - m) < 1e-12  # every replay selects exactly m
    assert_frequencies(est, exact, R, "pow-d")
    # biased by design: the highest-loss client is included far above its share m p_i
    assert exact[4] > 2 * m * sizes[4] / sizes.sum()


def test_power_of_choice_variants_helpers():
    rng = np.random.default_rng(9)
    sample_losses = np.arange(10.0)
    assert power_of_choice.minibatch_loss(sample_losses, 20, rng) == 4.5
    values = [power_of_choice.minibatch_loss(sample_losses, 3, rng) for _ in range(2000)]
    assert abs(np.mean(values) - 4.5) < Z * np.std(values) / np.sqrt(2000)  # unbiased for the full loss
    stale = power_of_choice.record_losses(np.full(5, np.inf), np.array([1, 3]), np.array([0.4, 0.2]))
    np.testing.assert_array_equal(stale, [np.inf, 0.4, np.inf, 0.2, np.inf])
    with pytest.raises(ValueError, match="m = 4 exceeds the candidate set size d = 3"):
        power_of_choice.power_of_choice(np.ones(5), np.ones(5), 3, 4, rng)
    with pytest.raises(ValueError, match="d = 5 exceeds"):
        power_of_choice.candidate_set(np.array([1.0, 1, 1, 1, 0]), 5, rng)


# ----------------------------------------------------------------------------------------------------
# optimal client sampling (Chen, Horvath & Richtarik 2022)


def paper_sorted_rule(u: np.ndarray, m: int) -> np.ndarray:
    """Test oracle, the paper's rule written out: u ascending, l the largest integer with
    0 < m + l - n <= sum_{i<=l} u_(i) / u_(l); p_(i) = (m + l - n) u_(i) / sum_{j<=l} u_(j) for i <= l, else 1."""
    n = u.size
    order = np.argsort(u)
    s = u[order]
    best = None
    for l in range(1, n + 1):
        if 0 < m + l - n <= s[:l].sum() / s[l - 1]:
            best = l
    p_sorted = np.ones(n)
    p_sorted[:best] = (m + best - n) * s[:best] / s[:best].sum()
    p = np.empty(n)
    p[order] = p_sorted
    return p


def test_optimal_probabilities_five_client_hand_examples():
    # 2 * 12 / 20 > 1: client 4 capped; the others share 1 in proportion to 1, 1, 2, 4 (sum 8)
    u = np.array([1.0, 1, 2, 4, 12])
    np.testing.assert_allclose(optimal.optimal_probabilities(u, 2), [0.125, 0.125, 0.25, 0.5, 1.0], atol=1e-15)
    np.testing.assert_allclose(paper_sorted_rule(u, 2), [0.125, 0.125, 0.25, 0.5, 1.0], atol=1e-15)
    # two caps, one after the other: 3 * 20 / 34 > 1, then 2 * 10 / 14 > 1, then 1 over four equal norms
    u = np.array([1.0, 20, 1, 10, 1, 1])
    np.testing.assert_allclose(optimal.optimal_probabilities(u, 3), [0.25, 1, 0.25, 1, 0.25, 0.25], atol=1e-15)
    np.testing.assert_allclose(paper_sorted_rule(u, 3), [0.25, 1, 0.25, 1, 0.25, 0.25], atol=1e-15)


def test_optimal_probabilities_match_the_paper_rule_and_fedlab_case():
    rng = np.random.default_rng(10)
    for _ in range(20):
        u = rng.lognormal(0, 2, 25)
        m = int(rng.integers(1, 25))
        np.testing.assert_allclose(optimal.optimal_probabilities(u, m), paper_sorted_rule(u, m), rtol=1e-10)
    # FedLab's reported case: 32 log-normal norms, m = 8 (FedLab returned p = 1.17, sum 8.17)
    u = np.random.default_rng(2022).lognormal(0, 1.5, 32)
    assert np.max(8 * u / u.sum()) > 1  # the case needs capping
    p = optimal.optimal_probabilities(u, 8)
    assert p.max() <= 1.0 and abs(p.sum() - 8) < 1e-12
    np.testing.assert_allclose(p, paper_sorted_rule(u, 8), rtol=1e-10)


def test_aocs_converges_to_the_optimal_rule_and_stays_feasible():
    rng = np.random.default_rng(12)
    u = rng.lognormal(0, 2, 40)
    m = 10
    exact = optimal.optimal_probabilities(u, m)
    previous = 0.0
    for j in range(0, 12):
        p = optimal.aocs_probabilities(u, m, j)
        assert p.max() <= 1.0 and p.sum() <= m + 1e-12 and p.sum() >= previous - 1e-12
        previous = p.sum()
    np.testing.assert_allclose(optimal.aocs_probabilities(u, m, 50), exact, rtol=1e-12)
    np.testing.assert_allclose(optimal.aocs_probabilities(u, m, 0), np.minimum(m * u / u.sum(), 1))
    np.testing.assert_array_equal(optimal.aocs_probabilities([0, 3, 0, 1], 2, 5), [0, 1, 0, 1])


def test_optimal_sampling_inclusion_and_unbiased_horvitz_thompson_mc():
    rng = np.random.default_rng(13)
    N, m, R = 15, 4, 6000
    weights = rng.random(N)
    weights /= weights.sum()
    U = rng.normal(size=(N, 2)) * rng.lognormal(0, 1.5, (N, 1))
    U[4] *= 10.0 / (weights[4] * np.linalg.norm(U[4]))  # u_4 = 10: far above its share, capped
    u = optimal.update_norms(U, weights)
    p = optimal.optimal_probabilities(u, m)
    assert np.any(p == 1.0)  # a capped client
    target = weights @ U
    estimates, counts = np.zeros((R, 2)), np.zeros(N)
    for t in range(R):
        s = optimal.optimal_sample(u, m, rng)
        counts[s.ids] += 1
        estimates[t] = optimal.horvitz_thompson_estimate(s, weights, U)
    assert_frequencies(counts / R, p, R, "optimal sending")
    # exact variance of the HT estimate under Poisson sampling: sum_i (1/p_i - 1) (w_i U_i)^2
    sd = np.sqrt(((1 / p - 1)[:, None] * (weights[:, None] * U) ** 2).sum(axis=0))
    assert np.all(np.abs(estimates.mean(axis=0) - target) <= Z * sd / np.sqrt(R))


def test_optimal_rejects_bad_input():
    with pytest.raises(ValueError, match="norms"):
        optimal.optimal_probabilities(np.array([1.0, np.nan]), 1)
    with pytest.raises(ValueError, match="j_max"):
        optimal.aocs_probabilities(np.ones(4), 2, -1)


# ----------------------------------------------------------------------------------------------------
# DELTA (Wang et al. 2023)


def test_delta_scores_and_diversity_hand_computed():
    np.testing.assert_allclose(delta.delta_scores([3.0, 0.0], [16.0, 4.0], 1.0, 1.0), [5.0, 2.0])
    np.testing.assert_allclose(delta.delta_scores([1.0], [1.0], 2.0, 7.0), [3.0])
    G = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # weighted mean gradient (0.5, 0.5) with weights 1, 1, 0; then (0.75, 0.5) with weights 2, 1, 1
    np.testing.assert_allclose(delta.gradient_diversity(G, [1.0, 1, 0]), [np.sqrt(0.5)] * 3)
    np.testing.assert_allclose(delta.gradient_diversity(G, [2.0, 1, 1]), np.sqrt([0.3125, 0.8125, 0.3125]))
    assert delta.local_variance(np.array([[0.0, 0.0], [2.0, 0.0]])) == 1.0
    np.testing.assert_allclose(delta.delta_probabilities([0.0, 0.0]), [0.5, 0.5])


def _delta_case():
    p = delta.delta_probabilities(np.array([6.0, 3.0, 2.0, 1.0, 1.0, 0.5]))
    weights = np.full(p.size, 1 / p.size)
    updates = np.array([[1.0], [2.0], [-1.0], [4.0], [0.5], [3.0]])
    return p, weights, updates, float(weights @ updates[:, 0])


def test_delta_matched_draws_are_unbiased_mc():
    p, w, U, target = _delta_case()
    m, R = 3, 4000
    rng = np.random.default_rng(14)
    with_repl, pois = np.zeros(R), np.zeros(R)
    for t in range(R):
        s = delta.with_replacement_sample(p, m, rng)
        with_repl[t] = delta.with_replacement_weights(s, p, m, w) @ U[s.ids, 0]
        s = delta.poisson_sample(p, m, rng)
        pois[t] = optimal.horvitz_thompson_weights(s, w) @ U[s.ids, 0]
    # exact standard deviations: with replacement (1/m) Var_p(w U / p); Poisson sum (1/pi - 1)(w U)^2
    y = w * U[:, 0] / p
    sd_wr = np.sqrt((p @ (y - target) ** 2) / m)
    pi = optimal.optimal_probabilities(p, m)
    sd_po = np.sqrt(((1 / pi - 1) * (w * U[:, 0]) ** 2).sum())
    assert abs(with_repl.mean() - target) <= Z * sd_wr / np.sqrt(R)
    assert abs(pois.mean() - target) <= Z * sd_po / np.sqrt(R)


def test_delta_reference_draw_is_biased_mc():
    p, w, U, target = _delta_case()
    m, R = 3, 4000
    pi = delta.reference_inclusion(p, m)
    assert abs(pi.sum() - m) < 1e-12 and not np.allclose(pi, m * p)
    expected = float((pi / (m * p) * w) @ U[:, 0])  # E[naive estimate] = sum_i pi_i w_i U_i / (m p_i)
    bias = float(delta.reference_bias(p, m, w, U)[0])
    assert abs(expected - target - bias) < 1e-12 and abs(bias) > 0.1 * abs(target)
    rng = np.random.default_rng(15)
    naive, counts = np.zeros(R), np.zeros(p.size)
    for t in range(R):
        s = delta.reference_sample(p, m, rng)
        counts[s.ids] += 1
        naive[t] = delta.with_replacement_weights(s, p, m, w) @ U[s.ids, 0]
    assert_frequencies(counts / R, pi, R, "reference draw")  # the enumerated probabilities are the draw's
    se = naive.std(ddof=1) / np.sqrt(R)
    assert abs(naive.mean() - expected) <= Z * se  # the naive estimate centres on the biased expectation ...
    assert abs(naive.mean() - target) > 2 * Z * se  # ... and not on the target
    est = delta.reference_inclusion(p, m, draws=1000, rng=np.random.default_rng(16))
    assert_frequencies(est, pi, 1000, "reference replay")


# ----------------------------------------------------------------------------------------------------
# Fed-CBS (Zhang et al. 2023)

HIST = np.array([[10.0, 0, 0], [0, 10, 0], [0, 0, 10], [5, 5, 0], [8, 1, 1]])


def test_qcid_hand_computed():
    assert fedcbs.qcid(np.array([5.0, 5.0])) == 0.0
    assert abs(fedcbs.qcid(np.array([[5.0, 5.0], [10.0, 0.0]])) - 0.125) < 1e-15  # pooled .75 .25
    assert abs(fedcbs.qcid(np.array([10.0, 0, 0])) - (4 / 9 + 1 / 9 + 1 / 9)) < 1e-15
    np.testing.assert_allclose(
        fedcbs.qcid_with_each(HIST[0] + HIST[1], HIST), [fedcbs.qcid(HIST[[0, 1, i]]) for i in range(5)], atol=1e-15
    )
    bonus = fedcbs.exploration_bonus([0, 1, 4], 10, 2.0)  # T = 0: never selected, an infinite bonus
    np.testing.assert_allclose(bonus, 2 * np.sqrt(3 * np.log(10) / (2 * np.array([0, 1, 4]))))
    assert bonus[0] == np.inf
    bonus = fedcbs.exploration_bonus([0, 1, 4], 10, 2.0, count_rule="floor_one")  # T = 0 counts as 1
    np.testing.assert_allclose(bonus, 2 * np.sqrt(3 * np.log(10) / (2 * np.array([1, 1, 4]))))


def test_fedcbs_step_probabilities_hand_computed():
    # after clients 0 and 1, client 2 completes a balanced pool (QCID 0): it is the only possible next pick
    np.testing.assert_array_equal(fedcbs.step_probabilities(HIST, [0, 1], 2.0), [0, 0, 1, 0, 0])
    p = fedcbs.step_probabilities(HIST, [3], 1.0)
    q = np.array([fedcbs.qcid(HIST[[3, i]]) for i in (0, 1, 2, 4)])
    np.testing.assert_allclose(p[[0, 1, 2, 4]], (1 / q) / (1 / q).sum())
    assert p[3] == 0.0


def fedcbs_exact_inclusion(H, m, bonus, betas):
    """Test oracle: sum over every ordered sequence of the product of the step probabilities."""
    pi = np.zeros(H.shape[0])

    def walk(chosen, prob):
        if len(chosen) == m:
            pi[chosen] += prob
            return
        k = len(chosen)
        step = fedcbs.step_probabilities(H, chosen, betas[k], bonus if k == 0 else None)
        for i in np.flatnonzero(step > 0):
            walk(chosen + [int(i)], prob * step[i])

    walk([], 1.0)
    return pi


def test_fedcbs_estimate_matches_the_sequential_probabilities_and_sums_to_m():
    counts, t, lam, m, R = np.array([0.0, 3, 1, 2, 5]), 4, 0.5, 3, 3000
    exact = fedcbs_exact_inclusion(HIST, m, fedcbs.exploration_bonus(counts, t, lam), fedcbs.step_exponents(m))
    assert abs(exact.sum() - m) < 1e-12
    est = fedcbs.estimate_inclusion(HIST, m, R, np.random.default_rng(17), t=t, counts=counts, lam=lam)
    assert abs(est.sum() - m) < 1e-12
    assert_frequencies(est, exact, R, "fed-cbs")


def test_fedcbs_is_reproducible_and_rejects_bad_input():
    a = fedcbs.fedcbs_sample(HIST, 2, np.random.default_rng(3), t=2, counts=np.zeros(5))
    b = fedcbs.fedcbs_sample(HIST, 2, np.random.default_rng(3), t=2, counts=np.zeros(5))
    np.testing.assert_array_equal(a.ids, b.ids)
    assert np.all(np.isnan(a.inclusion))
    with pytest.raises(ValueError, match="empty label histogram"):
        fedcbs.fedcbs_sample(np.vstack([HIST, np.zeros(3)]), 2, np.random.default_rng(0), t=1, counts=np.zeros(6))
    with pytest.raises(ValueError, match="beta"):
        fedcbs.step_exponents(3, [1.0, -1.0, 2.0])


# ----------------------------------------------------------------------------------------------------
# FedCor (Tang et al. 2022)


def test_fedcor_greedy_hand_computed():
    # clients 0 and 1 move together: after choosing 0, client 1 is nearly known, so 2 comes next
    K = np.array([[1.0, 0.9, 0.0], [0.9, 1.0, 0.0], [0.0, 0.0, 1.0]])
    np.testing.assert_array_equal(fedcor.greedy_posterior_selection(K, 2), [0, 2])
    # weights: a heavy client 2 is worth taking first
    np.testing.assert_array_equal(fedcor.greedy_posterior_selection(K, 1, weights=[1.0, 1.0, 3.0]), [2])
    np.testing.assert_array_equal(fedcor.greedy_posterior_selection(K, 3), [0, 1, 2])


def test_fedcor_covariance_is_probabilistic_pca():
    from sklearn.decomposition import PCA

    rng = np.random.default_rng(18)
    T, N, q = 60, 8, 2
    X = rng.normal(size=(T, q)) @ rng.normal(size=(q, N)) + 0.3 * rng.normal(size=(T, N)) + 1.0
    mu, K = fedcor.loss_change_covariance(X, q)
    np.testing.assert_allclose(mu, X.mean(axis=0), atol=1e-12)
    ref = PCA(n_components=q, svd_solver="full").fit(X).get_covariance() * (T - 1) / T  # sklearn divides by T - 1
    np.testing.assert_allclose(K, ref, atol=1e-10)
    assert np.linalg.eigvalsh(K).min() > 0
    # forgetting weights recent rounds more: with forget -> the last rounds dominate the mean
    mu_f, _ = fedcor.loss_change_covariance(np.vstack([np.zeros((10, N)), np.ones((2, N))]), 1, forget=0.01)
    assert np.all(mu_f > 0.99)


def test_fedcor_warm_up_is_uniform_then_deterministic():
    N, m, R = 10, 3, 4000
    freq = count_inclusions(lambda g: fedcor.fedcor_select(0, 5, m, N, g), N, R, seed=19)
    assert_frequencies(freq, np.full(N, m / N), R, "fedcor warm-up")
    rng = np.random.default_rng(20)
    _, K = fedcor.loss_change_covariance(rng.normal(size=(30, N)), 2)
    picks = {tuple(fedcor.fedcor_select(7, 5, m, N, np.random.default_rng(s), K).ids) for s in range(5)}
    assert len(picks) == 1
    s = fedcor.fedcor_select(7, 5, m, N, rng, K)
    assert len(s) == m and np.all(s.inclusion == 1.0)
    with pytest.raises(ValueError, match="needs a covariance"):
        fedcor.fedcor_select(5, 5, m, N, rng)


# ----------------------------------------------------------------------------------------------------
# DivFL (Balakrishnan et al. 2022)


def test_divfl_greedy_hand_computed_and_deterministic():
    g = np.array([[0.0], [1.0], [2.0], [10.0], [11.0]])
    # first: client 2 minimizes the total distance (20); then 3 and 4 tie at G = 4, the smaller id wins
    np.testing.assert_array_equal(divfl.divfl_select(g, 1).ids, [2])
    s = divfl.divfl_select(g, 2)
    np.testing.assert_array_equal(s.ids, [2, 3])
    assert np.all(s.inclusion == 1.0)
    np.testing.assert_array_equal(divfl.represented_by(divfl.dissimilarity(g), s.ids), [3, 2])
    for _ in range(3):
        np.testing.assert_array_equal(divfl.divfl_select(g, 2).ids, [2, 3])


def test_divfl_greedy_beats_random_choices_and_cosine():
    rng = np.random.default_rng(21)
    G = rng.normal(size=(30, 5))
    D = divfl.dissimilarity(G)
    ids = divfl.facility_location_greedy(D, 4)
    cost = D[:, ids].min(axis=1).sum()
    random_costs = [D[:, rng.choice(30, 4, replace=False)].min(axis=1).sum() for _ in range(200)]
    assert cost <= np.min(random_costs) + 1e-12
    Dc = divfl.dissimilarity(np.array([[1.0, 0], [2.0, 0], [0, 1.0]]), "cosine")
    np.testing.assert_allclose(Dc, [[0, 0, 1], [0, 0, 1], [1, 1, 0]], atol=1e-12)
    with pytest.raises(ValueError, match="metric"):
        divfl.dissimilarity(G, "l1")


# ----------------------------------------------------------------------------------------------------
# Oort (Lai et al. 2021), statistical utility only


def test_oort_formulas_hand_computed():
    assert oort.statistical_utility([4.0], [np.mean(np.array([1.0, 1, 3, 3]) ** 2)])[0] == 4 * np.sqrt(5)
    np.testing.assert_allclose(oort.staleness_bonus([2.0, 10.0], 10), np.sqrt(0.1 * np.log(10) / np.array([2, 10])))
    assert oort.exploration_rate(0) == 0.9
    assert abs(oort.exploration_rate(3, 0.9, 0.5) - 0.2) < 1e-15  # 0.9 / 8 < 0.2: the floor
    assert abs(oort.exploration_rate(1, 0.9, 0.98) - 0.882) < 1e-15
    assert oort.slot_split(10, 0.9, 20, 20) == (1, 9)  # (1 - 0.9) * 10 rounds to 1, not 0
    assert oort.slot_split(10, 0.9, 20, 3) == (7, 3)  # few unexplored: the rest is exploited
    with pytest.raises(ValueError, match="last_round"):
        oort.staleness_bonus([0.0], 5)


def test_oort_cut_off_and_exploration_probabilities_mc():
    utility = np.array([10.0, 9.6, 9.5, 5.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    explored = np.array([True] * 5 + [False] * 5)
    m, eps, R = 4, 0.5, 3000
    # 2 exploitation slots: cut-off 0.95 * 9.6 = 9.12 keeps clients 0, 1, 2; 2 exploration slots over 5 new
    est = oort.estimate_inclusion(utility, explored, m, eps, R, np.random.default_rng(22))
    assert abs(est.sum() - m) < 1e-12
    assert est[3] == 0.0 and est[4] == 0.0  # below the cut-off: never
    assert_frequencies(est[5:], np.full(5, 2 / 5), R, "oort exploration")
    # exploitation: 2 of {0, 1, 2} without replacement proportional to utility (successive sampling)
    pi = design.successive_sampling_inclusion(utility[:3], 2)
    assert_frequencies(est[:3], pi, R, "oort exploitation")


def test_oort_rejects_bad_input():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="explored"):
        oort.oort_select(np.ones(4), np.array([1, 0, 1, 0]), 2, 0.5, rng)
    with pytest.raises(ValueError, match="exceeds"):
        oort.oort_select(np.ones(4), np.ones(4, dtype=bool), 5, 0.5, rng)
