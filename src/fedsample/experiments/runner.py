"""Run an experiment: every strategy for every seed, with checkpoints, resume and a progress bar.

Everything the config names is built and validated before anything is written, so a bad experiment leaves
no half-written output folder; the result files are written into a temporary folder and moved into place
together. A strategy/seed that diverges is contained (docs/reliability.md).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from fedsample.experiments import grid
from fedsample.experiments.config import ConfigError, ExperimentConfig
from fedsample.experiments.execute import RunSettings, checkpoint_path, folder_name, run_jobs
from fedsample.experiments.plan import (  # noqa: F401 - the runner's public names
    Failure, Job, Outcome, Plan, check_cohort_size, fault_model, only_strategies, prepare, restricted,
)
from fedsample.experiments.stats import best_round, metric_table
from fedsample.simulation import SimulationResult
from fedsample.tracking.setup import TrackingSpec, parse_backends

METRICS = ("accuracy", "macro_f1", "loss")


OWNED = ("results.json", "summary.md", "curves.png", "partition.png", "partition_stats.json", "privacy.json", "checkpoints", "run.json", "tracking")
SUMMARY_FILES = ("results.json", "summary.md", "curves.png", "partition.png")


def _ours(out: Path) -> list[str]:
    return [name for name in OWNED if (out / name).exists()]


def check_output_folder(out: Path, config: ExperimentConfig | None = None, resume: bool = False, overwrite: bool = False) -> None:
    """The output folder may be created or reused: a folder that holds a run's files is reused only with
    ``overwrite`` or to ``resume`` the same experiment (its ``run.json`` names it)."""
    if not out.parent.exists():
        raise ConfigError(f"output folder {out}: its parent folder {out.parent} does not exist")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output folder {out}: a file of that name exists")
    if config is None or overwrite or not out.exists() or not _ours(out):
        return
    if not resume:
        raise ConfigError(f"output folder {out} holds a run's results: pass --overwrite to replace them or --resume to continue")
    changed = _changed_settings(out / "run.json", config)
    if changed:
        raise ConfigError(f"--resume: output folder {out} holds another experiment ({', '.join(changed)} differ); pass --overwrite or another --out")


def _changed_settings(marker: Path, config: ExperimentConfig) -> list[str]:
    """Top-level settings that differ between the folder's run.json and ``config`` (rounds may grow; the
    description is prose, not a setting: a preset whose stated cost was updated still resumes; tracking does
    not change the numbers; the [privacy] table may raise the budget, and each run's checkpoint refuses a ledger
    kept with another unit, k or threat model)."""
    try:
        saved = json.loads(marker.read_text())["config"]
    except (OSError, ValueError, KeyError, TypeError):
        return ["run.json (missing or unreadable)"]
    current = config.model_dump(mode="json")
    return sorted(k for k in set(saved) | set(current) if k not in ("rounds", "description", "tracking", "privacy") and saved.get(k) != current.get(k))


def start_output_folder(out: Path, config: ExperimentConfig, overwrite: bool = False) -> None:
    """Create the folder (or clear this tool's files from it with ``overwrite``) and record the experiment."""
    out.mkdir(exist_ok=True)
    if overwrite:
        for name in _ours(out):
            target = out / name
            shutil.rmtree(target) if target.is_dir() else target.unlink()
    (out / "checkpoints").mkdir(exist_ok=True)
    write_atomic(out / "run.json", lambda p: p.write_text(json.dumps({"config": config.model_dump(mode="json")}, indent=1)))


def run_plan(
    plan: Plan,
    out: Path,
    resume: bool = False,
    checkpoint_every: int = 10,
    progress: Callable[[str, int], None] | None = None,
    backend: str = "auto",
    on_failure: Callable[[str], None] | None = None,
    options: dict | None = None,
    device: str | None = None,
    jobs: int = 1,
    threads: int | None = None,
    tracking: TrackingSpec | None = None,
) -> dict[Job, Outcome]:
    """Run every strategy (every grid value) for every seed; ``progress(run label, round)`` is called after
    each round. A run that diverges is contained: ``on_failure(one line)`` is called, its outcome holds a
    :class:`Failure`, and the other runs still go on. ``options`` are further ``simulate`` arguments (e.g.
    ``federation=ray_federation(workers=4)``: :func:`fedsample.federation.ray.ray_federation`, which each run
    opens and closes); ``device`` overrides the experiment's ``device`` (default ``"cpu"``); ``jobs > 1`` runs
    the independent runs in that many processes with ``threads`` torch threads each (default 1), with the
    numbers of ``jobs = 1`` (fedsample.experiments.execute). ``tracking`` logs each (label, grid value, seed) run to
    its trackers (fedsample.tracking)."""
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    if jobs > 1 and (options or {}).get("federation") is not None:
        raise ConfigError("--jobs and Ray (--workers/--ray-address) exclude each other: Ray already spreads each run")
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    settings = RunSettings(out, resume, checkpoint_every, backend, device or plan.config.device, dict(options or {}), tracking)
    if tracking is not None:
        tracking.prepare(plan.config.name)
    return run_jobs(plan, settings, jobs, threads, progress, on_failure)


def run_experiment(
    plan: Plan, out: Path, *, resume: bool = False, overwrite: bool = False, checkpoint_every: int = 10,
    progress: Callable[[str, int], None] | None = None, backend: str = "auto",
    on_failure: Callable[[str], None] | None = None, options: dict | None = None, device: str | None = None,
    jobs: int = 1, only: list[str] | None = None, threads: int | None = None, tracking: TrackingSpec | None = None,
) -> tuple[dict, dict[str, list[SimulationResult | Failure]]]:
    """The whole experiment into ``out`` (already checked with :func:`check_output_folder`): record it, run
    every strategy, grid value and seed (:func:`run_plan`; ``only`` a subset of the labels), select each
    grid's value on the validation split, write results.json, summary.md and the plots; returns the
    results.json document and the raw results of each label (its selected value's runs). With ``tracking``
    each run is a tracked run, and a run named "summary" holds the experiment's result files."""
    plan = restricted(plan, only)
    if tracking is not None:
        tracking.check()
    start_output_folder(out, plan.config, overwrite=overwrite)
    outcomes = run_plan(
        plan, out, resume=resume, checkpoint_every=checkpoint_every, progress=progress, backend=backend,
        on_failure=on_failure, options=options, device=device, jobs=jobs, threads=threads, tracking=tracking,
    )
    results, extras = selected_runs(plan, outcomes)
    document = summarize(plan.config, results, extras)
    write_outputs(plan, out, document, privacy_document(results))
    if tracking is not None and tracking.backends:
        config = {"experiment_config": plan.config.model_dump(mode="json")}
        tracking.log_files(plan.config.name, "summary", f"{folder_name(plan.config.name)}/summary", [out / name for name in SUMMARY_FILES], config)
    return document, results


def tracking_spec(config: ExperimentConfig, track: str | None, folder: Path) -> TrackingSpec | None:
    """The trackers of an experiment's runs: ``--track`` (a comma list, ``none``: off) or else the config's
    ``[tracking]`` backends, with the config's per-backend options; None when neither asks for any. The local
    stores go in ``folder``. A missing extra is one error line (checked here, before anything runs)."""
    table = config.tracking
    backends = parse_backends(track) if track is not None else tuple(table.backends) if table is not None else ()
    if not backends:
        return None
    options = {} if table is None else {
        "mlflow_uri": table.mlflow.tracking_uri, "wandb_project": table.wandb.project, "wandb_mode": table.wandb.mode,
        "wandb_entity": table.wandb.entity,
    }
    spec = TrackingSpec(backends, Path(folder), **options)
    spec.check()
    return spec


def selected_runs(plan: Plan, outcomes: dict[Job, Outcome]) -> tuple[dict[str, list[SimulationResult | Failure]], dict[str, dict]]:
    """Per label, the runs of its selected grid value (its only runs without a grid), and the results.json
    entries beside them: ``validation`` (final-round metrics on the validation split) and ``selected``."""
    results, extras = {}, {}
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
            extras[label]["validation"] = {"final": metric_table([o.validation for o in by_key[key]], METRICS)}
    return results, extras


def finite_or_none(value: Any) -> Any:
    """JSON-safe numbers: non-finite floats become None, recursively through dicts and lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def summarize(config: ExperimentConfig, results: dict[str, list[SimulationResult | Failure]], extras: dict[str, dict] | None = None) -> dict:
    """The results.json document: config, and per strategy the final-round and best-round metrics
    (``{"mean", "sd", "n", "per_seed"}`` over the seeds that finished, sd with ddof = 1 and null for one seed;
    ``per_seed`` null for a seed that did not; best = the best evaluated round of each seed: highest accuracy
    and macro-F1, lowest loss), each seed's ``status`` ("ok" or the reason it stopped), the per-seed round
    histories, and ``extras[label]`` (validation metrics, a grid's selection). Strict JSON: no NaN or Infinity."""
    strategies = {}
    for label, runs in results.items():
        finished = [run if isinstance(run, SimulationResult) else None for run in runs]
        strategies[label] = {
            "final": metric_table([run and run.final for run in finished], METRICS),
            "best": metric_table([run and {m: best_round(run.history, m) for m in METRICS} for run in finished], METRICS),
            "status": [run.status if isinstance(run, SimulationResult) else run.reason for run in runs],
            "history": [run.history if isinstance(run, SimulationResult) else [] for run in runs],
            "seeds": [run.seed for run in runs],
            "privacy": privacy_spent([run for run in runs if isinstance(run, SimulationResult)]),
            "backend": [{"engine": run.backend, "reason": run.backend_reason} if isinstance(run, SimulationResult) else None for run in runs],
            **(extras or {}).get(label, {}),
        }
    return finite_or_none({"config": config.model_dump(mode="json"), "strategies": strategies})


def failures(results: dict[str, list[SimulationResult | Failure]]) -> list[str]:
    """The one-line reasons of the runs that stopped."""
    return [run.reason for runs in results.values() for run in runs if isinstance(run, Failure)]


def privacy_spent(runs: list[SimulationResult]) -> dict:
    """What one client spent over the whole run: the last round's accountant keys of the first seed, and each
    seed's privacy ledger (``ledger``: epsilon with and without amplification, delta, neighbouring relation, unit,
    threat model, unprotected releases; the releases themselves are in privacy.json)."""
    from fedsample.privacy.accounting import SPEND_KEYS

    last = runs[0].history[-1] if runs and runs[0].history else {}
    ledgers = [{k: v for k, v in run.privacy.items() if k != "releases"} for run in runs]
    return {**{k: last[k] for k in SPEND_KEYS if k in last}, "ledger": ledgers}


def privacy_document(results: dict[str, list[SimulationResult | Failure]]) -> dict:
    """privacy.json: per strategy label, each seed's ledger with every release (None for a run that failed)."""
    return {label: {"seeds": [run.seed for run in runs],
                    "ledger": [run.privacy if isinstance(run, SimulationResult) else None for run in runs]}
            for label, runs in results.items()}


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file in the same folder and rename it into place; the file gets the
    user's normal permissions (0666 less the umask), like any other file the tool writes."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def written_together(out: Path, names: tuple[str, ...]) -> Iterator[Path]:
    """A staging folder inside ``out``: the block writes the files ``names`` there, and they are moved into
    ``out`` only when the block ends without error, so a failure leaves none of them half-written."""
    with tempfile.TemporaryDirectory(dir=out, prefix=".writing-") as tmp:
        yield Path(tmp)
        for name in names:
            os.replace(Path(tmp) / name, out / name)


def write_outputs(plan: Plan, out: Path, document: dict, privacy: dict | None = None) -> None:
    """results.json, summary.md, curves.png, the partition picture of the first seed and privacy.json (each run's
    ledger): all written into a temporary folder inside ``out`` and moved into place only when every one is complete."""
    from fedsample.data.report import write_partition_report
    from fedsample.experiments.report import plot_curves, summary_table

    text = json.dumps(document, indent=1, allow_nan=False)
    ledgers = json.dumps(finite_or_none(privacy or {}), indent=1, allow_nan=False)
    with written_together(out, ("results.json", "summary.md", "curves.png", "partition.png", "partition_stats.json", "privacy.json")) as folder:
        (folder / "results.json").write_text(text)
        (folder / "privacy.json").write_text(ledgers)
        (folder / "summary.md").write_text(summary_table(document))
        plot_curves(document, folder / "curves.png")
        write_partition_report(plan.federation(plan.config.seeds[0]), folder / "partition")
        os.replace(folder / "partition" / "stats.json", folder / "partition_stats.json")
        os.replace(folder / "partition" / "partition.png", folder / "partition.png")
