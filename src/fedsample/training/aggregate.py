"""Aggregators: how the chosen clients' updates combine into one pseudo-gradient.

Weights come from the cohort (inclusion probabilities, multiplicities) and, where declared, from size
reports; clients that sent nothing or failed (:class:`fedsample.rounds.Failed`) are left out. Weights that
are inverse inclusion probabilities (Horvitz-Thompson) and FedSampling's sum are divided by the round's
response rate ``ctx.response_rate`` (answered/asked; 1 when nobody failed), which keeps them unbiased when
clients drop out at random (docs/reliability.md); normalized weights need no adjustment.

Aggregators read the replies through the reply-list protocol (:class:`fedsample.rounds.ReplyList`): the
positions that carry an update, the weighted sum of the updates (fused where the federation forms it itself:
one backward pass, partial sums on Ray's workers, a secure sum) and the drawn-sample count. A plain list of
reports is read as :class:`fedsample.rounds.Replies`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Literal, Mapping, Sequence, overload

import typing
import warnings

import numpy as np

from fedsample import checks
from fedsample.parts import AggregatorCapabilities, SizeNeed
from fedsample.sampling.data import DRAWN
from fedsample.training.functional import Params

from fedsample.rounds import ReplyList, replies_of, weighted_sum  # noqa: F401 - weighted_sum kept importable from here

if TYPE_CHECKING:
    from fedsample.messages import TrainReport
    from fedsample.rounds import Cohort, RoundContext

__all__ = ["DrawnNormalizedSum", "FedNova", "ISFedAvgAggregate", "Scaling", "StratifiedMean", "Sum", "WeightedMean"]

Reports = ReplyList | Sequence["TrainReport | None"]  # what an aggregator is handed


def received(reports: Reports) -> tuple[np.ndarray, Sequence["TrainReport"]]:
    """Positions (in the cohort) and reports of the clients that sent an update: every reply except
    :class:`~fedsample.rounds.Failed`, None and the empty replies (no step taken: the client's plan drew nothing,
    and its update is zero), as the reply list names them (:meth:`~fedsample.rounds.ReplyList.received_positions`:
    the vectorized engine knows them without a pass; a secure sum names every client that answered)."""
    replies = replies_of(reports)
    positions = replies.received_positions()
    return positions, _Picked(replies, positions)


class _Picked(Sequence["TrainReport"]):
    """The replies at ``positions`` of a reply list, each read when indexed: a cohort of 30,000 received clients
    costs no pass over them unless an aggregator reads each report (FedNova's a_k)."""

    def __init__(self, replies: ReplyList, positions: np.ndarray) -> None:
        self._replies, self._positions = replies, positions

    def __len__(self) -> int:
        return len(self._positions)

    @overload
    def __getitem__(self, i: int) -> TrainReport: ...

    @overload
    def __getitem__(self, i: slice) -> list[TrainReport]: ...

    def __getitem__(self, i: int | slice) -> TrainReport | list[TrainReport]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self._replies.report(int(self._positions[i]))  # a received position holds a TrainReport


Weighting = Literal["uniform", "size", "inverse_inclusion", "size_inverse_inclusion"]
WEIGHTINGS = checks.Param(checks.Options(*typing.get_args(Weighting)),
                          words="one of the weightings uniform, size, inverse_inclusion or size_inverse_inclusion")
BY_INCLUSION = ("inverse_inclusion", "size_inverse_inclusion")
OBJECTIVE = "objective weights w_k of the Horvitz-Thompson target sum_k w_k Delta_k"
"""The shared setting of a sampler whose probabilities follow w_k ||Delta_k|| (optimal sampling, DELTA) and of the
aggregator that divides by them: both must mean the same w_k ("uniform": 1/N, "size": n_k/n)."""


def _weighting_needs(by: str) -> SizeNeed:
    """The sizes a weighting needs: ``size`` the cohort's size reports (exact, or randomized ones used as they are),
    ``size_inverse_inclusion`` every client's exact size (n = sum of all n_k), the others none."""
    return {"size": SizeNeed.COHORT, "size_inverse_inclusion": SizeNeed.EXACT_ALL}.get(by, SizeNeed.NONE)


def _weighting_settings(by: str) -> Mapping[str, object]:
    """The objective a Horvitz-Thompson weighting targets (a sampler built on it must agree); none for the others."""
    return {OBJECTIVE: "size" if by == "size_inverse_inclusion" else "uniform"} if by in BY_INCLUSION else {}

@dataclass(frozen=True)
@checks.constrained(by=WEIGHTINGS)
class WeightedMean:
    """Weighted mean of the received updates.

    - ``uniform``: (1/|S|) * sum_k m_k * Delta_k over received updates, m_k the draw multiplicity
      (Li et al. 2019's average for with-replacement sampling);
    - ``size``: sum_k n_k * Delta_k / sum_k n_k with reported sizes n_k (FedAvg, McMahan et al. 2017);
    - ``inverse_inclusion``: the Horvitz-Thompson estimator (1/N) * sum_k Delta_k / pi_k, unbiased for the
      full-participation mean (1/N) * sum_{all k} Delta_k; for a cohort drawn with replacement that carries its
      expected draws, Hansen-Hurwitz's (1/N) * sum_k m_k Delta_k / E[m_k] (:meth:`~fedsample.rounds.Cohort.design_weights`);
    - ``size_inverse_inclusion``: the same for FedAvg's size-weighted objective, sum_k (n_k / n) d_k Delta_k with
      every client's exact size (optimal client sampling's and DELTA's aggregation with w_k = n_k / n).
    """

    by: Weighting = "uniform"

    @property
    def capabilities(self) -> AggregatorCapabilities:
        """Linear; the uniform mean weighs every received update the same; ``size`` needs the cohort's size reports
        (exact, or randomized ones used as they are), ``size_inverse_inclusion`` every client's exact size (n = sum
        of all n_k); the Horvitz-Thompson weights share the objective they target (a sampler built on them must
        agree)."""
        return AggregatorCapabilities(weighs_by_inclusion=self.by in BY_INCLUSION, linear=True, equal_weights=self.by == "uniform",
                                      needs_sizes=_weighting_needs(self.by), shared_settings=_weighting_settings(self.by))

    def weights(self, positions: np.ndarray, cohort: "Cohort", ctx: "RoundContext | None" = None) -> np.ndarray:
        if self.by == "inverse_inclusion":
            inverse: np.ndarray = cohort.design_weights()[positions] / (cohort.population * response_rate_of(ctx))
            return inverse
        if self.by == "size_inverse_inclusion":
            if ctx is None:
                raise ValueError("WeightedMean('size_inverse_inclusion') needs the round's context (the clients' exact sizes)")
            sizes = ctx.require_sizes(exact=True)
            share = sizes.for_clients(cohort.ids[positions]) / float(np.sum(sizes.reports))
            weights: np.ndarray = share * cohort.design_weights()[positions] / response_rate_of(ctx)
            return weights
        w = np.asarray(cohort.multiplicity)[positions].astype(np.float64)
        if self.by == "size":
            w = w * reported_sizes(ctx, cohort.ids[positions])
        normalized: np.ndarray = w / w.sum()
        return normalized

    def planned_weights(self, cohort: "Cohort", ctx: "RoundContext") -> np.ndarray:
        """The weights :meth:`combine` gives the cohort if every client's update arrives (declared before training:
        :meth:`fedsample.strategy.Strategy.planned_weights`)."""
        return self.weights(np.arange(len(cohort)), cohort, ctx)

    def combine(self, reports: Reports, cohort: "Cohort", ctx: "RoundContext") -> Params | None:
        return linear_combination(reports, lambda positions, _: self.weights(positions, cohort, ctx))


@dataclass(frozen=True)
class Sum:
    """FedSampling's aggregation: the sum of the received G_c (Qi et al. 2023, Algorithm 1, line 18)."""

    capabilities: ClassVar[AggregatorCapabilities] = AggregatorCapabilities(weighs_by_inclusion=False, linear=True, equal_weights=True)

    def combine(self, reports: Reports, cohort: "Cohort", ctx: "RoundContext") -> Params | None:
        return linear_combination(reports, lambda positions, _: np.full(len(positions), 1.0 / response_rate_of(ctx)))


@dataclass(frozen=True)
@checks.constrained(K=checks.COUNT)
class DrawnNormalizedSum:
    """The self-normalized FedSampling update (``fedsampling(normalize="drawn")``): the clients' G_c =
    (1/K) sum g_s summed and rescaled by K / S, S = sum_c |S_c| the number of samples actually drawn (learned
    through the same secure sum as the update), i.e. (1/S) sum_s g_s instead of Algorithm 1's (1/K) sum_s g_s.
    Given S >= 1 the drawn rows are a uniform random subset of size S (Bernoulli sampling at one rate), so dividing
    by the drawn S is exactly unbiased for the full-data mean gradient; only the noise on the count (below) biases
    it, by E[S / S~] - 1 ~ sigma_S^2 / E[S]^2. Its step no longer scales with S/K = N/N~ * (noise), so an error in
    N~ changes only how many samples are drawn, not the step size. No response-rate scaling:
    the ratio already averages over whoever answered. Not the paper's method (that is :class:`Sum`).

    With noise on the count (``FedSamplingData(count_noise=sigma_S)``) the server divides by the noised S~; a
    noised count below one sample is read as one (:func:`drawn_divisor`), so a round that drew (almost) nothing
    cannot blow the step up. sigma_S is in samples, not relative to K: with the default 5 the step's relative bias
    E[S / S~] - 1 is 7e-6 at E[S] = 2048, 0.04% at 256, 0.65% at 64 and 12% at 20 (Monte Carlo, S ~ Poisson(E[S]),
    ``tests/test_budget.py``), so small K needs a smaller sigma_S (at a privacy cost the ledger states)."""

    K: int

    @property
    def capabilities(self) -> AggregatorCapabilities:
        """Linear (the sum of the updates; the drawn count is one more coordinate of that sum), equal weights (the
        equal-weight sum, then divided by the count: post-processing); it needs the summed drawn count
        (:data:`~fedsample.sampling.data.DRAWN`); it shares K."""
        return AggregatorCapabilities(weighs_by_inclusion=False, linear=True, needs_summed=(DRAWN,), equal_weights=True,
                                      shared_settings={"K (samples per round)": self.K})

    def combine(self, reports: Reports, cohort: "Cohort", ctx: "RoundContext") -> Params | None:
        total = linear_combination(reports, lambda positions, _: np.ones(len(positions)))
        drawn = replies_of(reports).summed(DRAWN) if total is not None else 0
        if total is None or drawn == 0:
            return None
        return {k: v * (self.K / drawn_divisor(drawn)) for k, v in total.items()}


def drawn_divisor(drawn: float) -> float:
    """The count the self-normalized update divides by: the (noised) drawn count S~, read as 1 below 1."""
    return max(float(drawn), 1.0)


def reported_sizes(ctx: "RoundContext | None", ids: np.ndarray, exact: bool = False) -> np.ndarray:
    """The round's size reports of the clients ``ids`` (size weights need the round's context)."""
    if ctx is None:
        raise ValueError("size weights need the round's context (its size reports)")
    return ctx.require_sizes(exact=exact).for_clients(ids)


def response_rate_of(ctx: "RoundContext | None") -> float:
    """The round's response rate (1 without a context)."""
    return 1.0 if ctx is None else float(ctx.response_rate)


def linear_combination(
    reports: Reports, weights_of: Callable[[np.ndarray, Sequence["TrainReport"]], np.ndarray]
) -> Params | None:
    """sum_k w_k * Delta_k over the received updates (None when nothing was received), with the weights
    ``weights_of(positions, received_reports)``, formed by the reply list
    (:meth:`~fedsample.rounds.ReplyList.weighted_update_sum`: update by update, or without materializing each
    update where the federation can: the vectorized engine's one backward pass over the union of the drawn
    samples, Ray's partial sums, a secure sum); the result is the same."""
    replies = replies_of(reports)
    positions, got = received(replies)
    if not got:
        return None
    return replies.weighted_update_sum(positions, np.asarray(weights_of(positions, got), dtype=np.float64))


def normalizer(report: "TrainReport") -> float:
    """FedNova's a_k of one report: the solver's ||a_k||_1 where it reports one, else the steps tau_k."""
    return float(report.steps if report.norm_steps is None else report.norm_steps)


@dataclass(frozen=True)
@checks.constrained(by=WEIGHTINGS)
class FedNova:
    """FedNova's normalized averaging (Wang et al. 2020, Eq. 6-7):

        Delta = tau_eff * sum_k p_k * Delta_k / a_k,   tau_eff = sum_k p_k * a_k,

    with Delta_k = w_global - w_k the client's cumulative update and a_k = ||a_k||_1 its effective number
    of steps (tau_k for plain SGD, see :func:`fedsample.training.local.effective_steps` for momentum and
    the proximal term). Each client's update becomes an average step, so clients that take more steps no
    longer pull the fixed point toward their own optimum; the server then applies w - eta * Delta.

    The weights p_k are :class:`WeightedMean`'s (``by``): ``size`` (n_k over the cohort's total, the
    paper's p_i = n_i/n restricted to the participants; for uniform and Poisson client sampling),
    ``uniform`` (draw multiplicities; for size-proportional sampling with replacement, whose draws already
    carry p_k = n_k/n) or ``inverse_inclusion`` (Horvitz-Thompson 1/(N*pi_k) for any other design; then both
    sums target their full-participation values with p_k = 1/N). tau_eff is computed as the weighted mean
    sum_k p_k a_k / sum_k p_k: the same number where the p_k sum to 1 (size, uniform), and for HT weights the
    ratio (Hajek) estimate of the mean a_k, so that with equal a_k for all clients FedNova is exactly
    :class:`WeightedMean` with the same weights (FedAvg) under every weighting.
    """

    by: Weighting = "size"

    @property
    def capabilities(self) -> AggregatorCapabilities:
        """Not linear: its weights tau_eff p_k / a_k need each client's a_k, which comes with its update (and is
        known only for a local rule linear in the gradients: ``normalizes_steps``); the sizes and settings of its
        weighting (:class:`WeightedMean`)."""
        return AggregatorCapabilities(weighs_by_inclusion=self.by in BY_INCLUSION, linear=False, needs_step_counts=True,
                                      normalizes_steps=True, needs_sizes=_weighting_needs(self.by),
                                      shared_settings=_weighting_settings(self.by))

    def combine(self, reports: Reports, cohort: "Cohort", ctx: "RoundContext") -> Params | None:
        def weights(positions: np.ndarray, got: Sequence["TrainReport"]) -> np.ndarray:
            p = WeightedMean(self.by).weights(positions, cohort, ctx)
            a = np.array([normalizer(r) for r in got], dtype=np.float64)
            if np.any(a <= 0):
                raise ValueError(f"FedNova needs positive effective step counts a_k, got {a.tolist()}")
            tau_eff = float(np.dot(p, a) / np.sum(p))
            ctx.log["tau_eff"] = tau_eff
            return tau_eff * p / a

        return linear_combination(reports, weights)


@dataclass(frozen=True)
@checks.constrained()
class StratifiedMean:
    """Stratified aggregation of FedSTS / FedSTaS (needs a Cohort with ``strata`` and ``info`` holding
    ``stratum_sizes`` N_h and ``allocation`` m_h, as :class:`~fedsample.sampling.stratify.StratifiedClients`
    returns). A client that sent nothing counts as a zero update.

    - ``unbiased`` (default): Horvitz-Thompson inside strata, (1/N) * sum_h sum_{k in s_h} Delta_k / pi_k.
      Since strata are sampled independently, pi_k is the overall inclusion probability, so this is
      unbiased for the full-participation mean (1/N) * sum_k Delta_k whatever the within-stratum design
      (it coincides with ``WeightedMean("inverse_inclusion")``). When clients fail, each stratum's weights
      are divided by that stratum's response rate r_h = answered_h / asked_h (the weighting-class adjustment
      with the strata as classes): unbiased, given at least one answer in every stratum, when clients answer
      at random with a rate that may differ between strata; one overall rate would be biased then.
    - ``paper``: the FedSTS/FedSTaS aggregation (Slessor et al. 2025, Eq. 6 and Algorithm 2, last line)
      (1/N) * sum_h N_h * (1/m_h) * sum_{k in s_h} Delta_k. Unbiased only when pi_k = m_h / N_h inside
      each stratum; with importance sampling proportional to ||X_k|| it over-weights large-norm clients
      (E = (1/N) * sum_h (N_h/m_h) * sum_{k in h} pi_k * Delta_k), contrary to the paper's Lemma 2.1.
    - ``size``: the size-weighted ratio (Hajek) estimator sum_{k in s} (n_k/pi_k) Delta_k / sum_{k in s} n_k/pi_k
      of FedAvg's objective, the size-weighted mean (1/n) * sum_k n_k * Delta_k (the paper's Eq. 1 with
      omega_k = n_k/n); consistent (bias O(1/m)) and needing only the cohort's exact sizes. With equal pi_k it is
      FedAvg's size-weighted mean. ``unbiased`` and ``paper`` target the client mean (omega_k = 1/N), which
      on label-skewed partitions with unequal sizes is a different objective from FedAvg's.

    The papers aggregate models w_k; we aggregate updates Delta_k = w - w_k. For ``paper`` the weights sum
    to 1, so both agree; the ``unbiased`` weights do not sum to 1 and must be applied to updates.
    """

    by: Literal["unbiased", "paper", "size"] = "unbiased"

    @property
    def capabilities(self) -> AggregatorCapabilities:
        """Linear; ``unbiased`` and ``size`` divide by pi_k; ``size`` needs the cohort's exact sizes (the ratio
        estimator weighs by n_k / pi_k); ``paper`` weighs by N_h / m_h: the cohort must carry its strata and
        allocation."""
        return AggregatorCapabilities(weighs_by_inclusion=self.by in ("unbiased", "size"), linear=True, needs_strata=self.by == "paper",
                                      needs_sizes=SizeNeed.COHORT_EXACT if self.by == "size" else SizeNeed.NONE)

    def weights(self, positions: np.ndarray, cohort: "Cohort", ctx: "RoundContext | None" = None) -> np.ndarray:
        if self.by == "unbiased":
            return WeightedMean("inverse_inclusion").weights(positions, cohort, ctx)
        if self.by == "size":
            sizes = reported_sizes(ctx, cohort.ids[positions], exact=True)
            return size_ratio_weights(sizes, cohort.inclusion[positions])
        if cohort.strata is None or "stratum_sizes" not in cohort.info or "allocation" not in cohort.info:
            raise ValueError("StratifiedMean('paper') needs a stratified cohort (strata, stratum_sizes, allocation)")
        h = np.asarray(cohort.strata)[positions]
        N_h = np.asarray(cohort.info["stratum_sizes"], dtype=np.float64)
        m_h = np.asarray(cohort.info["allocation"], dtype=np.float64)
        weights: np.ndarray = N_h[h] / (m_h[h] * cohort.population)
        return weights

    def combine(self, reports: Reports, cohort: "Cohort", ctx: "RoundContext") -> Params | None:
        if self.by == "unbiased" and cohort.strata is not None:
            rate = stratum_response_rates(reports, cohort, ctx)
            return linear_combination(reports, lambda positions, _: 1.0 / (cohort.inclusion[positions] * cohort.population * rate[positions]))
        return linear_combination(reports, lambda positions, _: self.weights(positions, cohort, ctx))


def note_unanswered_strata(ctx: "RoundContext | None", unanswered: int) -> None:
    """Say, in the round record (``strata_unanswered``) and on the terminal, that ``unanswered`` strata of the cohort
    lost every member: the estimate leaves those strata out, so it is unbiased only given an answer in every
    stratum (no weighting-class adjustment can restore a class without respondents)."""
    if unanswered and ctx is not None:
        ctx.log["strata_unanswered"] = unanswered
        # one text for every round (the count is in the record), so a run shows it once (fedsample.runtime.warned)
        warnings.warn("StratifiedMean: a stratum lost every member this round (how many: the record's strata_unanswered); "
                      "the estimate leaves it out, biased unless its updates are zero (docs/reliability.md)",
                      RuntimeWarning, stacklevel=4)


def stratum_response_rates(reports: Reports, cohort: "Cohort", ctx: "RoundContext | None") -> np.ndarray:
    """Per cohort position, the response rate of its stratum, r_h = (members of h whose reply did not fail) /
    (members of h asked). Clients lost before the cohort was formed (a failed size report) belong to no known
    stratum: the share of them in the round's rate (``ctx.response_rate``) scales every stratum alike."""
    failed = replies_of(reports).failed
    failed_at = np.fromiter(failed, dtype=np.int64, count=len(failed))
    replied = np.ones(len(cohort), dtype=bool)
    replied[failed_at] = False
    _, stratum = np.unique(np.asarray(cohort.strata), return_inverse=True)
    rate = np.bincount(stratum, weights=replied) / np.bincount(stratum)
    note_unanswered_strata(ctx, int(np.count_nonzero(rate == 0)))
    in_cohort = replied.mean() if len(cohort) else 1.0
    lost = response_rate_of(ctx) / in_cohort if in_cohort > 0 else 1.0
    return rate[stratum] * lost


def size_ratio_weights(sizes: np.ndarray, inclusion: np.ndarray) -> np.ndarray:
    """Hajek weights (n_k / pi_k) / sum_j (n_j / pi_j) of the size-weighted mean under inclusion probabilities pi_k."""
    raw = np.asarray(sizes, dtype=np.float64) / np.asarray(inclusion, dtype=np.float64)
    weights: np.ndarray = raw / raw.sum()
    return weights


#: ISFedAvg's ``scaling``: "step" (the 1/(K p_k) factor inside the local steps, Eq. 8) or "aggregate".
Scaling = Literal["step", "aggregate"]


@dataclass(frozen=True)
@checks.constrained()
class ISFedAvgAggregate:
    """ISFedAvg's aggregation (Rizk, Vlaski & Sayed 2022): Eq. 9's plain mean of the agents' updates (``scaling="step"``: the 1/(K p_k) factor was in the local
    steps) or the Horvitz-Thompson mean (1/K) sum_k Delta_k / pi_k (``scaling="aggregate"``). The data weights
    of Eq. 53 stay on the clients (:func:`fedsample.sampling.importance.stored_data_weights`)."""

    scaling: Scaling = "step"

    @property
    def capabilities(self) -> AggregatorCapabilities:
        """Linear; ``aggregate``: the Horvitz-Thompson mean divides by pi_k; where the agent factor 1/(K p_k) goes,
        which the data sampler's plans must agree with."""
        return AggregatorCapabilities(weighs_by_inclusion=self.scaling == "aggregate", linear=True,
                                      shared_settings={"scaling (where ISFedAvg's 1/(K p_k) is applied)": self.scaling})

    def combine(self, reports: Reports, cohort: Cohort, ctx: "RoundContext") -> Params | None:
        mean = WeightedMean("uniform" if self.scaling == "step" else "inverse_inclusion")
        return mean.combine(reports, cohort, ctx)
