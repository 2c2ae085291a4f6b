"""The floor: a hand-written PyTorch FedAvg round (per-client loop, in-place SGD, no framework) and one
centralized pass over the same samples. Run by run.py with the project's python:
``python benchmarks/peers/floor.py {round,central} WORKLOAD_FILE WORKLOAD THREADS ROUNDS``."""

from __future__ import annotations

import sys

import numpy as np
import torch
from torch import nn

from workload import Workload, build_model, emit_result, load_rows, set_threads, timed_rounds, workload_named


def local_sgd_(module: nn.Module, x: torch.Tensor, y: torch.Tensor, w: Workload) -> None:
    """``w.local_steps()`` minibatch SGD steps on (x, y) in order, batches of ``w.batch``, updated in place."""
    params = list(module.parameters())
    for step in range(w.local_steps()):
        rows = slice((step * w.batch) % len(x), (step * w.batch) % len(x) + w.batch)
        for p in params:
            p.grad = None
        nn.functional.cross_entropy(module(x[rows]), y[rows]).backward()
        with torch.no_grad():
            for p in params:
                p.add_(p.grad, alpha=-w.lr)


def fedavg_round(module: nn.Module, global_params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                 cohort: np.ndarray, w: Workload) -> None:
    """One FedAvg round (McMahan et al. 2017, Algorithm 1) by hand: each cohort member starts from the global
    parameters, trains locally, its delta is summed; the server moves by ``server_lr`` × the mean delta
    (equal user weights)."""
    total = [torch.zeros_like(g) for g in global_params]
    params = list(module.parameters())
    module.train()
    for u in cohort:
        rows = slice(int(u) * w.per_user, (int(u) + 1) * w.per_user)
        with torch.no_grad():
            for p, g in zip(params, global_params):
                p.copy_(g)
        local_sgd_(module, x[rows], y[rows], w)
        with torch.no_grad():
            for s, p, g in zip(total, params, global_params):
                s.add_(p).sub_(g)
    with torch.no_grad():
        for g, s in zip(global_params, total):
            g.add_(s, alpha=w.server_lr / len(cohort))


def centralized_pass(module: nn.Module, x: torch.Tensor, y: torch.Tensor, cohort: np.ndarray, w: Workload) -> None:
    """One pass of one model over the cohort's samples (batches of ``w.batch``, ``local_steps`` per user's
    rows, the same number of samples and steps as the round, without the per-client copies)."""
    module.train()
    for u in cohort:
        rows = slice(int(u) * w.per_user, (int(u) + 1) * w.per_user)
        local_sgd_(module, x[rows], y[rows], w)


def main(kind: str, path: str, workload: str, threads: int, rounds: int) -> None:
    set_threads(threads)
    w = workload_named(workload)
    x, y, source = load_rows(path)
    torch.manual_seed(0)
    module = build_model(w, x)
    global_params = [p.detach().clone() for p in module.parameters()]
    rng = np.random.default_rng(0)

    def one_round(_: int) -> None:
        cohort = rng.choice(w.users, size=w.cohort, replace=False) if w.cohort < w.users else np.arange(w.users)
        if kind == "round":
            fedavg_round(module, global_params, x, y, cohort, w)
        else:
            centralized_pass(module, x, y, cohort, w)

    first, times, cpu = timed_rounds(one_round, rounds)
    emit_result(f"floor-{kind}", first, times, cpu, data=source, threads=threads)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
