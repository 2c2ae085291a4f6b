"""Server optimizers on the aggregated pseudo-gradient Delta (a descent direction): w <- w - eta * Delta."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedsample.training.functional import Params


@dataclass(frozen=True)
class ServerSGD:
    """w_t = w_{t-1} - eta * Delta_t. With eta = 1 and Delta the mean of w_global - w_k this is FedAvg;
    with Delta = sum_c G_c it is FedSampling's update (Qi et al. 2023, Algorithm 1, line 18)."""

    lr: float = 1.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.lr) or self.lr <= 0:
            raise ValueError(f"server learning rate must be > 0, got {self.lr!r}")

    def init_state(self, params: Params) -> dict:
        return {}

    def step(self, params: Params, delta: Params, state: dict) -> tuple[Params, dict]:
        return {k: params[k] - self.lr * delta[k] for k in params}, state
