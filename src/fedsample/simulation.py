"""``simulate``: run a strategy for some rounds on federated data, with evaluation, checkpoints and resume.

All simulator state (parameters, strategy and server-optimizer state, history, the seed from which
every random draw derives, and the client-held states of the federation) is one :class:`SimulationState`,
saved atomically every N rounds.
"""

from __future__ import annotations

import copy
import math
import os
import warnings
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import numpy as np
import torch
from torch import nn

from fedsample import checks, validate
from fedsample.data.types import FederatedData
from fedsample.runtime.device import blas_on_one_thread, resolve_device, to_device
from fedsample.runtime.heap import heap_frozen
from fedsample.evaluation import evaluate
from fedsample.federation.base import Federation, FederationFactory, client_states_of, load_client_states_into
from fedsample.federation.choose import BackendChoice, choose_backend, choose_cores
from fedsample.federation.faults import FaultModel, with_faults
from fedsample.federation.secure_sum import with_secure_sum
from fedsample.federation.simulator import Simulator
from fedsample.runtime.fingerprint import differences, run_fingerprint
from fedsample.models import initial_parameters
from fedsample.privacy.ledger import Accounting, BudgetExceeded, Ledger
from fedsample.privacy.recorder import LEDGER_KEY
from fedsample.strategy import Strategy
from fedsample.tracking.base import Tracker, TrackerGroup, numeric_metrics
from fedsample.training.functional import Params
from fedsample.runtime.warned import once_per_kind

__all__ = [
    "Backend", "CheckpointError", "Diverged", "SimulationResult", "SimulationState", "build_module", "make_federation",
    "resolve_backend", "simulate",
]


@dataclass
class SimulationState:
    """Everything needed to continue a run exactly: ``round`` rounds are done. ``client_states`` are the
    clients' own ``ClientContext.state`` dicts (kept by the federation, not the strategy), by client id."""

    key: str
    seed: int
    round: int
    params: Params
    state: dict
    history: list[dict] = field(default_factory=list)
    client_states: dict = field(default_factory=dict)
    fingerprint: dict = field(default_factory=dict)

    def save(self, path: Path) -> None:
        """Write atomically: a temporary file in the same folder, then a rename."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        torch.save(self.__dict__, tmp)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path, device: torch.device | str = "cpu") -> "SimulationState":
        """Read a checkpoint with every tensor on ``device``, whichever device wrote it; a truncated or corrupt
        file is one :class:`CheckpointError` line naming it."""
        try:
            fields = torch.load(path, map_location=torch.device(device), weights_only=False)
            return cls(**fields)
        except Exception as error:  # noqa: BLE001 - whatever a damaged file raises (pickle, zip, EOF, type)
            raise CheckpointError(
                f"checkpoint {path} is unreadable ({type(error).__name__}); delete it to start that run afresh"
            ) from None


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or belongs to another run (one line naming the file)."""


class Diverged(ArithmeticError):
    """A run whose loss or parameters became non-finite (one line naming strategy, seed and round)."""


@dataclass
class SimulationResult:
    """A finished run; ``backend`` is the engine that trained it, ``workers`` the worker processes it ran on (1:
    this process), ``client_threads`` the threads its loop engine trained clients on side by side (1: one after the
    other) and ``backend_reason`` why (``backend="auto"`` records the rule that picked both,
    :mod:`fedsample.federation.choose`). ``status`` is ``"ok"``, or the one line
    saying why the run stopped early (the privacy budget); ``privacy`` is the run's ledger
    (:meth:`fedsample.privacy.ledger.Ledger.summary` with every release); ``warnings`` each kind of warning the run
    raised, shown once, with its count (:meth:`fedsample.runtime.warned.Warned.record`)."""

    history: list[dict]
    params: Params
    strategy: str
    seed: int
    backend: str = ""
    backend_reason: str = ""
    status: str = "ok"
    privacy: dict = field(default_factory=dict)
    workers: int = 1
    client_threads: int = 1
    warnings: list[dict] = field(default_factory=list)

    @property
    def final(self) -> dict:
        """The metrics of the last evaluated round."""
        evaluated = [h for h in self.history if "loss" in h]
        return evaluated[-1] if evaluated else {}


def build_module(model: Any, data: FederatedData) -> nn.Module:
    """A model spec (with ``build``) or a ready module."""
    if isinstance(model, nn.Module):
        return model
    return model.build(data.dataset.input_shape, data.dataset.num_classes)


