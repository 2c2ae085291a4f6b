"""Privacy accounting over a whole run: what one client has spent, not what one message costs.

Two budgets, kept apart:

- **size reports** (pure epsilon-LDP randomized response, Qi et al. 2023 Eq. 1): k reports cost k*epsilon by
  basic composition (Dwork & Roth 2014, Thm 3.16) or, for any delta' > 0,
  ``epsilon * sqrt(2k ln(1/delta')) + k * epsilon * (e^epsilon - 1)`` by advanced composition (Dwork, Rothblum &
  Vadhan 2010; Dwork & Roth Thm 3.20), whichever is smaller. A *permanent* report is sent once and repeated:
  repeating it is post-processing, so the run costs one report's epsilon (RAPPOR's memoization, Erlingsson
  et al. 2014), as long as the client's data size does not change.
- **updates** with clipping and Gaussian noise (:class:`fedsample.privacy.noise.UpdateNoise`): T Gaussian mechanisms
  of noise multiplier z, composed with a Renyi-DP accountant (Mironov 2017) or the privacy-loss-distribution
  accountant of the ``dp-accounting`` package (the ``privacy`` extra; imported only here, only when asked).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fedsample import checks

if TYPE_CHECKING:  # a type only: the accounting is imported without the parts (and torch)
    from fedsample.parts import UpdatePrivacy

__all__ = [
    "DEFAULT_DELTA", "SPEND_KEYS", "advanced_composition", "basic_composition", "gaussian_rdp_epsilon",
    "gaussian_update_epsilon", "run_spend", "size_report_spend", "SpendsPerReport",
]

DEFAULT_DELTA = 1e-5  # the delta' of advanced composition and of the update accountant
"""The delta' of advanced composition and of the update accountant."""
#: The keys of a round log's privacy spend.
SPEND_KEYS = ("size_reports", "size_epsilon", "size_epsilon_advanced", "size_delta", "update_epsilon", "update_delta")


def basic_composition(epsilon: float, k: int) -> float:
    """k epsilon-DP mechanisms compose to k * epsilon (Dwork & Roth 2014, Thm 3.16)."""
    checks.non_negative("epsilon", epsilon)
    return float(k) * epsilon


def advanced_composition(epsilon: float, k: int, delta: float = DEFAULT_DELTA) -> float:
    """k epsilon-DP mechanisms are (epsilon', delta')-DP with
    epsilon' = epsilon * sqrt(2k ln(1/delta')) + k * epsilon * (e^epsilon - 1) (Dwork & Roth 2014, Thm 3.20)."""
    checks.non_negative("epsilon", epsilon)
    checks.in_interval("delta", delta, 0, 1, closed="()")
    if epsilon > 700:  # e^epsilon overflows a float; the bound is vacuous there anyway
        return math.inf
    return epsilon * math.sqrt(2 * k * math.log(1 / delta)) + k * epsilon * math.expm1(epsilon)


def size_report_spend(epsilon: float, reports: int, permanent: bool, delta: float = DEFAULT_DELTA) -> dict[str, float]:
    """One client's size-report budget after sending ``reports`` answers.

    Returns ``{"size_reports", "size_epsilon", "size_epsilon_advanced", "size_delta"}``: the number of
    randomized draws the client made (1 for permanent reports once asked), the pure epsilon (basic
    composition) and the epsilon at ``delta`` (the smaller of basic and advanced composition)."""
    checks.non_negative("reports", reports)
    draws = min(int(reports), 1) if permanent else int(reports)
    basic = basic_composition(epsilon, draws)
    advanced = min(basic, advanced_composition(epsilon, draws, delta)) if draws else 0.0
    return {"size_reports": draws, "size_epsilon": basic, "size_epsilon_advanced": advanced, "size_delta": delta}


def _dp_accounting() -> Any:
    try:
        import dp_accounting
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("the update accountant needs the 'dp-accounting' package: pip install 'fedsample[privacy]'") from error
    return dp_accounting


