"""FedCor: correlation-based active client selection (Tang, Wang, Chen, Li & Shen, "FedCor: Correlation-based
active client selection strategy for heterogeneous federated learning", CVPR 2022; arXiv 2103.13822).

FedCor models the clients' loss changes from one round to the next, Delta L in R^N (one entry per client), as
a Gaussian process over the clients: Delta L ~ N(mu, K), K a kernel between clients learned from observed
loss changes. After ``warmup`` rounds of uniform selection (m of N without replacement, pi = m / N exactly),
during which every client reports its loss each round, the server selects greedily
(:func:`greedy_posterior_selection`): the next client is the one whose observed loss decrease most lowers the
posterior mean of the weighted total loss change, sum_k w_k Delta L_k, and the GP is then conditioned on that
client before the next pick. Nothing in the greedy step is random: after warm-up the selection is a
deterministic function of K (inclusion probabilities 0 or 1).

**The kernel** (:func:`loss_change_covariance`). FedCor's kernel is a polynomial kernel on learned client
embeddings plus observation noise, fitted by maximizing the marginal likelihood of the recorded loss changes.
For the order-1 (linear) kernel with embeddings of dimension q, K = E E^T + sigma^2 I, that maximum has a
closed form: probabilistic PCA (Tipping & Bishop 1999): the q leading eigenvectors of the (here
optionally discounted) sample covariance of the loss-change rounds, their eigenvalues reduced by sigma^2 =
the mean of the other N - q eigenvalues. We use that closed form instead of FedCor's gradient ascent; the
paper's kernel details (a bias term, normalization of the losses) may differ.

**The acquisition**, as we read the paper and a public re-implementation: if client j is selected its loss
change is taken to be one posterior standard deviation below its mean, so the posterior mean of the total
moves by -sum_k w_k K_kj / sqrt(K_jj); the greedy step maximizes that reduction, then conditions,
``K <- K - K_:j K_j: / K_jj``. FedCor's per-client discount of the assumed decrease is the ``discount`` of
:func:`greedy_posterior_selection` (:class:`FedCorClients` lowers it for each chosen client between two fits of
the GP, as the authors' code does); its other extras (random picks with probability epsilon, dynamic cohort sizes)
are not implemented.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypedDict

import numpy as np

from fedsample import checks
from fedsample.messages import ProbeReport, ProbeRequest
from fedsample.parts import ClientSamplerCapabilities, InclusionKind, Learns, SizeNeed
from fedsample.rounds import Cohort
from fedsample.sampling import adaptive, design
from fedsample.sampling.design import Sample

if TYPE_CHECKING:
    from fedsample.rounds import RoundContext

__all__ = [
    "FedCorClients",
    "FedCorHeld",
    "PROBABILITY_KIND",
    "SERVER_LEARNS",
    "loss_change_covariance",
    "greedy_posterior_selection",
    "fedcor_select",
]

#: Kind of inclusion probabilities: uniform during warm-up (exact, m / N), then deterministic.
PROBABILITY_KIND = {"warm-up": "exact", "fedcor": "degenerate"}
#: What the server must learn: every client's loss at each new global model in the rounds that train the GP
#: (the loss changes), and nothing more to select.
SERVER_LEARNS = {"warm-up": (), "fedcor": ("losses",)}
#: Eigenvalues of the loss changes' covariance below this fraction of the largest are rounding noise, set to 0: with
#: fewer rounds than ``rank`` + 1 the extra directions would otherwise be arbitrary eigenvectors of zero eigenvalues
#: (their choice depends on the last bits of the losses).
EIGEN_TOLERANCE = 1e-9
#: Diagonal entries of the posterior covariance below this fraction of the prior's largest are treated as
#: fully known (score 0, no further conditioning on them).
KNOWN = 1e-9
#: Scores within this fraction of the best count as ties (broken towards the smaller id): a rank-deficient K gives
#: many clients the same score up to rounding, and the choice must not depend on the last bits.
TIES = 1e-9


def loss_change_covariance(history: np.ndarray, rank: int, forget: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Maximum-likelihood mean and covariance K = E E^T + sigma^2 I (E: N x ``rank``) of the loss changes
    recorded in ``history`` (one round per row, one client per column), by probabilistic PCA.

    Rounds are weighted ``forget ** age`` (age 0 for the last row; ``forget = 1``: the plain maximum-likelihood
    covariance, normalized by the number of rounds). Returns ``(mu, K)``. Raises ``ValueError`` for fewer than
    2 rounds, ``rank`` not in [1, N), or ``forget`` not in (0, 1].
    """
    where = "loss_change_covariance"
    X = design.finite_matrix(history, "history", where)
    T, N = X.shape
    if T < 2:
        raise ValueError(f"{where}: history needs at least 2 rounds, got {T}")
    rank = design.check_count(rank, "rank", where, minimum=1)
    if rank >= N:
        raise ValueError(f"{where}: rank must be below the number of clients ({N}), got {rank}")
    if not (0 < forget <= 1):
        raise ValueError(f"{where}: forget must be in (0, 1], got {forget!r}")
    w = forget ** np.arange(T - 1, -1, -1, dtype=np.float64)
    w /= w.sum()
    mu = w @ X
    centered = X - mu
    C = centered.T @ (centered * w[:, None])
    evals, evecs = np.linalg.eigh(C)
    evals, evecs = np.maximum(evals[::-1], 0.0), evecs[:, ::-1]
    evals[evals <= EIGEN_TOLERANCE * evals[0]] = 0.0  # rounding noise (T rounds give at most T - 1 directions)
    sigma2 = float(evals[rank:].mean())
    lead = evecs[:, :rank] * np.sqrt(np.maximum(evals[:rank] - sigma2, 0.0))
    K = lead @ lead.T
    K[np.diag_indices(N)] += sigma2
    return mu, K


