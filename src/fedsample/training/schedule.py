"""Learning-rate schedules for the server optimizer: a factor per round that scales its learning rate.

For FedSampling and centralized training the server step is the only step size (their local solver takes
one step from the global parameters, and ``w - f * eta * Delta`` with ``Delta = lr * g`` scales that step by
``f``); for strategies with several local steps the factor scales the server's update, not the clients'
local learning rate.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from fedsample import checks

if TYPE_CHECKING:  # a type only: a schedule is built (and checked) without torch, as experiment files are read
    from fedsample.parts import ServerOptimizer, ServerState
    from fedsample.training.functional import Params

__all__ = ["Kind", "Schedule", "scheduled_step"]

#: The shape of a learning-rate schedule.
Kind = Literal["constant", "step", "exponential", "cosine"]


@dataclass(frozen=True)
@checks.constrained(every=checks.COUNT, rounds=checks.COUNT, gamma=checks.POSITIVE)
class Schedule:
    """The factor of round ``t`` (0-based: the first round is t = 0, factor 1 for every kind):

    - ``constant``: 1
    - ``step``: gamma ** floor(t / every)        (multiply by gamma every ``every`` rounds)
    - ``exponential``: gamma ** t                (e.g. IWDS's decay 0.992 per round)
    - ``cosine``: (1 + cos(pi * min(t, rounds) / rounds)) / 2   (cosine annealing to 0 over ``rounds``)
    """

    kind: Kind = "constant"
    every: int = 1
    gamma: float = 1.0
    rounds: int = 1

    def factor(self, t: int) -> float:
        """The multiplier of the server learning rate in round ``t`` (0-based)."""
        if self.kind == "step":
            return self.gamma ** (t // self.every)
        if self.kind == "exponential":
            return self.gamma**t
        if self.kind == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * min(t, self.rounds) / self.rounds))
        return 1.0


def scheduled_step(server: ServerOptimizer, schedule: Schedule | None, round: int, params: Params, delta: Params, state: ServerState) -> tuple[Params, ServerState]:
    """The server optimizer's step of round ``round`` with its learning rate times the schedule's factor.
    A factor of 0 (the end of a cosine schedule) leaves the parameters unchanged; the optimizer's state
    (momentum, moments) still advances, as it would with a learning rate of 0. A factor other than 1 builds the
    optimizer again with the scaled ``lr`` (``dataclasses.replace``): a scheduled optimizer is a dataclass."""
    factor = 1.0 if schedule is None else schedule.factor(round)
    if factor == 1.0:
        return server.step(params, delta, state)
    if factor == 0.0:
        return params, server.step(params, delta, state)[1]
    if not dataclasses.is_dataclass(server) or isinstance(server, type):
        raise TypeError(f"a learning-rate schedule scales a dataclass server optimizer's lr, not a {type(server).__name__}'s")
    return dataclasses.replace(server, lr=server.lr * factor).step(params, delta, state)