def gaussian_update_epsilon(
    noise_multiplier: float, rounds: int, delta: float = DEFAULT_DELTA, sampling_rate: float = 1.0, method: str = "rdp"
) -> float:
    """epsilon at ``delta`` of ``rounds`` Gaussian mechanisms of noise multiplier z (sensitivity 1), each
    applied with probability ``sampling_rate`` (Poisson subsampling; 1.0 when the adversary knows who took part,
    as a server that picks the cohort does). ``method``: ``"rdp"`` (Renyi DP, an upper bound, milliseconds) or
    ``"pld"`` (privacy-loss distribution: tight, seconds to tens of seconds)."""
    checks.positive("noise_multiplier", noise_multiplier)
    checks.in_interval("delta", delta, 0, 1, closed="()")
    checks.in_interval("sampling_rate", sampling_rate, 0, 1, closed="(]")
    checks.check("method", method, checks.Options("rdp", "pld"))
    if rounds <= 0:
        return 0.0
    dpa = _dp_accounting()
    event = dpa.GaussianDpEvent(noise_multiplier)
    if sampling_rate < 1.0:
        event = dpa.PoissonSampledDpEvent(sampling_rate, event)
    composed = dpa.SelfComposedDpEvent(event, int(rounds))
    accountant = dpa.rdp.RdpAccountant() if method == "rdp" else dpa.pld.PLDAccountant()
    return float(accountant.compose(composed).get_epsilon(delta))


def gaussian_rdp_epsilon(noise_multiplier: float, rounds: int, delta: float = DEFAULT_DELTA) -> float:
    """The closed form for T full-participation Gaussian mechanisms, without the package: RDP of order a is
    T*a/(2 z^2) (Mironov 2017, Prop. 7), converted by epsilon = min_a T*a/(2z^2) + ln(1/delta)/(a - 1)
    (Prop. 3), minimized over real a > 1: a* = 1 + z*sqrt(2 ln(1/delta)/T)."""
    checks.positive("noise_multiplier", noise_multiplier)
    if rounds <= 0:
        return 0.0
    a = 1 + noise_multiplier * math.sqrt(2 * math.log(1 / delta) / rounds)
    return rounds * a / (2 * noise_multiplier**2) + math.log(1 / delta) / (a - 1)


@runtime_checkable
class SpendsPerReport(Protocol):
    """A size reporting whose answers spend a privacy budget (:class:`fedsample.privacy.sizes.RandomizedSizes`, or
    a user's own): the answers a client has sent after ``rounds`` rounds, and what they have spent at ``delta``."""

    def reports_after(self, rounds: int) -> int: ...

    def epsilon_spent(self, reports: int, delta: float = DEFAULT_DELTA) -> dict[str, float]: ...


def run_spend(sizes: object, noise: UpdatePrivacy | None, rounds: int, delta: float = DEFAULT_DELTA) -> dict[str, float]:
    """The most any one client has spent after ``rounds`` rounds, for a round log: the size reports' budget
    (a client asked every round, or every ``reuse`` rounds, the worst case for cohort-scoped reports) where
    ``sizes`` declares what its answers spend (:class:`SpendsPerReport`), and
    the update's epsilon at ``delta`` (RDP accountant, one Gaussian mechanism per round, no amplification:
    the server knows the cohort) where ``noise`` clips each client's update (:class:`~fedsample.privacy.noise.UpdateNoise`).
    Exact size reports and noiseless updates add no key. The run's ledger (:mod:`fedsample.privacy.ledger`)
    accounts every release together, with the amplification it has earned."""
    spent: dict[str, float] = {}
    if isinstance(sizes, SpendsPerReport):  # declared by its methods (once a round: isinstance's cost is nothing here)
        spent.update(sizes.epsilon_spent(sizes.reports_after(rounds), delta))
    if noise is not None and noise.clipping == "client" and noise.noise_multiplier > 0:  # both declared by UpdatePrivacy
        spent["update_epsilon"] = gaussian_update_epsilon(noise.noise_multiplier, rounds, delta)
        spent["update_delta"] = delta
    return spent