def run_key(strategy: Strategy, seed: int) -> str:
    return f"{strategy!r}|seed={seed}"


Backend = Literal["auto", "vectorized", "loop"]
"""The engine :func:`simulate` runs on: ``"vectorized"``, ``"loop"``, or ``"auto"`` (chosen by :func:`resolve_backend`)."""


@checks.arguments(
    renamed={"data": "federated_data"}, rounds=checks.COUNT, seed=checks.SEED, eval_every=checks.COUNT,
    checkpoint_every=checks.integers(0), resume=checks.BOOLEAN, memory_budget=[checks.COUNT, None], workers=[checks.COUNT, None],
    client_threads=[checks.COUNT, None],
)
def simulate(
    strategy: Strategy,
    federated_data: FederatedData,
    model: Any,
    rounds: int,
    *,
    seed: int = 0,
    eval_every: int = 1,
    checkpoint: str | Path | None = None,
    checkpoint_every: int = 0,
    resume: bool = False,
    progress: Callable[[int], None] | None = None,
    federation: Federation | FederationFactory | None = None,
    backend: Backend = "auto",
    memory_budget: int | None = None,
    faults: FaultModel | None = None,
    device: str | torch.device = "cpu",
    trackers: Sequence[Tracker] | None = None,
    privacy: Accounting | None = None,
    workers: int | None = None,
    client_threads: int | None = None,
) -> SimulationResult:
    """Run ``rounds`` rounds of ``strategy`` on the clients' data ``federated_data`` (a
    :class:`~fedsample.data.types.FederatedData`; the strategy's own ``data`` is its data sampler) and
    evaluate on the test split every ``eval_every`` rounds (and after the last). Everything after ``rounds``
    is keyword-only; each argument is checked up front (one error line naming it). With ``checkpoint`` the state is saved every ``checkpoint_every`` rounds and at
    the end; ``resume`` continues from a saved state and ends with the numbers of an uninterrupted run.
    ``backend`` picks the in-process federation when none is given: ``"auto"`` (default: the faster engine for
    this strategy, model and data, by the rule of :mod:`fedsample.federation.choose`), ``"vectorized"`` (batched
    cohorts) or ``"loop"`` (the per-client reference); all give the same numbers within float tolerance, and the
    result records the engine and why (``backend``, ``backend_reason``).
    ``memory_budget`` (bytes) bounds one chunk of stacked clients in the vectorized backend (default
    :data:`fedsample.federation.vectorized.DEFAULT_MEMORY_BUDGET`); the numbers do not depend on it.
    ``workers`` runs the engine on that many local worker processes of one thread each, the clients split
    k mod workers (:mod:`fedsample.federation.pool`; 1: this process, on torch's threads); with ``backend="auto"``
    and ``workers`` None the rule picks it (a pool where a round has many clients and enough work, as many
    workers as ``torch.get_num_threads()``); the numbers are the single-process engine's up to the order of the
    float32 partial sums. ``client_threads`` trains that many clients of the loop engine side by side on threads of
    this process, torch on one thread each (:class:`~fedsample.federation.simulator.Simulator`; the numbers do not
    depend on how many); with ``backend="auto"`` and both None the rule picks it for a multi-step loop cohort
    with enough work, as many threads as ``torch.get_num_threads()``.

    ``faults`` (:class:`~fedsample.federation.faults.FaultModel`) makes clients drop out or straggle; with
    or without it a client whose procedure raises is left out of its round (docs/reliability.md). A run
    whose parameters, loss or every update become non-finite raises :class:`Diverged`. A resumed run must
    have the checkpoint's fingerprint (strategy, seed, data, model, settings, version) and at least as many
    ``rounds`` as were done; otherwise :class:`CheckpointError` says what differs.
    ``federation`` runs the clients elsewhere: a federation object as it is, or a
    :class:`~fedsample.federation.base.FederationFactory` opened for this run and closed at its end (e.g.
    ``fedsample.federation.ray.ray_federation(workers=4)``: the clients split over Ray actors with the same
    numbers, docs/ray.md). Whichever it is, ``simulate`` wraps it in the failure model and, where the strategy
    declares ``secure_sum``, in :class:`~fedsample.federation.secure_sum.SecureSum`.
    ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"`` or ``"auto"``: CUDA when present) is where the data,
    the model, training, evaluation and the server optimizer live; the seed gives the same cohorts, draws
    and size reports on every device, and the parameters agree within float tolerance.
    ``trackers`` (:mod:`fedsample.tracking`) are started with the run's config, get every round's numbers
    (:func:`~fedsample.tracking.base.numeric_metrics` of its record) at the round as the step, and are closed
    at the end, as failed when the run raises (docs/tracking.md); a resumed run with no round left starts none.
    ``privacy`` (:class:`~fedsample.privacy.ledger.Accounting`; default: user-level, delta 1e-5, PLD, the server's
    view, no budget) is how the run's privacy ledger accounts every release (docs/privacy.md). With its
    ``max_epsilon`` a release that would take epsilon past the budget is not sent: the run stops before it,
    its ``status`` is that one line, and a checkpoint keeps the ledger, so ``resume`` (with a larger budget)
    continues it."""
    where = resolve_device(device)
    data = federated_data
    if strategy.pooled:
        data = data.pooled()
    strategy.check_data(data.num_clients, int(data.sizes().sum()))  # K, m within the data: no silent clamp
    module = build_module(model, data).cpu()  # initialised on the CPU: the same initial numbers on every device
    if isinstance(federation, str):
        raise ValueError(f"federation must be a federation or a federation factory (e.g. fedsample.federation.ray."
                         f"ray_federation(workers=2)), got {federation!r}")
    key = run_key(strategy, seed)
    fingerprint = run_fingerprint(strategy, data, model, seed, {"eval_every": eval_every, "faults": faults})
    state = _start(strategy, module, seed, key, checkpoint, resume, fingerprint, rounds, where)
    ledger = _attach_ledger(state, privacy or Accounting(), data, checkpoint)
    module.to(where)
    given = federation.description if isinstance(federation, FederationFactory) else "given"
    choice = BackendChoice(given, "a federation was passed") if federation is not None else resolve_backend(
        backend, strategy, data, module, memory_budget, where, workers=workers, rounds=rounds - state.round, client_threads=client_threads)
    with ExitStack() as stack:
        warned = stack.enter_context(once_per_kind())  # each warning once per run, counted (fedsample.runtime.warned)
        stack.enter_context(blas_on_one_thread())  # numpy's BLAS beside torch's threads, for this run only (use_threads)
        engine: Federation
        if federation is None and choice.workers > 1:
            federation, choice = _open_pool(stack, choice, data, module, seed, memory_budget, where, fallback=backend == "auto" and workers is None)
        if isinstance(federation, FederationFactory):
            engine = stack.enter_context(federation.open(data, module, seed, memory_budget=memory_budget, device=where))
        elif federation is None:
            engine = make_federation(choice.backend, data, module, seed, memory_budget, where, client_threads=choice.client_threads)
            choice = _as_run(choice, engine)
        else:
            engine = federation
        fed = with_secure_sum(with_faults(engine, faults, seed), strategy.secure_sum)
        stack.enter_context(heap_frozen())  # the objects alive now (torch's, the data's, the engine's) out of every collection
        load_client_states_into(fed, state.client_states)
        tracked = tracked_config(strategy, data, seed, rounds, eval_every, choice, where, fingerprint)
        status = _run_rounds(strategy, fed, module, data, state, ledger, rounds, seed, eval_every, checkpoint,
                             checkpoint_every, progress, where, trackers, tracked)
        spent = _ledger_summary(ledger, strategy, seed)
    return SimulationResult(
        history=state.history, params=state.params, strategy=strategy.name, seed=seed, backend=choice.backend, backend_reason=choice.reason,
        status=status, privacy=spent, workers=choice.workers, client_threads=choice.client_threads, warnings=warned.record(),
    )


