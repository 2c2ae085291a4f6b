"""Clustered sampling (Fraboni, Vidal, Kameni & Lorenzi, ICML 2021).

MD sampling (Li et al. 2019, the paper's baseline) draws m clients with replacement, each draw choosing
client i with probability p_i = n_i / n. Clustered sampling replaces the m identical draws by m *different*
distributions W_1..W_m over the clients, one draw from each: ``r[k, i]`` is the probability that draw k picks
client i, every row sums to 1 and every column to m p_i (the paper's conditions for unbiasedness:
sum_k r_{k,i} = m p_i). Then E[number of draws of i] = m p_i as under MD, the aggregation weight
omega_i = (draws of i) / m has the same expectation p_i, and its variance
Var(omega_i) = (1/m^2) sum_k r_{k,i}(1 - r_{k,i}) is never larger than MD's p_i (1 - p_i) / m (the paper's
variance theorem; by Cauchy-Schwarz, sum_k r_{k,i}^2 >= (m p_i)^2 / m). The exact first-order inclusion
probability, the draws being independent, is P(i in S) = 1 - prod_k (1 - r_{k,i}).

- :func:`size_distributions` is Algorithm 1 (clustering by sample size): the clients' masses m p_i are poured,
  largest first, into m distributions of mass 1 (a client may straddle consecutive distributions).
- :func:`similarity_distributions` is Algorithm 2 (clustering by model similarity): a hierarchical
  clustering of the clients' representative gradients (:func:`similarity_linkage`, Ward's method), cut into
  clusters of mass at most 1/m (:func:`mass_clusters`); the m heaviest clusters each seed one distribution
  and the clients of the other clusters fill the remaining room as in Algorithm 1
  (:func:`cluster_distributions`). The cut and the filling order are not spelled out in the paper as far as
  we remember it; we follow the authors' released code: the tree's merge heights are replaced by the merged
  clusters' total p, cut at 1/m, the kept distributions ordered by increasing mass and filled in that order by
  the other clusters, smallest cluster first. The released code shuffles the clients inside a leftover
  cluster at random; we keep them in id order, so ``r`` is a function of the inputs (every order gives a
  valid r with the same column sums).
- :func:`draw_from_distributions` draws once from each row; :func:`md_distributions` writes MD sampling in
  the same form (every row p), so :func:`aggregation_weight_variance` compares the two exactly.

All randomness comes from the ``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypedDict

import numpy as np
import torch

from fedsample import checks
from fedsample.messages import Params
from fedsample.parts import ClientSamplerCapabilities, InclusionKind, Learns, SizeNeed
from fedsample.rounds import Cohort
from fedsample.sampling import design
from fedsample.runtime.records import part_state
from fedsample.sampling.design import Sample

if TYPE_CHECKING:
    from fedsample.rounds import ReplyList, RoundContext

__all__ = [
    "ClusteredHeld",
    "PROBABILITY_KIND",
    "SERVER_LEARNS",
    "client_shares",
    "md_sampling",
    "md_distributions",
    "size_distributions",
    "similarity_linkage",
    "mass_clusters",
    "cluster_distributions",
    "similarity_distributions",
    "draw_from_distributions",
    "inclusion_from_distributions",
    "aggregation_weight_variance",
    "ClusteredClients",
    "similarity_labels",
]

Similarity = Literal["L2", "L1", "arccos"]
LinkageInput = Literal["embedded", "reference"]

#: Kind of inclusion probabilities of each design of this module.
PROBABILITY_KIND = {"md": "exact", "algorithm1": "exact", "algorithm2": "exact"}
#: What the server must learn to run each design.
SERVER_LEARNS = {
    "md": ("sizes",),
    "algorithm1": ("sizes",),
    "algorithm2": ("sizes", "gradients"),
}
#: Relative slack on the mass bound 1/m of Algorithm 2's clusters, so that clusters whose mass is exactly
#: 1/m in exact arithmetic are not split by rounding.
MASS_SLACK = 1e-9


def client_shares(sizes: np.ndarray) -> np.ndarray:
    """p_i = n_i / n, the clients' importance in FedAvg's objective (the paper's p_i). Raises
    ``ValueError`` if ``sizes`` is not a 1-D non-negative vector with a positive sum."""
    n = design.nonnegative_vector(sizes, "sizes", "clustered sampling")
    if n.sum() <= 0:
        raise ValueError("clustered sampling: sizes are all zero")
    shares: np.ndarray = n / n.sum()
    return shares


def md_sampling(sizes: np.ndarray, m: int, rng: np.random.Generator) -> Sample:
    """MD sampling: m independent draws with p_i = n_i / n (Li et al. 2019; the paper's Section 2 baseline),
    :func:`design.pps_with_replacement`. ``multiplicity`` holds the draws of each chosen client,
    ``inclusion`` 1 - (1 - p_i)^m."""
    return design.pps_with_replacement(client_shares(sizes), m, rng)


def md_distributions(sizes: np.ndarray, m: int) -> np.ndarray:
    """MD sampling written as clustered sampling: the m x N matrix whose every row is p (Section 3)."""
    m = design.check_count(m, "m", "md_distributions", minimum=1)
    return np.tile(client_shares(sizes), (m, 1))


def _pour(mass: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Lay the masses end to end on [0, total) and cut the line at ``bounds`` (row k is
    [bounds[k], bounds[k+1])): r[k, j] is the length of client j's segment inside row k. Returns the
    (len(bounds) - 1) x len(mass) matrix."""
    ends = np.cumsum(mass)
    starts = ends - mass
    lo = np.maximum(starts[None, :], bounds[:-1, None])
    hi = np.minimum(ends[None, :], bounds[1:, None])
    poured: np.ndarray = np.clip(hi - lo, 0.0, None)
    return poured


def _normalized_rows(r: np.ndarray) -> np.ndarray:
    """Rows scaled to sum exactly to 1 (they do up to rounding by construction)."""
    rows: np.ndarray = r / r.sum(axis=1, keepdims=True)
    return rows


def size_distributions(sizes: np.ndarray, m: int) -> np.ndarray:
    """Algorithm 1 (clustered sampling based on sample size): the m x N matrix r of the m distributions.

    Clients are taken in decreasing order of p_i (ties by id) and their masses m p_i are poured into
    distributions W_1, W_2, ... of mass 1 each, filling W_k before W_{k+1} (the paper's Figure 3: a client
    straddles at most two consecutive distributions, and all of them except at most one hold 0 or 1).
    Returns r with ``r[k, i]`` = the probability that draw k picks client i; rows sum to 1, column i to m p_i.
    """
    p = client_shares(sizes)
    m = design.check_count(m, "m", "size_distributions", minimum=1)
    order = np.argsort(-p, kind="stable")
    mass = m * p[order]
    bounds = np.arange(m + 1, dtype=np.float64)
    bounds[-1] = max(bounds[-1], float(mass.sum()))  # the last row takes the rounding remainder
    r = np.zeros((m, p.size))
    r[:, order] = _pour(mass, bounds)
    return _normalized_rows(r)


def similarity_linkage(
    gradients: np.ndarray,
    similarity: Similarity = "L2",
    linkage_input: LinkageInput = "embedded",
) -> np.ndarray:
    """Ward's hierarchical clustering of the clients' representative gradients (Algorithm 2's first step), as a
    scipy linkage matrix.

    ``gradients`` holds one row per client (the paper: the difference between the client's last local model
    and the global model it started from). Ward's method merges the pair of clusters that least increases the
    within-cluster sum of squares, which is defined for Euclidean geometry; ``linkage_input`` says what
    ``scipy.cluster.hierarchy.linkage(..., "ward")`` receives:

    - ``"embedded"`` (default): points or distances with a Euclidean embedding, so that Ward's recurrence is
      Ward's criterion. ``L2``: the gradients themselves. ``arccos``: the gradients scaled to unit norm, whose
      Euclidean (chord) distance 2 sin(theta/2) is an increasing function of the angle theta = arccos(cos);
      a zero gradient has no angle and is a ``ValueError``. ``L1``: the condensed matrix of square roots
      of the L1 distances, sqrt(||g_i - g_j||_1), which is Euclidean (an L1 metric is of negative type, so its
      square root embeds isometrically in L2; Schoenberg 1938, Deza & Laurent 1997, Ch. 6).
    - ``"reference"``: what the authors' released code does: the full N x N matrix of distances (``L1``: sum
      of |g_i - g_j|; ``L2``: the *squared* Euclidean distance; ``arccos``: the angle, 0 when a gradient is
      zero) handed to ``linkage`` as N observations of N coordinates, i.e. Ward on each client's row of
      distances to all clients.

    Raises ``ValueError`` for a bad ``gradients``, ``similarity`` or ``linkage_input``.
    """
    import warnings

    from scipy.cluster.hierarchy import ClusterWarning, linkage
    from scipy.spatial.distance import pdist, squareform

    def ward(observations: np.ndarray) -> np.ndarray:
        tree: np.ndarray = linkage(observations, "ward")
        return tree

    where = "similarity_linkage"
    g = design.finite_matrix(gradients, "gradients", where)
    if g.shape[0] < 2:
        raise ValueError(f"{where}: gradients needs at least 2 clients, got {g.shape[0]}")
    if similarity not in ("L2", "L1", "arccos"):
        raise ValueError(f"{where}: similarity must be 'L2', 'L1' or 'arccos', got {similarity!r}")
    if linkage_input not in ("embedded", "reference"):
        raise ValueError(f"{where}: linkage_input must be 'embedded' or 'reference', got {linkage_input!r}")
    norms = np.linalg.norm(g, axis=1)
    if linkage_input == "embedded":
        if similarity == "L2":
            return ward(g)
        if similarity == "arccos":
            if np.any(norms == 0):
                raise ValueError(
                    f"{where}: gradient of client {int(np.flatnonzero(norms == 0)[0])} is zero; "
                    "its arccos distance is undefined"
                )
            return ward(g / norms[:, None])
        return ward(np.sqrt(pdist(g, "cityblock")))
    if similarity == "L1":
        distances = squareform(pdist(g, "cityblock"))
    elif similarity == "L2":
        distances = squareform(pdist(g, "sqeuclidean"))
    else:
        safe = np.where(norms > 0, norms, 1.0)
        cosine = np.clip((g @ g.T) / np.outer(safe, safe), -1.0, 1.0)
        distances = np.arccos(cosine)
        zero = norms == 0
        distances[zero, :] = 0.0
        distances[:, zero] = 0.0
        np.fill_diagonal(distances, 0.0)
    with warnings.catch_warnings():  # scipy rightly suspects a square distance matrix: that is this mode's point
        warnings.simplefilter("ignore", ClusterWarning)
        return ward(distances)


def mass_clusters(Z: np.ndarray, p: np.ndarray, m: int) -> np.ndarray:
    """Cut the tree ``Z`` into the largest subtrees whose total p is at most 1/m (Algorithm 2's cut; the
    rule of the authors' code): each merge's height becomes the p-mass of the merged cluster (monotone up the
    tree) and the tree is cut at 1/m. A single client with p_i > 1/m stays a cluster of its own. Returns a
    cluster label in 0..K-1 per client."""
    from scipy.cluster.hierarchy import fcluster

    where = "mass_clusters"
    p = design.nonnegative_vector(p, "p", where)
    m = design.check_count(m, "m", where, minimum=1)
    Z = np.array(Z, dtype=np.float64)
    N = p.size
    if Z.shape != (N - 1, 4):
        raise ValueError(f"{where}: Z must be a linkage matrix for {N} clients, got shape {Z.shape}")
    mass = np.concatenate([p, np.zeros(N - 1)])
    for row in range(N - 1):
        mass[N + row] = mass[int(Z[row, 0])] + mass[int(Z[row, 1])]
        Z[row, 2] = mass[N + row]
    labels = fcluster(Z, t=(1.0 / m) * (1.0 + MASS_SLACK), criterion="distance")
    return np.unique(labels, return_inverse=True)[1].astype(np.int64)


def cluster_distributions(labels: np.ndarray, sizes: np.ndarray, m: int) -> np.ndarray:
    """The m distributions of Algorithm 2 from the clusters ``labels`` (as the authors' code builds them).

    The m heaviest clusters (by total p; ties by their smallest client id) each seed one distribution with
    their clients' masses m p_i (at most 1 by the cut; a lone client with m p_i > 1 fills its row and its
    excess joins the pour). The distributions are ordered by increasing seeded mass, and the remaining room
    is filled, distribution by distribution, by the excess masses (largest first) and then by the clients
    of the other clusters, smallest cluster first and in id order inside a cluster, each client possibly
    straddling two distributions. Returns r (m x N): rows sum to 1, column i to m p_i.
    """
    where = "cluster_distributions"
    p = client_shares(sizes)
    m = design.check_count(m, "m", where, minimum=1)
    labels = np.asarray(labels)
    if labels.shape != p.shape or labels.dtype.kind not in "iu":
        raise ValueError(f"{where}: labels must be one integer per client ({p.size}), got {labels!r}")
    K = int(labels.max()) + 1
    cluster_mass = np.bincount(labels, weights=p, minlength=K)
    first_member = np.full(K, p.size)
    np.minimum.at(first_member, labels, np.arange(p.size))
    by_mass = np.lexsort((first_member, -cluster_mass))  # heaviest first, ties by smallest id
    kept = by_mass[:m]
    kept = kept[np.argsort(cluster_mass[kept], kind="stable")]  # rows by increasing mass
    leftover = by_mass[m:][::-1]  # smallest first
    r = np.zeros((m, p.size))
    excess = np.zeros(p.size)  # beyond 1: only a lone client with m p_i > 1
    for row, c in enumerate(kept):
        members = np.flatnonzero(labels == c)
        r[row, members] = np.minimum(m * p[members], 1.0)
        excess[members] = m * p[members] - r[row, members]
    excess_ids = np.flatnonzero(excess > 0)
    excess_ids = excess_ids[np.argsort(-excess[excess_ids], kind="stable")]
    pour_ids = np.concatenate([excess_ids] + [np.flatnonzero(labels == c) for c in leftover]).astype(np.int64)
    pour_mass = np.where(np.isin(pour_ids, excess_ids), excess[pour_ids], m * p[pour_ids])
    room = np.maximum(1.0 - r.sum(axis=1), 0.0)
    bounds = np.concatenate([[0.0], np.cumsum(room)])
    bounds[-1] = max(bounds[-1], float(pour_mass.sum()))
    poured = _pour(pour_mass, bounds)
    np.add.at(r.T, pour_ids, poured.T)
    return _normalized_rows(r)


def similarity_distributions(
    sizes: np.ndarray,
    gradients: np.ndarray,
    m: int,
    similarity: Similarity = "L2",
    linkage_input: LinkageInput = "embedded",
) -> np.ndarray:
    """Algorithm 2 (clustered sampling based on model similarity): :func:`similarity_linkage`, then
    :func:`mass_clusters` at 1/m, then :func:`cluster_distributions`. Returns r (m x N)."""
    p = client_shares(sizes)
    g = design.finite_matrix(gradients, "gradients", "similarity_distributions")
    if g.shape[0] != p.size:
        raise ValueError(f"similarity_distributions: gradients has {g.shape[0]} rows but sizes has {p.size} clients")
    if p.size == 1:
        return np.ones((design.check_count(m, "m", "similarity_distributions", minimum=1), 1))
    Z = similarity_linkage(g, similarity, linkage_input)
    return cluster_distributions(mass_clusters(Z, p, m), p, m)


def _check_distributions(r: object, where: str) -> np.ndarray:
    arr = design.finite_matrix(r, "r", where)
    if np.any(arr < 0):
        raise ValueError(f"{where}: r has negative entries")
    sums = arr.sum(axis=1)
    if np.any(np.abs(sums - 1.0) > design.SUM_TOLERANCE):
        bad = int(np.flatnonzero(np.abs(sums - 1.0) > design.SUM_TOLERANCE)[0])
        raise ValueError(f"{where}: every row of r must sum to 1, row {bad} sums to {sums[bad]!r}")
    return arr


def draw_from_distributions(r: np.ndarray, rng: np.random.Generator) -> Sample:
    """One independent draw from each row of ``r`` (clustered sampling's selection, Section 3). Returns the
    distinct clients drawn (sorted), how many rows drew each (``multiplicity``; the aggregation weight is
    multiplicity / m) and their exact inclusion probabilities 1 - prod_k (1 - r_{k,i})."""
    where = "draw_from_distributions"
    rng = design.check_rng(rng, where)
    r = _check_distributions(r, where)
    cdf = np.cumsum(r, axis=1)
    u = rng.random(r.shape[0]) * cdf[:, -1]
    draws = (cdf <= u[:, None]).sum(axis=1)
    last_positive = r.shape[1] - 1 - np.argmax(r[:, ::-1] > 0, axis=1)
    draws = np.minimum(draws, last_positive)  # rounding guard: never past a row's last positive entry
    ids, counts = np.unique(draws, return_counts=True)
    return Sample(ids, inclusion_from_distributions(r)[ids], counts)


def inclusion_from_distributions(r: np.ndarray) -> np.ndarray:
    """P(i in S) = 1 - prod_k (1 - r_{k,i}) for independent draws from the rows of ``r`` (per client)."""
    r = _check_distributions(r, "inclusion_from_distributions")
    with np.errstate(divide="ignore"):  # r = 1: log(0) = -inf, inclusion exactly 1
        inclusion: np.ndarray = -np.expm1(np.log1p(-np.minimum(r, 1.0)).sum(axis=0))
        return inclusion


def aggregation_weight_variance(r: np.ndarray) -> np.ndarray:
    """Var(omega_i) for the aggregation weight omega_i = (draws of i) / m under independent draws from the
    rows of ``r``: (1/m^2) sum_k r_{k,i} (1 - r_{k,i}). With
    ``md_distributions(sizes, m)`` it is MD sampling's p_i (1 - p_i) / m; the paper proves clustered sampling's
    is never larger, the expectation p_i being the same."""
    r = _check_distributions(r, "aggregation_weight_variance")
    variance: np.ndarray = (r * (1.0 - r)).sum(axis=0) / r.shape[0] ** 2
    return variance


# --- the client sampler ------------------------------------------------------------------------------------------

Algorithm = Literal["size", "similarity"]
STATE_KEY = "clustered"


class ClusteredHeld(TypedDict):
    """What Algorithm 2's server holds between rounds (under :data:`STATE_KEY`): each client's latest update,
    flattened (float32 rows, 0 until it participates), and whether it has participated (``seen``)."""

    updates: np.ndarray
    seen: np.ndarray


def similarity_labels(updates: np.ndarray, seen: np.ndarray, p: np.ndarray, m: int, similarity: Similarity = "arccos",
                      linkage_input: LinkageInput = "embedded") -> np.ndarray:
    """Algorithm 2's clusters when only some clients have a representative update (``seen``): Ward's linkage of the
    seen clients' updates (:func:`similarity_linkage`) cut at mass 1/m (:func:`mass_clusters`), and every client
    without one a cluster of its own (of mass p_i). Before any client has taken part every client is its own
    cluster; :func:`cluster_distributions` then seeds the m rows with the m largest clients and pours the others."""
    N = len(p)
    labels = np.arange(N, dtype=np.int64)
    members = np.flatnonzero(seen)
    if len(members) < 2:
        return labels
    clustered = mass_clusters(similarity_linkage(updates[members], similarity, linkage_input), p[members], m)
    labels[members] = clustered
    alone = np.flatnonzero(~seen)
    labels[alone] = clustered.max() + 1 + np.arange(len(alone))
    return labels


def _flat(update: Params) -> np.ndarray:
    """An update as one float32 vector (the parameters in their order)."""
    return torch.cat([v.detach().reshape(-1).float().cpu() for v in update.values()]).numpy()


@dataclass(frozen=True)
@checks.constrained(m=checks.Param(checks.COUNT, label="m (draws per round)"))
class ClusteredClients:
    """Clustered sampling (Fraboni, Vidal, Kameni & Lorenzi, ICML 2021): m distributions r_k over the clients whose
    columns sum to m p_i (p_i = n_i / n, every client's exact size), one independent draw from each; a client drawn
    twice counts twice. ``algorithm="size"`` is Algorithm 1 (:func:`size_distributions`), ``"similarity"`` Algorithm 2
    (:func:`similarity_labels` and :func:`cluster_distributions`). Exact: pi_i = 1 - prod_k (1 - r_{k,i}), and the
    cohort carries the multiplicities and E[draws] = m p_i, so the paper's aggregation omega_i = draws / m is
    ``WeightedMean("uniform")`` (which ``fedavg(clients=ClusteredClients(...))`` picks: ``draws_carry_sizes``) and
    ``WeightedMean("size_inverse_inclusion")`` the same weights p_i m_i / (m p_i).

    Algorithm 2's input: each client's latest local update Delta_i = w_global - w_i as the server received it (the
    whole parameter vector), kept in the server-held ``ctx.state`` from the cohort's valid replies (:meth:`observe`:
    so a secure sum is refused) and saved with checkpoints; ``similarity`` ("arccos", "L2" or "L1") and
    ``linkage_input`` say how Ward's linkage receives them (:func:`similarity_linkage`). A client that has not yet
    taken part (or whose kept update is zero, which has no angle) is a cluster of its own.
    """

    m: int = 10
    algorithm: Algorithm = "size"
    similarity: Similarity = "arccos"
    linkage_input: LinkageInput = "embedded"

    @property
    def capabilities(self) -> ClientSamplerCapabilities:
        """Exact pi from every client's exact size, draws in proportion to the sizes; Algorithm 2 keeps each
        participant's update."""
        similarity = self.algorithm == "similarity"
        return ClientSamplerCapabilities(
            inclusion_kind=InclusionKind.EXACT, server_learns=(Learns.SIZES, Learns.GRADIENTS) if similarity else (Learns.SIZES,),
            needs_sizes=SizeNeed.EXACT_ALL, draws_carry_sizes=True, reads_replies=("update",) if similarity else ())

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        """sum_i pi_i of Algorithm 1 (for Algorithm 2 the same figure, approximately: its rows depend on the updates)."""
        from fedsample.sampling import cohort_size

        return float(inclusion_from_distributions(size_distributions(cohort_size.sizes_given(sizes, self), self.m)).sum())

    def shares(self, ctx: "RoundContext") -> np.ndarray:
        """p_i = n_i / n over every client (0 for a client whose size report failed)."""
        sizes = ctx.require_sizes(exact=True)
        n = np.zeros(ctx.num_clients)
        n[np.asarray(sizes.ids, dtype=np.int64)] = sizes.reports
        return client_shares(n)

    def distributions(self, ctx: "RoundContext", p: np.ndarray) -> np.ndarray:
        """The m x N matrix r of this round (Algorithm 1, or Algorithm 2 from the kept updates)."""
        if self.algorithm == "size":
            return size_distributions(p, self.m)
        kept = part_state(ctx.state, STATE_KEY, ClusteredHeld)
        if kept is None or len(kept["seen"]) != len(p):
            labels = np.arange(len(p), dtype=np.int64)
        else:
            seen = kept["seen"] & (np.linalg.norm(kept["updates"], axis=1) > 0 if self.similarity == "arccos" else True)
            labels = similarity_labels(kept["updates"], seen, p, self.m, self.similarity, self.linkage_input)
            ctx.log["clients_with_update"] = int(np.count_nonzero(kept["seen"]))
        ctx.log["clusters"] = int(labels.max()) + 1
        return cluster_distributions(labels, p, self.m)

    def select(self, ctx: "RoundContext") -> Cohort:
        p = self.shares(ctx)
        sample = draw_from_distributions(self.distributions(ctx, p), ctx.rng("clients"))
        return Cohort.from_sample(sample, ctx.num_clients, expected_draws=self.m * p[sample.ids])

    def observe(self, ctx: "RoundContext", cohort: Cohort, replies: "ReplyList") -> None:
        """Algorithm 2: keep each participant's update (its latest representative gradient)."""
        if self.algorithm != "similarity":
            return
        positions = replies.received_positions()
        if len(positions) == 0:
            return
        flat = {int(cohort.ids[i]): _flat(replies.report(int(i)).update) for i in positions.tolist()}
        kept = part_state(ctx.state, STATE_KEY, ClusteredHeld)
        dim = len(next(iter(flat.values())))
        if kept is None or kept["updates"].shape != (ctx.num_clients, dim):
            kept = ctx.state[STATE_KEY] = ClusteredHeld(updates=np.zeros((ctx.num_clients, dim), dtype=np.float32),
                                                       seen=np.zeros(ctx.num_clients, dtype=bool))
        for k, vector in flat.items():
            kept["updates"][k] = vector
            kept["seen"][k] = True
