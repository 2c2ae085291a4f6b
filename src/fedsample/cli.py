"""The ``fedsample`` command line: run experiments, list presets, partition datasets.

A user error (:class:`CliError`, or a ``ValueError`` such as a bad experiment file or parameter, or a missing
file) is one line on stderr with exit code 2; nothing is half-written. Any other exception is a bug and shows
its traceback (a ``TypeError`` included: bad values are refused as ``ValueError`` before they can cause one).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ContextManager

if TYPE_CHECKING:
    import numpy as np

    from fedsample.experiments.config import ExperimentConfig
    from fedsample.experiments.plan import Failure, Plan
    from fedsample.runtime.records import JSONObject
    from fedsample.simulation import EngineOptions, SimulationResult
    from fedsample.tracking.setup import TrackingSpec

__all__ = ["COMMANDS", "main"]

EXIT_USAGE = 2
DEFAULT_RUNS = Path("runs")


class CliError(Exception):
    """A user error: printed as one line, exit code 2."""


class RunsFailed(Exception):
    """Some strategy/seed runs diverged; the others were written. Exit code 1."""


#: The end of ``fedsample --help``: a first command and where to go next.
EXAMPLES = """examples:
  fedsample run                                   the quickstart preset (about 20 s): writes runs/quickstart/
  fedsample run my-experiment.toml --out runs/me  your experiment file (docs/command-line.md)
  fedsample diagnose quickstart-lognormal         bias and variance of each strategy's round
  fedsample reproduce --list                      the papers' presets, with their cost

'fedsample COMMAND --help' lists a command's options; the tutorials are in docs/tutorials/ (docs/index.md)."""


