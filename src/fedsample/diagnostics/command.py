"""``fedsample diagnose [PRESET|CONFIG] --out DIR``: the experiment's dataset, partition, model, strategies and
failure model, diagnosed at the model's initial parameters (or a checkpoint's), written to DIR.

Every argument, the output folder and the memory the diagnosis needs are checked before anything is computed.
A strategy with a grid is diagnosed at its first value (said in the table); each strategy also runs its first
``--check-rounds`` rounds as ``fedsample run`` does, and one that diverges there is flagged.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    from fedsample.data.types import FederatedData
    from fedsample.diagnostics.document import DiagnosedGrid, DiagnosisNotes, RunCheck, StrategyResult
    from fedsample.experiments.plan import Plan
    from fedsample.messages import Params
    from fedsample.runtime.warned import Warned
    from fedsample.strategy import Strategy

__all__ = ["add_arguments", "command_diagnose", "diagnosed_strategies", "diagnosis_memory",
           "run_checks"]

DEFAULT_DRAWS = 1000
DEFAULT_CHECK_ROUNDS = 5
LOG_BYTES_PER_DRAW = 4096  # a round's log (size estimates, the failed list) kept per draw: a generous bound


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``fedsample diagnose``'s arguments to ``parser``."""
    parser.add_argument("target", nargs="?", default="quickstart", help="preset name or experiment .toml (default: quickstart)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: runs/<experiment name>-diagnose)")
    parser.add_argument("--overwrite", action="store_true", help="replace the results in --out")
    parser.add_argument("--draws", type=int, default=DEFAULT_DRAWS, help=f"rounds drawn per strategy (default {DEFAULT_DRAWS})")
    parser.add_argument("--seed", type=int, default=None, help="partition, model and sampling seed (default: the first seed)")
    parser.add_argument("--checkpoint", type=Path, default=None, help="a run's checkpoint (.pt): diagnose at its parameters")
    parser.add_argument("--sketch-dim", type=int, default=None, help="CountSketch size when the gradients do not fit (default 1024)")
    parser.add_argument("--check-rounds", type=int, default=DEFAULT_CHECK_ROUNDS, metavar="N",
                        help=f"run each strategy N rounds as 'fedsample run' does and flag one that diverges (default {DEFAULT_CHECK_ROUNDS}; 0: no check)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help=f"measure the strategies in N processes (default: every core, {available_cores()} here; same numbers for any N)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    from fedsample.tracking.setup import add_track_argument

    add_track_argument(parser)


def available_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def check_arguments(args: argparse.Namespace) -> None:
    """The numbers on the command line, before anything is built (one ValueError line each)."""
    from fedsample.diagnostics.estimator import MIN_DRAWS

    if args.draws < MIN_DRAWS:
        raise ValueError(f"diagnose: rounds must be >= {MIN_DRAWS}, got {args.draws} (--draws)")
    if args.sketch_dim is not None and args.sketch_dim < 1:
        raise ValueError(f"--sketch-dim must be >= 1, got {args.sketch_dim}")
    if args.seed is not None and args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    if args.check_rounds < 0:
        raise ValueError(f"--check-rounds must be >= 0, got {args.check_rounds}")
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    if args.checkpoint is not None and not args.checkpoint.is_file():
        raise FileNotFoundError(f"checkpoint {args.checkpoint} does not exist")


def command_diagnose(args: argparse.Namespace) -> None:
    """``fedsample diagnose``: measure each strategy's sampling at a fixed model and write the report."""
    from fedsample.runtime.warned import once_per_kind

    with once_per_kind() as warned:  # each warning once, counted, kept in diagnostics.json (fedsample.runtime.warned)
        _diagnose(args, warned)


def _diagnose(args: argparse.Namespace, warned: Warned) -> None:
    from fedsample.runtime.device import use_threads
    from fedsample.diagnostics.gradients import DEFAULT_SKETCH_DIM
    from fedsample.diagnostics.measure import diagnose
    from fedsample.diagnostics.report import check_diagnosis_folder, summary_table, write_diagnosis
    from fedsample.experiments import runner
    from fedsample.experiments.presets import resolve

    check_arguments(args)
    use_threads(args.threads)
    config = resolve(args.target)
    out = args.out if args.out is not None else Path("runs") / f"{runner.folder_name(config.name)}-diagnose"
    sketch_dim = DEFAULT_SKETCH_DIM if args.sketch_dim is None else args.sketch_dim
    seed = config.seeds[0] if args.seed is None else args.seed
    inputs = {"config": config.model_dump(mode="json"), "draws": args.draws, "seed": seed, "sketch_dim": sketch_dim,
              "checkpoint": None if args.checkpoint is None else str(args.checkpoint), "check_rounds": args.check_rounds}
    check_diagnosis_folder(out, inputs, overwrite=args.overwrite, make_parent=args.out is None)
    tracking = runner.tracking_spec(config, args.track, out / "tracking")  # --track: add_track_argument
    plan = runner.prepare(config)
    fed = plan.federation(seed)
    strategies, grid = diagnosed_strategies(plan)
    check_memory(plan, fed, len(strategies), args.draws, sketch_dim)
    params = _checkpoint_params(args.checkpoint)
    start = time.perf_counter()
    jobs = worker_processes(plan, fed, strategies, available_cores() if args.jobs is None else args.jobs)
    with _progress_bar(config.name, len(strategies), args.draws, quiet=args.quiet) as (done, advance):
        diagnosis = diagnose(strategies, fed, plan.model, params=params, rounds=args.draws, seed=seed, sketch_dim=sketch_dim,
                             progress=done, faults=plan.faults, jobs=jobs, advance=advance, check_rounds=args.check_rounds)
    notes: DiagnosisNotes = {"faults": None if config.faults is None else config.faults.model_dump(mode="json"), "grid": grid,
             "run_check": run_checks(diagnosis.run_check, args.check_rounds), "warnings": warned.record()}
    if args.out is None:
        out.parent.mkdir(exist_ok=True)  # the default location is ours to create, once everything is done
    written = write_diagnosis(diagnosis, out, overwrite=args.overwrite, inputs=inputs, notes=notes)
    if tracking is not None:  # the tables and pictures, as the artifacts of a run named "diagnose"
        settings = {"experiment_config": config.model_dump(mode="json"), "draws": args.draws, "seed": seed}
        tracking.log_files(config.name, "diagnose", f"{runner.folder_name(config.name)}/diagnose", written, settings)
    print(summary_table({**diagnosis.to_dict(), **notes}))
    print(f"{time.perf_counter() - start:.1f} s; wrote {out}/diagnostics.json, summary.md, exploitation.png, estimator.png, labels.png")


def diagnosed_strategies(plan: Plan) -> tuple[dict[str, Strategy], dict[str, DiagnosedGrid]]:
    """The strategy of each label, a grid at its first value under its run label (``label [lr=0.01]``), and per
    such label the grid it was taken from (``{"param", "value", "values"}``)."""
    from fedsample.experiments import grid

    strategies: dict[str, Strategy] = {}
    grids: dict[str, DiagnosedGrid] = {}
    for s in plan.config.strategies:
        key, strategy = next(iter(plan.variants[s.display].items()))
        label = grid.run_label(s.display, s, key)
        strategies[label] = strategy
        if s.grid:
            ((param, values),) = s.grid.items()
            grids[label] = {"param": param, "value": values[0], "values": list(values)}
    return strategies, grids


def diagnosis_memory(rows: int, parameters: int, strategies: int, draws: int, sketch_dim: int) -> int:
    """Bytes a diagnosis holds at its peak (an estimate): the per-sample gradient basis (rows x its columns,
    float64 exact or float32 sketched), one chunk of per-sample gradients (float32 and a float64 copy), every
    strategy's ``draws`` estimates (float64) and round logs, and the estimator statistics' three temporary
    copies of one strategy's estimates."""
    from fedsample.diagnostics.gradients import GRADIENT_CHUNK, basis_shape

    dim, sketched = basis_shape(rows, parameters, sketch_dim=sketch_dim)
    basis = rows * dim * (4 if sketched else 8)
    chunk = min(rows, GRADIENT_CHUNK) * parameters * 12
    kept = strategies * draws * (8 * dim + LOG_BYTES_PER_DRAW)
    statistics = 3 * draws * dim * 8
    return basis + chunk + kept + statistics


def check_memory(plan: Plan, fed: FederatedData, strategies: int, draws: int, sketch_dim: int) -> None:
    """Refuse a diagnosis that cannot fit in the memory available, before it starts (one line)."""
    from fedsample.runtime.memory import check_fits
    from fedsample.simulation import build_module

    parameters = sum(p.numel() for p in build_module(plan.model, fed).parameters())
    needed = diagnosis_memory(len(fed.dataset.y_train), parameters, strategies, draws, sketch_dim)
    check_fits(f"diagnose: {strategies} strategies x {draws} draws (--draws)", needed)


def worker_processes(plan: Plan, fed: FederatedData, strategies: dict[str, Strategy], jobs: int, available: int | None = None) -> int:
    """``jobs`` worker processes, or as many as the ``available`` memory (default: the machine's) holds, each at the
    peak estimated from the model and data (:func:`~fedsample.experiments.footprint.plan_worker_peak`; the measure
    trains no stacked cohort); a cap is said in one line."""
    from fedsample.experiments.footprint import plan_worker_peak
    from fedsample.runtime.memory import capped_processes

    if jobs <= 1 or len(strategies) <= 1:  # one process: nothing to cap
        return jobs
    return capped_processes("diagnose --jobs", min(jobs, len(strategies)), plan_worker_peak(plan.model, fed, list(strategies.values()), "loop"), available)


def run_checks(status: dict[str, str], rounds: int) -> RunCheck | None:
    """Each strategy's first ``rounds`` rounds run as ``fedsample run`` runs them (by
    :func:`~fedsample.diagnostics.measure.diagnose`'s ``check_rounds``, in the strategies' workers):
    ``{"rounds", "status": {label: "ok" or why it diverged}}`` (None: no check), each divergence said on stderr."""
    if rounds == 0:
        return None
    for label, why in status.items():
        if why != "ok":
            print(f"fedsample: {label!r} diverges in its first {rounds} rounds: {why}", file=sys.stderr, flush=True)
    return {"rounds": rounds, "status": status}


@contextmanager
def _progress_bar(name: str, strategies: int, draws: int, quiet: bool) -> Iterator[tuple[Callable[[str, StrategyResult], None], Callable[[int], None]]]:
    """A rich progress bar of the draws on stderr (strategies done in its text; none with ``quiet``), shown from the
    first draw on (an error before it is one line), and the callbacks
    :func:`~fedsample.diagnostics.measure.diagnose` reports to: a finished strategy's line goes to stderr."""
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    bar = Progress(*columns, console=Console(stderr=True), disable=quiet, transient=False)  # stdout: the table
    task = bar.add_task(escape(f"{name}: 0 of {strategies} strategies"), total=strategies * draws)
    finished, shown = 0, False

    def advance(made: int) -> None:
        nonlocal shown
        if not shown:
            bar.start()
            shown = True
        bar.update(task, advance=made)

    def done(label: str, result: StrategyResult) -> None:
        nonlocal finished
        finished += 1
        advance(0)
        bar.update(task, description=escape(f"{name}: {finished} of {strategies} strategies"))
        e = result["estimator"]
        print(f"{label}: bias {e['bias']:.3f}, variance {e['variance']:.3f} ({result['seconds']:.1f} s)", file=sys.stderr, flush=True)

    try:
        yield done, advance
    finally:
        if shown:
            bar.stop()


def _checkpoint_params(path: Path | None) -> Params | None:
    if path is None:
        return None
    from fedsample.simulation import SimulationState

    return SimulationState.load(path).params
