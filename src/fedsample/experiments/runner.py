"""Run an experiment: every strategy for every seed, with checkpoints, resume and a progress bar.

Everything the config names is built and validated before anything is written, so a bad experiment leaves
no half-written output folder; the result files are written into a temporary folder and moved into place
together. A strategy/seed that diverges is contained (docs/reliability.md).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from pathlib import Path
from typing import Callable, Mapping

from fedsample import outputs
from fedsample.budget import arm_budget
from fedsample.experiments import grid
from fedsample.experiments.config import ConfigError, ExperimentConfig
from fedsample.experiments.execute import RunSettings, checkpoint_path, folder_name, run_jobs
from fedsample.experiments.plan import (  # the runner's public names (__all__)
    Failure, Job, Outcome, Plan, check_data_fits, fault_model, only_strategies, prepare, restricted,
)
from fedsample.experiments.stats import best_round, metric_table
from fedsample.experiments.timing import TIMING_FILE, record_wall_time
from fedsample.simulation import Backend, EngineOptions, SimulationResult
from fedsample.tracking.setup import TrackingSpec, parse_backends
from fedsample.runtime.records import JSON, JSONObject
from fedsample.runtime.warned import Warned, once_per_kind

__all__ = [
    "METRICS", "check_output_folder", "check_run_settings", "checkpoint_path", "failures", "finite_or_none", "run_experiment",
    "run_plan", "summarize", "tracking_spec", "folder_name",
    "Failure", "Job", "Outcome", "Plan", "check_data_fits", "fault_model", "only_strategies", "prepare", "restricted",
]

METRICS = ("accuracy", "macro_f1", "loss")
"""The test metrics every run reports."""


RUN_FILES = (
    "results.json", "summary.md", "curves.png", "partition.png", "partition_stats.json", "privacy.json", TIMING_FILE, "checkpoints",
    "tracking",
)
SUMMARY_FILES = ("results.json", "summary.md", "curves.png", "partition.png")


def run_marker(config: ExperimentConfig) -> outputs.Marker:
    """The folder's fingerprint, ``run.json``: the experiment (a resume may add rounds; the description is
    prose, not a setting: a preset whose stated cost was updated still resumes; tracking does not change the
    numbers; the [privacy] table may raise the budget, and each run's checkpoint refuses a ledger kept with another
    unit, k or threat model)."""
    return outputs.Marker("run", RUN_FILES, {"config": config.model_dump(mode="json")}, resumable=True,
                          free=("config.rounds", "config.description", "config.tracking", "config.privacy"))


def check_output_folder(
    out: Path, config: ExperimentConfig, resume: bool = False, overwrite: bool = False, make_parent: bool = False
) -> None:
    """The output folder may be created or reused (:func:`fedsample.outputs.check_folder`, writes nothing): a
    folder that holds results is reused only with ``overwrite`` or to ``resume`` the same experiment (its
    ``run.json`` names it); ``make_parent``: the parent (a default ``runs/``) may still be missing."""
    outputs.check_folder(out, run_marker(config), resume=resume, overwrite=overwrite, make_parent=make_parent)


def start_output_folder(out: Path, config: ExperimentConfig, overwrite: bool = False) -> None:
    """Create the folder (or clear the results in it with ``overwrite``), remove a killed run's staging, and
    record the experiment in ``run.json``."""
    outputs.start(out, run_marker(config), overwrite=overwrite)
    (out / "checkpoints").mkdir(exist_ok=True)


def check_run_settings(jobs: int, ray: bool = False) -> None:
    """``jobs`` processes (>= 1; not with Ray, which already spreads each run): one ConfigError line."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs!r}")
    if jobs > 1 and ray:
        raise ConfigError("--jobs and Ray (--workers/--ray-address) exclude each other: Ray already spreads each run")


