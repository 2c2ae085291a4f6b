"""Client samplers: who trains this round. Each returns a :class:`Cohort` that carries every chosen
client's inclusion probability pi_k, so aggregators can weight honestly.

:class:`UniformClients`, :class:`SizeProportional` and :class:`PoissonClients` take either a fixed
cohort parameter (m or q) or ``samples_per_round=K``: a target for the expected number of training
samples the cohort holds, from which m (or q) is derived each round from the clients' exact reported
sizes (see :mod:`fedsample.sampling.cohort_size`). That target asks every client for its exact size
each round (the server learns all sizes, as size-weighted sampling already requires); a sampler given
a fixed m asks nothing.

No count is capped silently: m (or K) above the data's clients (or samples) is refused where the data meets the
strategy (``limits``, :meth:`fedsample.strategy.Strategy.check_data`); a derived count that a round still cannot
realize (fewer than one client, more than N, q above 1: failed size reports change the mean) is moved to the
nearest feasible value and the round's record names it (``clamped``, :mod:`fedsample.sampling.clamp`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedsample import checks
from fedsample.checks import Param
from fedsample.parts import Census, ClientSamplerCapabilities, Design, FixedSize, InclusionKind, Learns, Limit, Poisson, SizeNeed, Undeclared
from fedsample.rounds import Cohort, RoundContext
from fedsample.sampling import cohort_size, design
from fedsample.sampling.clamp import clamped

__all__ = ["Cohort", "AllClients", "UniformClients", "SizeProportional", "PoissonClients", "census", "is_built_census", "is_census_ids"]

_CENSUS: dict[int, Cohort] = {}  # the last population's census (one kept: 10^6 clients' arrays are 24 MB)


def census(population: int) -> Cohort:
    """Every one of ``population`` clients, once, pi_k = 1 (:class:`AllClients`'s cohort), built once per population
    and given again while the population is the same: its arrays are read-only (nothing can change them), so what
    follows from the cohort alone is known without a pass over it (:func:`is_built_census`)."""
    cohort = _CENSUS.get(population)
    if cohort is None:
        ids, inclusion, multiplicity = np.arange(population), np.ones(population), np.ones(population, dtype=np.int64)
        for array in (ids, inclusion, multiplicity):
            array.flags.writeable = False
        _CENSUS.clear()
        cohort = _CENSUS[population] = Cohort(ids, inclusion, population, multiplicity)
    return cohort


def is_built_census(cohort: Cohort) -> bool:
    """Whether ``cohort`` is the very object :func:`census` built (ids 0..N-1 ascending, pi_k = 1, m_k = 1, read-only):
    a valid census, known without reading its arrays."""
    return _CENSUS.get(cohort.population) is cohort


def is_census_ids(ids: np.ndarray, population: int) -> bool:
    """Whether ``ids`` is the very (read-only) id array of :func:`census`'s cohort of ``population``: every client, once."""
    cohort = _CENSUS.get(population)
    return cohort is not None and ids is cohort.ids


@dataclass(frozen=True)
class AllClients:
    """Every available client takes part (pi_k = 1), as in FedSampling (Algorithm 1)."""

    capabilities: ClassVar[ClientSamplerCapabilities] = ClientSamplerCapabilities(inclusion_kind=InclusionKind.EXACT, server_learns=())

    def select(self, ctx: RoundContext) -> Cohort:
        return census(ctx.num_clients)

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        return float(num_clients)

    def sampling_design(self, population: int) -> Design:
        """No client sampling: every client takes part."""
        return Census()


@dataclass(frozen=True)
@checks.constrained(m=[checks.COUNT, None], samples_per_round=[checks.COUNT, None])
class UniformClients:
    """m of N clients uniformly without replacement (FedAvg, McMahan et al. 2017): pi_k = m/N.

    ``samples_per_round=K`` instead of m: m = K / mean(n_k) from the exact reported sizes, rounded at
    random so that E[m] = K / mean(n_k) and the expected number of samples in the cohort is exactly K
    (:func:`fedsample.sampling.cohort_size.uniform_count`); pi_k = E[m]/N."""

    m: int | None = None
    samples_per_round: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "m", cohort_size.one_of("m", self.m, self.samples_per_round, 10, "UniformClients"))

    @property
    def capabilities(self) -> ClientSamplerCapabilities:
        """Exact pi; with ``samples_per_round``, every client's exact size (m follows from them), else nothing;
        m at most the clients, or K at most the samples."""
        return _capabilities(self.m, self.samples_per_round)

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        """m (at most N), or with ``samples_per_round`` E[m] = K / mean(n_k) from ``sizes`` (at most N)."""
        if self.samples_per_round is None:
            assert self.m is not None  # __post_init__: m is set when samples_per_round is not
            return float(min(self.m, num_clients))
        return min(float(num_clients), cohort_size.uniform_count(cohort_size.sizes_given(sizes, self), self.samples_per_round))

    def sampling_design(self, population: int) -> Design:
        """m of the ``population`` uniformly without replacement; with ``samples_per_round``, m follows from the sizes."""
        if self.samples_per_round is not None:
            return Undeclared("UniformClients(samples_per_round=...) derives its inclusion probabilities from the clients' sizes")
        assert self.m is not None  # one_of: m or samples_per_round
        return FixedSize(int(self.m), int(population))

    def select(self, ctx: RoundContext) -> Cohort:
        N = ctx.num_clients
        if self.samples_per_round is None:
            assert self.m is not None  # __post_init__: m is set when samples_per_round is not
            m = int(clamped(ctx.log, "clients_per_round", self.m, 0, N))
            return Cohort.from_sample(design.simple_random(N, m, ctx.rng("clients")), N)
        asked = self.samples_per_round / cohort_size.mean_size(ctx.require_sizes(exact=True).reports)
        expected = clamped(ctx.log, "clients_per_round", asked, 1.0, N)
        m = cohort_size.randomly_rounded(expected, ctx.rng("cohort_size"))
        sample = design.simple_random(N, min(m, N), ctx.rng("clients"))
        return Cohort(sample.ids, np.full(len(sample), expected / N), N, sample.multiplicity)


