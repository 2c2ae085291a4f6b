"""``backend="auto"``: which in-process engine trains a run, and why.

Both engines give the same numbers; they differ in speed. The rule reads what the parts declare
(:mod:`fedsample.parts`), never their classes; measured on CPU (``benchmarks/vectorized_vs_loop_every_recipe.py``,
figures in ``benchmarks/README.md``), in order:

1. A model the vectorized engine cannot batch (BatchNorm without running statistics, random operations
   outside ``nn.Dropout``): **loop** (the vectorized engine would run it through the loop anyway).
2. Clipped and noised updates (``Strategy.noise``): **loop** (each update is clipped on its own: the
   vectorized engine trains them client by client).
3. A solver that is not ``batched`` (one that declares no schedule, or whose ``run`` adds to it: ``EpochSGD``,
   custom subclasses): **loop** (the vectorized engine trains them client by client).
4. A solver whose every client takes exactly one step (``single_step(sizes)``: FedSampling's ``OneGradient``,
   local SGD with ``steps=1`` or one epoch whose batch holds the largest client's data): **vectorized** (one
   forward/backward over the union of the drawn samples, the cost of one centralized step).
5. Multi-step local SGD on an accelerator (``device`` other than "cpu"): **vectorized** (stacked clients fill
   the device).
6. Multi-step local SGD with convolutions on CPU: **loop** (stacked clients run as grouped convolutions, about
   3× slower on CPU than the same convolutions one client after the other).
7. Multi-step local SGD of a convolution-free model: **vectorized** when the client sampler's expected cohort
   (``expected_cohort(N, sizes)``, from the federation's true sizes; ``expected_trainings`` for a sampler where
   more clients train than send) is at least :data:`STACKED_MIN_CLIENTS`,
   otherwise **loop**: a stacked step has a fixed overhead (the ``vmap``) that the cohort shares; measured with
   MLP(64) on Fashion-MNIST, batch 32, the vectorized round was 1.3-3× faster with 10 clients per round (19
   steps each) and even or slower with 5 (IWDS, 188 steps each). A sampler that declares no expected cohort is
   taken to choose every client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from fedsample import parts
from fedsample.training import random_layers

__all__ = ["BackendChoice", "STACKED_MIN_CLIENTS", "choose_backend", "expected_cohort"]

STACKED_MIN_CLIENTS = 8
"""The smallest cohort for which stacking the clients' parameters can pay off."""
_CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


@dataclass(frozen=True)
class BackendChoice:
    """The engine ``backend="auto"`` picked and the rule that picked it (recorded with the run)."""

    backend: str
    reason: str


def choose_backend(strategy: Any, sizes: np.ndarray, module: nn.Module, sample: torch.Tensor, device: str = "cpu") -> BackendChoice:
    """The engine for ``strategy`` training ``module`` on clients of ``sizes`` (``sample``: one input row);
    see the module docstring for the rule."""
    unbatchable = _unbatchable(module, sample)
    if unbatchable:
        return BackendChoice("loop", f"{unbatchable}: the vectorized engine would train it client by client")
    if getattr(strategy, "noise", None) is not None:
        return BackendChoice("loop", "clipped and noised updates: the vectorized engine trains them client by client")
    solver = strategy.local
    if not parts.batched(solver):
        return BackendChoice("loop", f"{type(solver).__name__} is trained client by client on either engine")
    if solver.single_step(sizes):
        if solver.step_rule(0).is_gradient:
            return BackendChoice("vectorized", "one-gradient cohort: one forward/backward over the union of the drawn samples")
        return BackendChoice("vectorized", "every client takes one local step: one forward/backward over the union of the minibatches")
    if device != "cpu":
        return BackendChoice("vectorized", f"multi-step local SGD on {device}: stacked clients fill the device")
    conv = next((type(m).__name__ for m in module.modules() if isinstance(m, _CONVOLUTIONS)), None)
    if conv is not None:
        return BackendChoice("loop", f"multi-step local SGD with {conv} on CPU: stacked clients would run grouped convolutions, slower than one client after the other")
    m = expected_trainings(strategy.clients, len(sizes), sizes)
    if m >= STACKED_MIN_CLIENTS:
        return BackendChoice("vectorized", f"multi-step local SGD, no convolutions, ~{m:g} clients per round (>= {STACKED_MIN_CLIENTS}): stacked steps share their overhead")
    return BackendChoice("loop", f"multi-step local SGD, ~{m:g} clients per round (< {STACKED_MIN_CLIENTS}): too few to pay for stacking")


def _unbatchable(module: nn.Module, sample: torch.Tensor) -> str | None:
    """Why the vectorized engine cannot batch this model (None: it can)."""
    return random_layers.prepare(module, sample[:1]).unbatchable(sample[:1])


def expected_trainings(sampler: Any, num_clients: int, sizes: np.ndarray | None = None) -> float:
    """Clients that train per round: the sampler's declared ``expected_trainings`` where more train than send
    (:class:`fedsample.parts.TrainsFirst`: every available client), else its expected cohort."""
    declared = getattr(sampler, "expected_trainings", None)
    return expected_cohort(sampler, num_clients, sizes) if declared is None else float(declared(num_clients, sizes))


def expected_cohort(sampler: Any, num_clients: int, sizes: np.ndarray | None = None) -> float:
    """Clients per round ``sampler`` is expected to pick: its declared ``expected_cohort(num_clients, sizes)``
    (``sizes``: the clients' data sizes, which a sampler whose cohort follows from them needs), or every client
    for a sampler that declares none."""
    declared = getattr(sampler, "expected_cohort", None)
    return float(num_clients) if declared is None else float(declared(num_clients, sizes))
