"""``fedsample reproduce PAPER``: run a paper's presets (one experiment folder each, resumable) and studies
for the device's profile, then write OUT/REPRODUCTION.md and OUT/reproduction.json with the paper's
numbers beside ours and a verdict per row. Bad input is one ValueError line before anything runs; a preset
or study that fails is reported and the others still run (the caller exits 1)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence, TypedDict, cast

from fedsample import outputs
from fedsample.experiments import runner
from fedsample.experiments.config import ConfigError, ExperimentConfig, parse_config
from fedsample.experiments.presets import resolve
from fedsample.experiments.timing import record_wall_time, recorded_wall_time
from fedsample.reproduction.collect import Values, read_experiment, study_values
from fedsample.reproduction.environment import hardware, utc_now
from fedsample.reproduction.registry import find_paper, papers, profile_of, profile_presets
from fedsample.reproduction.rows import paper_rows
from fedsample.reproduction.spec import Paper, Study
from fedsample.reproduction.table import markdown
from fedsample.runtime.records import JSON, JSONObject, as_list, as_object, as_text
from fedsample.tracking.setup import TrackingSpec, parse_backends

__all__ = ["add_arguments", "finished", "reproduce"]

DEFAULT_STUDY_SEEDS = (0, 1, 2)
STUDY_FILE = "study.json"
REUSED = "reused"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``reproduce`` subcommand's arguments."""
    parser.add_argument("paper", nargs="?", default=None, help="the paper (fedsample reproduce --list names them)")
    parser.add_argument("--list", action="store_true", help="list the papers with their presets, profiles and costs")
    parser.add_argument("--device", default="cpu", metavar="cpu|cuda|auto",
                        help="cpu (default: the small CPU stand-ins), cuda (the papers' models), auto (cuda when present)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: runs/reproduce-PAPER-PROFILE)")
    parser.add_argument("--seeds", default=None, help="override every preset's and study's seeds, e.g. 0,1,2")
    parser.add_argument("--rounds", type=int, default=None, help="override every preset's rounds")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="independent (strategy, seed) runs in N processes")
    parser.add_argument("--only", action="append", default=[], metavar="PRESET", help="run only this preset or study (repeatable)")
    parser.add_argument("--resume", action="store_true", help="reuse finished presets and continue interrupted ones")
    parser.add_argument("--overwrite", action="store_true", help="replace earlier results in OUT")
    parser.add_argument("--quiet", action="store_true", help="print only the result")
    from fedsample.tracking.setup import add_track_argument

    add_track_argument(parser)


class RunOptions(TypedDict, total=False):
    """The runner's options of every preset (:func:`run_options`): ``jobs`` processes, the ``tracking`` spec."""

    jobs: int
    tracking: TrackingSpec


@dataclass
class Selection:
    """What one invocation runs: the paper, device, profile, output folder and the chosen presets and studies."""

    paper: Paper
    device: str
    profile: str
    out: Path
    configs: dict[str, ExperimentConfig]
    studies: dict[str, Study]
    seeds: list[int] | None
    skipped: list[str]
    options: RunOptions