def greedy_posterior_selection(
    covariance: np.ndarray, m: int, weights: np.ndarray | None = None, discount: np.ndarray | None = None
) -> np.ndarray:
    """FedCor's greedy selection of m clients from the loss-change covariance K: repeatedly pick the client j
    maximizing alpha_j sum_k w_k K_kj / sqrt(K_jj) (the drop of the posterior total when j's loss change is
    alpha_j posterior standard deviations below its mean; scores within a relative 1e-9 of the best tie, and ties go
    to the smaller id), then condition K on j.
    ``weights`` w_k and ``discount`` alpha_j (FedCor's per-client discount of the assumed decrease, lowered each
    time a client is chosen between two fits of the GP) default to 1. Returns the chosen ids, sorted."""
    where = "greedy_posterior_selection"
    K = design.finite_matrix(covariance, "covariance", where).copy()
    N = K.shape[0]
    if K.shape != (N, N) or not np.allclose(K, K.T, rtol=1e-9, atol=1e-12 * max(1.0, np.abs(K).max())):
        raise ValueError(f"{where}: covariance must be a symmetric square matrix, got shape {K.shape}")
    m = design.check_count(m, "m", where, minimum=1)
    if m > N:
        raise ValueError(f"{where}: m = {m} exceeds the number of clients ({N})")
    w = np.ones(N) if weights is None else design.nonnegative_vector(weights, "weights", where)
    if w.size != N:
        raise ValueError(f"{where}: weights has {w.size} entries, expected {N}")
    alpha = np.ones(N) if discount is None else design.nonnegative_vector(discount, "discount", where)
    if alpha.size != N:
        raise ValueError(f"{where}: discount has {alpha.size} entries, expected {N}")
    known = KNOWN * max(float(np.max(np.diag(K))), np.finfo(float).tiny)
    free = np.ones(N, dtype=bool)
    for _ in range(m):
        diag = np.diag(K)
        informative = free & (diag > known)
        score = np.zeros(N)
        score[informative] = alpha[informative] * (w @ K)[informative] / np.sqrt(diag[informative])
        score[~free] = -np.inf
        best = float(np.max(score))
        j = int(np.flatnonzero(score >= best - TIES * abs(best))[0])
        free[j] = False
        if diag[j] > known:
            K -= np.outer(K[:, j], K[j, :]) / diag[j]
    return np.flatnonzero(~free).astype(np.int64)