def _ledger_summary(ledger: Ledger, strategy: Strategy, seed: int) -> dict:
    """The ledger's summary with every release; where it cannot be computed, the trained run is kept: ``{"error":
    line}`` instead, and one warning line saying what could not be computed."""
    try:
        return ledger.summary(releases=True)
    except Exception as error:  # noqa: BLE001 - after training, nothing the ledger raises may lose the run
        line = f"{strategy.name}, seed {seed}: the privacy ledger could not be computed ({type(error).__name__}: {error})"
        warnings.warn(f"{line}; the trained results are kept", RuntimeWarning, stacklevel=3)
        return {"error": line}


def _as_run(choice: BackendChoice, engine: Any) -> BackendChoice:
    """``choice`` as the engine runs it: a loop engine whose model draws outside ``nn.Dropout`` trains one client at
    a time whatever ``client_threads`` asked (:class:`~fedsample.federation.simulator.Simulator`)."""
    threads = getattr(engine, "client_threads", 1)
    if threads == choice.client_threads:
        return choice
    return BackendChoice(choice.backend, f"{choice.reason}; one client at a time (the model draws random numbers outside "
                                         f"nn.Dropout from torch's global generator)", choice.workers, threads)


def _open_pool(
    stack: ExitStack, choice: BackendChoice, data: FederatedData, module: nn.Module, seed: int, memory_budget: int | None,
    where: torch.device, fallback: bool,
) -> tuple[Federation | None, BackendChoice]:
    """The pool of ``choice.workers`` processes running ``choice.backend``, opened on ``stack``; where the ``auto``
    rule chose it (``fallback``) and it cannot start, this process instead, the reason saying why."""
    from fedsample.federation.pool import pool_federation

    try:
        return stack.enter_context(pool_federation(choice.workers, choice.backend).open(
            data, module, seed, memory_budget=memory_budget, device=where)), choice
    except (OSError, RuntimeError) as error:
        if not fallback:
            raise
        why = str(error).splitlines()[0] if str(error) else type(error).__name__
        return None, BackendChoice(choice.backend, f"{choice.reason}; the pool did not start ({why}): in this process instead", 1)


