"""The ``fedsample`` command line: run experiments, list presets, partition datasets.

Errors are one line on stderr with exit code 2; nothing is half-written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_USAGE = 2
DEFAULT_RUNS = Path("runs")


class CliError(Exception):
    """A user error: printed as one line, exit code 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedsample", description="Sampling for federated learning.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run an experiment (a preset name or a TOML file)")
    run.add_argument("target", nargs="?", default="quickstart", help="preset name or experiment .toml (default: quickstart)")
    run.add_argument("--out", type=Path, default=None, help="output folder (default: runs/<experiment name>)")
    run.add_argument("--resume", action="store_true", help="continue an interrupted run from its checkpoints")
    run.add_argument("--checkpoint-every", type=int, default=10, metavar="N", help="save state every N rounds (default 10)")
    run.add_argument("--rounds", type=int, default=None, help="override the number of rounds")
    run.add_argument("--seeds", type=str, default=None, help="override the seeds, e.g. 0,1,2")
    run.add_argument("--threads", type=int, default=1, help="torch threads (default 1: the models are small)")
    run.add_argument("--backend", choices=("auto", "vectorized", "loop"), default="auto",
                     help="in-process federation: auto (default: the faster engine for each strategy), batched cohorts, or the per-client loop")
    run.add_argument("--quiet", action="store_true", help="no progress bar")

    sub.add_parser("presets", help="list the presets")

    part = sub.add_parser("partition", help="partition a dataset and write stats.json and partition.png")
    part.add_argument("--dataset", required=True)
    part.add_argument("--scheme", required=True, help="iid, dirichlet, shards, lognormal, llt or natural")
    part.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="scheme parameter (repeatable)")
    part.add_argument("--seed", type=int, default=0)
    part.add_argument("--out", type=Path, required=True)
    return parser


def _key_values(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise CliError(f"--param {pair!r}: expected KEY=VALUE")
        key, value = pair.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def _overridden(config, rounds: int | None, seeds: str | None):
    from fedsample.experiments.config import parse_config

    data = config.model_dump()
    if rounds is not None:
        data["rounds"] = rounds
    if seeds is not None:
        try:
            data["seeds"] = [int(s) for s in seeds.split(",") if s.strip()]
        except ValueError:
            raise CliError(f"--seeds {seeds!r}: expected integers separated by commas") from None
    return parse_config(data, f"{config.name} (with command-line overrides)")


def command_run(args: argparse.Namespace) -> None:
    import torch

    from fedsample.experiments import runner
    from fedsample.experiments.presets import resolve

    if args.checkpoint_every < 0:
        raise CliError(f"--checkpoint-every must be >= 0, got {args.checkpoint_every}")
    torch.set_num_threads(max(1, args.threads))
    config = _overridden(resolve(args.target), args.rounds, args.seeds)
    out = args.out if args.out is not None else DEFAULT_RUNS / config.name
    if args.out is not None:
        runner.check_output_folder(out)
    plan = runner.prepare(config)
    if args.out is None:
        DEFAULT_RUNS.mkdir(exist_ok=True)  # the default location is ours to create, once the run is valid
        runner.check_output_folder(out)
    results = _run_with_progress(plan, out, args)
    document = runner.summarize(config, results)
    runner.write_outputs(plan, out, document)
    _print_summary(document, out)


def _run_with_progress(plan, out: Path, args: argparse.Namespace):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from fedsample.experiments import runner

    config = plan.config
    total = config.rounds * len(config.seeds) * len(plan.strategies)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, disable=args.quiet, transient=False) as bar:
        task = bar.add_task(f"{config.name}", total=total)
        def advance(label: str, round_done: int) -> None:
            bar.update(task, advance=1, description=f"{config.name}: {label}")

        return runner.run_plan(
            plan, out, resume=args.resume, checkpoint_every=args.checkpoint_every, progress=advance, backend=args.backend
        )


def _print_summary(document: dict, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from fedsample.experiments.report import METRIC_TITLES, rows

    table_rows = rows(document)
    metrics = [m for m in METRIC_TITLES if any(m in cells for _, cells in table_rows)]
    table = Table(title=f"{document['config']['name']}: final metrics (mean ± std over seeds)")
    table.add_column("strategy")
    for m in metrics:
        table.add_column(METRIC_TITLES[m], justify="right")
    for label, cells in table_rows:
        table.add_row(label, *(cells.get(m, "—") for m in metrics))
    console = Console()
    console.print(table)
    console.print(f"wrote {out}/results.json, summary.md, curves.png, partition.png")


def command_presets(args: argparse.Namespace) -> None:
    from fedsample.experiments.presets import describe_presets

    for name, description in describe_presets():
        print(f"{name:<24} {description}")


def command_partition(args: argparse.Namespace) -> None:
    from fedsample.data import load_dataset, make_scheme, partition, write_partition_report

    if not args.out.parent.exists():
        raise CliError(f"output folder {args.out}: its parent folder {args.out.parent} does not exist")
    dataset = load_dataset(args.dataset)
    scheme = make_scheme(args.scheme, **_key_values(args.param))
    fed = partition(dataset, scheme, seed=args.seed)
    write_partition_report(fed, args.out)
    print(f"{fed.num_clients} clients; wrote {args.out}/stats.json and partition.png")


COMMANDS = {"run": command_run, "presets": command_presets, "partition": command_partition}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        COMMANDS[args.command](args)
    except (CliError, ValueError, FileNotFoundError, TypeError) as error:
        print(f"fedsample: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("fedsample: interrupted; rerun with --resume to continue from the last checkpoint", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
