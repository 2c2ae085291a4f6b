"""Client samplers: who trains this round. Each returns a :class:`Cohort` that carries every chosen
client's inclusion probability pi_k, so aggregators can weight honestly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from fedsample import checks
from fedsample.rounds import Cohort, RoundContext
from fedsample.sampling import design

__all__ = ["Cohort", "AllClients", "UniformClients", "SizeProportional", "PoissonClients"]


@dataclass(frozen=True)
class AllClients:
    """Every available client takes part (pi_k = 1), as in FedSampling (Algorithm 1)."""

    needs_sizes: ClassVar[Literal["exact", None]] = None

    def select(self, ctx: RoundContext) -> Cohort:
        N = ctx.num_clients
        return Cohort(np.arange(N), np.ones(N), N)


@dataclass(frozen=True)
class UniformClients:
    """m of N clients uniformly without replacement (FedAvg, McMahan et al. 2017): pi_k = m/N."""

    m: int = 10
    needs_sizes: ClassVar[Literal["exact", None]] = None

    def __post_init__(self) -> None:
        checks.count("clients per round m", self.m)

    def select(self, ctx: RoundContext) -> Cohort:
        N = ctx.num_clients
        return Cohort.from_sample(design.simple_random(N, min(self.m, N), ctx.rng("clients")), N)


@dataclass(frozen=True)
class SizeProportional:
    """m draws with replacement with p_k = n_k / n (Li et al. 2019, scheme I); a client drawn twice
    counts twice in the average. pi_k = 1 - (1 - p_k)^m. Needs exact sizes of every client."""

    m: int = 10
    needs_sizes: ClassVar[Literal["exact", None]] = "exact"

    def __post_init__(self) -> None:
        checks.count("clients per round m", self.m)

    def select(self, ctx: RoundContext) -> Cohort:
        sizes = ctx.require_sizes(exact=True)
        p = np.zeros(ctx.num_clients)
        p[sizes.ids] = sizes.reports / sizes.reports.sum()
        return Cohort.from_sample(design.pps_with_replacement(p, self.m, ctx.rng("clients")), ctx.num_clients)


@dataclass(frozen=True)
class PoissonClients:
    """Each client independently with probability q (Poisson sampling): pi_k = q; the cohort size varies."""

    q: float = 0.1
    needs_sizes: ClassVar[Literal["exact", None]] = None

    def __post_init__(self) -> None:
        checks.in_interval("client probability q", self.q, 0, 1, closed="(]")

    def select(self, ctx: RoundContext) -> Cohort:
        N = ctx.num_clients
        return Cohort.from_sample(design.bernoulli(N, self.q, ctx.rng("clients")), N)
