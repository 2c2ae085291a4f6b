"""``simulate``: run a strategy for some rounds on federated data, with evaluation, checkpoints and resume.

An engine run plus callbacks: :class:`Engine` says where the clients train, the rounds run in :func:`_run_rounds`,
and the callbacks of :mod:`fedsample.callbacks` (tracking, checkpoints, progress, divergence) act between them. All
simulator state (parameters, strategy and server-optimizer state, history, the seed from which every random draw
derives, and the client-held states of the federation) is one :class:`~fedsample.callbacks.SimulationState`.
"""

from __future__ import annotations

import copy
import warnings
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, Sequence, TypedDict

import numpy as np
import torch
from torch import nn

from fedsample import checks
from fedsample.budget import measured_figure
from fedsample.callbacks import (
    Callback, Checkpoint, CheckpointError, Diverged, Divergence, Run, SimulationState,
)
from fedsample.data.types import FederatedData
from fedsample.runtime.device import blas_on_one_thread, resolve_device, to_device
from fedsample.runtime.heap import heap_frozen
from fedsample.runtime.measured import MeasuresRows
from fedsample.evaluation import evaluate
from fedsample.federation.base import Federation, FederationFactory, load_client_states_into
from fedsample.federation.choose import BackendChoice, choose_backend, choose_cores
from fedsample.federation.faults import FaultModel, with_faults
from fedsample.federation.secure_sum import with_secure_sum
from fedsample.federation.simulator import Simulator
from fedsample.runtime.fingerprint import run_fingerprint
from fedsample.models import initial_parameters
from fedsample.privacy.ledger import Accounting, BudgetExceeded, Ledger, Summary
from fedsample.privacy.recorder import LEDGER_KEY
from fedsample.strategy import Strategy
from fedsample.training.functional import Params
from fedsample.runtime.records import JSONObject, Record, State
from fedsample.runtime.warned import once_per_kind

if TYPE_CHECKING:
    from fedsample.federation.vectorized import VectorizedSimulator

__all__ = [
    "Backend", "BuildsModule", "CheckpointError", "Diverged", "EARLIER_KEYWORDS", "Engine", "EngineOptions", "Model", "SimulationResult",
    "SimulationState", "build_module", "make_federation", "resolve_backend", "simulate",
]



