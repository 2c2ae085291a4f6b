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
``K <- K - K_:j K_j: / K_jj``. FedCor's optional extras (a per-client discount of the assumed decrease, random
picks with probability epsilon, dynamic cohort sizes) are not implemented.
"""

from __future__ import annotations

import numpy as np

from fedsample.sampling import design
from fedsample.sampling.design import Sample

__all__ = [
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
#: Diagonal entries of the posterior covariance below this fraction of the prior's largest are treated as
#: fully known (score 0, no further conditioning on them).
KNOWN = 1e-12


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
    sigma2 = float(evals[rank:].mean())
    lead = evecs[:, :rank] * np.sqrt(np.maximum(evals[:rank] - sigma2, 0.0))
    K = lead @ lead.T
    K[np.diag_indices(N)] += sigma2
    return mu, K


def greedy_posterior_selection(covariance: np.ndarray, m: int, weights: np.ndarray | None = None) -> np.ndarray:
    """FedCor's greedy selection of m clients from the loss-change covariance K: repeatedly pick the client j
    maximizing sum_k w_k K_kj / sqrt(K_jj) (the drop of the posterior total when j's loss change is one
    posterior standard deviation below its mean; ties to the smaller id), then condition K on j. ``weights``
    w_k default to 1. Returns the chosen ids, sorted."""
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
    known = KNOWN * max(float(np.max(np.diag(K))), np.finfo(float).tiny)
    free = np.ones(N, dtype=bool)
    for _ in range(m):
        diag = np.diag(K)
        informative = free & (diag > known)
        score = np.zeros(N)
        score[informative] = (w @ K)[informative] / np.sqrt(diag[informative])
        score[~free] = -np.inf
        j = int(np.argmax(score))
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
