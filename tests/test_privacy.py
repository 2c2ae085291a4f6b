"""Randomized-response size reports (Qi et al. 2023, §3.3): alpha, unbiasedness, variance, epsilon-LDP."""

import math

import numpy as np
import pytest

from fedsample import privacy
from fedsample.sampling.data import sampling_ratio


@pytest.mark.parametrize(
    "epsilon, M, expected",
    [
        (3.0, 100, (math.e**3 - 1) / (math.e**3 + 98)),  # 0.1616..., the value FedSTaS reports
        (3.0, 300, (math.e**3 - 1) / (math.e**3 + 298)),  # FedSampling's experiments
        (1.0, 2, (math.e - 1) / math.e),  # M = 2: (e - 1) / (e + 0)
        (math.log(3), 4, 2 / 5),  # (3 - 1) / (3 + 2)
    ],
)
def test_alpha_hand_computed(epsilon, M, expected):
    assert privacy.alpha_for(epsilon, M) == pytest.approx(expected, rel=1e-12)


def test_alpha_fedstas_value():
    assert round(privacy.alpha_for(3.0, 100), 4) == 0.1616


@pytest.mark.parametrize("epsilon, M", [(0, 100), (-1, 100), (float("nan"), 100), (3, 1), (3, 2.5)])
def test_bad_parameters(epsilon, M):
    with pytest.raises(ValueError):
        privacy.alpha_for(epsilon, M)


def test_reports_stay_in_range_and_clip():
    rng = np.random.default_rng(0)
    r = privacy.randomized_response(np.array([1, 5, 500]).repeat(2000), 3.0, 20, rng)
    assert r.min() >= 1 and r.max() <= 19
    # the truthful value of a client holding 500 samples is clipped to M - 1 = 19
    assert np.mean(r[4000:] == 19) == pytest.approx(privacy.alpha_for(3.0, 20) + (1 - privacy.alpha_for(3.0, 20)) / 19, abs=0.03)


def test_estimate_is_unbiased_and_variance_matches_closed_form():
    """Over R independent rounds of reports: mean of N~ within 4 standard errors of the true total, and the
    sample variance within 4 standard errors (of a variance estimate) of the closed form."""
    rng = np.random.default_rng(1)
    sizes = np.maximum(1, np.round(rng.lognormal(1.0, 1.0, 400))).astype(int)
    epsilon, M, R = 2.0, 50, 4000
    truth = np.minimum(sizes, M - 1).sum()
    estimates = np.array(
        [privacy.estimate_total(privacy.randomized_response(sizes, epsilon, M, rng), epsilon, M, clamp=False) for _ in range(R)]
    )
    var = privacy.estimator_variance(sizes, epsilon, M)
    assert abs(estimates.mean() - truth) < 4 * math.sqrt(var / R)
    # the variance of a sample variance of a near-normal sum is about 2 var^2 / (R - 1)
    assert abs(estimates.var(ddof=1) - var) < 4 * math.sqrt(2 * var**2 / (R - 1))


def test_variance_closed_form_small_case_by_enumeration():
    """Var(r) from the exact distribution of one report equals the closed form."""
    epsilon, M, n = 1.5, 7, 4
    probs = privacy.response_distribution(n, epsilon, M)
    y = np.arange(1, M)
    var_r = probs @ y**2 - (probs @ y) ** 2
    assert privacy.estimator_variance(np.array([n]), epsilon, M) == pytest.approx(var_r / privacy.alpha_for(epsilon, M) ** 2)


def test_clamp_to_number_of_answers():
    assert privacy.estimate_total(np.ones(10, dtype=int), 3.0, 100) == 10.0
    assert privacy.estimate_total(np.ones(10, dtype=int), 3.0, 100, clamp=False) < 0


def test_sampling_ratio_capped():
    assert sampling_ratio(64, 32.0) == 1.0
    assert sampling_ratio(64, 640.0) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        sampling_ratio(0, 100.0)


def test_report_outside_range_is_rejected_naming_the_client():
    with pytest.raises(ValueError, match="client 42"):
        privacy.estimate_total(np.array([3, 0, 5]), 3.0, 10, client_ids=[7, 42, 9])
    with pytest.raises(ValueError, match="client 9"):
        privacy.estimate_total(np.array([3, 4, 10]), 3.0, 10, client_ids=[7, 42, 9])


def test_exact_distribution_ratio_is_e_to_epsilon():
    """Lemma 3.2: max_y P(y|n)/P(y|n') = e^epsilon exactly."""
    epsilon, M = 3.0, 20
    d1, d2 = privacy.response_distribution(3, epsilon, M), privacy.response_distribution(11, epsilon, M)
    assert np.max(d1 / d2) == pytest.approx(math.exp(epsilon))


def test_privacy_audit_monte_carlo_within_tolerance():
    """The empirical worst-case likelihood ratio stays near e^eps: within 15% (with 200,000 draws per size
    the ratio's relative standard error at the rarest output is below 3%)."""
    epsilon, M = 1.0, 10
    audit = privacy.privacy_audit(epsilon, M, 200_000, np.random.default_rng(2), sizes=(1, 5, 9))
    assert audit["max_ratio"] == pytest.approx(math.exp(epsilon), rel=0.15)
    # a mechanism with a smaller alpha would be detected below the bound, a larger one above it
    assert audit["max_ratio"] > math.exp(0.8 * epsilon)
