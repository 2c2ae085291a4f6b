"""DELTA as its paper and its authors' code define it (issue 40, item 2): the probabilities of Corollary 3.4 with
the target's client weights and the paper's constants against hand-computed cases, and the authors' aggregation
(sum_S L_i Delta_i / (N p_i) / sum_S L_i, server momentum 0.2) against its exact expectation.

Monte Carlo tolerance: a mean over R independent rounds must lie within Z = 4.5 standard errors (the sample standard
deviation over sqrt(R)) of the exact expectation; a chance failure has probability below 1e-5 per comparison.
"""

from __future__ import annotations

import numpy as np
import pytest

import fedsample as fs
from fedsample.sampling import delta, design
from fedsample.sampling.delta import DeltaClients, ReferenceMean
from fedsample.training.server import ServerSGD
from test_exact_samplers import Probed, context

Z = 4.5

# Three clients (sizes 1, 1, 2: w = 1/4, 1/4, 1/2) with 1-D gradients 4, 0, 0 (weighted mean 1: zeta = 3, 1, 1) and
# variances 0, 8, 3: the scores sqrt(zeta^2 + sigma^2) are 3, 3, 2.
SIZES3 = np.array([1, 1, 2])
GRADIENTS3 = np.array([[4.0], [0.0], [0.0]])
SIGMA2_3 = np.array([0.0, 8.0, 3.0])


def test_delta_probabilities_by_hand_weighted_by_the_target_and_as_printed():
    """p proportional to w_i score_i = 0.75, 0.75, 1 (default): 0.3, 0.3, 0.4; eq. (11) as printed (no w_i):
    3/8, 3/8, 2/8. The sampler computes the same from its probes."""
    w = SIZES3 / SIZES3.sum()
    zeta = delta.gradient_diversity(GRADIENTS3, w)
    np.testing.assert_allclose(zeta, [3.0, 1.0, 1.0])
    scores = delta.delta_scores(zeta, SIGMA2_3)
    np.testing.assert_allclose(scores, [3.0, 3.0, 2.0])
    np.testing.assert_allclose(delta.delta_probabilities(delta.objective_scores(scores, w)), [0.3, 0.3, 0.4])
    np.testing.assert_allclose(delta.delta_probabilities(scores), [0.375, 0.375, 0.25])
    fed = Probed(GRADIENTS3, SIGMA2_3)
    for score_weights, expected in (("objective", [0.3, 0.3, 0.4]), ("none", [0.375, 0.375, 0.25])):
        p = DeltaClients(m=2, score_weights=score_weights).probabilities(context(0, SIZES3, fed))
        np.testing.assert_allclose(p, expected, err_msg=score_weights)
    # objective="uniform": w_i = 1/3 for all, so weighting changes nothing (zeta against the plain mean 4/3)
    p = DeltaClients(m=2, objective="uniform").probabilities(context(0, SIZES3, fed))
    zeta_u = np.array([8 / 3, 4 / 3, 4 / 3])
    s = np.sqrt(zeta_u**2 + SIGMA2_3)
    np.testing.assert_allclose(p, s / s.sum())


def test_the_papers_constants_by_hand():
    """alpha_1 = 20 K^2 L eta_L, alpha_2 = 5 K L eta_L + eta / n: K = 2, L = 1, eta_L = 0.1, eta = 1, n = 4 give 8 and
    1.25; the scores sqrt(8 zeta^2 + 1.25 sigma^2) = sqrt(72), sqrt(18), sqrt(11.75), times w = 1/4, 1/4, 1/2."""
    a1, a2 = delta.paper_alphas(local_steps=2, smoothness=1.0, local_lr=0.1, server_lr=1.0, cohort=4)
    assert (a1, a2) == pytest.approx((8.0, 1.25))
    scores = delta.delta_scores(np.array([3.0, 1.0, 1.0]), SIGMA2_3, a1, a2)
    np.testing.assert_allclose(scores, np.sqrt([72.0, 18.0, 11.75]))
    np.testing.assert_allclose(delta.delta_probabilities(delta.objective_scores(scores, SIZES3 / 4)),
                               [0.43328558, 0.21664279, 0.35007163], rtol=1e-7)
    with pytest.raises(ValueError, match="smoothness"):
        delta.paper_alphas(2, 0.0, 0.1, 1.0, 4)


