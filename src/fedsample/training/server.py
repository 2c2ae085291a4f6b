"""Server optimizers on the aggregated pseudo-gradient Delta (a descent direction): w <- w - eta * Delta.

Every optimizer has ``init_state(params) -> ServerState`` and ``step(params, delta, state) -> (params, state)``;
the state holds only tensors and numbers, so it is saved in checkpoints with ``torch.save``.

Reddi et al. (2021) write Delta_t = mean of (x_i - x_t), an ascent-on-parameters direction, and update
x + eta * m / (sqrt(v) + tau). Here Delta is the descent direction (w_global - w_i), so m has the opposite
sign and the update is w - eta * m / (sqrt(v) + tau); v depends on Delta^2 only, so nothing else changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedsample import checks
from fedsample.parts import ServerOptimizer, ServerState
from fedsample.runtime.records import State
from fedsample.training.functional import Params, zeros_like

__all__ = ["AdaptiveServer", "FedAdagrad", "FedAdam", "FedYogi", "SERVER_KEY", "ServerOptimizer", "ServerSGD", "ServerState", "server_state"]

#: The key of the server optimizer's state in the strategy state (saved in checkpoints).
SERVER_KEY = "server"


def server_state(state: State) -> ServerState:
    """The server optimizer's state kept in the strategy state, checked: buffers by name, each a tensor per parameter
    name (a one-line ``TypeError`` naming the key otherwise)."""
    held = state.get(SERVER_KEY)
    if not (isinstance(held, dict) and all(isinstance(buffer, dict) and all(isinstance(t, torch.Tensor) for t in buffer.values())
                                           for buffer in held.values())):
        raise TypeError(f"state[{SERVER_KEY!r}]: expected the server optimizer's buffers (tensors by parameter name by buffer), "
                        f"the state holds {type(held).__name__}")
    return held


SERVER_LR = checks.Param(checks.POSITIVE, label="server learning rate")
MOMENT = checks.reals(0, 1, "[)")


@dataclass(frozen=True)
@checks.constrained(lr=SERVER_LR, momentum=checks.Param(MOMENT, label="server momentum"))
class ServerSGD:
    """w_t = w_{t-1} - eta * Delta_t. With eta = 1 and Delta the mean of w_global - w_k this is FedAvg;
    with Delta = sum_c G_c it is FedSampling's update (Qi et al. 2023, Algorithm 1, line 18).

    With ``momentum`` beta > 0 it is FedAvgM (Hsu et al. 2019; Reddi et al. 2021, §5): v_t = beta*v_{t-1} +
    Delta_t, w_t = w_{t-1} - eta * v_t, v_0 = 0.
    """

    lr: float = 1.0
    momentum: float = 0.0

    def init_state(self, params: Params) -> ServerState:
        return {"velocity": zeros_like(params)} if self.momentum else {}

    def step(self, params: Params, delta: Params, state: ServerState) -> tuple[Params, ServerState]:
        if not self.momentum:
            return {k: params[k] - self.lr * delta[k] for k in params}, state
        velocity = state.get("velocity") or zeros_like(params)
        velocity = {k: self.momentum * velocity[k] + delta[k] for k in params}
        return {k: params[k] - self.lr * velocity[k] for k in params}, {**state, "velocity": velocity}


@checks.constrained(lr=SERVER_LR, beta1=MOMENT, tau=checks.Param(checks.POSITIVE, label="tau (adaptivity)"))
class AdaptiveServer:
    """The shared part of Reddi et al. (2021), Algorithm 2 (FedAdagrad, FedYogi, FedAdam):

        m_t = beta1 * m_{t-1} + (1 - beta1) * Delta_t
        v_t = second_moment(v_{t-1}, Delta_t^2)          (the only line that differs)
        w_{t+1} = w_t - eta * m_t / (sqrt(v_t) + tau)

    with m_{-1} = 0 and v_{-1} = tau^2 (the algorithm asks for v_{-1} >= tau^2). There is no bias
    correction and tau sits outside the square root, so torch.optim.Adam (bias-corrected, v_0 = 0) and
    torch.optim.Adagrad (no first moment) do not compute this update; it is written out here.

    Defaults: beta1 = 0.9, beta2 = 0.99 as fixed in the paper's experiments (§5); eta and tau were tuned
    per task on grids there, so the defaults eta = 0.01 and tau = 1e-3 are only a common starting point.
    """

    lr: float
    beta1: float
    tau: float

    def second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def init_state(self, params: Params) -> ServerState:
        return {"m": zeros_like(params), "v": {k: torch.full_like(p, self.tau**2) for k, p in params.items()}}

    def step(self, params: Params, delta: Params, state: ServerState) -> tuple[Params, ServerState]:
        if not state:
            state = self.init_state(params)
        m = {k: self.beta1 * state["m"][k] + (1 - self.beta1) * delta[k] for k in params}
        v = {k: self.second_moment(state["v"][k], delta[k] * delta[k]) for k in params}
        new = {k: params[k] - self.lr * m[k] / (torch.sqrt(v[k]) + self.tau) for k in params}
        return new, {"m": m, "v": v}


@dataclass(frozen=True)
class FedAdagrad(AdaptiveServer):
    """FedAdagrad (Reddi et al. 2021, Algorithm 2): v_t = v_{t-1} + Delta_t^2."""

    lr: float = 0.01
    beta1: float = 0.9
    tau: float = 1e-3

    def second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        return v + d2


@dataclass(frozen=True)
@checks.constrained(beta2=MOMENT)
class _ExponentialSecondMoment(AdaptiveServer):
    """The parameters of the methods whose second moment forgets at rate beta2 (FedAdam, FedYogi)."""

    lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3


@dataclass(frozen=True)
class FedAdam(_ExponentialSecondMoment):
    """FedAdam (Reddi et al. 2021, Algorithm 2): v_t = beta2 * v_{t-1} + (1 - beta2) * Delta_t^2."""

    def second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        return self.beta2 * v + (1 - self.beta2) * d2


@dataclass(frozen=True)
class FedYogi(_ExponentialSecondMoment):
    """FedYogi (Reddi et al. 2021, Algorithm 2; Yogi of Zaheer et al. 2018):
    v_t = v_{t-1} - (1 - beta2) * Delta_t^2 * sign(v_{t-1} - Delta_t^2)."""

    def second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        return v - (1 - self.beta2) * d2 * torch.sign(v - d2)

