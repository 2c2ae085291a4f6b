"""``simulate``: run a strategy for some rounds on federated data, with evaluation, checkpoints and resume.

All simulator state (parameters, strategy and server-optimizer state, history, the seed from which
every random draw derives, and the client-held states of the federation) is one :class:`SimulationState`,
saved atomically every N rounds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from fedsample.data.types import FederatedData
from fedsample.evaluation import evaluate
from fedsample.federation.choose import BackendChoice, choose_backend
from fedsample.federation.simulator import Simulator
from fedsample.models import initial_parameters
from fedsample.strategy import Strategy
from fedsample.training.functional import Params


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

    def save(self, path: Path) -> None:
        """Write atomically: a temporary file in the same folder, then a rename."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        torch.save(self.__dict__, tmp)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> "SimulationState":
        return cls(**torch.load(path, weights_only=False))


@dataclass
class SimulationResult:
    """A finished run; ``backend`` is the engine that trained it and ``backend_reason`` why (``backend="auto"``
    records the rule that picked it, :mod:`fedsample.federation.choose`)."""

    history: list[dict]
    params: Params
    strategy: str
    seed: int
    backend: str = ""
    backend_reason: str = ""

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


def simulate(
    strategy: Strategy,
    data: FederatedData,
    model: Any,
    rounds: int,
    seed: int = 0,
    eval_every: int = 1,
    checkpoint: str | Path | None = None,
    checkpoint_every: int = 0,
    resume: bool = False,
    progress: Callable[[int], None] | None = None,
    federation: Any = None,
    backend: str = "auto",
    memory_budget: int | None = None,
) -> SimulationResult:
    """Run ``rounds`` rounds of ``strategy`` and evaluate on the test split every ``eval_every`` rounds
    (and after the last). With ``checkpoint`` the state is saved every ``checkpoint_every`` rounds and at
    the end; ``resume`` continues from a saved state and ends with the numbers of an uninterrupted run.
    ``backend`` picks the in-process federation when none is given: ``"auto"`` (default: the faster engine for
    this strategy, model and data, by the rule of :mod:`fedsample.federation.choose`), ``"vectorized"`` (batched
    cohorts) or ``"loop"`` (the per-client reference); all give the same numbers within float tolerance, and the
    result records the engine and why (``backend``, ``backend_reason``).
    ``memory_budget`` (bytes) bounds one chunk of stacked clients in the vectorized backend (default
    :data:`fedsample.federation.vectorized.DEFAULT_MEMORY_BUDGET`); the numbers do not depend on it."""
    if rounds < 1 or eval_every < 1:
        raise ValueError(f"rounds and eval_every must be >= 1, got rounds={rounds}, eval_every={eval_every}")
    if strategy.pooled:
        data = data.pooled()
    module = build_module(model, data)
    choice = BackendChoice("given", "a federation was passed") if federation is not None else resolve_backend(backend, strategy, data, module, memory_budget)
    fed = federation or make_federation(choice.backend, data, module, seed, memory_budget)
    key = run_key(strategy, seed)
    state = _start(strategy, module, seed, key, checkpoint, resume)
    _load_client_states(fed, state.client_states)
    x_test, y_test = torch.as_tensor(data.dataset.x_test), torch.as_tensor(data.dataset.y_test)
    ds = data.dataset
    for t in range(state.round, rounds):
        state.params, log = strategy.round(fed, state.params, state.state, t, seed)
        record = {"round": t + 1, **log}
        if (t + 1) % eval_every == 0 or t + 1 == rounds:
            record.update(evaluate(module, state.params, x_test, y_test, ds.task, ds.num_classes))
        state.history.append(record)
        state.round = t + 1
        if checkpoint and checkpoint_every and state.round % checkpoint_every == 0:
            _save(state, fed, Path(checkpoint))
        if progress:
            progress(t + 1)
    if checkpoint:
        _save(state, fed, Path(checkpoint))
    return SimulationResult(
        history=state.history, params=state.params, strategy=strategy.name, seed=seed, backend=choice.backend, backend_reason=choice.reason
    )


def _start(strategy: Strategy, module: nn.Module, seed: int, key: str, checkpoint: Any, resume: bool) -> SimulationState:
    if resume and checkpoint and Path(checkpoint).exists():
        saved = SimulationState.load(Path(checkpoint))
        if saved.key != key:
            raise ValueError(f"checkpoint {checkpoint} belongs to another run (strategy or seed differ)")
        return saved
    params = initial_parameters(module, seed)
    return SimulationState(key=key, seed=seed, round=0, params=params, state=strategy.init_state(params))


def _save(state: SimulationState, fed: Any, path: Path) -> None:
    """Save with the federation's client-held states (federations without them save none)."""
    export = getattr(fed, "client_states", None)
    state.client_states = export() if export is not None else {}
    state.save(path)


def _load_client_states(fed: Any, states: dict) -> None:
    """Give the federation's clients their saved states (empty for a fresh run), where it keeps any."""
    load = getattr(fed, "load_client_states", None)
    if load is not None:
        load(states)


BACKENDS = ("auto", "vectorized", "loop")


def resolve_backend(
    backend: str, strategy: Strategy, data: FederatedData, module: nn.Module, memory_budget: int | None = None
) -> BackendChoice:
    """The engine ``backend`` names, or for ``"auto"`` the one :func:`~fedsample.federation.choose.choose_backend`
    picks for this strategy, data and model."""
    if memory_budget is not None and memory_budget <= 0:
        raise ValueError(f"memory_budget must be > 0 bytes, got {memory_budget}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend != "auto":
        return BackendChoice(backend, "asked for")
    return choose_backend(strategy, data.sizes(), module, torch.as_tensor(data.dataset.x_train[:1]))


def make_federation(backend: str, data: FederatedData, module: nn.Module, seed: int, memory_budget: int | None = None) -> Any:
    """The in-process federation named by ``backend``: ``"loop"`` or ``"vectorized"``."""
    if backend == "loop":
        return Simulator(data, module, seed)
    if backend == "vectorized":
        from fedsample.federation.vectorized import DEFAULT_MEMORY_BUDGET, VectorizedSimulator

        return VectorizedSimulator(data, module, seed, memory_budget=memory_budget or DEFAULT_MEMORY_BUDGET)
    raise ValueError(f"backend must be 'loop' or 'vectorized', got {backend!r}")