def _run_rounds(
    strategy: Strategy, fed: Federation, module: nn.Module, data: FederatedData, state: SimulationState, ledger: Ledger,
    rounds: int, seed: int, eval_every: int, checkpoint: str | Path | None, checkpoint_every: int,
    progress: Callable[[int], None] | None, where: torch.device, trackers: Sequence[Tracker] | None, tracked: dict,
) -> str:
    """The rounds ``state.round`` to ``rounds`` on ``fed``: evaluation, divergence checks, checkpoints, and each
    round's numbers to the ``trackers`` (started with ``tracked``, the run's config). Returns the run's status:
    "ok", or the line of a budget stop (the ``ledger``'s ``max_epsilon``)."""
    x_test, y_test = torch.as_tensor(data.dataset.x_test, device=where), torch.as_tensor(data.dataset.y_test, device=where)
    ds = data.dataset
    status = "ok"
    with TrackerGroup((trackers or ()) if state.round < rounds else ()) as track:  # a finished run resumed: nothing to track
        track.start(tracked, resumed_at=state.round)
        for t in range(state.round, rounds):
            before = _without_ledger(state.state) if ledger.accounting.max_epsilon is not None else None
            try:
                state.params, log = strategy.round(fed, state.params, state.state, t, seed)
            except BudgetExceeded as stop:  # nothing of round t+1 past the refused release: its state is put back
                state.state = {**(before or {}), LEDGER_KEY: ledger}
                status = f"{strategy.name}, seed {seed}: {stop}"
                break
            except (ValueError, ArithmeticError) as error:
                raise _round_error(error, strategy, seed, t + 1) from None
            record = {"round": t + 1, **log}
            if (t + 1) % eval_every == 0 or t + 1 == rounds:
                record.update(evaluate(module, state.params, x_test, y_test, ds.task, ds.num_classes))
            track.log_dict(numeric_metrics(record), step=t + 1)
            _check_divergence(record, state.params, strategy, seed)
            state.history.append(record)
            state.round = t + 1
            if checkpoint and checkpoint_every and state.round % checkpoint_every == 0:
                _save(state, fed, Path(checkpoint))
            if progress:
                progress(t + 1)
        if checkpoint:
            _save(state, fed, Path(checkpoint))
    return status


def tracked_config(
    strategy: Strategy, data: FederatedData, seed: int, rounds: int, eval_every: int, choice: BackendChoice, device: torch.device,
    fingerprint: dict,
) -> dict:
    """What the trackers record of a run: the strategy (name and full spec), seed, rounds, evaluation period,
    failure model, model, dataset (name, digest of data and partition, number of clients), engine, device and
    fedsample's version (the run's fingerprint, :func:`fedsample.runtime.fingerprint.run_fingerprint`, and more)."""
    return {
        "name": strategy.name, "strategy": fingerprint["strategy"], "seed": seed, "rounds": rounds, "eval_every": eval_every,
        "faults": fingerprint["faults"], "model": fingerprint["model"], "dataset": data.dataset.name, "data_digest": fingerprint["data"],
        "clients": data.num_clients, "backend": choice.backend, "backend_reason": choice.reason, "workers": choice.workers,
        "client_threads": choice.client_threads, "device": str(device),
        "version": fingerprint["version"],
    }


