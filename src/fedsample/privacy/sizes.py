"""Size reporting: how (and whether) the server learns how much data clients hold.

``ExactSizes`` asks clients for their true sizes (declared explicitly by the strategy, as weighted client
sampling and size-weighted FedAvg need); ``RandomizedSizes`` asks for epsilon-LDP randomized responses
(Qi et al. 2023, §3.3) and estimates the total with Eq. 2. ``scope`` says who is asked: every available
client before selection (FedSampling) or only the chosen cohort after it (FedSTaS, size-weighted FedAvg).
Randomized reports are *permanent* by default (each client randomizes once and repeats its answer every
round, so a whole run costs one report's epsilon); ``permanent=False`` re-draws them every round, and
:meth:`RandomizedSizes.epsilon_spent` says what a client has then spent (:mod:`fedsample.privacy.accounting`).

The remedies for a noisy estimate (docs/size-estimate.md): ``M="rmse"`` (M minimizing the estimate's RMSE for
an assumed population, :mod:`fedsample.privacy.size_estimate`), ``reuse=R`` (one estimate for R rounds: fresh reports
are sent only every R rounds) and ``average=A`` (the mean of the last A estimates from fresh reports). The
paper's method is ``M`` given, ``reuse=1``, ``average=1``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Literal

import numpy as np

from fedsample import checks
from fedsample.messages import SizeQuery
from fedsample.parts import SizeReporting
from fedsample.privacy import accounting, size_estimate
from fedsample.privacy.reports import EPSILON, THRESHOLD, estimate_total
from fedsample.privacy.size_estimate import scaled_total

__all__ = ["ExactSizes", "RandomizedSizes", "Scope", "SizeInfo", "SizeReporting"]

Scope = Literal["all", "cohort"]
"""Whose sizes a policy asks for: every client's, or the cohort's."""


@dataclass(frozen=True)
class SizeInfo:
    """What the server holds after a size query: who answered, their reports, and the estimated total."""

    ids: np.ndarray
    reports: np.ndarray
    total: float
    exact: bool
    policy: "ExactSizes | RandomizedSizes | None" = None

    def for_clients(self, ids: np.ndarray) -> np.ndarray:
        """Reports of ``ids`` (each must have answered)."""
        position = np.searchsorted(self.ids, ids)
        if np.any(position >= len(self.ids)) or np.any(self.ids[np.minimum(position, len(self.ids) - 1)] != ids):
            raise ValueError("size reports were not collected from every client asked about")
        return self.reports[position]

    def total_over(self, ids: np.ndarray) -> float:
        """The estimated total size of a subset of the clients that answered (e.g. the participants,
        FedSTaS Eq. 8): the policy's estimator applied to their reports alone."""
        if self.policy is None:
            raise ValueError("these size reports name no policy: a subset's total needs its estimator")
        return self.policy.summarize(np.asarray(ids), self.for_clients(np.asarray(ids))).total


@dataclass(frozen=True)
@checks.constrained()
class ExactSizes:
    """Clients report their true sizes (no privacy). Needed by size-proportional client sampling."""

    scope: Scope = "all"
    exact: ClassVar[bool] = True

    @property
    def query(self) -> SizeQuery:
        return SizeQuery("exact")

    def summarize(self, ids: np.ndarray, reports: np.ndarray) -> SizeInfo:
        reports = np.asarray(reports, dtype=np.int64)
        return SizeInfo(ids=ids, reports=reports, total=float(reports.sum()), exact=True, policy=self)


@dataclass(frozen=True)
@checks.constrained(
    epsilon=EPSILON, M=[THRESHOLD, checks.Options("rmse")], permanent=checks.BOOLEAN, reuse=checks.COUNT,
    average=checks.COUNT,
)
class RandomizedSizes:
    """epsilon-LDP randomized-response size reports with threshold M; total estimated by Eq. 2. ``permanent``
    (default): one randomized answer per client for the whole run; False: a fresh answer every round.

    ``M="rmse"``: M is chosen, once the number of clients is known, to minimize the RMSE of N~ over
    populations from ``size_prior = (mean client size, log-normal sigma)``, an assumption the user states
    (public inputs: no privacy cost; :func:`fedsample.privacy.size_estimate.rmse_M`). ``reuse=R``: the server asks
    for reports only every R rounds and keeps the estimate in between. ``average=A`` (fresh reports only):
    the estimate is the mean of the last A estimates, variance / A at the same privacy cost as fresh reports."""

    epsilon: float = 3.0
    M: int | Literal["rmse"] = 100
    scope: Scope = "all"
    permanent: bool = True
    reuse: int = 1
    average: int = 1
    size_prior: tuple[float, float] = (2.0, 4.0)
    exact: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if (self.reuse > 1 or self.average > 1) and self.scope != "all":
            raise ValueError("reuse and average need size reports from every client (scope='all'): a cohort changes every round")
        if self.average > 1 and self.permanent:
            raise ValueError("average needs fresh reports (permanent=False): permanent reports repeat the same answer")
        prior = self.size_prior
        if not (isinstance(prior, (tuple, list)) and len(prior) == 2 and checks.reals(1).satisfied_by(prior[0])
                and checks.NON_NEGATIVE.satisfied_by(prior[1])):
            checks.fail("size_prior", prior, "(mean client size >= 1, log-normal sigma >= 0)", "RandomizedSizes")

    def for_population(self, num_clients: int) -> "RandomizedSizes":
        """This policy with a numeric M: ``M="rmse"`` resolved for ``num_clients`` clients and the prior."""
        if self.M != "rmse":
            return self
        return replace(self, M=size_estimate.rmse_M(int(num_clients), float(self.epsilon), *map(float, self.size_prior)))

    @property
    def threshold(self) -> int:
        """M as a number: ``M="rmse"`` is resolved per population (:meth:`for_population`)."""
        if self.M == "rmse":
            raise RuntimeError("M='rmse' is resolved per population: use for_population(num_clients).query")
        return self.M

    @property
    def query(self) -> SizeQuery:
        return SizeQuery("randomized", self.epsilon, self.threshold, self.permanent)

    def reports_after(self, rounds: int) -> int:
        """Size queries a client has answered after ``rounds`` rounds: one every ``reuse`` rounds."""
        return -(-int(rounds) // self.reuse)

    def epsilon_spent(self, reports: int, delta: float = accounting.DEFAULT_DELTA) -> dict[str, float]:
        """What one client has spent after sending ``reports`` answers (:func:`fedsample.privacy.accounting.size_report_spend`)."""
        return accounting.size_report_spend(self.epsilon, reports, self.permanent, delta)

    def summarize(self, ids: np.ndarray, reports: np.ndarray) -> SizeInfo:
        total = estimate_total(np.asarray(reports), self.epsilon, self.threshold, client_ids=ids)
        return SizeInfo(ids=ids, reports=np.asarray(reports, dtype=np.int64), total=total, exact=False, policy=self)

    def unclamped_total(self, info: SizeInfo, asked: int) -> float:
        """Eq. 2 without the floor at the number of answers, scaled from the clients that answered to the
        ``asked`` (as :meth:`fedsample.strategy.Strategy.collect_sizes` scales the clamped total): the unbiased
        value that ``average`` averages before flooring the mean."""
        raw = estimate_total(info.reports, self.epsilon, self.threshold, client_ids=info.ids, clamp=False)
        return scaled_total(raw, asked, len(info.ids))