def parsed_seeds(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--seeds {text!r}: expected integers separated by commas") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ValueError(f"--seeds {text!r}: expected distinct non-negative integers")
    return seeds


def preset_config(entry: str, seeds: list[int] | None, rounds: int | None, device: str) -> ExperimentConfig:
    """The preset with this invocation's seeds, rounds and device (validated as a config file would be)."""
    updates = {"device": device, **({"seeds": seeds} if seeds else {}), **({"rounds": rounds} if rounds else {})}
    config = resolve(entry)
    return parse_config({**config.model_dump(), **updates}, f"{config.name} (with command-line overrides)")


def chosen(names: Sequence[str], only: Sequence[str], paper: Paper, profile: str) -> list[str]:
    """The presets and studies to run: all, or those named by ``--only`` (each must exist)."""
    unknown = [name for name in only if name not in names]
    if unknown:
        raise ValueError(f"--only {unknown[0]!r}: not a {profile} preset or study of {paper.name}; known: {', '.join(names)}")
    return [name for name in names if not only or name in only]


def select(args: argparse.Namespace) -> Selection:
    """Check every argument and build every config before anything runs or is written."""
    from fedsample.runtime.device import resolve_device

    if args.paper is None:
        raise ValueError("name a paper (fedsample reproduce --list shows them)")
    if args.resume and args.overwrite:
        raise ValueError("--resume and --overwrite exclude each other")
    if args.rounds is not None and args.rounds < 1:
        raise ValueError(f"--rounds must be >= 1, got {args.rounds}")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    paper = find_paper(args.paper)
    device = str(resolve_device(args.device))
    profile = profile_of(device)
    seeds = parsed_seeds(args.seeds)
    entries = profile_presets(paper, profile)
    studies = {study.name: study for study in paper.studies}
    names = chosen([*entries, *studies], args.only, paper, profile)
    out = args.out if args.out is not None else Path("runs") / f"reproduce-{paper.name}-{profile}"
    configs = {key: preset_config(entries[key], seeds, args.rounds, device) for key in names if key in entries}
    chosen_studies = {k: studies[k] for k in names if k in studies}
    outputs.check_folder(out, reproduction_marker(paper, profile, names), resume=args.resume, overwrite=args.overwrite,
                         make_parent=args.out is None)
    check_folders(out, configs, chosen_studies, args)
    skipped = [name for name in [*entries, *studies] if name not in names]
    return Selection(paper, device, profile, out, configs, chosen_studies, seeds, skipped, run_options(args, out))


REPRODUCTION_FILES = ("REPRODUCTION.md", "reproduction.json")


def reproduction_marker(paper: Paper, profile: str, names: Sequence[str] = ()) -> outputs.Marker:
    """OUT's fingerprint, ``reproduce.json``: the paper and profile, and the files and folders (one per preset
    and study) a reproduction writes there; a --resume continues only the same paper on the same profile (each
    preset's folder then checks its own experiment)."""
    return outputs.Marker("reproduce", (*REPRODUCTION_FILES, *names), {"paper": paper.name, "profile": profile},
                          resumable=True, subject="reproduction")


def check_folders(out: Path, configs: dict[str, ExperimentConfig], studies: dict[str, Study], args: argparse.Namespace) -> None:
    """Earlier results in OUT's preset and study folders are replaced only with --overwrite, or continued with
    --resume (same experiment)."""
    if not out.exists() or args.overwrite:  # a new OUT holds nothing to protect; --overwrite clears OUT first
        return
    for key, config in configs.items():
        runner.check_output_folder(out / key, config, args.resume, args.overwrite)
    for key in studies:
        if (out / key / STUDY_FILE).exists() and not (args.resume or args.overwrite):
            raise ValueError(f"output folder {out / key} holds a study's results: pass --overwrite or --resume")


def say(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(text, flush=True)


def finished(folder: Path, config: ExperimentConfig) -> bool:
    """Whether ``folder`` holds the finished results of exactly this experiment (its description, prose such
    as the stated cost, may have changed since)."""
    try:
        saved = dict(json.loads((folder / "results.json").read_text())["config"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    current = config.model_dump(mode="json")
    for key in ("description", "tracking"):  # prose, and trackers: neither changes the numbers
        saved.pop(key, None), current.pop(key, None)
    return saved == current


def run_options(args: argparse.Namespace, out: Path) -> RunOptions:
    """The runner's options from the command line (``jobs``: independent runs in that many processes;
    ``tracking``: every preset's runs logged to the trackers of ``--track``, stored in OUT/tracking)."""
    options = RunOptions(jobs=args.jobs) if args.jobs > 1 else RunOptions()
    if args.track is not None:  # --track: add_track_argument
        backends = parse_backends(args.track)
        if backends:
            options["tracking"] = TrackingSpec(backends, out / "tracking")
            options["tracking"].check()
    return options


def run_preset(key: str, config: ExperimentConfig, sel: Selection, args: argparse.Namespace) -> tuple[str, list[str]]:
    """Run one preset into OUT/key (or reuse it with --resume: status :data:`REUSED`); its status and its
    one-line failures."""
    folder = sel.out / key
    if args.resume and finished(folder, config):
        return REUSED, []
    plan = runner.prepare(config)
    stopped: list[str] = []
    runner.run_experiment(
        plan, folder, resume=args.resume, overwrite=args.overwrite, on_failure=stopped.append, device=sel.device, **sel.options
    )
    return ("ran" if not stopped else f"ran; {len(stopped)} run(s) diverged"), stopped


def run_study(study: Study, sel: Selection, args: argparse.Namespace) -> tuple[str, Values]:
    """Run one study into OUT/name/study.json, its wall time into OUT/name/timing.json (or reuse them with
    --resume, same seeds and device: status :data:`REUSED`)."""
    folder = sel.out / study.name
    seeds = sel.seeds or list(study.seeds or DEFAULT_STUDY_SEEDS)
    saved = folder / STUDY_FILE
    if args.resume and saved.exists():
        document = json.loads(saved.read_text())
        if document.get("seeds") == seeds and document.get("device") == sel.device:
            return REUSED, study_values(document["values"])
    folder.mkdir(exist_ok=True)
    start = time.perf_counter()
    measured = study.run(sel.device, seeds, folder)
    # {label: {metric: one value per seed, "budget": an ArmBudget}}: JSON, a TypedDict of JSON fields among it
    values = cast(JSONObject, {k: {m: v if isinstance(v, Mapping) or v is None else list(v) for m, v in d.items()}
                               for k, d in measured.items()})
    written: JSONObject = {"seeds": [*seeds], "device": sel.device, "values": values}
    outputs.write_atomic(saved, lambda p: p.write_text(json.dumps(runner.finite_or_none(written), indent=1, allow_nan=False)))
    record_wall_time(folder, time.perf_counter() - start)
    return "ran", study_values(values)


def earlier_wall_times(out: Path) -> dict[str, float]:
    """``{run name: wall seconds}`` of the runs in ``out``'s last reproduction.json that ran (then or before): the
    fallback of :func:`reused_wall_time` for folders written before timing.json existed."""
    try:
        runs = json.loads((out / "reproduction.json").read_text())["runs"]
        return {r["name"]: float(r["wall_s"]) for r in runs if r["wall_s"] is not None and r["status"].startswith(("ran", "reused"))}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def reused_wall_time(folder: Path, earlier: float | None) -> tuple[float | None, str]:
    """A reused preset's or study's wall time and status: from its folder's own record of the invocation(s) that
    produced it (timing.json, :mod:`fedsample.experiments.timing`), else, for a folder written before that record
    existed, ``earlier`` (its time in OUT's last reproduction.json), else unknown (None)."""
    record = recorded_wall_time(folder)
    if record is not None:
        count = len(record["invocations"])
        more = (f", {count} invocations" if count > 1 else "") + ("" if record["complete"] else "; not counting interrupted earlier work")
        return record["wall_s"], f"{REUSED} (ran {record['finished']}{more})"
    if earlier is not None:
        return earlier, f"{REUSED} (ran earlier; wall time from the last reproduction.json)"
    return None, f"{REUSED} (ran earlier; wall time not recorded)"


def execute(sel: Selection, args: argparse.Namespace) -> tuple[list[JSON], dict[str, Values], list[str]]:
    """Run every chosen preset, then every chosen study; a failure is recorded and the rest still run."""
    runs: list[JSON] = []
    values: dict[str, Values] = {}
    failures: list[str] = []
    earlier = earlier_wall_times(sel.out)
    total = len(sel.configs) + len(sel.studies)
    jobs = [(key, "preset", config) for key, config in sel.configs.items()] + [(k, "study", s) for k, s in sel.studies.items()]
    for i, (key, kind, what) in enumerate(jobs, 1):
        say(args, f"[{i}/{total}] {sel.paper.name}: {kind} {key} ...")
        start = time.perf_counter()
        try:
            if isinstance(what, ExperimentConfig):  # a preset
                status, stopped = run_preset(key, what, sel, args)
                values[key] = read_experiment(sel.out / key)
                failures += stopped
            else:
                status, values[key] = run_study(what, sel, args)
        except Exception as error:  # a failing preset or study is reported; the others still run
            status = f"failed: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            failures.append(f"{kind} {key}: {status}")
            print(f"fedsample: {kind} {key} {status}", file=sys.stderr)
        wall: float | None = time.perf_counter() - start
        if status == REUSED:  # the time it took when it ran, not the seconds spent checking it
            wall, status = reused_wall_time(sel.out / key, earlier.get(key))
        description = what.description if isinstance(what, ExperimentConfig) else f"{what.description} (cost: {what.cost})".strip()
        runs.append({"name": key, "kind": kind, "description": description, "wall_s": wall, "status": status})
        say(args, f"[{i}/{total}] {key}: {status} ({'?' if wall is None else f'{wall:.0f}'} s)")
    runs += [{"name": name, "kind": "skipped", "description": "", "wall_s": None, "status": "not run (--only)"} for name in sel.skipped]
    return runs, values, failures


def command_line(args: argparse.Namespace, sel: Selection) -> str:
    """The exact command that reproduces this document (every setting spelled out)."""
    words = ["fedsample", "reproduce", sel.paper.name, "--device", args.device, "--out", str(sel.out)]
    words += ["--seeds", ",".join(map(str, sel.seeds))] if sel.seeds else []
    words += ["--rounds", str(args.rounds)] if args.rounds else []
    words += ["--jobs", str(args.jobs)] if args.jobs != 1 else []
    for name in args.only:
        words += ["--only", name]
    return shlex.join(words)


def ran_rows(paper: Paper, sources: set[str]) -> Paper:
    """The paper with only the Figures and Comparisons whose source this profile runs."""
    return replace(
        paper, figures=tuple(f for f in paper.figures if f.source in sources),
        comparisons=tuple(c for c in paper.comparisons if c.source in sources),
    )


def reproduction_document(sel: Selection, args: argparse.Namespace, runs: list[JSON], values: dict[str, Values], wall: float) -> JSONObject:
    """reproduction.json: the settings, hardware, runs, and every row with its verdict."""
    sources = set(profile_presets(sel.paper, sel.profile)) | {s.name for s in sel.paper.studies}
    return {
        "paper": sel.paper.name, "citation": sel.paper.citation, "profile": sel.profile, "device": sel.device,
        "seeds": [*sel.seeds] if sel.seeds else "as in each preset", "command": command_line(args, sel), "date": utc_now(),
        "hardware": {**hardware(sel.device)}, "wall_s": wall, "runs": runs,
        **paper_rows(ran_rows(sel.paper, sources), values), "notes": [*sel.paper.notes],
    }


def write_reproduction(out: Path, document: JSONObject) -> None:
    """reproduction.json and REPRODUCTION.md, each written whole (temporary file, then renamed)."""
    text = json.dumps(runner.finite_or_none(document), indent=1, allow_nan=False)
    outputs.write_atomic(out / "reproduction.json", lambda p: p.write_text(text))
    outputs.write_atomic(out / "REPRODUCTION.md", lambda p: p.write_text(markdown(document)))


def preset_description(entry: str) -> str:
    """The preset's description (it states the cost), or why the preset does not load."""
    try:
        return resolve(entry).description
    except ConfigError as error:
        return f"(does not load: {error})"


def listing() -> str:
    """Every registered paper: its presets per profile with their stated costs, and its studies."""
    lines = []
    for name, paper in papers().items():
        lines.append(f"{name}: {paper.citation}")
        for profile in paper.presets:
            for key, entry in profile_presets(paper, profile).items():
                lines.append(f"  [{profile}] {key}: {preset_description(entry)}")
        lines += [f"  [study] {s.name}: {s.description} (cost: {s.cost})" for s in paper.studies]
    return "\n".join(lines) if lines else "no papers registered"


def verdict_counts(document: JSONObject) -> str:
    """How many rows got each verdict, e.g. 'figures: 2 matches, 1 differs; comparisons: 3 holds'."""
    from collections import Counter

    parts = []
    for table in ("figures", "comparisons"):
        counts = Counter(as_text(as_object(row, table)["verdict"], "verdict").split(" (")[0] for row in as_list(document[table], table))
        parts.append(f"{table}: " + (", ".join(f"{n} {v}" for v, n in counts.items()) or "none"))
    return "; ".join(parts)


def reproduce(args: argparse.Namespace) -> list[str]:
    """The whole command; returns the one-line failures (empty: every preset and study ran)."""
    if args.list:
        print(listing())
        return []
    sel = select(args)
    if args.out is None:
        sel.out.parent.mkdir(exist_ok=True)  # the default location is ours to create, once everything is valid
    marker = reproduction_marker(sel.paper, sel.profile, [*sel.configs, *sel.studies])
    outputs.start(sel.out, marker, overwrite=args.overwrite)
    start = time.perf_counter()
    runs, values, failures = execute(sel, args)
    document = reproduction_document(sel, args, runs, values, time.perf_counter() - start)
    write_reproduction(sel.out, document)
    tracking = sel.options.get("tracking")
    if tracking is not None:  # REPRODUCTION.md and reproduction.json, as the artifacts of a run named "reproduction"
        name = f"reproduce-{sel.paper.name}-{sel.profile}"
        tracking.log_files(name, "reproduction", f"{runner.folder_name(name)}/reproduction",
                           [sel.out / "REPRODUCTION.md", sel.out / "reproduction.json"], {"command": document["command"]})
    print(f"{sel.paper.name}: {verdict_counts(document)}; wrote {sel.out}/REPRODUCTION.md and reproduction.json")
    return failures
