"""``fedsample diagnose [PRESET|CONFIG] --out DIR``: the experiment's dataset, partition, model and strategies,
diagnosed at the model's initial parameters (or a checkpoint's), written to DIR."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

DEFAULT_DRAWS = 1000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", default="quickstart", help="preset name or experiment .toml (default: quickstart)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: runs/<experiment name>-diagnose)")
    parser.add_argument("--draws", type=int, default=DEFAULT_DRAWS, help=f"rounds drawn per strategy (default {DEFAULT_DRAWS})")
    parser.add_argument("--seed", type=int, default=None, help="partition, model and sampling seed (default: the first seed)")
    parser.add_argument("--checkpoint", type=Path, default=None, help="a run's checkpoint (.pt): diagnose at its parameters")
    parser.add_argument("--sketch-dim", type=int, default=None, help="CountSketch size when the gradients do not fit (default 1024)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    from fedsample.tracking.setup import add_track_argument

    add_track_argument(parser)


def command_diagnose(args: argparse.Namespace) -> None:
    import torch

    from fedsample.diagnostics.gradients import DEFAULT_SKETCH_DIM
    from fedsample.diagnostics.measure import diagnose
    from fedsample.diagnostics.report import summary_table, write_diagnosis
    from fedsample.experiments import runner
    from fedsample.experiments.presets import resolve

    torch.set_num_threads(max(1, args.threads))
    config = resolve(args.target)
    out = args.out if args.out is not None else Path("runs") / f"{runner.folder_name(config.name)}-diagnose"
    if not out.parent.exists():
        raise ValueError(f"output folder {out}: its parent folder {out.parent} does not exist")
    tracking = runner.tracking_spec(config, getattr(args, "track", None), out / "tracking")
    plan = runner.prepare(config)
    seed = config.seeds[0] if args.seed is None else args.seed
    params = _checkpoint_params(args.checkpoint)
    start = time.perf_counter()
    diagnosis = diagnose(plan.strategies, plan.federation(seed), plan.model, params=params, rounds=args.draws, seed=seed,
                         sketch_dim=DEFAULT_SKETCH_DIM if args.sketch_dim is None else args.sketch_dim, progress=_report_progress)
    written = write_diagnosis(diagnosis, out)
    if tracking is not None:  # the tables and pictures, as the artifacts of a run named "diagnose"
        settings = {"experiment_config": config.model_dump(mode="json"), "draws": args.draws, "seed": seed}
        tracking.log_files(config.name, "diagnose", f"{runner.folder_name(config.name)}/diagnose", written, settings)
    print(summary_table(diagnosis.to_dict()))
    print(f"{time.perf_counter() - start:.1f} s; wrote {out}/diagnostics.json, summary.md, exploitation.png, estimator.png, labels.png")


def _report_progress(label: str, result: dict) -> None:
    e = result["estimator"]
    print(f"{label}: bias {e['bias']:.3f}, variance {e['variance']:.3f} ({result['seconds']:.1f} s)", file=sys.stderr, flush=True)


def _checkpoint_params(path: Path | None):
    if path is None:
        return None
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    from fedsample.simulation import SimulationState

    return SimulationState.load(path).params