class _OneLineHelp(argparse.RawDescriptionHelpFormatter):
    """The help's layout: each command and its help on one line (wide enough for the longest), the examples as written."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=18, width=160)
        self._action_max_length = 16  # the commands' names sit indented under COMMAND; argparse measures them unindented


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedsample", description="Sampling for federated learning.", epilog=EXAMPLES,
                                     formatter_class=_OneLineHelp)
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    run = sub.add_parser("run", help="run an experiment (a preset name or a TOML file)")
    run.add_argument("target", nargs="?", default="quickstart", help="preset name or experiment .toml (default: quickstart)")
    run.add_argument("--out", type=Path, default=None, help="output folder (default: runs/<experiment name>)")
    run.add_argument("--resume", action="store_true", help="continue an interrupted run from its checkpoints")
    run.add_argument("--overwrite", action="store_true", help="replace the results of another run in --out")
    run.add_argument("--checkpoint-every", type=int, default=10, metavar="N", help="save state every N rounds (default 10)")
    run.add_argument("--rounds", type=int, default=None, help="override the number of rounds")
    run.add_argument("--seeds", type=str, default=None, help="override the seeds, e.g. 0,1,2")
    run.add_argument("--threads", type=int, default=1, help="torch threads (default 1: the models are small)")
    run.add_argument("--backend", choices=("auto", "vectorized", "loop"), default="auto",
                     help="in-process federation: auto (default: the faster engine for each strategy), batched cohorts, or the per-client loop")
    run.add_argument("--device", default=None, metavar="DEVICE",
                     help="cpu, cuda, cuda:N or auto (CUDA when present); default: the experiment's device (cpu)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--only", action="append", default=None, metavar="LABEL", help="run only this strategy (repeatable)")
    run.add_argument("--jobs", type=int, default=1, metavar="N",
                     help="run the independent (strategy, grid value, seed) runs in N processes (same numbers; on CUDA one after another)")
    run.add_argument("--workers", type=int, default=None, metavar="N",
                     help="split the clients over N Ray actors (needs fedsample[ray]; default 2 with --ray-address)")
    run.add_argument("--ray-address", default=None, metavar="auto|ADDRESS",
                     help="run on this Ray cluster ('auto': the one started here by 'ray start'); without it, "
                          "--workers starts and stops a local Ray")
    from fedsample.tracking.setup import add_track_argument

    add_track_argument(run)

    sub.add_parser("presets", help="list the presets")

    part = sub.add_parser("partition", help="partition a dataset and write stats.json and partition.png")
    part.add_argument("--dataset", required=True)
    part.add_argument("--scheme", required=True, help="iid, dirichlet, shards, lognormal, llt or natural")
    part.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="scheme parameter (repeatable)")
    part.add_argument("--seed", type=int, default=0)
    part.add_argument("--out", type=Path, required=True)
    part.add_argument("--overwrite", action="store_true", help="replace the results in --out")

    from fedsample.diagnostics.command import add_arguments

    add_arguments(sub.add_parser("diagnose", help="bias, variance and data exploitation of each strategy's round"))
    from fedsample.privacy.command import add_parser as add_privacy_parser

    add_privacy_parser(sub)
    from fedsample.reproduction.command import add_arguments as add_reproduce_arguments

    add_reproduce_arguments(sub.add_parser("reproduce", help="run a paper's presets and write its numbers beside ours, with verdicts"))
    return parser


def _key_values(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise CliError(f"--param {pair!r}: expected KEY=VALUE")
        key, value = pair.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def _overridden(config: ExperimentConfig, rounds: int | None, seeds: str | None, device: str | None = None) -> ExperimentConfig:
    from fedsample.experiments.config import parse_config

    data = config.model_dump()
    if rounds is not None:
        data["rounds"] = rounds
    if device is not None:
        data["device"] = device
    if seeds is not None:
        try:
            data["seeds"] = [int(s) for s in seeds.split(",") if s.strip()]
        except ValueError:
            raise CliError(f"--seeds {seeds!r}: expected integers separated by commas") from None
    return parse_config(data, f"{config.name} (with command-line overrides)")


def command_run(args: argparse.Namespace) -> None:
    from fedsample.runtime.device import use_threads
    from fedsample.experiments import runner
    from fedsample.experiments.presets import resolve

    if args.checkpoint_every < 0:
        raise CliError(f"--checkpoint-every must be >= 0, got {args.checkpoint_every}")
    if args.resume and args.overwrite:
        raise CliError("--resume and --overwrite exclude each other")
    if args.workers is not None and args.workers < 1:
        raise CliError(f"--workers must be >= 1, got {args.workers}")
    runner.check_run_settings(args.jobs, ray=args.workers is not None or args.ray_address is not None)
    use_threads(args.threads)
    config = _overridden(resolve(args.target), args.rounds, args.seeds, args.device)
    args.device = _checked_device(config.device)
    config = config.model_copy(update={"device": args.device})  # results.json records the device used
    config = runner.only_strategies(config, args.only)
    out = args.out if args.out is not None else DEFAULT_RUNS / runner.folder_name(config.name)
    runner.check_output_folder(out, config, args.resume, args.overwrite, make_parent=True)
    tracking = runner.tracking_spec(config, args.track, out / "tracking")
    plan = runner.prepare(config)
    with _ray_if_asked(args) as options:  # a bad --workers or unreachable cluster fails before any file is written
        out.parent.mkdir(exist_ok=True)  # a missing parent (runs/ on a fresh clone) is ours to create, once the run is valid
        document, results = _run_with_progress(plan, out, args, options, tracking)
    _print_summary(document, out, tracking)
    stopped = runner.failures(results)
    if stopped:
        raise RunsFailed(f"{len(stopped)} run(s) diverged (listed above; status in results.json)")


def _ray_if_asked(args: argparse.Namespace) -> ContextManager[EngineOptions]:
    """A Ray session for ``--workers``/``--ray-address`` (one for every run of the experiment) yielding the
    ``simulate`` options, or no session and no options."""
    import contextlib

    if args.workers is None and args.ray_address is None:
        no_options: EngineOptions = {}
        return contextlib.nullcontext(no_options)
    try:
        from fedsample.federation.ray import cli_session
    except ImportError:
        raise CliError("--workers/--ray-address need Ray: pip install 'fedsample[ray]'") from None
    return cli_session(args.ray_address, args.workers or 2, CliError)


def _checked_device(device: str) -> str:
    """The device name, after checking that this machine has it (a ValueError line otherwise: exit 2)."""
    from fedsample.runtime.device import resolve_device

    return str(resolve_device(device))


def _run_with_progress(
    plan: Plan, out: Path, args: argparse.Namespace, options: EngineOptions, tracking: TrackingSpec | None = None
) -> tuple[JSONObject, dict[str, list[SimulationResult | Failure]]]:
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from fedsample.experiments import runner

    config = plan.config
    total = config.rounds * len(plan.runs())
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, disable=args.quiet, transient=False) as bar:
        task = bar.add_task(f"{config.name}", total=total)
        def advance(label: str, round_done: int) -> None:
            bar.update(task, advance=1, description=escape(f"{config.name}: {label}"))

        def stopped(reason: str) -> None:  # plain stderr (the live bar redirects it above itself): one line
            print(f"fedsample: {reason}", file=sys.stderr)

        return runner.run_experiment(
            plan, out, resume=args.resume, overwrite=args.overwrite, checkpoint_every=args.checkpoint_every,
            progress=advance, backend=args.backend, on_failure=stopped, options=options, device=args.device,
            jobs=args.jobs, threads=args.threads, tracking=tracking,
        )


def _print_summary(document: JSONObject, out: Path, tracking: TrackingSpec | None = None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from fedsample.experiments.report import budget_lines, caption, columns, config_of, rows

    table_rows = rows(document)
    cols = columns(table_rows)
    table = Table(title=escape(f"{config_of(document)['name']}"), caption=escape(caption(document)))
    table.add_column("strategy")
    for _, title in cols:
        table.add_column(title, justify="right")
    for label, cells in table_rows:
        table.add_row(escape(label), *(escape(cells.get(k, "—")) for k, _ in cols))
    console = Console()
    console.print(table)
    for line in budget_lines(document):  # an arm that did not sample its K; equal or unequal budgets
        console.print(escape(line), highlight=False, soft_wrap=True)
    console.print(escape(f"wrote {out}/results.json, summary.md, curves.png, partition.png"), highlight=False, soft_wrap=True)
    for line in _where_to_look(out):
        console.print(escape(line), highlight=False, soft_wrap=True)  # one line each, whatever the terminal's width
    if tracking is not None:
        console.print(escape(f"tracked ({', '.join(tracking.backends)}) in {tracking.folder}"), highlight=False)


def _where_to_look(out: Path) -> list[str]:
    """The lines that end a run: which of its files to open first, and where every number is."""
    return [f"open first: {out}/summary.md (this table) and {out}/curves.png (test accuracy per round, a band over seeds)",
            f"every number, per seed and per round: {out}/results.json; the data's split: {out}/partition.png"]


def command_presets(args: argparse.Namespace) -> None:
    from fedsample.experiments.presets import describe_presets

    for name, description in describe_presets():
        print(f"{name:<24} {description}")


def command_partition(args: argparse.Namespace) -> None:
    from fedsample.data import load_dataset, make_scheme, partition, write_partition_report
    from fedsample.data.report import partition_marker
    from fedsample.outputs import check_folder

    scheme = make_scheme(args.scheme, **_key_values(args.param))
    check_folder(args.out, partition_marker(), overwrite=args.overwrite)  # before the data is loaded
    fed = partition(load_dataset(args.dataset), scheme, seed=args.seed)
    write_partition_report(fed, args.out, overwrite=args.overwrite)
    print(f"{fed.num_clients} clients; wrote {args.out}/stats.json and partition.png")


def command_diagnose(args: argparse.Namespace) -> None:
    from fedsample.diagnostics.command import command_diagnose as diagnose

    diagnose(args)


def command_privacy(args: argparse.Namespace) -> None:
    from fedsample.privacy.command import command_privacy as run_privacy

    run_privacy(args, default_sizes=_quickstart_lognormal_sizes)


def _quickstart_lognormal_sizes() -> np.ndarray:
    """The client sizes of the quickstart-lognormal preset's partition (seed 0): ``fedsample privacy``'s default."""
    from fedsample.experiments.presets import load_preset
    from fedsample.experiments.runner import prepare

    return prepare(load_preset("quickstart-lognormal")).federation(0).sizes()


def command_reproduce(args: argparse.Namespace) -> None:
    from fedsample.reproduction.command import reproduce

    failed = reproduce(args)
    if failed:
        raise RunsFailed(f"{len(failed)} preset(s), study(ies) or run(s) failed (listed above; status in REPRODUCTION.md)")


def _os_errors_in_one_line(command: Callable[[argparse.Namespace], object]) -> Callable[[argparse.Namespace], None]:
    """The command with an operating-system failure (a full disk, a path under a file, an unreadable file)
    turned into one error line naming the path and the reason (exit code 2) instead of a traceback."""
    import functools

    @functools.wraps(command)
    def guarded(args: argparse.Namespace) -> None:
        try:
            command(args)
        except OSError as error:
            from fedsample.outputs import error_line

            raise CliError(error_line(error)) from None

    return guarded


#: Each subcommand's function, by its name on the command line (an operating-system failure
#: inside it becomes one error line).
COMMANDS = {
    name: _os_errors_in_one_line(command) for name, command in {
        "run": command_run, "presets": command_presets, "partition": command_partition,
        "diagnose": command_diagnose, "privacy": command_privacy, "reproduce": command_reproduce,
    }.items()
}


def main(argv: list[str] | None = None) -> int:
    """The ``fedsample`` command: run the subcommand ``argv`` names; returns the exit code (0; 2 for a user
    error, one line on stderr; 1 when runs failed; 130 on Ctrl-C)."""
    args = _parser().parse_args(argv)
    from fedsample.rounds import FederationLost

    try:
        COMMANDS[args.command](args)
    except (CliError, ValueError, FileNotFoundError) as error:
        print(f"fedsample: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except FederationLost as error:  # e.g. a Ray actor died: its one line says how to continue
        print(f"fedsample: {error}", file=sys.stderr)
        return 1
    except RunsFailed as error:
        print(f"fedsample: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fedsample: interrupted; rerun with --resume to continue from the last checkpoint", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
