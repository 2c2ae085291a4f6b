"""Run an experiment: every strategy for every seed, with checkpoints, resume and a progress bar.

Everything the config names is built and validated before anything is written, so a bad experiment leaves
no half-written output folder; the result files are written into a temporary folder and moved into place
together. A strategy/seed that diverges is contained (docs/reliability.md).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from fedsample.data import load_dataset, make_scheme, partition
from fedsample.data.types import Dataset, FederatedData
from fedsample.experiments.config import ConfigError, ExperimentConfig
from fedsample.federation.faults import FaultModel, Straggler
from fedsample.models import model_from_name
from fedsample.recipes import recipe
from fedsample.simulation import Diverged, SimulationResult, simulate
from fedsample.strategy import Strategy

METRICS = ("accuracy", "macro_f1", "loss")


OWNED = ("results.json", "summary.md", "curves.png", "partition.png", "partition_stats.json", "checkpoints", "run.json")


@dataclass
class Plan:
    """An experiment with every part built: what will run."""

    config: ExperimentConfig
    dataset: Dataset
    scheme: Any
    model: Any
    strategies: dict[str, Strategy]
    faults: FaultModel | None = None
    federations: dict[int, FederatedData] = field(default_factory=dict)

    def federation(self, seed: int) -> FederatedData:
        if seed not in self.federations:
            self.federations[seed] = partition(self.dataset, self.scheme, seed=seed)
        return self.federations[seed]


@dataclass
class Failure:
    """A strategy/seed run that stopped (diverged): the one-line reason."""

    seed: int
    reason: str


def _built(what: str, build: Callable[[], Any]) -> Any:
    try:
        return build()
    except (ValueError, TypeError, FileNotFoundError, OverflowError) as error:
        raise ConfigError(f"{what}: {error}") from None


def prepare(config: ExperimentConfig) -> Plan:
    """Build dataset, partition scheme, model, strategies and the failure model, partition every seed and
    check each strategy's cohort size against the number of clients; any problem is one ConfigError line."""
    dataset = _built(f"dataset {config.dataset.name!r}", lambda: load_dataset(config.dataset.name, **config.dataset.params))
    scheme = _built("partition", lambda: make_scheme(config.partition.scheme, **config.partition.params))
    model = _built("model", lambda: model_from_name(config.model.name, **config.model.params))
    strategies = {
        s.display: _built(f"strategy {s.display!r}", lambda s=s: recipe(s.recipe, **s.params)) for s in config.strategies
    }
    plan = Plan(config, dataset, scheme, model, strategies, fault_model(config))
    for seed in config.seeds:
        fed = _built(f"partition (seed {seed})", lambda seed=seed: plan.federation(seed))
        for label, strategy in strategies.items():
            check_cohort_size(label, strategy, fed.num_clients)
    return plan


def fault_model(config: ExperimentConfig) -> FaultModel | None:
    """The experiment's failure model (None without a [faults] table)."""
    if config.faults is None:
        return None
    straggler = config.faults.straggler
    return FaultModel(
        dropout=dict(config.faults.dropout), straggler=Straggler(straggler.deadline, straggler.mean) if straggler else None
    )


def check_cohort_size(label: str, strategy: Strategy, num_clients: int) -> None:
    """Clients per round (``m``, ISFedAvg's ``L``) must not exceed the number of clients N (no silent clamp)."""
    for name in ("m", "L"):
        value = getattr(strategy.clients, name, None)
        if isinstance(value, int) and value > num_clients:
            raise ConfigError(f"strategy {label!r}: {name} = {value} clients per round exceeds the number of clients N = {num_clients}")


def folder_name(name: str) -> str:
    """The default output folder's name for an experiment name: one path component, never '..'."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name).strip(".")
    return safe or "experiment"


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
    """Top-level settings that differ between the folder's run.json and ``config`` (rounds may grow)."""
    try:
        saved = json.loads(marker.read_text())["config"]
    except (OSError, ValueError, KeyError, TypeError):
        return ["run.json (missing or unreadable)"]
    current = config.model_dump(mode="json")
    return sorted(k for k in set(saved) | set(current) if k != "rounds" and saved.get(k) != current.get(k))


def start_output_folder(out: Path, config: ExperimentConfig, overwrite: bool = False) -> None:
    """Create the folder (or clear this tool's files from it with ``overwrite``) and record the experiment."""
    out.mkdir(exist_ok=True)
    if overwrite:
        for name in _ours(out):
            target = out / name
            shutil.rmtree(target) if target.is_dir() else target.unlink()
    (out / "checkpoints").mkdir(exist_ok=True)
    write_atomic(out / "run.json", lambda p: p.write_text(json.dumps({"config": config.model_dump(mode="json")}, indent=1)))