@dataclass(frozen=True)
@checks.constrained(m=[checks.COUNT, None], samples_per_round=[checks.COUNT, None])
class SizeProportional:
    """m draws with replacement with p_k = n_k / n (Li et al. 2019, scheme I); a client drawn twice
    counts twice in the average. pi_k = 1 - (1 - p_k)^m. Needs exact sizes of every client.

    ``samples_per_round=K`` instead of m: m = K / (sum n_k^2 / n), the count whose draws carry K samples
    in expectation (multiplicities counted), rounded at random; pi_k averages over the two counts."""

    m: int | None = None
    samples_per_round: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "m", cohort_size.one_of("m", self.m, self.samples_per_round, 10, "SizeProportional"))

    @property
    def capabilities(self) -> ClientSamplerCapabilities:
        """Exact pi from every client's exact size; E[draws of k] = m n_k / n, so the uniform mean over draws
        targets FedAvg's objective; K at most the samples (m draws with replacement: any m can be drawn)."""
        return ClientSamplerCapabilities(inclusion_kind=InclusionKind.EXACT, server_learns=(Learns.SIZES,), needs_sizes=SizeNeed.EXACT_ALL,
                                         draws_carry_sizes=True, limits=_limits(None, self.samples_per_round))

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        """The expected number of distinct clients, sum_k pi_k, from ``sizes`` (p_k = n_k / n)."""
        n = cohort_size.sizes_given(sizes, self)
        p = n / n.sum()
        if self.samples_per_round is None:
            return float(np.sum(1 - (1 - p) ** self.m))
        expected = cohort_size.size_weighted_count(n, self.samples_per_round)
        return float(np.sum(cohort_size.with_replacement_inclusion(p, expected)))

    def select(self, ctx: RoundContext) -> Cohort:
        sizes = ctx.require_sizes(exact=True)
        p = np.zeros(ctx.num_clients)
        p[sizes.ids] = sizes.reports / sizes.reports.sum()
        if self.samples_per_round is None:
            assert self.m is not None  # __post_init__: m is set when samples_per_round is not
            return Cohort.from_sample(design.pps_with_replacement(p, self.m, ctx.rng("clients")), ctx.num_clients)
        expected = clamped(ctx.log, "clients_per_round", cohort_size.size_weighted_draws(sizes.reports, self.samples_per_round), 1.0, np.inf)
        m = cohort_size.randomly_rounded(expected, ctx.rng("cohort_size"))
        sample = design.pps_with_replacement(p, m, ctx.rng("clients"))
        inclusion = cohort_size.with_replacement_inclusion(p[sample.ids], expected)
        return Cohort(sample.ids, inclusion, ctx.num_clients, sample.multiplicity)