def run_plan(
    plan: Plan,
    out: Path,
    resume: bool = False,
    checkpoint_every: int = 10,
    progress: Callable[[str, int], None] | None = None,
    backend: Backend = "auto",
    on_failure: Callable[[str], None] | None = None,
    options: EngineOptions | None = None,
    device: str | None = None,
    jobs: int = 1,
    threads: int | None = None,
    tracking: TrackingSpec | None = None,
) -> dict[Job, Outcome]:
    """Run every strategy (every grid value) for every seed; ``progress(run label, round)`` is called after
    each round. A run that diverges is contained: ``on_failure(one line)`` is called, its outcome holds a
    :class:`Failure`, and the other runs still go on. ``options`` are further :class:`~fedsample.simulation.Engine` settings (e.g.
    ``federation=ray_federation(workers=4)``: :func:`fedsample.federation.ray.ray_federation`, which each run
    opens and closes); ``device`` overrides the experiment's ``device`` (default ``"cpu"``); ``jobs > 1`` runs
    the independent runs in that many processes with ``threads`` torch threads each (default 1), with the
    numbers of ``jobs = 1`` (fedsample.experiments.execute). ``tracking`` logs each (label, grid value, seed) run to
    its trackers (fedsample.tracking)."""
    check_run_settings(jobs, (options or {}).get("federation") is not None)
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    settings = RunSettings(out, resume, checkpoint_every, backend, device or plan.config.device, EngineOptions(**(options or {})), tracking)
    if tracking is not None:
        tracking.prepare(plan.config.name)
    return run_jobs(plan, settings, jobs, threads, progress, on_failure)


def run_experiment(
    plan: Plan, out: Path, *, resume: bool = False, overwrite: bool = False, checkpoint_every: int = 10,
    progress: Callable[[str, int], None] | None = None, backend: Backend = "auto",
    on_failure: Callable[[str], None] | None = None, options: EngineOptions | None = None, device: str | None = None,
    jobs: int = 1, only: list[str] | None = None, threads: int | None = None, tracking: TrackingSpec | None = None,
) -> tuple[JSONObject, dict[str, list[SimulationResult | Failure]]]:
    """The whole experiment into ``out``: check the settings and the folder (:func:`check_run_settings`,
    :func:`check_output_folder`: a refusal writes nothing), record it, run every strategy, grid value and
    seed (:func:`run_plan`; ``only`` a subset of the labels), select each grid's value on the validation
    split, write results.json, summary.md and the plots, and then record this invocation's wall time in
    timing.json (:mod:`fedsample.experiments.timing`; a resumed invocation adds to the record there); returns the
    results.json document (with ``warnings``: each kind raised up to the results, shown once, and its count,
    :mod:`fedsample.runtime.warned`) and the raw results of each label (its selected value's runs). With ``tracking`` each
    run is a tracked run, and a run named "summary" holds the experiment's result files."""
    with once_per_kind() as warned:  # each warning once, counted, kept in results.json (fedsample.runtime.warned)
        return _run_experiment(plan, out, resume, overwrite, checkpoint_every, progress, backend, on_failure, options, device,
                               jobs, only, threads, tracking, warned)


def _run_experiment(
    plan: Plan, out: Path, resume: bool, overwrite: bool, checkpoint_every: int, progress: Callable[[str, int], None] | None,
    backend: Backend, on_failure: Callable[[str], None] | None, options: EngineOptions | None, device: str | None, jobs: int,
    only: list[str] | None, threads: int | None, tracking: TrackingSpec | None, warned: Warned,
) -> tuple[JSONObject, dict[str, list[SimulationResult | Failure]]]:
    started = time.perf_counter()
    plan = restricted(plan, only)
    check_run_settings(jobs, (options or {}).get("federation") is not None)
    check_output_folder(out, plan.config, resume=resume, overwrite=overwrite)
    if tracking is not None:
        tracking.check()
    earlier_work = resume and (out / "checkpoints").is_dir() and any((out / "checkpoints").iterdir())
    start_output_folder(out, plan.config, overwrite=overwrite)
    outcomes = run_plan(
        plan, out, resume=resume, checkpoint_every=checkpoint_every, progress=progress, backend=backend,
        on_failure=on_failure, options=options, device=device, jobs=jobs, threads=threads, tracking=tracking,
    )
    results, extras = selected_runs(plan, outcomes)
    document: JSONObject = {**summarize(plan.config, results, extras, task_metrics(plan.dataset.task)), "warnings": [*warned.record()]}
    write_outputs(plan, out, document, privacy_document(results))
    record_wall_time(out, time.perf_counter() - started, resumed=resume, earlier_work=earlier_work)
    if tracking is not None and tracking.backends:
        config = {"experiment_config": plan.config.model_dump(mode="json")}
        files = [out / name for name in SUMMARY_FILES if (out / name).exists()]
        after_training(lambda: tracking.log_files(plan.config.name, "summary", f"{folder_name(plan.config.name)}/summary", files, config),
                       ("the trackers' summary run",))
    return document, results


