"""FedSTaS's data level (Slessor et al. 2025, §2.4, Eq. 7-8 and Algorithm 3): data-uniform sampling
across the *participating* clients only.

The chosen clients send epsilon-LDP size reports r_k (Eq. 7; :class:`~fedsample.privacy.sizes.RandomizedSizes`
with ``scope="cohort"``), the server estimates their total n~ = (R - (1 - alpha) * M * m / 2) / alpha
(Eq. 8, :func:`fedsample.privacy.estimate_total` over the m answers), and every participant keeps each of
its samples with probability p = eta / n~ (capped at 1), eta being the desired number of samples across
the participants.

The paper fixes eta in two places that disagree: §3.1 lists K_desired = 2048 and says "the sampling ratio was
q = 0.1, determining the requested sample size eta". Both readings are offered: ``ParticipantData(eta=2048)``
(a fixed request, p = 2048 / n~) and ``ParticipantData(fraction=0.1)`` (the request is the fraction q of the
participants' estimated total, eta_t = q * n~_t, so p = q whatever n~ is: the size reports then set nothing and
only cost their epsilon). q = 0.1 is also m / N (10 of 100 clients), so q may be the client sampling ratio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from fedsample import checks
from fedsample.messages import ClientContext, LocalSample
from fedsample.parts import DataSamplerCapabilities, Limit, SizeNeed
from fedsample.sampling.data import BernoulliSamples, sampling_ratio

if TYPE_CHECKING:
    from fedsample.rng import ClientRandom
    from fedsample.rounds import Cohort
    from fedsample.rounds import RoundContext

__all__ = ["FixedShareSamples", "ParticipantData"]

Draw = Literal["bernoulli", "fixed"]


@dataclass(frozen=True)
class FixedShareSamples:
    """A fixed-size sample without replacement with per-sample inclusion probability exactly ``p``: the
    client draws floor(n*p) samples, plus one more with probability frac(n*p), uniformly without
    replacement (the randomized rounding keeps E[size] = n*p, hence P(sample j kept) = p)."""

    p: float

    def size(self, n: int, rng: ClientRandom) -> int:
        target = n * self.p
        whole = int(np.floor(target))
        return min(n, whole + int(rng.random() < target - whole))

    def draw(self, ctx: ClientContext, rng: ClientRandom) -> LocalSample:
        k = self.size(ctx.size, rng)
        return LocalSample(np.sort(rng.choice(ctx.size, size=k, replace=False)))


@dataclass(frozen=True)
@checks.constrained(eta=checks.COUNT, fraction=[checks.reals(0, 1, "(]"), None])
class ParticipantData:
    """Each participant keeps each local sample with probability eta / n~, n~ estimated over the cohort
    (Eq. 8). ``fraction`` (q): the other reading of the paper's eta, eta_t = q * n~_t, i.e. p = q (``eta`` is
    then unused; module docstring). ``draw``:

    - ``bernoulli`` (default): every sample independently (as FedSampling, Qi et al. 2023, §3.2);
    - ``fixed``: the authors' fixed-size sample without replacement (Algorithm 3 draws "a sample of
      (eta/m) observations ... with sampling probabilities eta/n~"); we take the size n_k * eta / n~ with
      randomized rounding (:class:`FixedShareSamples`), so each sample's inclusion probability is still
      exactly eta / n~ and the expected total over participants is eta * n / n~. (eta/m is that size for
      equal-sized clients.)

    Needs size reports from (at least) the cohort; n~ uses the participants' reports only.
    """

    eta: int = 2048
    draw: Draw = "bernoulli"
    fraction: float | None = None
    @property
    def capabilities(self) -> DataSamplerCapabilities:
        """Size reports of the cohort; eta, the samples per round (a solver or aggregator that divides by K must
        divide by eta; none for a fraction, whose eta_t changes with n~_t), at most the training samples (the
        participants hold fewer still: a round records its cap)."""
        return DataSamplerCapabilities(
            weighs_by_inclusion=False, needs_sizes=SizeNeed.COHORT, limits=(Limit("samples_per_round (eta)", self.eta, "samples"),),
            shared_settings={} if self.fraction is not None else {"K (samples per round)": self.eta})

    def ratio(self, ctx: "RoundContext", cohort: "Cohort") -> float:
        """p = eta / n~ with n~ the Eq. 8 estimate over the participants (capped at 1, recorded in the round's
        ``clamped``: the participants may hold fewer than eta samples); with ``fraction`` q, eta_t = q * n~_t and
        p = eta_t / n~_t = q."""
        total = ctx.require_sizes().total_over(cohort.ids)
        if self.fraction is not None:
            ctx.log["eta"] = self.fraction * total
            return float(self.fraction)
        return sampling_ratio(self.eta, total, ctx.log)

    def plan(self, ctx: "RoundContext", cohort: "Cohort") -> BernoulliSamples | FixedShareSamples:
        p = self.ratio(ctx, cohort)
        ctx.log["ratio"] = p
        return BernoulliSamples(p) if self.draw == "bernoulli" else FixedShareSamples(p)