def test_reference_aggregation_weights_by_hand():
    """L = 10, 30 drawn with p = 1/2, 1/4 among N = 4: L/(N p) = 5, 30, over the drawn total 40: 0.125, 0.75. With equal
    sizes and p = 1/N it is FedAvg's mean 1/m."""
    np.testing.assert_allclose(delta.reference_aggregate_weights(np.array([0.5, 0.25]), np.array([10, 30]), 4), [0.125, 0.75])
    np.testing.assert_allclose(delta.reference_aggregate_weights(np.full(3, 0.1), np.full(3, 7), 10), np.full(3, 1 / 3))
    with pytest.raises(ValueError, match="p_i = 0"):
        delta.reference_aggregate_weights(np.array([0.5, 0.0]), np.array([1, 1]), 4)


def _reference_case():
    """Ten clients, two far from the others (DELTA's p skewed), unequal sizes, scalar updates Delta_k."""
    rng = np.random.default_rng(11)
    N = 10
    g = rng.normal(0, 0.2, (N, 3))
    g[:2] += 5.0
    sizes = np.array([5, 40, 12, 8, 30, 3, 20, 15, 9, 25])
    updates = rng.normal(1.0, 1.0, (N, 1))
    return Probed(g, rng.uniform(0.1, 2.0, N)), sizes, updates


def test_reference_aggregation_through_the_sampler_matches_its_exact_expectation_and_is_biased():
    """The authors' draw (m = 3 of 10 without replacement, proportional to p) and aggregation, round after round through
    DeltaClients(draw="reference") and ReferenceMean: the mean step over R = 3000 rounds matches the exact expectation
    (enumeration of every cohort's probability, design.successive_sampling_sets) within 4.5 standard errors, and that
    expectation is off the target sum_k w_k Delta_k (w_k = n_k/n) by more than 4.5 standard errors of the mean: the
    reference aggregation is a biased ratio estimator. The matched draw with replacement and the paper's weights is
    unbiased on the same case."""
    fed, sizes, updates = _reference_case()
    N, m, R = len(sizes), 3, 3000
    sampler, aggregate = DeltaClients(m=m, draw="reference"), ReferenceMean(m)
    steps = np.empty(R)
    for t in range(R):
        ctx = context(t, sizes, fed)
        cohort = sampler.select(ctx)
        w = aggregate.planned_weights(cohort, ctx)
        steps[t] = float(w @ updates[cohort.ids, 0])
    p = delta.delta_probabilities(ctx.state["delta"]["scores"])
    np.testing.assert_allclose(w, delta.reference_aggregate_weights(p[cohort.ids], sizes[cohort.ids], N))
    exact = float(delta.reference_aggregate_expectation(p, m, sizes, updates)[0])
    target = float(sizes / sizes.sum() @ updates[:, 0])
    se = steps.std(ddof=1) / np.sqrt(R)
    assert abs(steps.mean() - exact) < Z * se, (steps.mean(), exact, se)
    assert abs(exact - target) > Z * se, (exact, target, se)
    # the paper's matched draw, weighted w_k draws_k / (m p_k), is unbiased for the target on the same case
    matched = DeltaClients(m=m, draw="with_replacement")
    hh = np.empty(R)
    for t in range(R):
        ctx = context(t, sizes, fed)
        cohort = matched.select(ctx)
        hh[t] = float((sizes[cohort.ids] / sizes.sum() * cohort.design_weights()) @ updates[cohort.ids, 0])
    assert abs(hh.mean() - target) < Z * hh.std(ddof=1) / np.sqrt(R)


def test_reference_expectation_by_enumeration_on_two_of_three():
    """p = 1/2, 1/4, 1/4, m = 2, sizes 1, 1, 2, updates 1, 2, 4: cohorts {0,1} with P = 1/2 1/2 + 1/4 2/3 = 5/12,
    {0,2} likewise 5/12, {1,2} with 1/4 1/3 2 = 1/6; steps (L_i / (3 p_i) / sum L): {0,1}: (2/3 + 4/3 * 2) / 2 = 5/3,
    {0,2}: (2/3 + 8/3 * 4) / 3 = 34/9, {1,2}: (4/3 * 2 + 8/3 * 4) / 3 = 40/9; E = 5/12 (5/3 + 34/9) + 1/6 40/9."""
    p, sizes, updates = np.array([0.5, 0.25, 0.25]), np.array([1, 1, 2]), np.array([[1.0], [2.0], [4.0]])
    members, probs = design.successive_sampling_sets(p, 2)
    assert sorted(np.round(probs, 12)) == sorted(np.round([5 / 12, 5 / 12, 1 / 6], 12))
    expected = 5 / 12 * (5 / 3 + 34 / 9) + 1 / 6 * 40 / 9
    assert delta.reference_aggregate_expectation(p, 2, sizes, updates)[0] == pytest.approx(expected)