def fedcor_select(
    round: int,
    warmup: int,
    m: int,
    num_clients: int,
    rng: np.random.Generator,
    covariance: np.ndarray | None = None,
    weights: np.ndarray | None = None,
) -> Sample:
    """FedCor's selection in ``round`` (0-based): uniform m of ``num_clients`` without replacement while
    ``round < warmup`` (inclusion m / N, exact), then :func:`greedy_posterior_selection` on ``covariance``
    (inclusion 1: the choice is deterministic)."""
    where = "fedcor_select"
    round = design.check_count(round, "round", where)
    warmup = design.check_count(warmup, "warmup", where)
    if round < warmup:
        return design.simple_random(num_clients, m, rng)
    if covariance is None:
        raise ValueError(f"{where}: round {round} is past the warm-up ({warmup} rounds) and needs a covariance")
    num_clients = design.check_count(num_clients, "num_clients", where, minimum=1)
    K = np.asarray(covariance)
    if K.shape != (num_clients, num_clients):
        raise ValueError(f"{where}: covariance has shape {K.shape}, expected ({num_clients}, {num_clients})")
    ids = greedy_posterior_selection(K, m, weights)
    return Sample(ids, np.ones(ids.size), np.ones(ids.size, dtype=np.int64))


# --- the client sampler ----------------------------------------------------------------------------------------


#: What FedCor does without a lost loss probe (the round record's ``sampler_lost_probes_instead``).
LOST_PROBE = "gave each client whose loss probe was lost the mean loss change of the others in the GP's data"


def with_lost_changes_filled(changes: np.ndarray) -> np.ndarray | None:
    """One row of loss changes with each client's unknown change (NaN: a probe of it was lost, at either end) set to
    the mean change of the clients known in that row; None when none is known (the row is left out)."""
    known = np.isfinite(changes)
    if not known.any():
        return None
    return np.where(known, changes, changes[known].mean())


class FedCorHeld(TypedDict, total=False):
    """What FedCor's server holds between rounds: the last probed losses with their round, the loss changes of the
    random rounds (one array per round, one entry per client), the GP's mean and covariance fitted to them and how
    many changes that fit read (``fitted_rows``), and the posterior discounts alpha of the greedy selection."""

    losses: tuple[int, np.ndarray]
    changes: list[np.ndarray]
    mean: np.ndarray
    covariance: np.ndarray
    fitted_rows: int
    alpha: np.ndarray


