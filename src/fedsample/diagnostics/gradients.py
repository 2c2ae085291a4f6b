"""The per-sample gradient basis: one pass over the training data at a fixed global model.

Every estimator a round computes from one gradient per sample at the global model w is a linear combination
ĝ = sum_s c_s g_s of the per-sample gradients g_s = grad l(w; x_s) (the coefficients c_s carry the sampling:
which clients, which samples, the estimator's weights). So the gradients are computed once and every one of
R draws of a strategy's sampling costs one sparse product c^T G.

When G (rows x parameters) fits ``memory_budget`` bytes it is kept exactly. Otherwise it is kept as a
CountSketch G S (Charikar, Chen & Farach-Colton 2004; Clarkson & Woodruff 2013): each parameter coordinate
goes to one of ``sketch_dim`` buckets with a random sign. S is linear, so the sketch of ĝ is c^T (G S); for
every fixed vector v, E||S^T v||^2 = ||v||^2 and Var||S^T v||^2 <= 2 ||v||^4 / sketch_dim, so each relative
squared norm below (bias^2, variance, mean squared error, all relative to ||g*||^2) carries a relative error of
at most sqrt(2 / sketch_dim) (4.4% at 1,024 buckets).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedsample.runtime.records import JSONObject
from fedsample.training.functional import Params, per_sample_gradients

__all__ = [
    "DEFAULT_MEMORY_BUDGET", "DEFAULT_SKETCH_DIM", "GRADIENT_CHUNK", "ClientUpdates", "GradientBasis", "basis_shape",
    "gradient_basis",
]

DEFAULT_MEMORY_BUDGET = 256 * 2**20
"""Bytes the exact per-sample gradients may take before they are sketched (256 MiB)."""
#: The number of buckets of the CountSketch that stands in for gradients too large to keep.
DEFAULT_SKETCH_DIM = 1024
GRADIENT_CHUNK = 1024  #: rows whose per-sample gradients are computed at once
UPDATE_CACHE_BYTES = 64 * 2**20  #: what :class:`ClientUpdates` may keep (float64 updates)


@dataclass(frozen=True)
class GradientBasis:
    """Per-sample gradients of every training row at one model, exact or sketched.

    ``matrix[row]`` is the (sketched) gradient of training row ``row``; ``parameters`` is the model's size."""

    matrix: torch.Tensor
    parameters: int
    sketched: bool

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    @property
    def relative_error(self) -> float:
        """Bound on the relative standard deviation of a squared norm measured in this basis (0: exact)."""
        return math.sqrt(2.0 / self.dim) if self.sketched else 0.0

    def combination(self, rows: np.ndarray, coefficients: np.ndarray) -> torch.Tensor:
        """sum_i coefficients_i * g_{rows_i} (rows may repeat)."""
        c = torch.as_tensor(np.asarray(coefficients, dtype=np.float64), dtype=self.matrix.dtype)
        return c @ self.matrix.index_select(0, torch.as_tensor(np.asarray(rows, dtype=np.int64)))

    def describe(self) -> JSONObject:
        return {
            "kind": "countsketch" if self.sketched else "exact",
            "dim": self.dim,
            "parameters": self.parameters,
            "relative_error_bound": self.relative_error,
        }


def countsketch_columns(parameters: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The bucket and the sign of each parameter coordinate (a CountSketch matrix S of shape parameters x dim)."""
    rng = np.random.default_rng([int(seed), 0xC0DE])
    bucket = torch.from_numpy(rng.integers(0, dim, size=parameters))
    sign = torch.from_numpy(rng.choice(np.array([-1.0, 1.0]), size=parameters))
    return bucket, sign


def basis_shape(rows: int, parameters: int, memory_budget: int = DEFAULT_MEMORY_BUDGET,
                sketch_dim: int = DEFAULT_SKETCH_DIM) -> tuple[int, bool]:
    """(columns, sketched) of the basis of ``rows`` per-sample gradients of ``parameters`` coordinates: exact
    when rows x parameters x 8 bytes fit ``memory_budget``, else ``sketch_dim`` CountSketch buckets."""
    sketched = rows * parameters * 8 > memory_budget
    return (sketch_dim if sketched else parameters), sketched


def gradient_basis(
    module: nn.Module, task: str, params: Params, x: torch.Tensor, y: torch.Tensor, seed: int = 0,
    memory_budget: int = DEFAULT_MEMORY_BUDGET, sketch_dim: int = DEFAULT_SKETCH_DIM, chunk: int = GRADIENT_CHUNK,
) -> GradientBasis:
    """Per-sample gradients of all rows of ``(x, y)`` at ``params``: exact (float64) when rows x parameters x 8
    bytes fit ``memory_budget``, else a ``sketch_dim``-bucket CountSketch (float32), computed chunk by chunk."""
    if sketch_dim < 1:
        raise ValueError(f"sketch_dim must be >= 1, got {sketch_dim}")
    parameters = sum(v.numel() for v in params.values())
    n = len(y)
    dim, sketched = basis_shape(n, parameters, memory_budget, sketch_dim)
    out = torch.zeros((n, dim), dtype=torch.float32 if sketched else torch.float64)
    if sketched:
        bucket, sign = countsketch_columns(parameters, dim, seed)
        sign = sign.to(torch.float32)
    for start in range(0, n, chunk):
        g = per_sample_gradients(module, task, params, x[start : start + chunk], y[start : start + chunk], chunk_size=None)
        if sketched:
            out[start : start + chunk].index_add_(1, bucket, g * sign)
        else:
            out[start : start + chunk] = g.double()
    return GradientBasis(out, parameters, sketched)


class ClientUpdates:
    """Client updates sum_s c_s g_s in ``basis``, each computed once per set of terms (its rows and coefficients, in
    any order) and kept while they fit ``budget`` bytes: a client that trains on all its data at the frozen model
    sends the same update every round (the order of its rows aside), so draw after draw reads it back instead of
    gathering its rows again. Computed in float64."""

    def __init__(self, basis: GradientBasis, budget: int = UPDATE_CACHE_BYTES) -> None:
        self.basis = basis
        self._kept: dict[bytes, torch.Tensor] = {}
        self._room = budget // (8 * max(basis.dim, 1))

    def of(self, rows: np.ndarray, coefficients: np.ndarray) -> torch.Tensor:
        """sum_i coefficients_i * g_{rows_i} (float64)."""
        rows, coefficients = np.asarray(rows, dtype=np.int64), np.asarray(coefficients, dtype=np.float64)
        order = np.lexsort((coefficients, rows))  # the terms in a canonical order: the key of the update
        rows, coefficients = rows[order], coefficients[order]
        key = hashlib.blake2b(rows.tobytes() + coefficients.tobytes(), digest_size=16).digest()
        found = self._kept.get(key)
        if found is None:
            gathered = self.basis.matrix.index_select(0, torch.from_numpy(rows)).double()
            found = torch.from_numpy(coefficients) @ gathered
            if len(self._kept) < self._room:
                self._kept[key] = found
        return found
