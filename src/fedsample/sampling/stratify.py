"""FedSTS / FedSTaS client sampling: strata from compressed gradients, Neyman allocation, and importance
sampling inside strata (Gao et al. 2024; Slessor et al. 2025, Algorithms 1 and 2).

Each round the server probes every client for its compressed gradient X_k (:mod:`fedsample.sampling.compression`),
clusters the X_k into H strata with k-means (Algorithm 1; recomputed every ``recompute_every`` rounds),
allocates m_h = m * N_h * S_h / sum_h N_h * S_h (Algorithm 2, Neyman 1934) and, independently in each
stratum, draws m_h clients without replacement with probability proportional to ||X_k|| (Algorithm 2,
p_t^k = ||IS(G_t^k)|| / sum ||IS(G_t^k)||). The draw uses :func:`fedsample.sampling.design.stratified`,
so every chosen client carries its exact inclusion probability pi_k (the Cohort's ``inclusion``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypedDict

import numpy as np

from fedsample.messages import ProbeRequest
from fedsample.parts import ClientSamplerCapabilities, InclusionKind, Learns, Limit, SizeNeed
from fedsample.sampling.compression import COMPRESSION, DIM, Compression
from fedsample.rng import SERVER, generator
from fedsample import checks
from fedsample.sampling import adaptive, cohort_size, design
from fedsample.sampling.clamp import clamped
from fedsample.rounds import Cohort, probe_reports
from fedsample.runtime.records import part_state

if TYPE_CHECKING:
    from fedsample.rounds import RoundContext

__all__ = ["STRATA", "Spread", "StrataHeld", "StratifiedClients", "Within", "kmeans_strata", "selection_weights", "stratum_spread"]

Spread = Literal["std", "pairwise"]
"""How a stratum's spread is measured for Neyman allocation."""
#: How clients are drawn within a stratum: proportional to their gradient norm, or uniformly.
Within = Literal["norm", "uniform"]

#: k-means restarts for the stratification (scikit-learn's ``n_init``).
KMEANS_RESTARTS = 4
#: Norms below this fraction of the largest norm are raised to it, so every client keeps a positive
#: selection probability (the inclusion probabilities stay exact for the weights actually used).
NORM_FLOOR = 1e-9