def tracking_spec(config: ExperimentConfig, track: str | None, folder: Path) -> TrackingSpec | None:
    """The trackers of an experiment's runs: ``--track`` (a comma list, ``none``: off) or else the config's
    ``[tracking]`` backends, with the config's per-backend options; None when neither asks for any. The local
    stores go in ``folder``. A missing extra is one error line (checked here, before anything runs)."""
    table = config.tracking
    backends = parse_backends(track) if track is not None else tuple(table.backends) if table is not None else ()
    if not backends:
        return None
    spec = TrackingSpec(backends, Path(folder)) if table is None else TrackingSpec(
        backends, Path(folder), mlflow_uri=table.mlflow.tracking_uri, wandb_project=table.wandb.project, wandb_mode=table.wandb.mode,
        wandb_entity=table.wandb.entity,
    )
    spec.check()
    return spec


def selected_runs(plan: Plan, outcomes: dict[Job, Outcome]) -> tuple[dict[str, list[SimulationResult | Failure]], dict[str, JSONObject]]:
    """Per label, the runs of its selected grid value (its only runs without a grid), and the results.json
    entries beside them: ``validation`` (final-round metrics on the validation split) and ``selected``."""
    results: dict[str, list[SimulationResult | Failure]] = {}
    extras: dict[str, JSONObject] = {}
    seeds = plan.config.seeds
    for s in plan.config.strategies:
        label = s.display
        by_key = {key: [outcomes[Job(label, key, seed)] for seed in seeds] for key in plan.variants[label]}
        key = ""
        extras[label] = {}
        if s.grid:
            key, extras[label]["selected"] = grid.select(s, {k: [o.validation for o in runs] for k, runs in by_key.items()})
        results[label] = [o.result for o in by_key[key]]
        if plan.config.validation is not None:
            extras[label]["validation"] = {"final": metric_table([o.validation for o in by_key[key]], task_metrics(plan.dataset.task))}
    return results, extras