def _round_error(error: Exception, strategy: Strategy, seed: int, round: int) -> Exception:
    """The error of a round, re-raised with the strategy, seed and round named: a ValueError or ArithmeticError
    keeps its type, anything else (subclasses included) becomes a ValueError; "non-finite" ones are Diverged."""
    if isinstance(error, (Diverged, CheckpointError)):
        return error
    message = f"{strategy.name}, seed {seed}, round {round}: {error}"
    if "non-finite" in str(error):
        return Diverged(message)
    return type(error)(message) if type(error) in (ValueError, ArithmeticError) else ValueError(message)


def divergence(record: dict, params: Params) -> str | None:
    """Why a round's outcome shows divergence: non-finite parameters, loss, or every update non-finite."""
    if not validate.params_finite(params):
        return "the parameters became non-finite"
    for key in ("train_loss", "loss"):
        value = record.get(key)
        if isinstance(value, float) and not math.isfinite(value):
            return f"the {'training' if key == 'train_loss' else 'test'} loss became {value}"
    reasons = [f["reason"] for f in record.get("failed", []) if f.get("phase") == "train"]
    if reasons and record.get("updates") == 0 and all(r.startswith("non-finite") for r in reasons):
        return f"every client's update was non-finite ({reasons[0]})"
    return None


def _check_divergence(record: dict, params: Params, strategy: Strategy, seed: int) -> None:
    why = divergence(record, params)
    if why:
        raise Diverged(f"{strategy.name}, seed {seed}, round {record['round']}: {why}; likely cause: a learning rate too high")


def _start(
    strategy: Strategy, module: nn.Module, seed: int, key: str, checkpoint: Any, resume: bool, fingerprint: dict, rounds: int,
    device: torch.device,
) -> SimulationState:
    """A saved state (loaded onto ``device``) or a fresh one: the seed's initial parameters, created on the
    CPU (the same numbers on every device) and moved to ``device``."""
    if resume and checkpoint and Path(checkpoint).exists():
        saved = SimulationState.load(Path(checkpoint), device)
        _check_resumable(saved, Path(checkpoint), key, fingerprint, rounds)
        return saved
    params = to_device(initial_parameters(module, seed), device)
    state = strategy.init_state(params)
    return SimulationState(key=key, seed=seed, round=0, params=params, state=state, fingerprint=fingerprint)


def _attach_ledger(state: SimulationState, accounting: Accounting, data: FederatedData, checkpoint: Any) -> Ledger:
    """The run's privacy ledger in the strategy state: a new one, or the checkpoint's continued under
    ``accounting`` (same unit, k and threat model); with user-level ``k``, every client must hold at most k records."""
    if accounting.unit == "user" and accounting.k is not None:
        sizes = data.sizes()
        if len(sizes) and int(sizes.max()) > accounting.k:
            raise ValueError(f"privacy: k = {accounting.k} records per user, but client {int(sizes.argmax())} holds {int(sizes.max())}")
    saved = state.state.get(LEDGER_KEY)
    if saved is None and state.round > 0:
        raise CheckpointError(f"checkpoint {checkpoint} has no privacy ledger (an older fedsample wrote it); delete it")
    try:
        ledger = saved.continued_with(accounting) if saved is not None else Ledger(accounting)
    except ValueError as error:
        raise CheckpointError(f"checkpoint {checkpoint}: {error}") from None
    state.state[LEDGER_KEY] = ledger
    return ledger


def _without_ledger(state: dict) -> dict:
    """A copy of the strategy state without the ledger (put back when the budget stops a round midway)."""
    return copy.deepcopy({k: v for k, v in state.items() if k != LEDGER_KEY})


def _check_resumable(saved: SimulationState, path: Path, key: str, fingerprint: dict, rounds: int) -> None:
    """A checkpoint continues only the run that wrote it, and only forward."""
    if not saved.fingerprint:
        raise CheckpointError(f"checkpoint {path} has no run fingerprint (an older fedsample wrote it); delete it")
    changed = differences(saved.fingerprint, fingerprint)
    if changed or saved.key != key:
        raise CheckpointError(f"checkpoint {path} belongs to another run: {', '.join(changed or ['strategy'])} differ")
    if saved.round > rounds:
        raise CheckpointError(f"checkpoint {path} has {saved.round} rounds done, more than the {rounds} asked for")


