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
   otherwise **loop**: a stacked step has a fixed overhead (the ``vmap``) that the cohort shares, where the loop
   pays its per-step overhead once per client; the stack starts at the measured crossing (``benchmarks/README.md``,
   "Where the auto rule's thresholds come from"). A sampler that
   declares no expected cohort is taken to choose every client.

Then, on CPU, how the cores are used: the threads this process may use (``torch.get_num_threads()``: every
core by default, fewer where the caller set it, e.g. ``fedsample run --jobs``) go to torch's intra-op threads
in this process (**threads**), to that many clients trained side by side on threads of this process with one
torch thread each (**client threads**, the loop engine's ``client_threads``,
:class:`fedsample.federation.simulator.Simulator`), or to that many worker processes of one thread each, every
worker holding the clients ``k mod workers`` and running the engine picked above (**pool**,
:mod:`fedsample.federation.pool`; the Ray federation's split, without Ray). Intra-op threads parallelise each
operation, which pays for large operations; client threads and a pool run whole clients side by side, which
pays when a round has many clients' worth of small operations. Client threads share this process's data and
interpreter (no start-up, no traffic, no second copy of anything but the model); a pool's workers are fresh
interpreters (a few seconds to start, a few hundred MB each) and each round moves the parameters to every
worker and a partial sum back. So, in order:

8. One thread allowed, a device other than the CPU, or a one-step cohort (one large union forward/backward,
   which threads parallelise): **threads**.
9. Fewer than :data:`SPLIT_MIN_CLIENTS_PER_WORKER` expected clients per thread, or too little work per round:
   estimated compute (:func:`round_work`: 3 x the model's multiply-adds per sample x the rows the cohort trains
   on, at a nominal :data:`NOMINAL_MACS_PER_S`) below :data:`SPLIT_MIN_ROUND_S`: **threads**.
10. The loop engine: **client threads**, as many as threads allowed (a model that draws random numbers outside
    ``nn.Dropout`` then trains one client at a time, as :class:`~fedsample.federation.simulator.Simulator` decides
    and the run records: torch's global generator serves one client at a time). Each client's numbers
    are those of a one-thread run and the server sums the replies in cohort order, so the run's numbers do not
    depend on the number of threads. Client threads beat intra-op threads and the pool on pfl-research's CIFAR-10
    workload, at the memory of one process (``benchmarks/README.md``, "Where the auto rule's thresholds come from").
11. The vectorized engine, with a model and parts a fresh interpreter can import (no class defined in
    ``__main__``) and estimated compute of at least :data:`POOL_MIN_RUN_S` over the run's rounds (to pay for
    starting the workers): a **pool** of as many workers as threads allowed, one thread each; otherwise
    **threads**. ``workers=1`` keeps one process where memory matters more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, cast

import numpy as np
import torch
from torch import nn

from fedsample import parts
from fedsample.parts import ClientSampler, LocalSolver
from fedsample.training import random_layers

__all__ = ["BackendChoice", "STACKED_MIN_CLIENTS", "choose_backend", "expected_cohort"]

STACKED_MIN_CLIENTS = 5
"""The smallest cohort for which stacking the clients' parameters can pay off."""
SPLIT_MIN_CLIENTS_PER_WORKER = 2  # splitting a round by client (client threads or a pool): expected clients per worker
NOMINAL_MACS_PER_S = 2.5e10  # one core, fp32 forward/backward multiply-adds (PflCNN on the benchmark machine: ~2.5e10)
SPLIT_MIN_ROUND_S = 0.2  # a round's estimated compute, single process: below it splitting clients (threads or pool) does not pay
# (a pool's per-round traffic weighs; client threads would mostly wait on each other's Python work under the GIL)
POOL_MIN_RUN_S = 10.0  # the run's estimated compute, single process: below it starting the workers weighs
_CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


@dataclass(frozen=True)
class BackendChoice:
    """The engine ``backend="auto"`` picked and the rule that picked it (recorded with the run); ``workers`` is
    the number of worker processes (1: this process), ``client_threads`` the clients the loop engine trains side
    by side on threads of this process (1: one after the other, on torch's threads)."""

    backend: str
    reason: str
    workers: int = 1
    client_threads: int = 1


class Parts(Protocol):
    """What the engine choice reads of a strategy: its parts (the local solver's schedule, the client sampler's
    expected cohort, whether updates are noised, and each part's class)."""

    @property
    def clients(self) -> ClientSampler: ...
    @property
    def data(self) -> object: ...
    @property
    def local(self) -> LocalSolver: ...
    @property
    def aggregate(self) -> object: ...
    @property
    def server(self) -> object: ...
    @property
    def sizes(self) -> object: ...
    @property
    def noise(self) -> object: ...


def choose_backend(strategy: Parts, sizes: np.ndarray, module: nn.Module, sample: torch.Tensor, device: str = "cpu") -> BackendChoice:
    """The engine for ``strategy`` training ``module`` on clients of ``sizes`` (``sample``: one input row);
    see the module docstring for the rule."""
    unbatchable = _unbatchable(module, sample)
    if unbatchable:
        return BackendChoice("loop", f"{unbatchable}: the vectorized engine would train it client by client")
    if strategy.noise is not None:
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
    m = parts.expected_trainings(strategy.clients, len(sizes), sizes)
    if m >= STACKED_MIN_CLIENTS:
        return BackendChoice("vectorized", f"multi-step local SGD, no convolutions, ~{m:g} clients per round (>= {STACKED_MIN_CLIENTS}): stacked steps share their overhead")
    return BackendChoice("loop", f"multi-step local SGD, ~{m:g} clients per round (< {STACKED_MIN_CLIENTS}): too few to pay for stacking")


def _unbatchable(module: nn.Module, sample: torch.Tensor) -> str | None:
    """Why the vectorized engine cannot batch this model (None: it can)."""
    return random_layers.prepare(module, sample[:1], channels_last=False).unbatchable(sample[:1])  # layout: irrelevant here


def expected_cohort(sampler: object, num_clients: int, sizes: np.ndarray | None = None) -> float:
    """Clients per round ``sampler`` is expected to pick: a client sampler's ``expected_cohort(num_clients, sizes)``
    (``sizes``: the clients' data sizes, which a sampler whose cohort follows from them needs; the strategy checks
    where it is built that its sampler is one), or every client for an object that is not a
    :class:`~fedsample.parts.ClientSampler`."""
    if parts.conforms(sampler, ClientSampler):
        return float(cast(ClientSampler, sampler).expected_cohort(num_clients, sizes))
    return float(num_clients)


def choose_cores(
    engine: BackendChoice, strategy: Parts, sizes: np.ndarray, module: nn.Module, sample: torch.Tensor, device: str = "cpu",
    rounds: int | None = None, threads: int | None = None,
) -> BackendChoice:
    """``engine`` (rules 1-7) run on this process's threads, on client threads or on a pool of worker processes
    (rules 8-11 of the module docstring); ``threads``: the threads allowed (default ``torch.get_num_threads()``),
    ``rounds`` the run's rounds (None: one)."""
    threads = torch.get_num_threads() if threads is None else int(threads)
    here = f"in this process on {threads} torch thread{'s' if threads > 1 else ''}"
    if threads < 2 or device != "cpu":
        return BackendChoice(engine.backend, f"{engine.reason}; {here}", 1)
    solver = strategy.local
    if parts.batched(solver) and solver.single_step(sizes):
        return BackendChoice(engine.backend, f"{engine.reason}; {here} (one union forward/backward: threads split it)", 1)
    m = expected_cohort(strategy.clients, len(sizes), sizes)
    if m < SPLIT_MIN_CLIENTS_PER_WORKER * threads:
        return BackendChoice(engine.backend, f"{engine.reason}; {here} (~{m:g} clients per round: too few to split over {threads} threads)", 1)
    seconds = round_work(solver, sizes, m, module, sample) / NOMINAL_MACS_PER_S
    work = f"~{m:g} clients and ~{seconds:.2g} s of compute per round"
    if seconds < SPLIT_MIN_ROUND_S:
        return BackendChoice(engine.backend, f"{engine.reason}; {here} ({work}: too little to split by client)", 1)
    if engine.backend == "loop":
        return BackendChoice(engine.backend, f"{engine.reason}; in this process, clients side by side on {threads} threads of 1 torch "
                                             f"thread ({work})", 1, client_threads=threads)
    foreign = unimportable(strategy, module)
    if foreign:
        return BackendChoice(engine.backend, f"{engine.reason}; {here} ({foreign} is defined in __main__: pool workers could not import it)", 1)
    total = seconds * (rounds or 1)
    if total < POOL_MIN_RUN_S:
        return BackendChoice(engine.backend, f"{engine.reason}; {here} (~{total:.2g} s of compute per run: too little to pay for "
                                             f"starting worker processes)", 1)
    return BackendChoice(engine.backend, f"{engine.reason}; on a pool of {threads} worker processes of 1 thread, clients k mod {threads} "
                                         f"({work})", threads)


def macs_per_sample(module: nn.Module, sample: torch.Tensor) -> float:
    """Multiply-adds of one sample's forward through the model's linear and convolution layers (hooks on one
    forward of ``sample``, one row)."""
    total = [0.0]

    def hook(layer: nn.Module, _inputs: tuple[object, ...], output: object) -> None:
        if isinstance(output, torch.Tensor):  # each output element: one multiply-add per weight it reads
            weight = cast(torch.Tensor, layer.weight)
            per_output = weight.numel() / weight.shape[1 if getattr(layer, "transposed", False) else 0]  # torch's convolutions
            total[0] += float(output[:1].numel() * per_output)

    handles = [m.register_forward_hook(hook) for m in module.modules() if isinstance(m, (nn.Linear, *_CONVOLUTIONS))]
    try:
        with torch.no_grad():
            module(sample[:1])
    finally:
        for h in handles:
            h.remove()
    return total[0]


def round_work(solver: object, sizes: np.ndarray, cohort: float, module: nn.Module, sample: torch.Tensor) -> float:
    """Estimated multiply-adds of a round's local training: 3 (forward and backward) x :func:`macs_per_sample` x
    the rows ``cohort`` clients of the mean size train on (:func:`fedsample.parts.rows_trained`: the solver's
    declared ``rows_trained(sizes)``, else one pass over their data)."""
    sizes = np.asarray(sizes, dtype=np.float64)
    per_client = float(np.mean(parts.rows_trained(solver, sizes))) if len(sizes) else 0.0
    return 3.0 * macs_per_sample(module, sample) * per_client * cohort


def unimportable(strategy: Parts, module: nn.Module) -> str | None:
    """The first class among the strategy's parts and the model's layers that a fresh interpreter cannot import
    by name (defined in ``__main__``), or None."""
    found = [strategy.clients, strategy.data, strategy.local, strategy.aggregate, strategy.server, strategy.sizes, strategy.noise]
    found += list(module.modules())
    for obj in found:
        if obj is not None and type(obj).__module__ == "__main__":
            return type(obj).__name__
    return None