def checkpoint_path(out: Path, label: str, seed: int) -> Path:
    """One file per (label, seed): the label's safe characters for reading, plus a digest of the whole label
    so that two labels never share a file; never a path outside ``out/checkpoints``."""
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in label)[:40]
    tag = hashlib.blake2b(label.encode(), digest_size=6).hexdigest()
    return out / "checkpoints" / f"{safe}-{tag}-seed{seed}.pt"


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
) -> dict[str, list[SimulationResult | Failure]]:
    """Run every strategy for every seed; ``progress(label, rounds_done_total)`` is called after each round.
    A run that diverges is contained: ``on_failure(one line)`` is called, its slot holds a :class:`Failure`,
    and the other strategies and seeds still run. ``options`` are further ``simulate`` arguments (e.g.
    ``federation="ray", workers=4``); ``device`` overrides the experiment's ``device`` (default ``"cpu"``)."""
    config = plan.config
    device = device or config.device
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    results: dict[str, list[SimulationResult | Failure]] = {label: [] for label in plan.strategies}
    for seed in config.seeds:
        fed = plan.federation(seed)
        for label, strategy in plan.strategies.items():
            try:
                result: SimulationResult | Failure = simulate(
                    strategy, data=fed, model=plan.model, rounds=config.rounds, seed=seed, eval_every=config.eval_every,
                    checkpoint=checkpoint_path(out, label, seed), checkpoint_every=checkpoint_every, resume=resume,
                    progress=(lambda t, label=label: progress(label, t)) if progress else None, backend=backend,
                    faults=plan.faults, device=device, **(options or {}),
                )
            except Diverged as error:
                result = Failure(seed, f"{label!r} diverged: {error}")
                if on_failure:
                    on_failure(result.reason)
            results[label].append(result)
    return results


def run_experiment(
    plan: Plan, out: Path, *, resume: bool = False, overwrite: bool = False, checkpoint_every: int = 10,
    progress: Callable[[str, int], None] | None = None, backend: str = "auto",
    on_failure: Callable[[str], None] | None = None, options: dict | None = None, device: str | None = None,
) -> tuple[dict, dict[str, list[SimulationResult | Failure]]]:
    """The whole experiment into ``out`` (already checked with :func:`check_output_folder`): record it, run
    every strategy and seed (:func:`run_plan`), write results.json, summary.md and the plots; returns the
    results.json document and the raw results."""
    start_output_folder(out, plan.config, overwrite=overwrite)
    results = run_plan(
        plan, out, resume=resume, checkpoint_every=checkpoint_every, progress=progress, backend=backend,
        on_failure=on_failure, options=options, device=device,
    )
    document = summarize(plan.config, results)
    write_outputs(plan, out, document)
    return document, results


def finite_or_none(value: Any) -> Any:
    """JSON-safe numbers: non-finite floats become None, recursively through dicts and lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def summarize(config: ExperimentConfig, results: dict[str, list[SimulationResult | Failure]]) -> dict:
    """The results.json document: config, and per strategy the final metrics (mean, std over the seeds
    that finished; ``per_seed`` null for a seed that did not), each seed's ``status`` ("ok" or the reason
    it stopped) and the per-seed round histories. Strict JSON: no NaN or Infinity anywhere."""
    strategies = {}
    for label, runs in results.items():
        done = [run for run in runs if isinstance(run, SimulationResult)]
        final = {}
        for metric in METRICS:
            values = [run.final.get(metric) for run in done]
            if not done or any(v is None for v in values):
                continue
            per_seed = [run.final.get(metric) if isinstance(run, SimulationResult) else None for run in runs]
            final[metric] = {"mean": float(np.mean(values)), "std": float(np.std(values)), "per_seed": per_seed}
        strategies[label] = {
            "final": final,
            "status": ["ok" if isinstance(run, SimulationResult) else run.reason for run in runs],
            "history": [run.history if isinstance(run, SimulationResult) else [] for run in runs],
            "seeds": [run.seed for run in runs],
            "privacy": privacy_spent([run for run in runs if isinstance(run, SimulationResult)]),
            "backend": [{"engine": run.backend, "reason": run.backend_reason} if isinstance(run, SimulationResult) else None for run in runs],
        }
    return finite_or_none({"config": config.model_dump(mode="json"), "strategies": strategies})


def failures(results: dict[str, list[SimulationResult | Failure]]) -> list[str]:
    """The one-line reasons of the runs that stopped."""
    return [run.reason for runs in results.values() for run in runs if isinstance(run, Failure)]


def privacy_spent(runs: list[SimulationResult]) -> dict:
    """What one client spent over the whole run (the last round's accountant keys; the same for every seed)."""
    from fedsample.accounting import SPEND_KEYS

    last = runs[0].history[-1] if runs and runs[0].history else {}
    return {k: last[k] for k in SPEND_KEYS if k in last}


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


def write_outputs(plan: Plan, out: Path, document: dict) -> None:
    """results.json, summary.md, curves.png and the partition picture of the first seed: all written into a
    temporary folder inside ``out`` and moved into place only when every one is complete."""
    from fedsample.data.report import write_partition_report
    from fedsample.experiments.report import plot_curves, summary_table

    text = json.dumps(document, indent=1, allow_nan=False)
    with tempfile.TemporaryDirectory(dir=out, prefix=".writing-") as tmp:
        folder = Path(tmp)
        (folder / "results.json").write_text(text)
        (folder / "summary.md").write_text(summary_table(document))
        plot_curves(document, folder / "curves.png")
        write_partition_report(plan.federation(plan.config.seeds[0]), folder / "partition")
        os.replace(folder / "partition" / "stats.json", folder / "partition_stats.json")
        os.replace(folder / "partition" / "partition.png", folder / "partition.png")
        for name in ("results.json", "summary.md", "curves.png", "partition.png", "partition_stats.json"):
            os.replace(folder / name, out / name)
