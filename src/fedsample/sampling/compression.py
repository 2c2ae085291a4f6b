"""Client-side gradient compression for FedSTS / FedSTaS probes (Slessor et al. 2025, Algorithms 1-3;
Gao et al. 2024).

A client compresses its full local gradient to a short vector of ``dim`` numbers (d' = 9 in the
papers' experiments) that the server clusters into strata. Two compressions:

- :func:`information_squeeze`: 1-D k-means of the flattened gradient's coordinates into ``dim``
  centroids, returned **sorted**.
- :func:`random_projection`: a Gaussian random projection of the last layer's gradient to ``dim``
  dimensions, with the projection matrix derived from a seed the server sends, so that every client
  projects with the same matrix.

Both are deterministic functions of the gradient (and of the seed), so they need no client RNG.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

import numpy as np
import torch

from fedsample import checks
from fedsample.training.functional import Params, flatten

__all__ = [
    "COMPRESSION", "Compression", "DIM", "compress", "information_squeeze", "kmeans_1d", "last_layer",
    "projection_matrix", "random_projection",
]

Compression = Literal["squeeze", "projection"]
"""The compressions of client gradients: FedSTS's squeeze, or a random projection."""
COMPRESSIONS: tuple[str, ...] = ("squeeze", "projection")

#: Lloyd iterations of the 1-D k-means (it stops earlier when the assignment no longer changes).
SQUEEZE_MAX_ITER = 100


#: The compressed dimension d' (an integer >= 1), and the compression's name.
DIM = checks.Param(checks.COUNT, label="compressed dimension d'")
#: One of ``COMPRESSIONS``.
COMPRESSION = checks.Options(*COMPRESSIONS)


def check_dim(dim: object) -> int:
    """Validate the compressed dimension d' (an integer >= 1)."""
    checked = checks.check("dim", dim, DIM)
    assert checks.is_integer(checked)  # DIM admits integers alone
    return int(checked)


def check_compression(name: object) -> str:
    return str(checks.check("compression", name, COMPRESSION))


def kmeans_1d(values: np.ndarray, k: int, max_iter: int = SQUEEZE_MAX_ITER) -> np.ndarray:
    """Lloyd's k-means of scalars into ``k`` clusters; returns the ``k`` centroids sorted ascending.

    Deterministic: the centroids start at the quantiles ``(j + 0.5) / k`` of the values, and every
    iteration assigns each value to its nearest centroid (in 1-D the clusters are the intervals between
    midpoints of consecutive sorted centroids, found by binary search on the sorted values) and moves
    each centroid to its cluster's mean (from prefix sums), until the assignment no longer changes. An
    empty cluster keeps its centroid (which keeps the centroids ordered). Cost: one sort, then
    O(k log n) per iteration. With fewer than ``k`` distinct values some centroids coincide.
    """
    k = check_dim(k)
    x = np.sort(np.asarray(values, dtype=np.float64).reshape(-1))
    if x.size == 0:
        raise ValueError("kmeans_1d needs at least one value")
    if not np.all(np.isfinite(x)):
        raise ValueError("kmeans_1d: the values contain NaN or infinite entries")
    cumsum = np.concatenate([[0.0], np.cumsum(x)])
    centroids = np.quantile(x, (np.arange(k) + 0.5) / k)
    bounds = np.zeros(k + 1, dtype=np.int64)
    bounds[-1] = x.size
    cuts = None
    for _ in range(max_iter):
        new_cuts = np.searchsorted(x, 0.5 * (centroids[1:] + centroids[:-1]), side="right")
        if cuts is not None and np.array_equal(new_cuts, cuts):
            break
        cuts = new_cuts
        bounds[1:-1] = cuts
        lo, hi = bounds[:-1], bounds[1:]
        counts = hi - lo
        centroids = np.where(counts > 0, (cumsum[hi] - cumsum[lo]) / np.maximum(counts, 1), centroids)
    return np.sort(centroids)


def information_squeeze(gradient: Params | np.ndarray | torch.Tensor, dim: int) -> np.ndarray:
    """FedSTS's "information squeeze" IS(G) (Gao et al. 2024; Slessor et al. 2025, Algorithm 3 output):
    1-D k-means of all coordinates of the flattened gradient into ``dim`` clusters; returns the ``dim``
    centroids **sorted ascending**.

    The authors' code returned the centroids in k-means' arbitrary cluster order, so two clients with
    equal gradients could send different vectors and land in different strata; sorting makes the
    compression a function of the multiset of coordinates (invariant to any permutation of them).

    Algorithm 1 of the FedSTaS paper also "restores" each client's full-size quantized gradient Z from the
    centroids and the cluster index lambda before clustering clients; here (as the issue specifies) the
    server clusters the ``dim``-dimensional centroid vectors themselves, so the cluster index never
    leaves the client.
    """
    return kmeans_1d(_as_vector(gradient), dim)


@lru_cache(maxsize=8)
def projection_matrix(seed: int, dim: int, width: int) -> np.ndarray:
    """The ``dim x width`` Gaussian projection matrix with i.i.d. N(0, 1/dim) entries drawn from
    ``numpy.random.default_rng(seed)``: the same on every client that receives the same seed, and
    ``E||R g||^2 = ||g||^2`` (Johnson-Lindenstrauss scaling). Read-only (cached)."""
    dim = check_dim(dim)
    checks.check("seed", seed, checks.integers(0), label="projection seed")
    matrix: np.ndarray = np.random.default_rng(int(seed)).standard_normal((dim, int(width))) / np.sqrt(dim)
    matrix.setflags(write=False)
    return matrix


def last_layer(gradient: Params) -> Params:
    """The entries of a parameter dict that belong to its last layer: the keys sharing the module prefix
    (text before the final '.') of the last key, e.g. ``{"3.weight", "3.bias"}`` of an MLP."""
    if not gradient:
        raise ValueError("last_layer: the gradient has no parameters")
    keys = list(gradient)
    prefix = keys[-1].rpartition(".")[0]
    return {k: v for k, v in gradient.items() if k.rpartition(".")[0] == prefix}


def random_projection(gradient: Params, dim: int, seed: int) -> np.ndarray:
    """Gaussian random projection R g of the last layer's gradient g to ``dim`` dimensions, with R from
    :func:`projection_matrix` (``seed`` is sent by the server, so every client uses the same R)."""
    g = _as_vector(last_layer(gradient))
    projected: np.ndarray = projection_matrix(int(seed), check_dim(dim), g.size) @ g
    return projected


def compress(gradient: Params, method: str, dim: int, seed: int = 0) -> np.ndarray:
    """Compress a client's gradient with ``method`` ("squeeze" or "projection") to ``dim`` numbers."""
    method = check_compression(method)
    if method == "squeeze":
        return information_squeeze(gradient, dim)
    return random_projection(gradient, dim, seed)


def _as_vector(gradient: Params | np.ndarray | torch.Tensor) -> np.ndarray:
    if isinstance(gradient, dict):
        gradient = flatten(gradient)
    if isinstance(gradient, torch.Tensor):
        gradient = gradient.detach().reshape(-1).to(torch.float64).cpu().numpy()
    return np.asarray(gradient, dtype=np.float64).reshape(-1)