def finite_or_none(value: object) -> JSON:
    """JSON-safe numbers: non-finite floats become None, recursively through dicts and lists (a tuple becomes a list);
    a value JSON has no type for is the TypeError ``json.dumps`` would raise."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    if value is None or isinstance(value, (str, int)):
        return value
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def task_metrics(task: str) -> tuple[str, ...]:
    """The metrics results.json summarizes for a task: accuracy, macro-F1 and loss; the loss for regression."""
    return METRICS if task == "classification" else ("loss",)


def summarize(
    config: ExperimentConfig, results: dict[str, list[SimulationResult | Failure]], extras: Mapping[str, JSONObject] | None = None,
    metrics: tuple[str, ...] = METRICS,
) -> JSONObject:
    """The results.json document: config, and per strategy the final-round and best-round metrics
    (``{"mean", "sd", "n", "per_seed"}`` over the seeds that finished, sd with ddof = 1 and null for one seed;
    ``per_seed`` null for a seed that did not; best = the best evaluated round of each seed: highest accuracy
    and macro-F1, lowest loss), each seed's ``status`` ("ok" or the reason it stopped), the per-seed round
    histories, the realised budget (``budget``: samples per round, :func:`fedsample.budget.arm_budget`; null where no
    round knows it), and ``extras[label]`` (validation metrics, a grid's selection). A strategy whose every seed
    stopped keeps the same keys: each of ``metrics`` with mean, sd null, n = 0. Strict JSON: no NaN or Infinity."""
    strategies: dict[str, dict[str, object]] = {}
    for label, runs in results.items():
        finished = [run if isinstance(run, SimulationResult) else None for run in runs]
        strategies[label] = {
            "final": metric_table([None if run is None else run.final for run in finished], metrics),
            "best": metric_table([None if run is None else {m: best_round(run.history, m) for m in metrics} for run in finished], metrics),
            "status": [run.status if isinstance(run, SimulationResult) else run.reason for run in runs],
            "history": [run.history if isinstance(run, SimulationResult) else [] for run in runs],
            "budget": arm_budget([run.history for run in runs if isinstance(run, SimulationResult)]),
            "seeds": [run.seed for run in runs],
            "privacy": privacy_spent([run for run in runs if isinstance(run, SimulationResult)]),
            "backend": [{"engine": run.backend, "reason": run.backend_reason, "workers": run.workers, "client_threads": run.client_threads}
                        if isinstance(run, SimulationResult) else None for run in runs],
            **(extras or {}).get(label, {}),
        }
    document: dict[str, object] = {"config": config.model_dump(mode="json"), "strategies": strategies}
    return {key: finite_or_none(value) for key, value in document.items()}


def failures(results: dict[str, list[SimulationResult | Failure]]) -> list[str]:
    """The one-line reasons of the runs that stopped."""
    return [run.reason for runs in results.values() for run in runs if isinstance(run, Failure)]


def privacy_spent(runs: list[SimulationResult]) -> dict[str, object]:
    """What one client spent over the whole run: the last round's accountant keys of the first seed, and each
    seed's privacy ledger (``ledger``: epsilon with and without amplification, delta, neighbouring relation, unit,
    threat model, unprotected releases; the releases themselves are in privacy.json)."""
    from fedsample.privacy.accounting import SPEND_KEYS

    last = runs[0].history[-1] if runs and runs[0].history else {}
    ledgers = [{k: v for k, v in run.privacy.items() if k != "releases"} for run in runs]
    return {**{k: last[k] for k in SPEND_KEYS if k in last}, "ledger": ledgers}


def privacy_document(results: dict[str, list[SimulationResult | Failure]]) -> dict[str, object]:
    """privacy.json: per strategy label, each seed's ledger with every release (None for a run that failed)."""
    return {label: {"seeds": [run.seed for run in runs],
                    "ledger": [run.privacy if isinstance(run, SimulationResult) else None for run in runs]}
            for label, runs in results.items()}


def write_outputs(plan: Plan, out: Path, document: JSONObject, privacy: Mapping[str, object] | None = None) -> None:
    """results.json, summary.md, curves.png, the partition picture of the first seed and privacy.json (each run's
    ledger): all written into a temporary folder inside ``out`` and moved into place only when every one is complete."""
    from fedsample.data.report import write_partition_files
    from fedsample.experiments.report import plot_curves, summary_table

    text = json.dumps(document, indent=1, allow_nan=False)
    ledgers = json.dumps(finite_or_none(privacy or {}), indent=1, allow_nan=False)
    names = ["results.json", "privacy.json", "summary.md", "curves.png", "partition.png", "partition_stats.json"]
    with outputs.written_together(out, names) as folder:  # moves the names still listed when the block ends
        (folder / "results.json").write_text(text)
        (folder / "privacy.json").write_text(ledgers)
        steps: list[tuple[tuple[str, ...], Callable[[], object]]] = [
            (("summary.md",), lambda: (folder / "summary.md").write_text(summary_table(document))),
            (("curves.png",), lambda: plot_curves(document, folder / "curves.png")),
            (("partition.png", "partition_stats.json"),
             lambda: write_partition_files(plan.federation(plan.config.seeds[0]), folder, stats_name="partition_stats.json")),
        ]
        for files, step in steps:
            if not after_training(step, files):
                names[:] = [name for name in names if name not in files]


def after_training(step: Callable[[], object], files: tuple[str, ...]) -> bool:
    """Run one step that follows the trained results (a table, a plot): True when it worked, else one warning line
    naming the files it could not write (the results are written all the same)."""
    try:
        step()
    except OSError:
        raise  # the folder itself failed: outputs names the file
    except Exception as error:  # noqa: BLE001 - a picture or a table must never lose a trained run
        warnings.warn(f"could not write {', '.join(files)} ({type(error).__name__}: {error}); the results are written",
                      RuntimeWarning, stacklevel=2)
        return False
    return True
