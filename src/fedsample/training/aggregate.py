"""Aggregators: how the chosen clients' updates combine into one pseudo-gradient.

Weights come from the cohort (inclusion probabilities, multiplicities) and, where declared, from size
reports; clients that sent nothing are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, Sequence

import numpy as np
import torch

from fedsample.training.functional import Params

if TYPE_CHECKING:
    from fedsample.client import TrainReport
    from fedsample.sampling.clients import Cohort
    from fedsample.strategy import RoundContext


def weighted_sum(updates: Sequence[Params], weights: Sequence[float]) -> Params:
    """sum_k w_k * Delta_k, key-wise."""
    w = torch.as_tensor(np.asarray(weights, dtype=np.float64))
    return {k: torch.einsum("c,c...->...", w.to(updates[0][k].dtype), torch.stack([u[k] for u in updates])) for k in updates[0]}


def received(reports: Sequence["TrainReport | None"], cohort: "Cohort") -> tuple[np.ndarray, list["TrainReport"]]:
    """Positions (in the cohort) and reports of the clients that sent an update."""
    positions = np.array([i for i, r in enumerate(reports) if r is not None], dtype=np.int64)
    return positions, [reports[i] for i in positions]


Weighting = Literal["uniform", "size", "inverse_inclusion"]


@dataclass(frozen=True)
class WeightedMean:
    """Weighted mean of the received updates.

    - ``uniform``: (1/|S|) * sum_k m_k * Delta_k over received updates, m_k the draw multiplicity
      (Li et al. 2019's average for with-replacement sampling);
    - ``size``: sum_k n_k * Delta_k / sum_k n_k with reported sizes n_k (FedAvg, McMahan et al. 2017);
    - ``inverse_inclusion``: the Horvitz-Thompson estimator (1/N) * sum_k Delta_k / pi_k, unbiased for the
      full-participation mean (1/N) * sum_{all k} Delta_k.
    """

    by: Weighting = "uniform"

    def __post_init__(self) -> None:
        if self.by not in ("uniform", "size", "inverse_inclusion"):
            raise ValueError(f"weighted mean 'by' must be uniform, size or inverse_inclusion, got {self.by!r}")

    @property
    def needs_sizes(self) -> Literal["any", None]:
        return "any" if self.by == "size" else None

    def weights(self, positions: np.ndarray, cohort: "Cohort", ctx: "RoundContext") -> np.ndarray:
        if self.by == "inverse_inclusion":
            return 1.0 / (cohort.inclusion[positions] * cohort.population)
        w = cohort.multiplicity[positions].astype(np.float64)
        if self.by == "size":
            w = w * ctx.require_sizes().for_clients(cohort.ids[positions])
        return w / w.sum()

    def combine(self, reports: Sequence["TrainReport | None"], cohort: "Cohort", ctx: "RoundContext") -> Params | None:
        positions, got = received(reports, cohort)
        if not got:
            return None
        return combine_updates(reports, positions, got, self.weights(positions, cohort, ctx))


@dataclass(frozen=True)
class Sum:
    """FedSampling's aggregation: the sum of the received G_c (Qi et al. 2023, Algorithm 1, line 18)."""

    needs_sizes: ClassVar[None] = None

    def combine(self, reports: Sequence["TrainReport | None"], cohort: "Cohort", ctx: "RoundContext") -> Params | None:
        positions, got = received(reports, cohort)
        if not got:
            return None
        return combine_updates(reports, positions, got, np.ones(len(got)))


def combine_updates(reports: Sequence["TrainReport | None"], positions: np.ndarray, got: Sequence["TrainReport"], weights: np.ndarray) -> Params:
    """sum_k w_k * Delta_k over the received updates. A federation whose reports can form this sum without
    materializing each update (``weighted_update_sum``: the vectorized engine's one-gradient cohorts, where
    it is one backward pass over the union of the drawn samples) is asked to; the result is the same."""
    fused = getattr(reports, "weighted_update_sum", None)
    if fused is not None:
        return fused(positions, np.asarray(weights, dtype=np.float64))
    return weighted_sum([r.update for r in got], weights)
