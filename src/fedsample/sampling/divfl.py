"""DivFL: diverse client selection by submodular maximization (Balakrishnan, Li, Zhou, Himayat, Smith &
Bilmes, "Diverse client selection for federated learning via submodular maximization", ICLR 2022).

DivFL picks the m clients whose gradients best represent all clients' gradients: it minimizes the
facility-location cost G(S) = sum_i min_{j in S} ||g_i - g_j|| (each client represented by its nearest
selected client), equivalently maximizes the submodular sum_i max_{j in S} sim(g_i, g_j) with
sim = C - distance, and does so greedily: S grows by the client that lowers G the most, m times
(:func:`facility_location_greedy`; for the empty set, min over S is read as a constant larger than every
distance, so the first pick is the client with the smallest total distance to all others). The gradients are,
as in the paper, the clients' latest updates (stale for clients not selected recently). Public
implementations also offer a stochastic-greedy variant (each step searches a random subset of the
clients); only the plain greedy is implemented here.

The greedy selection is deterministic given the gradients: inclusion probabilities 0 or 1. The relaxation
behind DivFL approximates the full gradient by sum_{j in S} gamma_j g_j, gamma_j the number of clients whose
nearest selected client is j (:func:`represented_by`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, TypedDict

import numpy as np

from fedsample import checks
from fedsample.messages import ProbeRequest
from fedsample.parts import ClientSamplerCapabilities, InclusionKind, Learns
from fedsample.rounds import Cohort
from fedsample.sampling import adaptive, design
from fedsample.sampling.design import Sample

if TYPE_CHECKING:
    from fedsample.rounds import RoundContext

__all__ = [
    "DivFLClients",
    "DivFLHeld",
    "PROBABILITY_KIND",
    "SERVER_LEARNS",
    "dissimilarity",
    "facility_location_greedy",
    "represented_by",
    "divfl_select",
]

Metric = Literal["l2", "cosine"]

#: Kind of inclusion probabilities.
PROBABILITY_KIND = {"divfl": "degenerate"}
#: What the server must learn: every client's (latest) gradient or update.
SERVER_LEARNS = {"divfl": ("gradients",)}


def dissimilarity(gradients: np.ndarray, metric: Metric = "l2", rows: np.ndarray | None = None) -> np.ndarray:
    """The N x N matrix of ``l2`` distances ||g_i - g_j|| (the paper's) or ``cosine`` dissimilarities
    1 - cos(g_i, g_j) between the clients' gradients (one row per client); with ``rows``, only those rows of it
    (the clients whose gradients changed)."""
    from scipy.spatial.distance import cdist

    where = "dissimilarity"
    G = design.finite_matrix(gradients, "gradients", where)
    A = G if rows is None else G[np.asarray(rows, dtype=np.int64)]
    if metric == "l2":
        distances: np.ndarray = cdist(A, G, "euclidean")
        return distances
    if metric == "cosine":
        if np.any(np.linalg.norm(G, axis=1) == 0):
            raise ValueError(f"{where}: a zero gradient has no cosine dissimilarity")
        distances = np.clip(cdist(A, G, "cosine"), 0.0, 2.0)
        return distances
    raise ValueError(f"{where}: metric must be 'l2' or 'cosine', got {metric!r}")


def facility_location_greedy(distances: np.ndarray, m: int) -> np.ndarray:
    """Greedy minimization of G(S) = sum_i min_{j in S} D_ij over |S| = m: each step adds the j minimizing
    G(S + {j}) (ties to the smaller id). Returns the chosen ids, sorted."""
    where = "facility_location_greedy"
    D = design.finite_matrix(distances, "distances", where)
    N = D.shape[0]
    if D.shape != (N, N) or np.any(D < 0):
        raise ValueError(f"{where}: distances must be a square non-negative matrix, got shape {D.shape}")
    m = design.check_count(m, "m", where, minimum=1)
    if m > N:
        raise ValueError(f"{where}: m = {m} exceeds the number of clients ({N})")
    nearest = np.full(N, np.inf)
    free = np.ones(N, dtype=bool)
    for _ in range(m):
        cost = np.minimum(nearest[:, None], D).sum(axis=0)
        cost[~free] = np.inf
        j = int(np.argmin(cost))
        free[j] = False
        nearest = np.minimum(nearest, D[:, j])
    return np.flatnonzero(~free).astype(np.int64)


def represented_by(distances: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """gamma_j for each selected client j (in the order of ``ids``): how many clients have j as their
    nearest selected client (ties to the first of ``ids``); the gammas sum to N."""
    D = design.finite_matrix(distances, "distances", "represented_by")
    chosen = np.asarray(ids, dtype=np.int64)
    if chosen.ndim != 1 or chosen.size == 0:
        raise ValueError("represented_by: ids must be a non-empty 1-D array")
    return np.bincount(np.argmin(D[:, chosen], axis=1), minlength=chosen.size).astype(np.int64)


def divfl_select(gradients: np.ndarray, m: int, metric: Metric = "l2") -> Sample:
    """DivFL's selection: :func:`facility_location_greedy` on :func:`dissimilarity`. Deterministic
    (``inclusion`` 1 for the chosen, 0 for the others)."""
    ids = facility_location_greedy(dissimilarity(gradients, metric), m)
    return Sample(ids, np.ones(ids.size), np.ones(ids.size, dtype=np.int64))


# --- the client sampler ----------------------------------------------------------------------------------------

#: What DivFL does without a lost gradient probe (the round record's ``sampler_lost_probes_instead``).
LOST_PROBE = ("chose among the clients whose gradient it holds (a lost refresh keeps the stale gradient; a client "
              "never heard from is probed again next round)")


class DivFLHeld(TypedDict, total=False):
    """What DivFL's server holds between rounds: each client's last probed full-data gradient (float32 rows, zero
    where none arrived yet), whether it holds one (``known``), and their pairwise dissimilarities (the facility
    location's distances)."""

    gradients: np.ndarray
    known: np.ndarray
    distances: np.ndarray


@dataclass(frozen=True)
@checks.constrained(m=checks.COUNT)
class DivFLClients:
    """DivFL (Balakrishnan et al., ICLR 2022) as a client sampler: the m clients chosen by greedy facility location
    (:func:`facility_location_greedy`) on the dissimilarities (``metric``) of the clients' latest gradients.

    The gradients: every client's full-data gradient at the global model, probed from all N clients the first round
    the sampler runs; afterwards each round's chosen clients send their gradient at the global model they receive
    (a gradient probe of the m chosen, as the authors' code has each chosen client compute its gradient at the
    received model and send it with its update), and the others keep their stale ones. The server holds the N
    gradients and their dissimilarity matrix (rows of the refreshed clients recomputed), in the strategy state.

    The choice is deterministic given the gradients: pi in {0, 1}, no unbiased estimator exists (round record:
    ``inclusion: degenerate``), and aggregators that divide by pi are refused. The server learns every client's
    gradient (the full parameter vector: 4 bytes per parameter and client in the probe's reply).

    Under faults: a client whose first probe was lost has no gradient at the server and is not chosen until a probe
    of it (asked again each round) arrives; a chosen client whose refresh was lost keeps its stale gradient (the
    round record names the lost probes and says so, ``sampler_lost_probes_instead``)."""

    m: int = 10
    metric: Metric = "l2"
    capabilities: ClassVar[ClientSamplerCapabilities] = ClientSamplerCapabilities(
        inclusion_kind=InclusionKind.DEGENERATE, server_learns=tuple(map(Learns, SERVER_LEARNS["divfl"])))

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        return float(min(self.m, num_clients))

    def select(self, ctx: "RoundContext") -> Cohort:
        N = ctx.num_clients
        if self.m > N:
            checks.fail("m", self.m, f"at most the number of clients ({N})", "DivFLClients")
        state = adaptive.sampler_state(ctx, DivFLHeld)
        first = "gradients" not in state
        known = state.setdefault("known", np.zeros(N, dtype=bool) if first else np.ones(N, dtype=bool))
        if not known.all():  # the first round, or clients whose first probe was lost
            self.refresh(ctx, state, np.flatnonzero(~known))
        held = np.flatnonzero(known)  # a client whose gradient the server never received cannot be chosen
        ids = held[facility_location_greedy(state["distances"][np.ix_(held, held)], min(self.m, held.size))]
        if not first:  # the chosen clients' gradients at this round's model
            self.refresh(ctx, state, ids)
        return Cohort(ids, np.ones(len(ids)), N, info={"inclusion_kind": "degenerate"})

    def refresh(self, ctx: "RoundContext", state: DivFLHeld, ids: np.ndarray) -> None:
        """Probe the full-data gradients of ``ids`` at the global model (one row each, float32 as sent) into the
        server's gradients and their dissimilarities (the refreshed rows recomputed); a client whose probe was lost
        keeps its stale gradient, or stays without one (``state["known"]``)."""
        request = ProbeRequest(params=ctx.params, gradient=True)
        replies, arrived = adaptive.probe_partial(ctx, ids, request, LOST_PROBE, needs_one=not state["known"].any())
        if not arrived.any():
            return
        got = ids[arrived]
        rows = np.stack([np.asarray(r.gradient, dtype=np.float32) for r in adaptive.arrived_reports(replies)])
        fresh = "gradients" not in state
        if fresh:
            state["gradients"] = np.zeros((ctx.num_clients, rows.shape[1]), dtype=np.float32)
        state["gradients"][got] = rows
        state["known"][got] = True
        if fresh:
            state["distances"] = dissimilarity(state["gradients"], self.metric)
            return
        distances = dissimilarity(state["gradients"], self.metric, rows=got)
        state["distances"][got] = distances
        state["distances"][:, got] = distances.T
