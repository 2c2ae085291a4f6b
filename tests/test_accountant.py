"""The privacy accountant against hand-computed composition values."""

import math

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from fedsample import recipes

from fedsample.privacy import accounting
from fedsample.privacy import UpdateNoise
from fedsample.privacy.sizes import RandomizedSizes


def test_basic_composition_hand_computed():
    assert accounting.basic_composition(3.0, 10) == 30.0
    assert accounting.basic_composition(0.5, 1) == 0.5


def test_advanced_composition_hand_computed():
    # eps = 0.1, k = 100, delta' = 1e-5: 0.1*sqrt(200*ln(1e5)) + 100*0.1*(e^0.1 - 1)
    #   = 0.1*sqrt(2302.585) + 10*0.105171 = 4.79853 + 1.05171 = 5.85024
    assert accounting.advanced_composition(0.1, 100, 1e-5) == pytest.approx(5.85024, abs=1e-4)
    # eps = 1, k = 4, delta' = e^-2: 1*sqrt(8*2) + 4*(e - 1) = 4 + 6.87313 = 10.87313
    assert accounting.advanced_composition(1.0, 4, math.exp(-2)) == pytest.approx(10.87313, abs=1e-4)


def test_size_report_spend_under_each_option():
    # permanent: one randomized draw, however many rounds
    assert accounting.size_report_spend(3.0, 100, permanent=True) == {
        "size_reports": 1, "size_epsilon": 3.0, "size_epsilon_advanced": 3.0, "size_delta": 1e-5}
    # per round at eps = 3: advanced composition is worse than 10 * 3, so the smaller (basic) is reported
    fresh = accounting.size_report_spend(3.0, 10, permanent=False)
    assert fresh["size_epsilon"] == 30.0 and fresh["size_epsilon_advanced"] == 30.0
    # per round at eps = 0.1 over 100 rounds: advanced (5.85) beats basic (10)
    small = accounting.size_report_spend(0.1, 100, permanent=False)
    assert small["size_epsilon"] == pytest.approx(10.0) and small["size_epsilon_advanced"] == pytest.approx(5.85024, abs=1e-4)
    assert accounting.size_report_spend(3.0, 0, permanent=True)["size_epsilon"] == 0.0
    assert RandomizedSizes(3.0, 20, permanent=False).epsilon_spent(5)["size_epsilon"] == 15.0


def analytic_gaussian_epsilon(z: float, delta: float) -> float:
    """Balle & Wang 2018, Thm 8: the exact epsilon of one Gaussian mechanism (sensitivity 1, sigma = z):
    delta = Phi(1/(2z) - eps*z) - e^eps * Phi(-1/(2z) - eps*z), solved for eps."""
    f = lambda eps: norm.cdf(1 / (2 * z) - eps * z) - math.exp(eps) * norm.cdf(-1 / (2 * z) - eps * z) - delta  # noqa: E731
    return brentq(f, 0.0, 100.0)


def test_gaussian_update_epsilon_one_round_matches_the_exact_value():
    """PLD is tight: within 2% of Balle & Wang's exact epsilon; RDP is an upper bound on it."""
    pytest.importorskip("dp_accounting")
    exact = analytic_gaussian_epsilon(1.0, 1e-5)  # 4.3773
    assert accounting.gaussian_update_epsilon(1.0, 1, 1e-5, method="pld") == pytest.approx(exact, rel=0.02)
    assert exact < accounting.gaussian_update_epsilon(1.0, 1, 1e-5, method="rdp") < 1.2 * exact


def test_gaussian_update_epsilon_composes_and_rdp_is_looser():
    pytest.importorskip("dp_accounting")
    one, ten = (accounting.gaussian_update_epsilon(1.0, t) for t in (1, 10))
    assert one < ten < 10 * one  # composition is sublinear, but grows
    closed = accounting.gaussian_rdp_epsilon(1.0, 10)
    assert ten <= closed  # the package's RDP conversion beats the textbook closed form
    # hand-computed closed form: T=10, z=1, L=ln(1e5)=11.5129: a* = 1 + sqrt(2L/10) = 2.51744,
    # eps = 10*a*/2 + L/(a* - 1) = 12.5872 + 7.5871 = 20.1743
    assert closed == pytest.approx(20.1743, abs=1e-3)
    subsampled = accounting.gaussian_update_epsilon(1.0, 10, sampling_rate=0.1)
    assert subsampled < ten


def test_round_log_carries_the_run_spend():
    strategy = recipes.fedsampling(K=30, epsilon=2.0, M=10, server_lr=0.1)
    assert accounting.run_spend(strategy.sizes, None, 7)["size_epsilon"] == 2.0
    fresh = RandomizedSizes(2.0, 10, permanent=False)
    assert accounting.run_spend(fresh, None, 7)["size_epsilon"] == 14.0
    assert accounting.run_spend(None, None, 7) == {}
    pytest.importorskip("dp_accounting")
    spend = accounting.run_spend(strategy.sizes, UpdateNoise(clip=1.0, noise_multiplier=1.0), 10)
    assert spend["update_epsilon"] == pytest.approx(accounting.gaussian_update_epsilon(1.0, 10))