@dataclass(frozen=True)
@checks.constrained(
    m=checks.COUNT, warmup=checks.integers(2), rank=checks.COUNT, discount=checks.reals(0, 1, "(]"),
    refit_every=[checks.integers(2), None], forget=checks.reals(0, 1, "(]"),
)
class FedCorClients:
    """FedCor (Tang et al., CVPR 2022) as a client sampler.

    - **Random rounds** (the ``warmup`` first rounds and, with ``refit_every=R``, one round before every R-th round
      after them): m of N uniformly without replacement (pi = m/N, exact; the round record says so). Every client's
      loss at the global model is probed at the start of each random round and of the round after it (a loss probe
      of all N: one forward pass over the data); the difference is one row of loss changes.
    - **Greedy rounds** (all others): the GP covariance K of the loss changes (:func:`loss_change_covariance`, rank
      ``rank``, rounds discounted by ``forget``) is fitted on the first greedy round after new rows, and the cohort is
      :func:`greedy_posterior_selection` with the clients' ``weights`` (data fractions n_k/n, FedCor's global loss;
      or ``"uniform"``) and FedCor's discount: each time a client is chosen its alpha_k is multiplied by
      ``discount``, reset to 1 at every fit. The choice is deterministic: pi in {0, 1}, no unbiased estimator
      exists (round record: ``inclusion: degenerate``), and aggregators that divide by pi are refused.

    Where the authors' code differs: it fits its GP after warm-up on a separate trial round (a copy of the model
    trained by random clients, not applied); here the random round is a real round of the run (no extra training).
    Server-held state (``ctx.state``, in checkpoints): the last probed losses, the loss-change rows, K and the
    discounts.

    Under faults: a client whose loss probe was lost has no loss change in that row; it gets the mean change of the
    others (:func:`with_lost_changes_filled`), which the round record says (``sampler_lost_probes_instead``, with the
    lost probes named in ``failed``)."""

    m: int = 10
    warmup: int = 10
    rank: int = 5
    discount: float = 0.9
    refit_every: int | None = None
    forget: float = 1.0
    weights: Literal["size", "uniform"] = "size"

    @property
    def capabilities(self) -> ClientSamplerCapabilities:
        """A deterministic selection; the data fractions of FedCor's global loss need every client's exact size
        (``weights="size"``)."""
        learns = tuple(map(Learns, SERVER_LEARNS["fedcor"]))
        sized = self.weights == "size"
        return ClientSamplerCapabilities(inclusion_kind=InclusionKind.DEGENERATE, server_learns=(Learns.SIZES, *learns) if sized else learns,
                                         needs_sizes=SizeNeed.EXACT_ALL if sized else SizeNeed.NONE)

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        return float(min(self.m, num_clients))

    def random_round(self, round: int) -> bool:
        """Whether ``round`` (0-based) selects at random: a warm-up round, or the round before each refit."""
        if round < self.warmup:
            return True
        return self.refit_every is not None and (round - self.warmup + 1) % self.refit_every == 0

    def select(self, ctx: "RoundContext") -> Cohort:
        N = ctx.num_clients
        if self.m > N:
            checks.fail("m", self.m, f"at most the number of clients ({N})", "FedCorClients")
        if self.rank >= N:
            checks.fail("rank", self.rank, f"below the number of clients ({N})", "FedCorClients")
        state = adaptive.sampler_state(ctx, FedCorHeld)
        self.record_losses(ctx, state)
        if self.random_round(ctx.round):
            sample = design.simple_random(N, self.m, ctx.rng("clients"))
            return Cohort.from_sample(sample, N, info={"inclusion_kind": "exact"})
        if state.get("fitted_rows") != len(state["changes"]):  # new loss changes since the last fit: refit, reset alpha
            state["mean"], state["covariance"] = loss_change_covariance(np.stack(state["changes"]), self.rank, self.forget)
            state["alpha"], state["fitted_rows"] = np.ones(N), len(state["changes"])
        ids = greedy_posterior_selection(state["covariance"], self.m, self.loss_weights(ctx), state["alpha"])
        state["alpha"][ids] *= self.discount
        return Cohort(ids, np.ones(len(ids)), N, info={"inclusion_kind": "degenerate"})

    def record_losses(self, ctx: "RoundContext", state: FedCorHeld) -> None:
        """Probe every client's loss where due (a random round, or the round after one) and keep the change since the
        previous round's probe when that round was random."""
        state.setdefault("changes", [])
        if not (self.random_round(ctx.round) or (ctx.round > 0 and self.random_round(ctx.round - 1))):
            adaptive.no_probes(ctx)
            return
        request = ProbeRequest(params=ctx.params, statistics="loss")
        replies, _ = adaptive.probe_partial(ctx, np.arange(ctx.num_clients), request, LOST_PROBE)
        losses = np.array([r.loss if isinstance(r, ProbeReport) else np.nan for r in replies], dtype=np.float64)  # arrived: the ProbeReports
        last = state.get("losses")
        if last is not None and last[0] == ctx.round - 1 and self.random_round(ctx.round - 1):
            changes = with_lost_changes_filled(losses - last[1])
            if changes is not None:
                state["changes"].append(changes)
        state["losses"] = (ctx.round, losses)

    def loss_weights(self, ctx: "RoundContext") -> np.ndarray | None:
        """w_k of the total loss change sum_k w_k Delta L_k: the data fractions n_k/n, or None (all 1)."""
        if self.weights == "uniform":
            return None
        reported = ctx.require_sizes(exact=True)
        w = np.zeros(ctx.num_clients)
        w[reported.ids] = reported.reports
        weights: np.ndarray = w / w.sum()
        return weights