def test_the_reference_recipe_is_the_authors_code_and_the_others_the_papers():
    """draw="reference": the authors' draw, their aggregation and server momentum 0.2 (overridable); the matched draws
    keep the Horvitz-Thompson/Hansen-Hurwitz weights and no momentum. A ReferenceMean whose m is not the sampler's
    is refused (the expected draws m p_k it divides would be misread)."""
    ref = fs.recipes.delta(clients_per_round=4, draw="reference")
    assert ref.aggregate == ReferenceMean(4) and ref.server == ServerSGD(1.0, 0.2)
    assert ref.clients.score_weights == "objective"
    assert fs.recipes.delta(draw="reference", server_momentum=0.0).server == ServerSGD(1.0, 0.0)
    paper = fs.recipes.delta(clients_per_round=4)
    assert paper.aggregate.by == "size_inverse_inclusion" and paper.server == ServerSGD(1.0, 0.0)
    assert fs.recipes.delta(score_weights="none").clients.score_weights == "none"
    with pytest.raises(ValueError, match="disagree"):
        fs.Strategy(**{**_fields(ref), "aggregate": ReferenceMean(5)})


def _fields(strategy):
    import dataclasses

    return {f.name: getattr(strategy, f.name) for f in dataclasses.fields(strategy) if f.init}


def test_weighting_the_scores_lowers_the_variance_on_log_normal_sizes():
    """40 clients with log-normal sizes (3 to 311 samples), one full-batch step at the initial model, m = 5, 150 draws
    (fs.diagnose): p proportional to w_k score_k (the default) and to score_k (eq. (11) as printed) are both unbiased
    (|bias z| < 3), and the weighted rule's variance is below a fifth of the unweighted one's (measured on this case:
    0.007 against 0.33 at 300 draws); the authors' code (reference draw and ratio aggregation) is biased (z > 4)."""
    import warnings

    from helpers import blobs, federate

    rng = np.random.default_rng(0)
    sizes = np.maximum(3, np.round(np.exp(rng.normal(3.5, 1.5, 40)))).astype(int)
    fed = federate(blobs(n=int(sizes.sum()), d=8, classes=3, seed=1), [int(s) for s in sizes])
    one = dict(lr=1.0, steps=1, batch_size=100000)
    strategies = {"weighted": fs.recipes.delta(clients_per_round=5, **one),
                  "none": fs.recipes.delta(clients_per_round=5, score_weights="none", **one),
                  "reference": fs.recipes.delta(clients_per_round=5, draw="reference", **one)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = fs.diagnose(strategies, fed, fs.models.LogisticRegression(), rounds=150, seed=0).results
    for name in ("weighted", "none"):
        assert abs(r[name]["estimator"]["bias_z"]) < 3, name
    assert r["weighted"]["estimator"]["variance"] < 0.2 * r["none"]["estimator"]["variance"]
    assert r["reference"]["estimator"]["bias_z"] > 4


def test_reference_mean_normalizes_over_the_clients_that_answered():
    """Cohort {0, 1, 2} of N = 4, m = 2, p = 1/2, 1/4, 1/8 (expected draws 1, 1/2, 1/4), sizes 10, 30, 20: every update
    arrives: L/(N p) = 5, 30, 40 over 60; client 1 fails: 5, 40 over 30. A cohort without expected draws is refused."""
    from fedsample.rounds import Cohort

    ctx = context(0, np.array([10, 30, 20, 5]))
    cohort = Cohort(np.array([0, 1, 2]), np.full(3, np.nan), 4, expected_draws=np.array([1.0, 0.5, 0.25]))
    aggregate = ReferenceMean(2)
    np.testing.assert_allclose(aggregate.planned_weights(cohort, ctx), np.array([5, 30, 40]) / 60)
    np.testing.assert_allclose(aggregate.weights(np.array([0, 2]), cohort, ctx), np.array([5, 40]) / 30)
    with pytest.raises(ValueError, match="expected draws"):
        aggregate.weights(np.array([0]), Cohort(np.array([0]), np.array([0.5]), 4), ctx)