class BuildsModule(Protocol):
    """A model spec (:mod:`fedsample.models`, or a user's own): makes the module for the data's shape and classes."""

    def build(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module: ...


#: What ``simulate`` trains: a ready module, or a spec it builds for the data.
Model = nn.Module | BuildsModule


@dataclass
class SimulationResult:
    """A finished run; ``backend`` is the engine that trained it, ``workers`` the worker processes it ran on (1:
    this process), ``client_threads`` the threads its loop engine trained clients on side by side (1: one after the
    other) and ``backend_reason`` why (``backend="auto"`` records the rule that picked both,
    :mod:`fedsample.federation.choose`). ``status`` is ``"ok"``, or the one line
    saying why the run stopped early (the privacy budget); ``privacy`` is the run's ledger
    (:meth:`fedsample.privacy.ledger.Ledger.summary` with every release); ``warnings`` each kind of warning the run
    raised, shown once, with its count (:meth:`fedsample.runtime.warned.Warned.record`)."""

    history: list[Record]
    params: Params
    strategy: str
    seed: int
    backend: str = ""
    backend_reason: str = ""
    status: str = "ok"
    privacy: Summary = field(default_factory=lambda: Summary())
    workers: int = 1
    client_threads: int = 1
    warnings: list[JSONObject] = field(default_factory=list)

    @property
    def final(self) -> Record:
        """The metrics of the last evaluated round."""
        evaluated = [h for h in self.history if "loss" in h]
        return evaluated[-1] if evaluated else {}


def build_module(model: Model, data: FederatedData) -> nn.Module:
    """A model spec (with ``build``) or a ready module."""
    if isinstance(model, nn.Module):
        return model
    return model.build(data.dataset.input_shape, data.dataset.num_classes)


def run_key(strategy: Strategy, seed: int) -> str:
    return f"{strategy!r}|seed={seed}"


Backend = Literal["auto", "vectorized", "loop"]
"""The engine :func:`simulate` runs on: ``"vectorized"``, ``"loop"``, or ``"auto"`` (chosen by :func:`resolve_backend`)."""


class EngineOptions(TypedDict, total=False):
    """:class:`Engine`'s settings beyond its backend and device, by keyword (an experiment's further settings:
    ``fedsample run --workers``' Ray federation, say)."""

    federation: Federation | FederationFactory | None
    workers: int | None
    client_threads: int | None
    memory_budget: int | None


@dataclass(frozen=True)
class Engine:
    """Where a run's clients train and on how many cores; none of it changes the numbers beyond float tolerance.

    ``backend`` picks the in-process federation when none is given: ``"auto"`` (default: the faster engine for the
    strategy, model and data, by the rule of :mod:`fedsample.federation.choose`), ``"vectorized"`` (batched cohorts)
    or ``"loop"`` (the per-client reference); the result records the engine and why (``backend``,
    ``backend_reason``). ``federation`` runs the clients elsewhere: a federation object as it is, or a
    :class:`~fedsample.federation.base.FederationFactory` opened for the run and closed at its end (e.g.
    ``fedsample.federation.ray.ray_federation(workers=4)``: the clients split over Ray actors, docs/ray.md).
    ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"`` or ``"auto"``: CUDA when present) is where the data, the model,
    training, evaluation and the server optimizer live; the seed gives the same cohorts, draws and size reports on
    every device. ``workers`` runs the engine on that many local worker processes of one thread each, the clients
    split k mod workers (:mod:`fedsample.federation.pool`; 1: this process); ``client_threads`` trains that many
    clients of the loop engine side by side on threads of this process
    (:class:`~fedsample.federation.simulator.Simulator`); with ``backend="auto"`` and both None the rule picks them.
    ``memory_budget`` (bytes) bounds one chunk of stacked clients in the vectorized engine (default
    :data:`fedsample.federation.vectorized.DEFAULT_MEMORY_BUDGET`)."""

    backend: Backend = "auto"
    federation: Federation | FederationFactory | None = None
    device: str | torch.device = "cpu"
    workers: int | None = None
    client_threads: int | None = None
    memory_budget: int | None = None

    def __post_init__(self) -> None:
        checks.validate("simulate", {"backend": self.backend, "memory_budget": self.memory_budget, "workers": self.workers,
                                     "client_threads": self.client_threads},
                        {"backend": checks.Options(*BACKENDS), "memory_budget": [checks.COUNT, None],
                         "workers": [checks.COUNT, None], "client_threads": [checks.COUNT, None]})
        if isinstance(self.federation, str):
            raise ValueError(f"federation must be a federation or a federation factory (e.g. fedsample.federation.ray."
                             f"ray_federation(workers=2)), got {self.federation!r}")


EARLIER_KEYWORDS = {
    **{name: f"engine=Engine({name}=...)" for name in ("backend", "federation", "device", "workers", "client_threads", "memory_budget")},
    "trackers": "callbacks=[Tracking(trackers)]", "checkpoint": "callbacks=[Checkpoint(path)]",
    "checkpoint_every": "callbacks=[Checkpoint(path, every=...)]", "resume": "callbacks=[Checkpoint(path, resume=True)]",
    "progress": "callbacks=[Progress(report)]", "data": "federated_data",
}
"""``simulate``'s keywords before :class:`Engine` and the callbacks grouped them, each refused with one line
naming its spelling now (a ``TypeError``)."""


@checks.arguments(renamed=EARLIER_KEYWORDS, rounds=checks.COUNT, seed=checks.SEED, eval_every=checks.COUNT)
def simulate(
    strategy: Strategy,
    federated_data: FederatedData,
    model: Model,
    rounds: int,
    *,
    seed: int = 0,
    eval_every: int = 1,
    faults: FaultModel | None = None,
    privacy: Accounting | None = None,
    engine: Engine | None = None,
    callbacks: Sequence[Callback] = (),
) -> SimulationResult:
    """Run ``rounds`` rounds of ``strategy`` on the clients' data ``federated_data`` (a
    :class:`~fedsample.data.types.FederatedData`; the strategy's own ``data`` is its data sampler) and
    evaluate on the test split every ``eval_every`` rounds (and after the last). Everything after ``rounds``
    is keyword-only; each argument is checked up front (one error line naming it).
    ``engine`` (:class:`Engine`: backend, federation, device, workers, client threads, memory budget) is where the
    clients train; whichever federation it is, ``simulate`` wraps it in the failure model and, where the strategy
    declares ``secure_sum``, in :class:`~fedsample.federation.secure_sum.SecureSum`.
    ``callbacks`` (:mod:`fedsample.callbacks`) see each round: :class:`~fedsample.callbacks.Tracking` (trackers,
    docs/tracking.md), :class:`~fedsample.callbacks.Checkpoint` (the state saved every N rounds and at the end;
    with ``resume`` a saved state continues and ends with the numbers of an uninterrupted run),
    :class:`~fedsample.callbacks.Progress`; every run ends with :class:`~fedsample.callbacks.Divergence`: a run
    whose parameters, loss or every update become non-finite raises :class:`~fedsample.callbacks.Diverged`.
    The earlier keywords (``backend``, ``federation``, ``device``, ``workers``, ``client_threads``,
    ``memory_budget``, ``trackers``, ``checkpoint``, ``checkpoint_every``, ``resume``, ``progress``, ``data``) are
    refused, each with one line naming its spelling now (:data:`EARLIER_KEYWORDS`).

    ``faults`` (:class:`~fedsample.federation.faults.FaultModel`) makes clients drop out or straggle; with
    or without it a client whose procedure raises is left out of its round (docs/reliability.md). A resumed run
    must have the checkpoint's fingerprint (strategy, seed, data, model, settings, version) and at least as many
    ``rounds`` as were done; otherwise :class:`~fedsample.callbacks.CheckpointError` says what differs.
    ``privacy`` (:class:`~fedsample.privacy.ledger.Accounting`; default: user-level, delta 1e-5, PLD, the server's
    view, no budget) is how the run's privacy ledger accounts every release (docs/privacy.md). With its
    ``max_epsilon`` a release that would take epsilon past the budget is not sent: the run stops before it,
    its ``status`` is that one line, and a checkpoint keeps the ledger, so ``resume`` (with a larger budget)
    continues it."""
    engine = engine or Engine()
    where = resolve_device(engine.device)
    data = federated_data
    if strategy.pooled:
        data = data.pooled()
    strategy.check_data(data.num_clients, int(data.sizes().sum()))  # K, m within the data: no silent clamp
    module = build_module(model, data).cpu()  # initialised on the CPU: the same initial numbers on every device
    key = run_key(strategy, seed)
    fingerprint = run_fingerprint(strategy, data, model, seed, {"eval_every": eval_every, "faults": faults})
    checkpoint = next((c for c in callbacks if isinstance(c, Checkpoint)), None)
    saved = checkpoint.resumed(key, fingerprint, rounds, where) if checkpoint is not None else None
    state = saved or _start(strategy, module, seed, key, fingerprint, where)
    ledger = _attach_ledger(state, privacy or Accounting(), data, None if checkpoint is None else checkpoint.path)
    module.to(where)
    federation = engine.federation
    given = federation.description if isinstance(federation, FederationFactory) else "given"
    choice = BackendChoice(given, "a federation was passed") if federation is not None else resolve_backend(
        engine.backend, strategy, data, module, engine.memory_budget, where, workers=engine.workers, rounds=rounds - state.round,
        client_threads=engine.client_threads)
    with ExitStack() as stack:
        warned = stack.enter_context(once_per_kind())  # each warning once per run, counted (fedsample.runtime.warned)
        stack.enter_context(blas_on_one_thread())  # numpy's BLAS beside torch's threads, for this run only (use_threads)
        opened, choice = _open_engine(stack, engine, choice, data, module, seed, where)
        fed = with_secure_sum(with_faults(opened, faults, seed), strategy.secure_sum, seed)
        stack.enter_context(heap_frozen())  # the objects alive now (torch's, the data's, the engine's) out of every collection
        load_client_states_into(fed, state.client_states)
        run = Run(strategy.name, seed, rounds, state, fed, tracked_config(strategy, data, seed, rounds, eval_every, choice, where, fingerprint))
        meter = opened if isinstance(opened, MeasuresRows) else None  # the unwrapped engine: its count is never sent
        status = _run_rounds(strategy, run, module, data, ledger, eval_every, where, (*callbacks, Divergence()), meter)
        spent = _ledger_summary(ledger, strategy, seed)
    return SimulationResult(
        history=state.history, params=state.params, strategy=strategy.name, seed=seed, backend=choice.backend, backend_reason=choice.reason,
        status=status, privacy=spent, workers=choice.workers, client_threads=choice.client_threads, warnings=warned.record(),
    )


def _ledger_summary(ledger: Ledger, strategy: Strategy, seed: int) -> Summary:
    """The ledger's summary with every release; where it cannot be computed, the trained run is kept: ``{"error":
    line}`` instead, and one warning line saying what could not be computed."""
    try:
        return ledger.summary(releases=True)
    except Exception as error:  # noqa: BLE001 - after training, nothing the ledger raises may lose the run
        line = f"{strategy.name}, seed {seed}: the privacy ledger could not be computed ({type(error).__name__}: {error})"
        warnings.warn(f"{line}; the trained results are kept", RuntimeWarning, stacklevel=3)
        return {"error": line}


def _open_engine(
    stack: ExitStack, engine: Engine, choice: BackendChoice, data: FederatedData, module: nn.Module, seed: int, where: torch.device,
) -> tuple[Federation, BackendChoice]:
    """The federation the run's clients answer through, opened on ``stack`` (a pool, a factory's federation, the
    in-process engine ``choice`` names, or the one ``engine`` gives as it is), and ``choice`` as it runs."""
    federation = engine.federation
    if federation is None and choice.workers > 1:
        federation, choice = _open_pool(stack, choice, data, module, seed, engine.memory_budget, where,
                                        fallback=engine.backend == "auto" and engine.workers is None)
    if isinstance(federation, FederationFactory):
        return stack.enter_context(federation.open(data, module, seed, memory_budget=engine.memory_budget, device=where)), choice
    if federation is None:
        built = make_federation(choice.backend, data, module, seed, engine.memory_budget, where, client_threads=choice.client_threads)
        return built, _as_run(choice, built.client_threads if choice.backend == "loop" else 1)
    return federation, choice


def _as_run(choice: BackendChoice, threads: int) -> BackendChoice:
    """``choice`` as the engine runs it, on ``threads`` client threads: a loop engine whose model draws outside
    ``nn.Dropout`` trains one client at a time whatever ``client_threads`` asked
    (:class:`~fedsample.federation.simulator.Simulator`)."""
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
    strategy: Strategy, run: Run, module: nn.Module, data: FederatedData, ledger: Ledger, eval_every: int, where: torch.device,
    callbacks: Sequence[Callback], meter: MeasuresRows | None = None,
) -> str:
    """The rounds ``run.state.round`` to ``run.rounds`` on ``run.federation``, evaluated every ``eval_every`` rounds
    (and after the last), each round's record shown to the ``callbacks`` before it is kept and the kept round after
    (:class:`~fedsample.callbacks.Callback`). Returns the run's status: "ok", or the line of a budget stop (the
    ``ledger``'s ``max_epsilon``). Where the server was told no realised budget, the record gets the ``meter``'s
    (the in-process engine's) count of the round's rows trained, after the round (:func:`fedsample.budget.measured_figure`)."""
    x_test, y_test = torch.as_tensor(data.dataset.x_test, device=where), torch.as_tensor(data.dataset.y_test, device=where)
    ds, state, seed = data.dataset, run.state, run.seed
    status = "ok"
    with ExitStack() as ending:  # each begun callback ends, the last begun first, told whether the run raised
        for callback in callbacks:
            callback.begin(run)
            ending.push(lambda kind, *_, c=callback: c.end(run, kind is not None))
        for t in range(state.round, run.rounds):
            before = _without_ledger(state.state) if ledger.accounting.max_epsilon is not None else None
            try:
                state.params, log = strategy.round(run.federation, state.params, state.state, t, seed)
            except BudgetExceeded as stop:  # nothing of round t+1 past the refused release: its state is put back
                state.state = {**(before or {}), LEDGER_KEY: ledger}
                status = f"{strategy.name}, seed {seed}: {stop}"
                break
            except (ValueError, ArithmeticError) as error:
                raise _round_error(error, strategy, seed, t + 1) from None
            measured = meter.rows_measured() if meter is not None else None
            record = {"round": t + 1, **log, **measured_figure(log, measured)}
            if (t + 1) % eval_every == 0 or t + 1 == run.rounds:
                record.update(evaluate(module, state.params, x_test, y_test, ds.task, ds.num_classes))
            for callback in callbacks:
                callback.on_record(run, record)
            state.history.append(record)
            state.round = t + 1
            for callback in callbacks:
                callback.after_round(run)
    return status


