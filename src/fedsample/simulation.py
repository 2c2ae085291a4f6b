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
from fedsample.device import resolve_device, to_device
from fedsample.evaluation import evaluate
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
    def load(cls, path: Path, device: torch.device | str = "cpu") -> "SimulationState":
        """Read a saved state with every tensor on ``device``, whichever device wrote it."""
        return cls(**torch.load(path, map_location=torch.device(device), weights_only=False))


@dataclass
class SimulationResult:
    history: list[dict]
    params: Params
    strategy: str
    seed: int

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
    backend: str = "vectorized",
    memory_budget: int | None = None,
    device: str | torch.device = "cpu",
) -> SimulationResult:
    """Run ``rounds`` rounds of ``strategy`` and evaluate on the test split every ``eval_every`` rounds
    (and after the last). With ``checkpoint`` the state is saved every ``checkpoint_every`` rounds and at
    the end; ``resume`` continues from a saved state and ends with the numbers of an uninterrupted run.
    ``backend`` picks the in-process federation when none is given: ``"vectorized"`` (batched cohorts) or
    ``"loop"`` (the per-client reference); both give the same numbers within float tolerance.
    ``memory_budget`` (bytes) bounds one chunk of stacked clients in the vectorized backend (default
    :data:`fedsample.federation.vectorized.DEFAULT_MEMORY_BUDGET`); the numbers do not depend on it.
    ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"`` or ``"auto"``: CUDA when present) is where the data,
    the model, training, evaluation and the server optimizer live; the seed gives the same cohorts, draws
    and size reports on every device, and the parameters agree within float tolerance."""
    where = resolve_device(device)
    if rounds < 1 or eval_every < 1:
        raise ValueError(f"rounds and eval_every must be >= 1, got rounds={rounds}, eval_every={eval_every}")
    if strategy.pooled:
        data = data.pooled()
    module = build_module(model, data).cpu()  # initialised on the CPU: the same initial numbers on every device
    key = run_key(strategy, seed)
    state = _start(strategy, module, seed, key, checkpoint, resume, where)
    module.to(where)
    fed = federation or make_federation(backend, data, module, seed, memory_budget, where)
    _load_client_states(fed, state.client_states)
    x_test, y_test = torch.as_tensor(data.dataset.x_test, device=where), torch.as_tensor(data.dataset.y_test, device=where)
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
    return SimulationResult(history=state.history, params=state.params, strategy=strategy.name, seed=seed)


def _start(strategy: Strategy, module: nn.Module, seed: int, key: str, checkpoint: Any, resume: bool, device: torch.device) -> SimulationState:
    """A saved state (loaded onto ``device``) or a fresh one: the seed's initial parameters, created on the
    CPU (the same numbers on every device) and moved to ``device``."""
    if resume and checkpoint and Path(checkpoint).exists():
        saved = SimulationState.load(Path(checkpoint), device)
        if saved.key != key:
            raise ValueError(f"checkpoint {checkpoint} belongs to another run (strategy or seed differ)")
        return saved
    params = to_device(initial_parameters(module, seed), device)
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


def make_federation(
    backend: str, data: FederatedData, module: nn.Module, seed: int, memory_budget: int | None = None, device: torch.device | str = "cpu"
) -> Any:
    """The in-process federation named by ``backend`` (``"loop"`` or ``"vectorized"``), its training data
    moved to ``device`` once (``module`` must already live there)."""
    if backend == "loop":
        return Simulator(data, module, seed, device=device)
    if backend == "vectorized":
        from fedsample.federation.vectorized import DEFAULT_MEMORY_BUDGET, VectorizedSimulator

        return VectorizedSimulator(data, module, seed, memory_budget=memory_budget or DEFAULT_MEMORY_BUDGET, device=device)
    raise ValueError(f"backend must be 'loop' or 'vectorized', got {backend!r}")
