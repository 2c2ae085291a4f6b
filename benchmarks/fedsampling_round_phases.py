"""Where a FedSampling round's time goes: thread CPU time per phase of the steered round ÷ one centralized step.

The round and the step are :mod:`fedsampling_round_vs_centralized`'s (MLP, K = 2048, LogNormalSizes(2, 4) over
Fashion-MNIST's 60,000 rows: 30,000 clients; round 1 of the steered protocol with size reports ``epsilon=3,
M=300``, the step on exactly the rows that round drew). Each phase is a library function whose calls are timed by
the thread's CPU time (``time.thread_time_ns``), *exclusive* of the timed phases it calls, so the phases add up
to the round; what no timed function covers is printed as ``round_other_ms``. The step is timed in three parts
(gather, forward, backward and update). Means over ``--rounds`` rounds and steps alternated (after a warm-up),
so that both see the same machine; thread CPU time, which a loaded machine's descheduling does not lengthen
(one torch thread: the round and the step run on this thread).

The timing wrappers cost about 1 us a call (a few dozen calls a round), so the instrumented round reads about
0.05 ms longer than :mod:`fedsampling_round_vs_centralized`'s.

Run: python benchmarks/fedsampling_round_phases.py [--smoke] [--rounds N]
"""

from __future__ import annotations

import contextlib
import importlib
import time
from typing import Any, Callable, Iterator

import torch

from _common import arguments, dataset, emit, footer, header, skipped

from fedsampling_round_vs_centralized import LR, drawn_rows, steady_round
from fedsample import recipes
from fedsample.data import LogNormalSizes, partition
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.models import MLP, initial_parameters
from fedsample.training.functional import per_sample_losses

#: (module, attribute path in it, phase): the functions timed, each exclusive of the others it calls. Named by
#: path, so that a function the library has renamed or moved is reported on a ``skipped:`` line, not fatal.
PHASES: tuple[tuple[str, str, str], ...] = (
    ("fedsample.strategy.round", "select", "select_cohort"),
    ("fedsample.strategy.round", "collect_sizes", "size_reports_and_estimate"),
    ("fedsample.sampling.data", "FedSamplingData.plan", "plan_ratio"),
    ("fedsample.federation.vectorized", "VectorizedSimulator.draw_cohort", "bernoulli_draws"),
    ("fedsample.federation.vectorized", "VectorizedSimulator.train", "engine_train_other"),
    ("fedsample.federation.vectorized", "BatchedCohort.one_gradient", "forward_gather_losses"),
    ("fedsample.federation.secure_sum", "count_shares", "count_noise_shares"),
    ("fedsample.federation.secure_sum", "SecureSum.run", "secure_sum_call"),
    ("fedsample.federation.vectorized", "_Union.weighted_gradient_sum", "backward_fused_sum"),
    ("fedsample.strategy.round", "combine_valid", "aggregate_other"),
    ("fedsample.strategy.round", "cohort_facts", "record_cohort_facts"),
    ("fedsample.strategy.round", "describe_round", "record_describe"),
    ("fedsample.strategy.round", "scheduled_step", "server_step"),
)


def resolved(module: str, path: str) -> tuple[Any, str] | None:
    """(the owner of ``path``'s last name, that name) in ``module``, where it is defined there; else None."""
    owner: Any = importlib.import_module(module)
    *outer, name = path.split(".")
    for part in outer:
        owner = getattr(owner, part, None)
    return (owner, name) if owner is not None and name in getattr(owner, "__dict__", {}) else None


class PhaseClock:
    """Exclusive thread CPU time (ns) per phase of the wrapped functions."""

    def __init__(self) -> None:
        self.spent: dict[str, int] = {}
        self._inner: list[int] = []  # per open call: the time spent in timed calls inside it

    def wrap(self, function: Callable, phase: str) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time_ns()
            self._inner.append(0)
            try:
                return function(*args, **kwargs)
            finally:
                spent, inner = time.thread_time_ns() - start, self._inner.pop()
                self.spent[phase] = self.spent.get(phase, 0) + spent - inner
                if self._inner:
                    self._inner[-1] += spent
        return timed


@contextlib.contextmanager
def timed_phases(clock: PhaseClock) -> Iterator[None]:
    """:data:`PHASES` wrapped by ``clock`` for the ``with`` block, restored after it (one the library no longer
    defines where named: said on a ``skipped:`` line, the others timed)."""
    saved = []
    for module, path, phase in PHASES:
        found = resolved(module, path)
        if found is None:
            skipped(f"phase {phase}", f"{module}.{path} is not defined (renamed or moved): its time counts in the caller's")
            continue
        owner, name = found
        saved.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, clock.wrap(getattr(owner, name), phase))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def main(smoke: bool, rounds: int) -> None:
    header(smoke)
    ds = dataset(smoke)
    fed = partition(ds, LogNormalSizes(mean=2, sigma=4), seed=0)
    K = 128 if smoke else 2048
    rounds = 2 if smoke else rounds
    module = MLP(hidden=64).build(ds.input_shape, ds.num_classes)
    params = initial_parameters(module, 0)
    sim = VectorizedSimulator(fed, module, seed=0)
    strategy = recipes.fedsampling(K=K, epsilon=3.0, M=300, server_lr=LR)
    one_round, state = steady_round(strategy, sim, params)
    rows = torch.from_numpy(drawn_rows(strategy, sim, fed, params, state))
    x, y = torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train)
    w = torch.full((len(rows),), 1.0 / K)
    step: dict[str, int] = {}

    def centralized_step() -> None:  # fedsampling_round_vs_centralized's step, in three timed parts
        t0 = time.thread_time_ns()
        xs, ys = x.index_select(0, rows), y.index_select(0, rows)
        t1 = time.thread_time_ns()
        leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        loss = torch.sum(w * per_sample_losses(module, leaves, xs, ys, ds.task))
        t2 = time.thread_time_ns()
        grads = torch.autograd.grad(loss, list(leaves.values()))
        {k: params[k] - LR * g for k, g in zip(params, grads)}
        t3 = time.thread_time_ns()
        for part, spent in (("gather", t1 - t0), ("forward", t2 - t1), ("backward_update", t3 - t2)):
            step[part] = step.get(part, 0) + spent

    clock = PhaseClock()
    with timed_phases(clock):
        for _ in range(2 if smoke else 20):  # warm-up
            one_round(), centralized_step()
        clock.spent.clear(), step.clear()
        round_ns = 0
        for _ in range(rounds):
            t = time.thread_time_ns()
            one_round()
            round_ns += time.thread_time_ns() - t
            centralized_step()
    emit("clients", fed.num_clients)
    emit("rows_drawn", len(rows))
    emit("rounds", rounds)
    ms = lambda ns: ns / rounds / 1e6  # noqa: E731
    for phase, spent in sorted(clock.spent.items(), key=lambda item: -item[1]):
        emit(f"round_{phase}_ms", ms(spent))
    emit("round_other_ms", ms(round_ns - sum(clock.spent.values())))
    emit("round_ms", ms(round_ns))
    for part, spent in step.items():
        emit(f"step_{part}_ms", ms(spent))
    step_ns = sum(step.values())
    emit("step_ms", ms(step_ns))
    emit("round_vs_step_cpu", round_ns / step_ns)
    footer()


if __name__ == "__main__":
    parser = arguments(__doc__)
    parser.add_argument("--rounds", type=int, default=300, help="rounds and steps timed, alternated (default 300)")
    args = parser.parse_args()
    main(args.smoke, args.rounds)
