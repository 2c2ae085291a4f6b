"""Run an experiment: every strategy for every seed, with checkpoints, resume and a progress bar.

Everything the config names is built and validated before anything is written, so a bad experiment leaves
no half-written output folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fedsample.data import load_dataset, make_scheme, partition
from fedsample.data.types import Dataset, FederatedData
from fedsample.experiments.config import ConfigError, ExperimentConfig
from fedsample.models import model_from_name
from fedsample.recipes import recipe
from fedsample.simulation import SimulationResult, simulate
from fedsample.strategy import Strategy

METRICS = ("accuracy", "macro_f1", "loss")


@dataclass
class Plan:
    """An experiment with every part built: what will run."""

    config: ExperimentConfig
    dataset: Dataset
    scheme: Any
    model: Any
    strategies: dict[str, Strategy]

    def federation(self, seed: int) -> FederatedData:
        return partition(self.dataset, self.scheme, seed=seed)


def _built(what: str, build: Callable[[], Any]) -> Any:
    try:
        return build()
    except (ValueError, TypeError, FileNotFoundError) as error:
        raise ConfigError(f"{what}: {error}") from None


def prepare(config: ExperimentConfig) -> Plan:
    """Build dataset, partition scheme, model and strategies; any problem is one ConfigError line."""
    dataset = _built(f"dataset {config.dataset.name!r}", lambda: load_dataset(config.dataset.name, **config.dataset.params))
    scheme = _built("partition", lambda: make_scheme(config.partition.scheme, **config.partition.params))
    model = _built("model", lambda: model_from_name(config.model.name, **config.model.params))
    strategies = {
        s.display: _built(f"strategy {s.display!r}", lambda s=s: recipe(s.recipe, **s.params)) for s in config.strategies
    }
    return Plan(config, dataset, scheme, model, strategies)


def check_output_folder(out: Path) -> None:
    if not out.parent.exists():
        raise ConfigError(f"output folder {out}: its parent folder {out.parent} does not exist")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output folder {out}: a file of that name exists")


def checkpoint_path(out: Path, label: str, seed: int) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)
    return out / "checkpoints" / f"{safe}-seed{seed}.pt"


def run_plan(
    plan: Plan,
    out: Path,
    resume: bool = False,
    checkpoint_every: int = 10,
    progress: Callable[[str, int], None] | None = None,
    backend: str = "auto",
) -> dict[str, list[SimulationResult]]:
    """Run every strategy for every seed; ``progress(label, rounds_done_total)`` is called after each round."""
    config = plan.config
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    results: dict[str, list[SimulationResult]] = {label: [] for label in plan.strategies}
    for seed in config.seeds:
        fed = plan.federation(seed)
        for label, strategy in plan.strategies.items():
            results[label].append(
                simulate(
                    strategy, data=fed, model=plan.model, rounds=config.rounds, seed=seed, eval_every=config.eval_every,
                    checkpoint=checkpoint_path(out, label, seed), checkpoint_every=checkpoint_every, resume=resume,
                    progress=(lambda t, label=label: progress(label, t)) if progress else None, backend=backend,
                )
            )
    return results


def summarize(config: ExperimentConfig, results: dict[str, list[SimulationResult]]) -> dict:
    """The results.json document: config, and per strategy the final metrics (mean, std, per seed) and the
    per-seed round histories."""
    import numpy as np

    strategies = {}
    for label, runs in results.items():
        final = {}
        for metric in METRICS:
            values = [run.final.get(metric) for run in runs]
            if any(v is None for v in values):
                continue
            final[metric] = {"mean": float(np.mean(values)), "std": float(np.std(values)), "per_seed": values}
        strategies[label] = {
            "final": final, "history": [run.history for run in runs], "seeds": [run.seed for run in runs],
            "backend": [{"engine": run.backend, "reason": run.backend_reason} for run in runs],
        }
    return {"config": config.model_dump(), "strategies": strategies}


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file in the same folder and rename it into place."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_outputs(plan: Plan, out: Path, document: dict) -> None:
    """results.json, summary.md, curves.png and the partition picture of the first seed."""
    from fedsample.data.report import write_partition_report
    from fedsample.experiments.report import plot_curves, summary_table

    write_atomic(out / "results.json", lambda p: p.write_text(json.dumps(document, indent=1)))
    write_atomic(out / "summary.md", lambda p: p.write_text(summary_table(document)))
    write_atomic(out / "curves.png", lambda p: plot_curves(document, p))
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        write_partition_report(plan.federation(plan.config.seeds[0]), Path(tmp))
        os.replace(Path(tmp) / "partition.png", out / "partition.png")
        os.replace(Path(tmp) / "stats.json", out / "partition_stats.json")


def remove_checkpoints(out: Path) -> None:
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
