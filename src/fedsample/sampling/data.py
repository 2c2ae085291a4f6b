"""Data samplers: what each chosen client trains on. The server sends a small *plan*; the client executes
it on its own data (:meth:`draw`). No index and no count of the drawn samples leaves the client: every asked
client replies with a report of the same shape (a zero update, no step, when it drew nothing), and the
engines keep the drawn rows on the clients' side. The update itself is computed from the drawn samples (its
norm grows with their number, and an empty draw gives a zero update); with
:class:`fedsample.federation.secure_sum.SecureSum` the server sees only the cohort's sum, and with
:class:`fedsample.privacy.noise.UpdateNoise` each update is clipped and noised (see docs/privacy.md)."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, Mapping, TypedDict

import numpy as np

from fedsample import checks
from fedsample.checks import Param
from fedsample.messages import SIZES, ClientContext, LocalSample, SizeSumRequest
from fedsample.parts import Census, CohortPlanCapabilities, DataSamplerCapabilities, Design, Limit, Poisson, SizeNeed
from fedsample.rng import Blocks, ClientRandom, CohortRandom
from fedsample.sampling.clamp import clamped
from fedsample.runtime.records import Record, State, as_number, opened_state, part_state

if TYPE_CHECKING:
    import torch

    from fedsample.rounds import Cohort
    from fedsample.rounds import RoundContext

__all__ = [
    "AllSamples", "BernoulliSamples", "COUNT_NOISE_PURPOSE", "DRAWN", "DrawnCount", "FedSamplingData", "fedsampling_capabilities", "FixedRatio", "FixedSizeSamples", "FullData", "UniformSubset",
    "sampling_ratio", "STEERED_TOTAL", "SUMMED_TOTAL", "SteeredTotals", "TotalFrom",
]


# --- plans (run on the client) ---------------------------------------------------------------------


@dataclass(frozen=True)
class AllSamples:
    """Train on every local sample."""

    capabilities: ClassVar[CohortPlanCapabilities] = CohortPlanCapabilities(draws_blocks=True)

    def draw(self, ctx: ClientContext, rng: ClientRandom) -> LocalSample:
        return LocalSample(np.arange(ctx.size))

    def sampling_design(self) -> Design:
        """Every record."""
        return Census()

    def draw_cohort(self, sizes: np.ndarray, rng: CohortRandom | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Every client's :meth:`draw` at once: ``(member, position)`` of each of the cohort's samples."""
        return self.draw_blocks(Blocks(sizes), rng)

    def draw_blocks(self, blocks: Blocks, rng: CohortRandom | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`draw_cohort` over a kept layout: the layout itself (every sample's owner and position)."""
        return blocks.owner, blocks.within

    def stream_reads(self, sizes: np.ndarray) -> np.ndarray:
        """No draw: nothing read from the clients' streams."""
        return np.zeros(len(sizes), dtype=np.int64)


DRAWN = "samples"
"""The name of FedSampling's drawn count among a reply's summed statistics (:attr:`fedsample.messages.TrainReport.sums`,
:class:`DrawnCount`): what the self-normalized update divides by and a steered run learns from; the round's record
and the Flower reply carry it under this name, as they carry every summed statistic."""

#: The purpose of the random cells of the clients' noise shares on the summed drawn count
#: (:func:`fedsample.federation.secure_sum.count_shares`, :attr:`DrawnCount.purpose`).
COUNT_NOISE_PURPOSE = "secure sum: drawn-count noise"


@dataclass(frozen=True)
class DrawnCount:
    """FedSampling's drawn count as a summed statistic (:class:`fedsample.messages.SummedStatistic`): each client adds
    |S_c|, how many samples it drew, to its reply under :data:`DRAWN`, and the server learns only
    S = sum_c |S_c| (inside the secure sum), plus Gaussian noise of standard deviation ``noise`` = sigma_S added by the
    asked clients in equal shares from the cells of ``purpose``: the self-normalized update's divisor
    (:class:`fedsample.training.aggregate.DrawnNormalizedSum`) and what a steered run learns N from
    (:meth:`FedSamplingData.observe_drawn`)."""

    noise: float = 0.0
    name: str = DRAWN
    purpose: str = COUNT_NOISE_PURPOSE
    released: str = "drawn count"
    symbol: str = "S"

    def of_cohort(self, counts: np.ndarray) -> np.ndarray:
        """|S_c| itself."""
        return np.asarray(counts, dtype=np.int64)


@functools.lru_cache(maxsize=64)
def counting_capabilities(count_noise: float) -> CohortPlanCapabilities:
    """What a :class:`BernoulliSamples` plan that reports its count declares: the class's record plus the
    :class:`DrawnCount` of noise ``count_noise`` (one record per setting, not one per plan)."""
    return dataclasses.replace(BernoulliSamples.capabilities, summed=(DrawnCount(float(count_noise)),))


@dataclass(frozen=True)
class BernoulliSamples:
    """Keep each local sample independently with probability p (Qi et al. 2023, Algorithm 1, lines 11-14); its draw
    is private (``private_draw``: FedSampling's count reaches the server only summed). ``report_count``: the client
    adds how many it kept to its reply (for a secure sum of the counts only: the plan declares a :class:`DrawnCount`); ``count_noise``: the standard deviation sigma_S of the Gaussian noise the asked
    clients add to that sum, in equal shares (:class:`fedsample.federation.secure_sum.SecureSum` adds it; 0: the
    exact count)."""

    p: float
    report_count: bool = False
    count_noise: float = 0.0
    capabilities: ClassVar[CohortPlanCapabilities] = CohortPlanCapabilities(draws_blocks=True, draws_on_device=True, private_draw=True)

    def __post_init__(self) -> None:
        if self.report_count:  # this plan's own record: the class's plus its drawn count (frozen: set as the dataclass does)
            object.__setattr__(self, "capabilities", counting_capabilities(float(self.count_noise)))

    def draw(self, ctx: ClientContext, rng: ClientRandom) -> LocalSample:
        return LocalSample(np.flatnonzero(rng.random(ctx.size) < self.p))

    def sampling_design(self) -> Design:
        """Each record independently with probability p."""
        return Poisson(float(self.p))

    def draw_cohort(self, sizes: np.ndarray, rng: CohortRandom) -> tuple[np.ndarray, np.ndarray]:
        """Every client's :meth:`draw` in one numpy pass: ``(member, position)`` of each kept sample, i.e. the
        cohort member that keeps it and its position in that client's data (the same draws as each client
        drawing alone with its ClientRandom)."""
        sizes = np.asarray(sizes, dtype=np.int64)
        kept = rng.ragged_below(sizes, self.p)
        ends = np.cumsum(sizes)
        member = np.searchsorted(ends, kept, side="right")  # the client whose block holds each kept sample
        return member, kept - (ends[member] - sizes[member])  # its block's start, for the kept samples only

    def draw_blocks(self, blocks: Blocks, rng: CohortRandom) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`draw_cohort` over a layout kept from round to round (:class:`~fedsample.rng.Blocks` of the
        sizes): the same draws, the members and positions read from the layout at the kept positions only."""
        kept = rng.ragged_below(blocks, self.p)
        return blocks.owner[kept], blocks.within[kept]

    def draw_cohort_on_device(self, sizes: "np.ndarray | torch.Tensor", rng: CohortRandom) -> tuple["torch.Tensor", "torch.Tensor"]:
        """:meth:`draw_cohort` with the cohort's arrays kept on ``rng``'s device (a :class:`CohortRandom` built
        with a ``device``): ``(member, position)`` as int64 tensors there, the same numbers as the numpy pass
        (the kept positions from :meth:`CohortRandom.ragged_below_on_device`, then the same block arithmetic).
        ``sizes`` on the host (copied to the device once) or already there (e.g. kept there for the run: the sizes
        do not change); the host waits for the number of draws and for how many were kept, nothing else."""
        import torch

        n = torch.as_tensor(sizes, dtype=torch.int64, device=rng.device)
        kept = rng.ragged_below_on_device(n, self.p)
        ends = torch.cumsum(n, 0)
        member = torch.searchsorted(ends, kept, right=True)  # the client whose block holds each kept sample
        return member, kept - (ends - n)[member]

    def stream_reads(self, sizes: np.ndarray) -> np.ndarray:
        """One uniform per local sample."""
        return np.asarray(sizes, dtype=np.int64)


@dataclass(frozen=True)
class FixedSizeSamples:
    """Keep min(k, n) local samples uniformly without replacement."""

    k: int

    def draw(self, ctx: ClientContext, rng: ClientRandom) -> LocalSample:
        return LocalSample(np.sort(rng.choice(ctx.size, size=min(self.k, ctx.size), replace=False)))


# --- samplers (run on the server) ------------------------------------------------------------------


@dataclass(frozen=True)
class FullData:
    """Every chosen client trains on all of its data (FedAvg and the client-sampling baselines)."""

    capabilities: ClassVar[DataSamplerCapabilities] = DataSamplerCapabilities(weighs_by_inclusion=False)

    def plan(self, ctx: "RoundContext", cohort: "Cohort") -> AllSamples:
        return AllSamples()


@dataclass(frozen=True)
@checks.constrained(ratio=Param(checks.reals(0, 1, "(]"), label="sampling ratio"))
class FixedRatio:
    """The naive method of Qi et al. 2023, §3.3: each sample kept with a fixed probability r."""

    ratio: float
    capabilities: ClassVar[DataSamplerCapabilities] = DataSamplerCapabilities(weighs_by_inclusion=False)

    def plan(self, ctx: "RoundContext", cohort: "Cohort") -> BernoulliSamples:
        return BernoulliSamples(self.ratio)


def sampling_ratio(K: int, total_estimate: float, log: Record | None = None) -> float:
    """FedSampling's per-sample keep probability K / N~, capped at 1 (§3.2): N~ is an estimate and can fall below
    K. With the round's ``log`` a cap is recorded there (``clamped: {"ratio": K/N~}``, :mod:`fedsample.sampling.clamp`)."""
    checks.check("K", K, checks.POSITIVE, owner="sampling_ratio")
    asked = K / total_estimate if total_estimate > 0 else np.inf
    return clamped({} if log is None else log, "ratio", asked, 0.0, 1.0)



#: The default standard deviation of the Gaussian noise on FedSampling's summed drawn count S (in samples; one
#: record moves S by at most 1, so it is also the noise multiplier of S's release at record level).
COUNT_NOISE = 5.0


#: Where a steered FedSampling keeps, in the strategy state, the running sum of its totals S_t / p_t and their number.
STEERED_TOTAL = "steered_total"


class SteeredTotals(TypedDict):
    """A steered FedSampling's running sum of its totals S_t / p_t and their number (under :data:`STEERED_TOTAL`)."""

    sum: float
    rounds: int


#: Where FedSampling keeps, in the strategy state, the total N^ released by the secure sum of the clients' sizes
#: (``total_from="secure_sum"``: asked once per run, before the first draw).
SUMMED_TOTAL = "summed_total"

TotalFrom = Literal["reports", "secure_sum"]
"""Where FedSampling's estimate of the total size N comes from: the size reports (the paper's Eq. 2, or exact sizes)
or the clients' sizes summed inside the secure sum with Gaussian noise (the library's default, not the paper's)."""


@functools.lru_cache(maxsize=None, typed=True)  # typed: K = 2048 and K = 2048.0 print differently in the record
def fedsampling_capabilities(K: int, total_from: TotalFrom, count_drawn: bool, count_noise: float) -> DataSamplerCapabilities:
    """:class:`FedSamplingData`'s declaration for these settings, built once per setting (the round record reads it
    every round)."""
    needs = SizeNeed.NONE if total_from == "secure_sum" else SizeNeed.COHORT
    summed = counting_capabilities(count_noise).summed if count_drawn else ()
    return DataSamplerCapabilities(weighs_by_inclusion=False, needs_sizes=needs, summed=summed,
                                   drawn_count=DRAWN if count_drawn else None, budget=K,
                                   limits=(Limit("samples_per_round (K)", K, "samples"),),
                                   shared_settings={"K (samples per round)": K})


@dataclass(frozen=True)
@checks.constrained(K=checks.COUNT, count_drawn=checks.BOOLEAN, count_noise=checks.NON_NEGATIVE, steer=checks.BOOLEAN,
                    total_from=checks.Options("reports", "secure_sum"))
class FedSamplingData:
    """FedSampling's data-uniform sampling (Qi et al. 2023, §3.2): each sample of each client kept with
    probability K / N~, with N~ the server's estimate of the total size (capped at 1; a round whose N~ falls
    below K records it, ``clamped``; K above the data's size is refused before the first round, ``limits``).
    ``count_drawn``: the clients also send how many samples they drew, for the self-normalized update under a
    secure sum; ``count_noise``: the standard deviation of the Gaussian noise on that summed count (docs/privacy.md:
    the drawn count S).

    ``total_from`` says where N~ comes from. ``"reports"`` (the paper's method): the strategy's size reports, N~ of
    Eq. 2 from the epsilon-LDP randomized responses (or the exact total of exact sizes). ``"secure_sum"`` (needs
    ``count_drawn``; a departure from the paper, the library's default, issue 38): before the first draw every client's
    size goes into the secure sum with Gaussian noise of standard deviation ``count_noise`` added in shares, as the
    drawn count does (:class:`~fedsample.messages.SizeSumRequest`), so the server learns N^ = N + N(0, sigma_S^2)
    once per run (scaled by asked / answered after dropouts, floored at the number of clients) and nothing per client;
    the ratio is K / N^ (no size reports needed). At sigma_S = 5 on 60,000 rows N^ is off by 0.01%, where Eq. 2 at
    eps = 3 on 100 clients is off by about N itself (docs/size-estimate.md, "The first round").

    ``steer`` (needs ``count_drawn``): from the second round on, N~ is replaced by the mean over the past rounds of
    N^_t = S~_t / p_t, the released (noised) drawn count over the ratio that drew it: given p_t, E[S~_t] = p_t N, so
    each N^_t is unbiased for the true total N, with variance (N p_t (1 - p_t) + sigma_S^2) / p_t^2 (about 2% of N
    at K = 2048 of 60,000 rows), and the realised count stays near K whatever the size reports' error (issue 38:
    an N~ 77 times too small made every round train on every row). Post-processing of the count the update already
    releases: no privacy cost beyond the ledger's drawn-count release (docs/size-estimate.md)."""

    K: int
    count_drawn: bool = False
    count_noise: float = 0.0
    steer: bool = False
    total_from: TotalFrom = "reports"

    def __post_init__(self) -> None:
        if self.total_from == "secure_sum" and not self.count_drawn:
            checks.fail("total_from", self.total_from, "'reports' unless count_drawn=True (the summed sizes travel as the drawn count "
                        "does, inside the secure sum)", "FedSamplingData")
        if self.count_noise > 0 and not self.count_drawn:
            checks.fail("count_noise", self.count_noise, "0 unless count_drawn=True (it is noise on the drawn count)",
                        "FedSamplingData")
        if self.steer and not self.count_drawn:
            checks.fail("steer", self.steer, "False unless count_drawn=True (it steers by the drawn count)", "FedSamplingData")

    @property
    def capabilities(self) -> DataSamplerCapabilities:
        """Size reports of the cohort; K, which the solver (``OneGradient(K)``) and the aggregator divide by, the
        budget a round is held to, at most the training samples (K/N >= 1 would keep every sample every round); with
        ``count_drawn`` its plans' summed :class:`DrawnCount` of noise ``count_noise``, the drawn count
        (``drawn_count``) the round's realised budget reads (:func:`fedsampling_capabilities`: built once per setting)."""
        return fedsampling_capabilities(self.K, self.total_from, self.count_drawn, float(self.count_noise))

    def ratio(self, ctx: "RoundContext") -> float:
        """K / N~, or K / N^ once a steered run has seen a drawn count (the round's ``steered_total``), or K / N^ of the
        summed sizes (``total_from="secure_sum"``: the round's ``summed_total``) until then."""
        total = self.steered_total(ctx.state, ctx.num_clients)
        if total is not None:
            ctx.log["steered_total"] = total
        elif self.total_from == "secure_sum":
            total = ctx.log["summed_total"] = self.summed_total(ctx)
        else:
            total = ctx.require_sizes().total
        return sampling_ratio(self.K, total, ctx.log)

    def summed_total(self, ctx: "RoundContext") -> float:
        """N^, the clients' sizes summed inside the secure sum with Gaussian noise sigma_S = ``count_noise`` (asked of
        every client once per run, before the first draw, and kept in the strategy state): the noised sum of the a
        answering clients' sizes scaled by asked / a, floored at the number of clients."""
        if SUMMED_TOTAL not in ctx.state:
            ids = np.arange(ctx.num_clients, dtype=np.int64)
            replies = ctx.federation.run(ids, SizeSumRequest(float(self.count_noise)), ctx.round)
            if not replies.sealed:
                raise ValueError("FedSamplingData(total_from='secure_sum') needs a secure sum: the clients' sizes may reach the "
                                 "server only summed (build the federation with with_secure_sum; simulate does)")
            answered = replies.received_positions()
            if len(answered) == 0:
                raise ValueError("FedSamplingData(total_from='secure_sum'): no client's size arrived in the secure sum")
            replies.weighted_update_sum(answered, np.ones(len(answered)))  # the one sum: its count is the noised total
            ctx.state[SUMMED_TOTAL] = float(replies.summed(SIZES)) * len(ids) / len(answered)
        total = ctx.state[SUMMED_TOTAL]
        if not isinstance(total, float):
            raise TypeError(f"state[{SUMMED_TOTAL!r}]: expected the summed total, a float; the state holds {type(total).__name__}")
        return max(total, float(ctx.num_clients))

    def steered_total(self, state: State, num_clients: int) -> float | None:
        """N^ = mean over the past rounds of S~_t / p_t, floored at the number of clients (each holds a sample, as
        N~ is floored); None before the first drawn count or without ``steer``."""
        memo = part_state(state, STEERED_TOTAL, SteeredTotals) if self.steer else None
        if not memo or memo["rounds"] == 0:
            return None
        total: float = max(memo["sum"] / memo["rounds"], float(num_clients))
        return total

    def observe_sums(self, state: State, sums: Mapping[str, float], log: Record) -> None:
        """Learn from a round's summed statistics: its released drawn count (:data:`DRAWN`) with the ratio that drew
        it (the record's ``ratio``, :meth:`plan`), :meth:`observe_drawn`."""
        if DRAWN in sums and "ratio" in log:
            self.observe_drawn(state, float(sums[DRAWN]), as_number(log["ratio"], "ratio"))

    def observe_drawn(self, state: State, drawn: float, ratio: float) -> None:
        """Record a round's released drawn count S~ and the ratio p that drew it (steered runs only)."""
        if self.steer and ratio > 0:
            memo = opened_state(state, STEERED_TOTAL, SteeredTotals, SteeredTotals(sum=0.0, rounds=0))
            memo["sum"] += float(drawn) / float(ratio)
            memo["rounds"] += 1

    def plan(self, ctx: "RoundContext", cohort: "Cohort") -> BernoulliSamples:
        p = self.ratio(ctx)
        ctx.log["ratio"] = p
        return BernoulliSamples(p, report_count=self.count_drawn, count_noise=float(self.count_noise))


@dataclass(frozen=True)
@checks.constrained(k=checks.COUNT)
class UniformSubset:
    """k samples uniformly without replacement from each chosen client (centralized minibatches when the
    only client holds the pooled data)."""

    k: int
    capabilities: ClassVar[DataSamplerCapabilities] = DataSamplerCapabilities(weighs_by_inclusion=False)

    def plan(self, ctx: "RoundContext", cohort: "Cohort") -> FixedSizeSamples:
        return FixedSizeSamples(self.k)
