"""R draws of a strategy's round at a frozen global model, and the bias and variance of its estimator.

A draw is the strategy's own round (``Strategy.round``: size reports, ``clients.select``, ``data.plan``, the
plan's draw on every client with the simulators' counter-based streams, ``aggregate.combine``) with the server
step replaced by a recorder, so the model never moves; draw i is round ``first_round + i``. Parts that keep
state (FedSTS's strata, ISFedAvg's probabilities) keep it across draws as in a run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from fedsample.diagnostics.federation import LinearisedFederation
from fedsample.federation.faults import FaultModel, with_faults
from fedsample.federation.secure_sum import with_secure_sum
from fedsample.parts import ServerState
from fedsample.runtime.records import Record, State
from fedsample.strategy import Strategy
from fedsample.training.functional import Params

__all__ = ["Draws", "MIN_DRAWS", "draw_rounds", "estimator_statistics", "full_gradient", "squared_bias"]

JACKKNIFE_BLOCKS = 20
MIN_DRAWS = 4  #: the jackknife leaves out one of at least 2 blocks of at least 2 draws


class _RecordingServer:
    """A server optimizer that records the aggregated update and leaves the parameters as they are."""

    lr = 1.0  # nothing to scale: the recorded update is the aggregate itself

    def __init__(self) -> None:
        self.delta: Params | None = None

    def init_state(self, params: Params) -> ServerState:
        return {}

    def step(self, params: Params, delta: Params, state: ServerState) -> tuple[Params, ServerState]:
        self.delta = delta
        return params, state


@dataclass
class Draws:
    """What R draws produced: the estimates ĝ (R x basis dim; 0 where no update arrived), how many rounds each
    training row was drawn in (rows whose update reached the server), and per round the samples drawn, clients
    contacted, updates and bytes sent up, local trainings and probes, the round logs (size estimates, sampling
    ratios), and the strategy state after the last draw (what an estimated sampler's replay starts from)."""

    estimates: np.ndarray
    inclusion: np.ndarray
    samples: np.ndarray
    contacted: np.ndarray
    updates: np.ndarray
    bytes_up: np.ndarray
    logs: list[Record]
    trainings: np.ndarray
    probes: np.ndarray
    state: State


def draw_rounds(strategy: Strategy, federation: LinearisedFederation, params: Params, rounds: int, seed: int,
                first_round: int = 0, faults: FaultModel | None = None, advance: Callable[[], None] | None = None) -> Draws:
    """Run ``rounds`` rounds of ``strategy`` at the frozen ``params``, recording each round's aggregate; the
    clients drop out or straggle by ``faults`` (the experiment's failure model) as in a run. ``advance`` is called
    after each draw (a progress bar)."""
    recorder = _RecordingServer()
    frozen = dataclasses.replace(strategy, server=recorder, schedule=None)  # a schedule scales the server's step, not the aggregate
    state = frozen.init_state(params)
    # the failure model, then sealed where the strategy declares a secure sum: the federation a run builds
    served = with_secure_sum(with_faults(federation, faults, seed), frozen.secure_sum, seed)
    n = len(federation.data.dataset.y_train)
    per_round = [np.zeros(rounds, dtype=np.int64) for _ in range(6)]
    out = Draws(np.zeros((rounds, federation.basis.dim)), np.zeros(n, dtype=np.int64),
                per_round[0], per_round[1], per_round[2], per_round[3], [], per_round[4], per_round[5], state)
    drawn = np.zeros(n, dtype=bool)
    for i in range(rounds):
        recorder.delta = None
        federation.new_round()
        _, log = frozen.round(served, params, state, first_round + i, seed)
        cost = federation.new_round()
        if recorder.delta is not None:
            out.estimates[i] = recorder.delta["g"].double().numpy()
        rows = np.concatenate(cost.rows + [np.zeros(0, np.int64)])
        drawn[:] = False
        drawn[rows] = True  # each row counts once per round, however often it was drawn
        out.inclusion += drawn
        out.samples[i], out.contacted[i], out.updates[i], out.bytes_up[i] = len(rows), len(cost.contacted), cost.updates, cost.bytes_up
        out.trainings[i], out.probes[i] = cost.trainings, cost.probes
        out.logs.append(log)
        if advance is not None:
            advance()
    return out


def _block_jackknife_se(blocks: list[np.ndarray], statistic: Callable[[np.ndarray, float, int], float]) -> float:
    """Delete-one-block jackknife standard error of ``statistic(sum vector, sum of squares, count)``."""
    sums = np.array([b.sum(0) for b in blocks])
    squares = np.array([float(np.sum(b * b)) for b in blocks])
    counts = np.array([len(b) for b in blocks])
    S, Q, R = sums.sum(0), squares.sum(), counts.sum()
    leave_out = np.array([statistic(S - s, Q - q, R - c) for s, q, c in zip(sums, squares, counts)])
    B = len(blocks)
    return float(np.sqrt((B - 1) / B * np.sum((leave_out - leave_out.mean()) ** 2)))


def squared_bias(total: np.ndarray, squares: float, count: int) -> float:
    """Unbiased estimate of ||E x||^2 from x_1..x_R: (||sum x||^2 - sum ||x||^2) / (R (R - 1)) (a U-statistic:
    the mean of <x_i, x_j> over pairs i != j), so it is 0 on average when E x = 0, unlike ||mean x||^2."""
    return float((np.dot(total, total) - squares) / (count * (count - 1)))


def estimator_statistics(estimates: np.ndarray, target: np.ndarray, blocks: int = JACKKNIFE_BLOCKS) -> dict[str, float]:
    """Bias and variance of the estimates ĝ_1..ĝ_R of ``target`` = g*, relative to ||g*||^2.

    - ``bias_sq`` = ||E ĝ - g*||^2 / ||g*||^2, unbiased (:func:`squared_bias`), with a delete-a-block jackknife
      standard error ``bias_sq_se`` and ``bias_z`` = bias_sq / bias_sq_se; ``bias`` = sqrt(max(bias_sq, 0));
    - ``variance`` = E||ĝ - E ĝ||^2 / ||g*||^2 (the sample covariance's trace);
    - ``mse`` = E||ĝ - g*||^2 / ||g*||^2 = variance + bias_sq, with its standard error ``mse_se``;
    - ``scale`` = <E ĝ, g*> / ||g*||^2 and ``cosine`` of E ĝ with g* (a biased estimator may still point the
      same way)."""
    R = len(estimates)
    if R < MIN_DRAWS:
        raise ValueError(f"need at least {MIN_DRAWS} draws, got {R}")
    norm2 = float(np.dot(target, target))
    x = estimates - target
    total, sq = x.sum(0), np.sum(x * x, axis=1)
    b2 = squared_bias(total, float(sq.sum()), R) / norm2
    se = _block_jackknife_se(np.array_split(x, min(blocks, R // 2)), squared_bias) / norm2
    mean = estimates.mean(0)
    variance = float(np.sum((estimates - mean) ** 2) / (R - 1)) / norm2
    mean_norm = float(np.linalg.norm(mean))
    return {
        "bias": float(np.sqrt(max(b2, 0.0))), "bias_sq": b2, "bias_sq_se": se, "bias_z": b2 / se if se > 0 else 0.0,
        "variance": variance, "mse": float(sq.mean()) / norm2, "mse_se": float(sq.std(ddof=1) / np.sqrt(R)) / norm2,
        "scale": float(np.dot(mean, target)) / norm2,
        "cosine": float(np.dot(mean, target)) / (mean_norm * np.sqrt(norm2)) if mean_norm > 0 else 0.0,
    }


def full_gradient(matrix: torch.Tensor, rows: np.ndarray) -> np.ndarray:
    """g* = (1/n) sum_s g_s over the partition's rows: every client, every sample, exact sizes."""
    return matrix.index_select(0, torch.as_tensor(rows)).double().mean(0).numpy()
