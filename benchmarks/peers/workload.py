"""The two workloads of the peers benchmark, and what every side shares: the data file, the models, the
round clock and the one-line JSON result. Imports only numpy and torch, so the pfl and Flower sides (each in
its own virtual environment) use it too; of fedsample they import only the model specs.

- ``cifar``: pfl-research's CIFAR-10 IID benchmark (its ``benchmarks/image_classification`` baseline config):
  1,000 users × 50 images (3×32×32, 10 classes), FedAvg, 50 users per round drawn uniformly, 1 local epoch
  of batch 10 (5 steps), local SGD lr 0.1, server SGD lr 1.0, weights by user, no evaluation in timed rounds.
- ``small``: 1,000 clients × 2 Fashion-MNIST samples, every client in every round, ``steps`` local SGD steps
  on both samples at lr 0.05, uniform mean, MLP(64).
- ``tiny-cifar``, ``tiny-small-STEPS`` (``run.py --smoke``): the same rounds on 20 users of 50 images (2 per
  round) and 50 clients of 2 samples, to check that every side runs; their figures are not the benchmark's.
"""

from __future__ import annotations

import json
import resource
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

PROCESS_START = time.perf_counter()


@dataclass(frozen=True)
class Workload:
    """One federated round's shape: ``users`` clients of ``per_user`` rows, ``cohort`` of them a round."""

    name: str
    users: int
    per_user: int
    cohort: int
    batch: int
    epochs: int | None
    steps: int | None
    lr: float
    server_lr: float

    @property
    def tiny(self) -> bool:
        """A smoke-mode workload (a few users): it checks the sides run, its figures mean nothing."""
        return self.name.startswith(TINY)

    @property
    def base(self) -> str:
        """The full workload this one scales down (``cifar`` or ``small-STEPS``)."""
        return self.name[len(TINY):] if self.tiny else self.name

    def local_steps(self) -> int:
        """Local SGD steps per client (an epoch of ``per_user / batch`` batches, or ``steps``)."""
        return self.steps if self.steps is not None else self.epochs * -(-self.per_user // self.batch)


CIFAR = Workload("cifar", users=1000, per_user=50, cohort=50, batch=10, epochs=1, steps=None, lr=0.1, server_lr=1.0)
TINY = "tiny-"
TINY_CIFAR_USERS, TINY_CIFAR_COHORT, TINY_SMALL_USERS = 20, 2, 50


def small(steps: int) -> Workload:
    """1,000 × 2-sample clients, all of them every round, ``steps`` full-batch local steps."""
    return Workload(f"small-{steps}", users=1000, per_user=2, cohort=1000, batch=2, epochs=None, steps=steps,
                    lr=0.05, server_lr=1.0)


def workload_named(name: str) -> Workload:
    """``cifar`` or ``small-STEPS``, or either with the ``tiny-`` prefix (a few users, for ``--smoke``)."""
    base = name[len(TINY):] if name.startswith(TINY) else name
    if base == CIFAR.name:
        w = CIFAR
    elif base.startswith("small-") and base[len("small-"):].isdigit():
        w = small(int(base[len("small-"):]))
    else:
        raise ValueError(f"unknown workload {name!r}; expected cifar or small-STEPS, optionally prefixed {TINY!r}")
    if base == name:
        return w
    if w is CIFAR:
        return replace(w, name=name, users=TINY_CIFAR_USERS, cohort=TINY_CIFAR_COHORT)
    return replace(w, name=name, users=TINY_SMALL_USERS, cohort=TINY_SMALL_USERS)


def model_spec(w: Workload):
    """The workload's model as a fedsample spec: ``PflCNN`` (pfl-research's CIFAR-10 CNN, with dropout) or
    ``MLP(hidden=64)``. fedsample.models needs only torch, so the pfl and Flower sides build the same layers."""
    from fedsample import models

    return models.PflCNN() if w.base == CIFAR.name else models.MLP(hidden=64)


def build_model(w: Workload, x: torch.Tensor) -> nn.Module:
    """The workload's model for inputs shaped like the rows ``x``, 10 classes."""
    return model_spec(w).build(tuple(x.shape[1:]), 10)


def load_rows(path: str | Path) -> tuple[torch.Tensor, torch.Tensor, str]:
    """The workload file written by ``run.py``: float32 inputs (users × per_user rows, user ``u`` owns rows
    ``u*per_user … (u+1)*per_user - 1``), int64 labels and where the rows come from."""
    with np.load(path) as f:
        return torch.from_numpy(f["x"]), torch.from_numpy(f["y"]), str(f["source"])


def set_threads(threads: int) -> None:
    """Intra-op threads for this process (the env var OMP_NUM_THREADS is set by the runner as well)."""
    torch.set_num_threads(threads)


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB: Linux's ``VmHWM`` (reset when the process execs), else
    ``ru_maxrss``, which on Linux keeps the high-water mark of the parent it was forked from."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed_rounds(one_round: Callable[[int], object], rounds: int) -> tuple[float, list[float], list[float]]:
    """Run round 0 (its end, from process start, is the time to the first round), then ``rounds`` warm
    rounds; returns (time to first round, warm round times, the warm rounds' CPU time of this process), seconds."""
    one_round(0)
    first = time.perf_counter() - PROCESS_START
    times, cpu = [], []
    for t in range(1, rounds + 1):
        start, start_cpu = time.perf_counter(), time.process_time()
        one_round(t)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return first, times, cpu


def emit_result(name: str, first_round_s: float, round_times: list[float], round_cpu: list[float] | None = None,
                **extra: object) -> None:
    """Print the side's one result line, ``RESULT {json}``: median warm round, all warm rounds, time to
    the first round, peak RSS of this process and, where measured, the warm rounds' CPU time of this process (all
    its threads; a side whose threads spin while they wait counts the spinning too)."""
    cpu = {"cpu_s_per_round": float(np.median(round_cpu)), "round_cpu_s": round_cpu} if round_cpu else {}
    record = {"name": name, "s_per_round": float(np.median(round_times)), "round_times_s": round_times,
              "time_to_first_round_s": first_round_s, "peak_rss_mb": peak_rss_mb(), **cpu, **extra}
    print("RESULT " + json.dumps(record), flush=True)