@dataclass(frozen=True)
@checks.constrained(q=Param(checks.reals(0, 1, "(]"), None, label="client probability q"), samples_per_round=[checks.COUNT, None])
class PoissonClients:
    """Each client independently with probability q (Poisson sampling): pi_k = q; the cohort size varies.

    ``samples_per_round=K`` instead of q: q = min(1, K / sum n_k) from the exact reported sizes, so the
    cohort holds K samples in expectation."""

    q: float | None = None
    samples_per_round: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "q", cohort_size.one_of("q", self.q, self.samples_per_round, 0.1, "PoissonClients"))

    @property
    def capabilities(self) -> ClientSamplerCapabilities:
        """Exact pi; with ``samples_per_round``, every client's exact size (q follows from them), else nothing;
        K at most the samples (so that q = K / n <= 1)."""
        return _capabilities(None, self.samples_per_round)

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        """q N, or with ``samples_per_round`` min(1, K / sum n_k) N from ``sizes``."""
        if self.samples_per_round is None:
            assert self.q is not None  # __post_init__: q is set when samples_per_round is not
            return float(self.q * num_clients)
        return min(1.0, self.samples_per_round / float(np.sum(cohort_size.sizes_given(sizes, self)))) * num_clients

    def sampling_design(self, population: int) -> Design:
        """Each client independently with probability q; with ``samples_per_round``, q follows from the sizes."""
        if self.samples_per_round is not None:
            return Undeclared("PoissonClients(samples_per_round=...) derives its inclusion probabilities from the clients' sizes")
        assert self.q is not None  # one_of: q or samples_per_round
        return Poisson(float(self.q))

    def select(self, ctx: RoundContext) -> Cohort:
        N = ctx.num_clients
        if self.samples_per_round is not None:
            q = clamped(ctx.log, "q", self.samples_per_round / float(np.sum(ctx.require_sizes(exact=True).reports)), 0.0, 1.0)
        else:
            assert self.q is not None  # __post_init__: q is set when samples_per_round is not
            q = self.q
        return Cohort.from_sample(design.bernoulli(N, q, ctx.rng("clients")), N)


def _capabilities(m: int | None, samples_per_round: int | None) -> ClientSamplerCapabilities:
    """An exact sampler of m clients (or probability q) that learns nothing, or, with ``samples_per_round``, one
    whose cohort follows from every client's exact size."""
    sized = samples_per_round is not None
    return ClientSamplerCapabilities(inclusion_kind=InclusionKind.EXACT, server_learns=(Learns.SIZES,) if sized else (),
                                     needs_sizes=SizeNeed.EXACT_ALL if sized else SizeNeed.NONE, limits=_limits(m, samples_per_round))


def _limits(m: int | None, samples_per_round: int | None) -> tuple[Limit, ...]:
    """A fixed cohort of m distinct clients, or a target of K samples per round (:class:`~fedsample.parts.Limit`)."""
    if samples_per_round is not None:
        return (Limit("samples_per_round", samples_per_round, "samples"),)
    return () if m is None else (Limit("clients_per_round (m)", m, "clients"),)