def tracked_config(
    strategy: Strategy, data: FederatedData, seed: int, rounds: int, eval_every: int, choice: BackendChoice, device: torch.device,
    fingerprint: dict[str, str],
) -> dict[str, object]:
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


def _start(strategy: Strategy, module: nn.Module, seed: int, key: str, fingerprint: dict[str, str], device: torch.device) -> SimulationState:
    """A fresh state: the seed's initial parameters, created on the CPU (the same numbers on every device) and moved
    to ``device``."""
    params = to_device(initial_parameters(module, seed), device)
    state = strategy.init_state(params)
    return SimulationState(key=key, seed=seed, round=0, params=params, state=state, fingerprint=fingerprint)


def _attach_ledger(state: SimulationState, accounting: Accounting, data: FederatedData, checkpoint: object) -> Ledger:
    """The run's privacy ledger in the strategy state: a new one, or the checkpoint's continued under
    ``accounting`` (same unit, k and threat model); with user-level ``k``, every client must hold at most k records."""
    if accounting.unit == "user" and accounting.k is not None:
        sizes = data.sizes()
        if len(sizes) and int(sizes.max()) > accounting.k:
            raise ValueError(f"privacy: k = {accounting.k} records per user, but client {int(sizes.argmax())} holds {int(sizes.max())}")
    saved = state.state.get(LEDGER_KEY)
    if not (saved is None or isinstance(saved, Ledger)):
        raise CheckpointError(f"checkpoint {checkpoint}: its privacy ledger is a {type(saved).__name__}, not a Ledger; delete it")
    if saved is None and state.round > 0:
        raise CheckpointError(f"checkpoint {checkpoint} has no privacy ledger (an older fedsample wrote it); delete it")
    try:
        ledger = saved.continued_with(accounting) if saved is not None else Ledger(accounting)
    except ValueError as error:
        raise CheckpointError(f"checkpoint {checkpoint}: {error}") from None
    state.state[LEDGER_KEY] = ledger
    return ledger


def _without_ledger(state: State) -> State:
    """A copy of the strategy state without the ledger (put back when the budget stops a round midway)."""
    return copy.deepcopy({k: v for k, v in state.items() if k != LEDGER_KEY})


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
) -> Simulator | VectorizedSimulator:
    """The in-process federation named by ``backend`` (``"loop"`` or ``"vectorized"``), its training data
    moved to ``device`` once (``module`` must already live there); the loop trains ``client_threads`` clients side
    by side."""
    if backend == "loop":
        return Simulator(data, module, seed, device=device, client_threads=client_threads)
    if backend == "vectorized":
        from fedsample.federation.vectorized import DEFAULT_MEMORY_BUDGET, VectorizedSimulator

        return VectorizedSimulator(data, module, seed, memory_budget=memory_budget or DEFAULT_MEMORY_BUDGET, device=device)
    checks.fail("backend", backend, "'loop' or 'vectorized'", "make_federation")