def kmeans_strata(vectors: np.ndarray, H: int, rng: np.random.Generator) -> np.ndarray:
    """Algorithm 1 (ClientStratification): k-means of the clients' compressed gradients into ``H``
    strata; returns each client's stratum label in 0..H-1. scikit-learn's KMeans with its random state
    drawn from ``rng``. Duplicate vectors can leave a stratum empty (its N_h is then 0)."""
    import warnings

    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    X = _check_vectors(vectors)
    H = _check_strata_count(H, X.shape[0])
    if H == 1:
        return np.zeros(X.shape[0], dtype=np.int64)
    model = KMeans(n_clusters=H, n_init=KMEANS_RESTARTS, random_state=int(rng.integers(2**31 - 1)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # fewer distinct vectors than H
        labels: np.ndarray = model.fit_predict(X).astype(np.int64)
        return labels


def stratum_spread(vectors: np.ndarray, labels: np.ndarray, H: int, how: Spread = "std") -> np.ndarray:
    """S_h for each of the ``H`` strata (0 for strata with fewer than two clients).

    - ``std`` (the papers' S_h, a standard deviation): sqrt(sum_{k in h} ||X_k - mean_h||^2 / (N_h - 1)),
      the square root of the summed coordinate variances of the compressed vectors;
    - ``pairwise`` (what the authors' code computed): the mean Euclidean distance over the distinct pairs
      of clients in the stratum.
    """
    checks.check("how", how, checks.Options("std", "pairwise"), owner="stratum_spread")
    X = _check_vectors(vectors)
    labels = np.asarray(labels, dtype=np.int64)
    if labels.shape != (X.shape[0],):
        raise ValueError(f"stratum_spread: {labels.size} labels for {X.shape[0]} vectors")
    S = np.zeros(H)
    for h in range(H):
        members = X[labels == h]
        if members.shape[0] < 2:
            continue
        if how == "std":
            S[h] = np.sqrt(np.sum((members - members.mean(axis=0)) ** 2) / (members.shape[0] - 1))
        else:
            from scipy.spatial.distance import pdist

            S[h] = float(np.mean(pdist(members)))
    return S


def selection_weights(vectors: np.ndarray, within: Within) -> np.ndarray | None:
    """Within-stratum selection weights: ||X_k|| (Algorithm 2), floored at ``NORM_FLOOR`` times the
    largest norm (all ones if every norm is 0); None for simple random sampling inside strata."""
    if within == "uniform":
        return None
    norms = np.linalg.norm(_check_vectors(vectors), axis=1)
    top = float(norms.max())
    weights: np.ndarray = np.maximum(norms, NORM_FLOOR * top) if top > 0 else np.ones_like(norms)
    return weights


#: What FedSTS does without a lost probe (the round record's ``sampler_lost_probes_instead``).
LOST_PROBE = ("stratified and drew only the clients whose probe arrived (their pi_k times the share whose probe "
              "arrived)")

#: The number of strata H: an integer >= 1.
STRATA = checks.Param(checks.COUNT, label="number of strata H")


class StrataHeld(TypedDict):
    """The strata the server keeps between clusterings (under ``"strata"``): one label per client (-1: its probe
    was lost then) and the round they were computed."""

    labels: np.ndarray
    round: int


@dataclass(frozen=True)
@checks.constrained(
    H=STRATA, dim=DIM, compression=COMPRESSION, recompute_every=checks.COUNT, samples_per_round=[checks.COUNT, None],
)
class StratifiedClients:
    """FedSTS's client sampler (Slessor et al. 2025, Algorithms 1-2; Gao et al. 2024).

    ``H`` strata, ``m`` clients per round (m >= H: Neyman allocation gives every non-empty stratum at
    least one client), compressed dimension ``dim`` (d'), ``compression`` "squeeze" or "projection",
    strata re-clustered every ``recompute_every`` rounds (1 in the paper; between recomputations the
    labels are kept in ``ctx.state`` while norms and S_h are refreshed from this round's probes),
    ``spread`` "std" (paper) or "pairwise" (authors' code), ``within`` "norm" (pi proportional to
    ||X_k||, paper) or "uniform" (simple random sampling in each stratum). ``samples_per_round=K``
    instead of m: m = max(H, K / mean(n_k)) from every client's exact reported size, rounded at random
    (:mod:`fedsample.sampling.cohort_size`; K samples in expectation under equal-probability selection,
    approximately under gradient-norm selection).

    The returned Cohort has ``strata`` (each chosen client's stratum) and ``info`` with
    ``stratum_sizes`` (N_h) and ``allocation`` (m_h), which :class:`~fedsample.training.aggregate.StratifiedMean`
    uses.
    """

    H: int = 10
    m: int | None = 10  # None with samples_per_round
    dim: int = 9
    compression: Compression = "squeeze"
    recompute_every: int = 1
    spread: Spread = "std"
    within: Within = "norm"
    samples_per_round: int | None = None

    def __post_init__(self) -> None:
        if self.samples_per_round is None and not checks.integers(self.H).satisfied_by(self.m):
            checks.fail("m", self.m, f"an integer >= H = {self.H} (one per stratum)", "StratifiedClients")

    @property
    def capabilities(self) -> ClientSamplerCapabilities:
        """Exact pi; its cohorts carry strata, stratum sizes and the allocation; the server learns every client's
        probe each round (its loss, gradient norm and compressed gradient), and every size with ``samples_per_round``;
        H strata of clients, and m clients or K samples per round."""
        sized = self.samples_per_round is not None
        if self.samples_per_round is not None:
            count = Limit("samples_per_round", self.samples_per_round, "samples")
        else:
            assert self.m is not None  # __post_init__: m is set when samples_per_round is not
            count = Limit("clients_per_round (m)", self.m, "clients")
        probed = (Learns.LOSSES, Learns.GRADIENT_NORMS, Learns.COMPRESSED_GRADIENTS)
        return ClientSamplerCapabilities(
            inclusion_kind=InclusionKind.EXACT, server_learns=probed + ((Learns.SIZES,) if sized else ()), stratified=True,
            needs_sizes=SizeNeed.EXACT_ALL if sized else SizeNeed.NONE, limits=(Limit("H (strata)", self.H, "clients"), count))

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        """m, or with ``samples_per_round`` max(H, K / mean(n_k)) from ``sizes`` (at most N)."""
        if self.samples_per_round is None:
            assert self.m is not None  # __post_init__: m is checked when samples_per_round is not given
            return float(min(self.m, num_clients))
        expected = cohort_size.uniform_count(cohort_size.sizes_given(sizes, self), self.samples_per_round)
        return float(min(num_clients, max(self.H, expected)))

    def clients_per_round(self, ctx: "RoundContext") -> int:
        """m, or the count derived from the reported sizes for ``samples_per_round``: K / mean(n_k), at least H (one
        client per stratum) and at most N, randomly rounded; a round whose count had to move records it (``clamped``)."""
        if self.samples_per_round is None:
            assert self.m is not None  # __post_init__: m is checked when samples_per_round is not given
            return self.m
        asked = self.samples_per_round / cohort_size.mean_size(ctx.require_sizes(exact=True).reports)
        expected = clamped(ctx.log, "clients_per_round", asked, self.H, ctx.num_clients)
        return cohort_size.randomly_rounded(expected, ctx.rng("cohort_size"))

    def probe(self, ctx: "RoundContext") -> tuple[np.ndarray, np.ndarray]:
        """The ids of the clients whose probe arrived (every client without faults) and their compressed gradients
        at the current global parameters (one row each); the lost ones are named in the round record
        (:func:`~fedsample.sampling.adaptive.arrived_or_failed`)."""
        ids = np.arange(ctx.num_clients)
        request = ProbeRequest(
            params=ctx.params, compression=self.compression, dim=self.dim, projection_seed=projection_seed(ctx.seed), partial=True,
        )
        reports = probe_reports(ctx.federation.run(ids, request, ctx.round))
        arrived = adaptive.arrived_or_failed(ctx, reports, LOST_PROBE)  # arrived: the ProbeReports
        return ids[arrived], np.stack([np.asarray(r.compressed, dtype=np.float64) for r in adaptive.arrived_reports(reports)])

    def strata(self, ctx: "RoundContext", vectors: np.ndarray, ids: np.ndarray, H: int) -> np.ndarray:
        """Stratum labels of the clients ``ids`` (rows of ``vectors``): re-clustered into ``H`` strata when due
        (every ``recompute_every`` rounds, or when one of them was lost at the last clustering), else kept from
        state (one label per client, -1 for a client whose probe was lost then)."""
        N, kept = ctx.num_clients, part_state(ctx.state, "strata", StrataHeld)
        due = (kept is None or len(kept["labels"]) != N or ctx.round - kept["round"] >= self.recompute_every
               or bool(np.any(np.asarray(kept["labels"])[ids] < 0)))
        if due or kept is None:
            labels = np.full(N, -1, dtype=np.int64)
            labels[ids] = kmeans_strata(vectors, H, ctx.rng("strata"))
            ctx.state["strata"] = StrataHeld(labels=labels, round=ctx.round)
            chosen: np.ndarray = labels[ids]
            return chosen
        chosen = np.asarray(kept["labels"], dtype=np.int64)[ids]
        return chosen

    def select(self, ctx: "RoundContext") -> Cohort:
        """The design (strata, Neyman allocation, draw) over the clients whose probe arrived, P (every client without
        faults); their pi_k times |P| / N (:func:`~fedsample.sampling.adaptive.with_probe_rate`), so that the
        Horvitz-Thompson estimate stays unbiased for the mean over every client when probes are lost at random
        (the stratum sizes N_h the ``paper`` aggregation reads are scaled likewise to the population's)."""
        N = ctx.num_clients
        _check_strata_count(self.H, N)
        m = self.clients_per_round(ctx)
        if m > N:
            raise ValueError(f"clients per round m = {m} exceeds the number of clients N = {N}")
        ids, vectors = self.probe(ctx)
        H, m = min(self.H, len(ids)), min(m, len(ids))  # both as asked unless probes were lost
        labels = self.strata(ctx, vectors, ids, H)
        N_h = np.bincount(labels, minlength=self.H)
        S_h = stratum_spread(vectors, labels, self.H, self.spread)
        m_h = design.allocate_neyman(N_h, S_h, m)
        sample = design.stratified(labels, m_h, ctx.rng("clients"), weights=selection_weights(vectors, self.within))
        ctx.log["strata_nonempty"] = int(np.count_nonzero(N_h))
        rate = len(ids) / N
        sample = adaptive.with_probe_rate(design.Sample(ids[sample.ids], sample.inclusion, sample.multiplicity), rate)
        return Cohort.from_sample(
            sample, N, strata=labels[np.searchsorted(ids, sample.ids)], info={"stratum_sizes": N_h if rate == 1.0 else N_h / rate, "allocation": m_h}
        )


def projection_seed(seed: int) -> int:
    """The seed of the shared projection matrix: derived from the run seed only, so the projected
    coordinates mean the same thing in every round (strata kept between rounds stay comparable)."""
    return int(generator(seed, 0, SERVER, "projection").integers(2**62))


def _check_strata_count(H: object, N: int | None = None) -> int:
    checks.check("H", H, STRATA)
    assert checks.is_integer(H)  # STRATA admits integers alone
    count = int(H)
    if N is not None and count > N:
        raise ValueError(f"number of strata H = {count} exceeds the number of clients N = {N}")
    return count


def _check_vectors(vectors: np.ndarray) -> np.ndarray:
    X = np.asarray(vectors, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"compressed gradients must be a non-empty 2-D array (clients x d'), got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("compressed gradients contain NaN or infinite values")
    return X