def _save(state: SimulationState, fed: Federation, path: Path) -> None:
    """Save with the federation's client-held states (a federation whose clients keep none saves none)."""
    state.client_states = client_states_of(fed)
    state.save(path)


BACKENDS = ("auto", "vectorized", "loop")


def resolve_backend(
    backend: str, strategy: Strategy, data: FederatedData, module: nn.Module, memory_budget: int | None = None,
    device: torch.device | str = "cpu", workers: int | None = None, rounds: int | None = None, client_threads: int | None = None,
) -> BackendChoice:
    """The engine ``backend`` names, or for ``"auto"`` the one :func:`~fedsample.federation.choose.choose_backend`
    picks for this strategy, data and model; and how it uses the cores: ``workers`` processes and
    ``client_threads``, or for ``"auto"`` (with both None) what :func:`~fedsample.federation.choose.choose_cores`
    picks for a run of ``rounds`` rounds (1 and 1 for a named engine)."""
    checks.validate("resolve_backend", {"memory_budget": memory_budget, "backend": backend, "workers": workers, "client_threads": client_threads},
                    {"memory_budget": checks.Param(checks.COUNT, None, label="memory_budget (bytes)"), "backend": checks.Options(*BACKENDS),
                     "workers": [checks.COUNT, None], "client_threads": [checks.COUNT, None]})
    kind = torch.device(device).type
    if backend != "auto":  # a named engine: nothing to look at (the device is not touched)
        return _asked_cores(BackendChoice(backend, "asked for"), workers or 1, client_threads or 1, kind)
    sizes = data.sizes()
    sample = torch.as_tensor(np.array(data.dataset.x_train[:1]), device=torch.device(device))  # a copy: data may be read-only
    engine = choose_backend(strategy, sizes, module, sample, kind)
    if workers is not None or client_threads is not None:
        return _asked_cores(engine, workers or 1, client_threads or 1, kind)
    return choose_cores(engine, strategy, sizes, module, sample, kind, rounds)


def _asked_cores(engine: BackendChoice, workers: int, client_threads: int, device: str = "cpu") -> BackendChoice:
    """``engine`` on the ``workers`` processes and ``client_threads`` the caller asked for (a pool runs each
    worker's clients one after the other: client threads are for the loop engine in this process, on CPU)."""
    if client_threads > 1 and (workers > 1 or engine.backend != "loop" or device != "cpu"):
        raise ValueError(f"client_threads={client_threads} trains the loop engine's clients side by side on CPU threads of this "
                         f"process: it needs backend 'loop' (or 'auto' where it picks the loop), no worker processes and device "
                         f"'cpu', got backend {engine.backend!r}, workers={workers} and device {device!r}")
    how = [f"on {workers} worker processes"] if workers > 1 else []
    how += [f"clients side by side on {client_threads} threads"] if client_threads > 1 else []
    if engine.reason == "asked for":  # a named engine
        reason = ", ".join([engine.reason, *how])
    else:  # the engine the auto rule picked, on the cores asked for
        reason = "; ".join([engine.reason, *(f"{h} (asked for)" for h in how)])
    return BackendChoice(engine.backend, reason, workers, client_threads)


def make_federation(
    backend: str, data: FederatedData, module: nn.Module, seed: int, memory_budget: int | None = None, device: torch.device | str = "cpu",
    client_threads: int = 1,
) -> Any:
    """The in-process federation named by ``backend`` (``"loop"`` or ``"vectorized"``), its training data
    moved to ``device`` once (``module`` must already live there); the loop trains ``client_threads`` clients side
    by side."""
    if backend == "loop":
        return Simulator(data, module, seed, device=device, client_threads=client_threads)
    if backend == "vectorized":
        from fedsample.federation.vectorized import DEFAULT_MEMORY_BUDGET, VectorizedSimulator

        return VectorizedSimulator(data, module, seed, memory_budget=memory_budget or DEFAULT_MEMORY_BUDGET, device=device)
    checks.fail("backend", backend, "'loop' or 'vectorized'", "make_federation")
