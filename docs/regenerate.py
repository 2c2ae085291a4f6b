"""The docs' tables and pictures, made by the commands the docs show, so that they cannot go stale.

    python docs/regenerate.py            # run the commands (about 2 minutes of CPU, and about 3 minutes wall more for the samplers: 1,000 draws of 19 samplers in 2 processes, 170 s wall and 320 s of CPU at load 0.6), store their records, rewrite the docs
    python docs/regenerate.py --only NAME                    # run one command (a key of COMMANDS)
    python docs/regenerate.py --render   # rewrite the docs from the stored records only (no command runs)
    python docs/regenerate.py --check    # exit 1 naming every generated block or picture that differs; writes nothing

Every generated part of a Markdown file (README.md, docs/*.md, docs/tutorials/*.md) sits between two marker comments::

    <!-- generated: NAME -->
    ...
    <!-- end: NAME -->

NAME is a key of :data:`BLOCKS`, whose function renders the text from a **record**: what a command wrote, stored in
``docs/records/COMMAND/`` (``meta.json``: the command as the docs show it, when and where it ran, its wall and CPU
time, the fedsample commit (``-dirty`` only when the code differs from it: :func:`commit`), and the sha256 of every picture it put in ``docs/img/``). A block may appear in several
files (the README and a page of docs/ show the same table). Text outside the markers is written by hand and must not
carry a number a command prints.

What the test suite checks (``tests/test_docs_generated.py``, run by CI):

- every block in the docs is exactly what its record renders, every block of :data:`BLOCKS` is in some doc, every
  marker names a block, and every picture in ``docs/img/`` that a record made has the hash the record stored;
- the commands still give the stored numbers: a full run is too slow for the suite (the quickstart is 3 seeds x 100
  rounds, the diagnosis 1,000 draws), so each record also stores a **sentinel**, the same command reduced (3 rounds of
  seed 0; 20 draws; 4 draws of docs/diagnose_importance.py; the partition in full) run through the real CLI by this script, and the test re-runs the reduced
  command and compares numbers (integers exactly, floats to a relative 1e-4). A change of the code that changes the
  commands' numbers (a default, a random stream, a formula) changes the sentinel too, and the test says to run this
  script. A change that shows only after round 3 or draw 20 is not seen by it: regenerate after such changes.
  A command that needs a data set the machine may not have (``Command.needs``: the samplers' diagnosis reads
  Fashion-MNIST) has its sentinel skipped where that data set is absent.

Another section adopts the mechanism by adding a renderer to :data:`BLOCKS` and markers to its Markdown, and a
command to :data:`COMMANDS`: the CLI's, or a script of docs/ (or of benchmarks/) where the docs' table comes from Python calls
(docs/diagnose_importance.py: the ``fs.diagnose`` calls of docs/diagnostics.md's importance table); a record
may come from a command this script does not run (a reproduction's REPRODUCTION.md copied into ``docs/records/``),
in which case its block is checked against the record but no sentinel is re-run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RECORDS = DOCS / "records"
IMG = DOCS / "img"
MARKER = re.compile(r"<!-- generated: (?P<name>[\w.-]+) -->\n(?P<body>.*?)<!-- end: (?P=name) -->", re.S)
OPENING = re.compile(r"<!-- (generated|end): ([\w.-]+) -->")
RTOL, ATOL = 1e-4, 1e-9


# --- the commands ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """A command as the docs show it (``args``, without ``--out``), the same command reduced for the test suite
    (``sentinel``), the files of its output folder kept as its record, and the pictures it puts in docs/img/
    (output file -> docs/img name). A command is the CLI's (``args`` without the leading ``fedsample``) or a script
    of docs/ or benchmarks/ (``("python", "docs/SCRIPT.py", ...)``, whose ``main(argv)`` takes ``--out``)."""

    args: tuple[str, ...]
    sentinel: tuple[str, ...]
    keep: tuple[str, ...]
    pictures: dict[str, str]
    numbers: Callable[[Path], dict]  # the sentinel's numbers, from its output folder
    needs: str = ""  # a data set the command loads that a machine may lack ("fashion-mnist"); "" for none


def run_numbers(out: Path) -> dict:
    """Per strategy: each round's training loss, samples drawn and size estimate, and the final test metrics."""
    document = json.loads((out / "results.json").read_text())
    numbers = {}
    for label, result in document["strategies"].items():
        rounds = result["history"][0]
        numbers[label] = {
            "train_loss": [r.get("train_loss") for r in rounds],
            "samples": [r.get("samples") for r in rounds],
            "cohort": [r.get("cohort") for r in rounds],
            "size_estimate": [r.get("size_estimate") for r in rounds],
            "final": {m: s["per_seed"][0] for m, s in result["final"].items()},
        }
    return numbers


def diagnose_numbers(out: Path) -> dict:
    """Per strategy: the estimator's numbers, the cost and the exploitation by size decile."""
    document = json.loads((out / "diagnostics.json").read_text())
    return {
        label: {
            "estimator": {k: r["estimator"][k] for k in ("bias_sq", "variance", "mse", "scale")},
            "cost": {k: r["cost"][k] for k in ("samples", "clients_contacted", "updates")},
            "by_size_decile": [d["inclusion"] for d in r["exploitation"]["by_size_decile"]],
        }
        for label, r in document["strategies"].items()
    }


def first_round_numbers(out: Path) -> dict:
    """Per partition family: every column's M and figures (benchmarks/first_round.py's first_round.json)."""
    return {r["partition"]: {k: v for k, v in r.items() if k != "partition"} for r in json.loads((out / "first_round.json").read_text())["rows"]}


def partition_numbers(out: Path) -> dict:
    """The partition's statistics (stats.json) but the scheme's text."""
    stats = json.loads((out / "stats.json").read_text())
    return {k: v for k, v in stats.items() if k != "scheme"}


IMPORTANCE_DRAWS = 400  # R of docs/diagnose_importance.py, the table's R (about 8 min wall on 2 loaded cores)

COMMANDS: dict[str, Command] = {
    "quickstart": Command(
        ("run", "quickstart"), ("run", "quickstart", "--rounds", "3", "--seeds", "0", "--quiet"),
        ("results.json", "summary.md"), {"curves.png": "quickstart-curves.png", "partition.png": "quickstart-partition.png"},
        run_numbers,
    ),
    "diagnose-quickstart-lognormal": Command(
        ("diagnose", "quickstart-lognormal"), ("diagnose", "quickstart-lognormal", "--draws", "20", "--check-rounds", "0"),
        ("diagnostics.json", "summary.md"),
        {"exploitation.png": "diagnose-quickstart-exploitation.png", "estimator.png": "diagnose-quickstart-estimator.png",
         "labels.png": "diagnose-quickstart-labels.png"},
        diagnose_numbers,
    ),
    "diagnose-samplers": Command(
        ("diagnose", "samplers"), ("diagnose", "samplers", "--draws", "4", "--check-rounds", "0"),
        ("diagnostics.json", "summary.md"), {"estimator.png": "samplers-estimator.png"},
        diagnose_numbers, needs="fashion-mnist",
    ),
    "diagnose-importance": Command(
        ("python", "docs/diagnose_importance.py", "--draws", str(IMPORTANCE_DRAWS)), ("python", "docs/diagnose_importance.py", "--draws", "4"),
        ("diagnostics.json", "summary.md"), {}, diagnose_numbers,
    ),
    "first-round": Command(
        ("python", "benchmarks/first_round.py", "--draws", "1000"), ("python", "benchmarks/first_round.py", "--draws", "20"),
        ("first_round.json",), {}, first_round_numbers,
    ),
    "partition-digits-dirichlet": Command(
        ("partition", "--dataset", "digits", "--scheme", "dirichlet", "--param", "num_clients=20", "--param", "alpha=0.5"),
        ("partition", "--dataset", "digits", "--scheme", "dirichlet", "--param", "num_clients=20", "--param", "alpha=0.5"),
        ("stats.json",), {"partition.png": "partition-digits-dirichlet.png"},
        partition_numbers,
    ),
}


def available(name: str) -> bool:
    """Whether this machine has the data set the command ``name`` needs (always, for a command that needs none)."""
    needs = COMMANDS[name].needs
    if not needs:
        return True
    from fedsample.data import datasets

    try:
        getattr(datasets, "load_" + needs.replace("-", "_"))()
    except FileNotFoundError:
        return False
    return True


def shown(args: tuple[str, ...]) -> str:
    """The command as the docs write it (``python docs/SCRIPT ...`` or ``python benchmarks/SCRIPT ...`` for a script,
    ``fedsample ...`` otherwise)."""
    return " ".join(args) if args[0] == "python" else "fedsample " + " ".join(args)


def process(args: tuple[str, ...]) -> list[str]:
    """The argv that runs ``args`` in a fresh process: a script of this checkout, or the CLI."""
    if args[0] == "python":
        return [sys.executable, str(ROOT / args[1]), *args[2:]]
    return [sys.executable, "-m", "fedsample.cli", *args]


def script_main(path: str) -> Callable[[list[str]], int]:
    """The ``main`` of a script of this checkout (docs/SCRIPT.py, benchmarks/SCRIPT.py), imported from its file with its
    folder on the path while it loads (a benchmark imports its folder's ``_common``, as run as a script)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    folder = str((ROOT / path).parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module.main


def run_cli(args: tuple[str, ...], out: Path) -> dict:
    """``fedsample ARGS --out OUT`` (or ``python docs/SCRIPT ARGS --out OUT``) in a fresh process, with this
    checkout's src/ first on the path; its wall and CPU time."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([*process(args), "--out", str(out)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{shown(args)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return {"wall_s": round(wall, 1), "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1)}


def sentinel_numbers(name: str, folder: Path) -> dict:
    """Run the reduced command of ``name`` through the CLI's own ``main`` into ``folder`` and read its numbers (what
    the test suite does)."""
    import contextlib
    import io

    from fedsample.cli import main

    command = COMMANDS[name]
    script = command.sentinel[0] == "python"
    run = script_main(command.sentinel[1]) if script else main
    argv = list(command.sentinel[2:] if script else command.sentinel)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = run([*argv, "--out", str(folder)])
    if code != 0:
        raise RuntimeError(f"{shown(command.sentinel)} failed ({code}): {err.getvalue().strip()}")
    return json.loads(json.dumps(command.numbers(folder)))  # plain JSON types, as stored


def machine() -> str:
    """The CPU model and core count, and the load when the command started."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()}-core {model}, load {os.getloadavg()[0]:.1f}"


NUMBER_PATHS = ("src", "benchmarks", "pyproject.toml", "constraints.txt")
"""The files whose changes can change a command's numbers: the code, the benchmarks and the dependencies."""


def commit(root: Path | None = None) -> str:
    """The commit a record's numbers come from: HEAD's short hash in the git checkout ``root`` (default: this
    repository), with ``-dirty`` only when a file of :data:`NUMBER_PATHS` differs from HEAD (changed, staged, deleted
    or new and not ignored). The docs, the README and the records, which this script itself rewrites, do not count
    (``git describe --dirty`` would always say dirty while a record is being written). "unknown" outside a checkout."""
    where = ["git", "-C", str(root or ROOT)]
    try:
        head = subprocess.run([*where, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        changed = subprocess.run([*where, "status", "--porcelain", "--untracked-files=all", "--", *NUMBER_PATHS],
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}-dirty" if changed else head


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def measure(name: str) -> None:
    """Run the command ``name`` as the docs show it and its sentinel; store the record and the pictures."""
    command = COMMANDS[name]
    record = RECORDS / name
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        where = machine()
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        timing = run_cli(command.args, out)
        if record.exists():
            shutil.rmtree(record)
        record.mkdir(parents=True)
        for kept in command.keep:
            text = (out / kept).read_text()
            if kept == "results.json":  # the per-round histories (MBs) are not what the docs show
                document = json.loads(text)
                for result in document["strategies"].values():
                    result.pop("history", None)
                text = json.dumps(document, indent=1) + "\n"
            (record / kept).write_text(text)
        pictures = {}
        for produced, picture in command.pictures.items():
            shutil.copyfile(out / produced, IMG / picture)
            pictures[picture] = sha256(IMG / picture)
        sentinel = sentinel_numbers(name, Path(tmp) / "sentinel")
    meta = {"command": shown(command.args), "sentinel": shown(command.sentinel), "date": started, "machine": where,
            **timing, "commit": commit(), "python": platform.python_version(), "pictures": pictures}
    (record / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    (record / "sentinel.json").write_text(json.dumps(sentinel, indent=1) + "\n")
    print(f"{shown(command.args)}: {timing['wall_s']} s wall, {timing['cpu_s']} s CPU; record {record.relative_to(ROOT)}")


# --- reading records ------------------------------------------------------------------------------------------------


def record(name: str, file: str) -> Any:
    path = RECORDS / name / file
    return json.loads(path.read_text()) if path.suffix == ".json" else path.read_text()


def table_lines(markdown: str) -> list[str]:
    """The lines of a Markdown table (the tool's printed table) from a summary.md."""
    return [line for line in markdown.splitlines() if line.startswith("|")]


def points(x: float) -> str:
    return f"{abs(x) * 100:.1f}"


# --- the blocks -----------------------------------------------------------------------------------------------------


def quickstart_measured() -> str:
    meta, results = record("quickstart", "meta.json"), record("quickstart", "results.json")
    config = results["config"]
    return (f"`{meta['command']}` on {meta['date']} ({meta['machine']}: {meta['wall_s']:.0f} s wall, {meta['cpu_s']:.0f} s "
            f"of CPU; fedsample {meta['commit']}); {config['rounds']} rounds, seeds {', '.join(map(str, config['seeds']))}. "
            "It prints this table (`runs/quickstart/summary.md`):\n")


def quickstart_table() -> str:
    summary = record("quickstart", "summary.md")
    caption = next(line for line in summary.splitlines() if line.startswith("Final round"))
    return "\n".join(table_lines(summary)) + "\n\n" + caption + "\n"


def final(results: dict, label: str, metric: str = "accuracy") -> tuple[float, float]:
    stats = results["strategies"][label]["final"][metric]
    return stats["mean"], stats["sd"] or 0.0


def quickstart_findings() -> str:
    """The claims the quickstart table supports, worded from its numbers."""
    r = record("quickstart", "results.json")
    fs, fs_sd = final(r, "FedSampling (eps=3)")
    central, central_sd = final(r, "Centralized")
    uniform, _ = final(r, "FedAvg (uniform clients)")
    weighted, _ = final(r, "FedAvg (size-weighted clients)")
    one_step, _ = final(r, "FedAvg (one step)")
    naive, naive_sd = final(r, "Naive fixed ratio")
    gaps = sorted([fs - uniform, fs - weighted])
    ahead = "ahead of" if gaps[0] > 0 else "behind" if gaps[1] < 0 else "between"
    pooled = math.sqrt((fs_sd**2 + naive_sd**2) / 2) or float("nan")
    versus_naive = (fs - naive) / pooled
    return (
        f"FedSampling's accuracy is {points(gaps[0])} to {points(gaps[1])} points {ahead} both FedAvg baselines (each "
        f"trains one local epoch on a cohort derived with `samples_per_round = 64`) and {points(fs - one_step)} points "
        f"{'ahead of' if fs > one_step else 'behind'} the one-step FedAvg; "
        f"it is {points(fs - central)} points {'below' if fs < central else 'above'} centralized training and "
        f"{points(fs - naive)} points {'above' if fs > naive else 'below'} the naive fixed-ratio method "
        f"({abs(versus_naive):.1f} pooled standard deviations over {len(r['config']['seeds'])} seeds).\n"
    )


def diagnose_measured() -> str:
    meta = record("diagnose-quickstart-lognormal", "meta.json")
    return (f"`{meta['command']}` (R = 1,000 draws; {meta['date']}, {meta['machine']}: {meta['cpu_s']:.0f} s of CPU, "
            f"{meta['wall_s']:.0f} s wall) prints:\n")


def diagnose_table() -> str:
    summary = record("diagnose-quickstart-lognormal", "summary.md").strip("\n")
    return summary + "\n"


def _diagnosis() -> tuple[dict, dict, dict]:
    d = record("diagnose-quickstart-lognormal", "diagnostics.json")
    return d, d["strategies"]["FedSampling (eps=3)"], d["strategies"]["FedAvg (size-weighted clients)"]


def fedsampling_divides_by_drawn(preset: str = "quickstart-lognormal") -> bool:
    """Whether the preset's FedSampling takes the self-normalized update (divided by the drawn count S, the library's
    default) rather than the paper's division by K: built from the preset as ``diagnose`` builds it."""
    from fedsample.experiments.plan import build_strategy
    from fedsample.experiments.presets import load_preset
    from fedsample.training.aggregate import DrawnNormalizedSum

    config = load_preset(preset)
    strategy = next(s for s in config.strategies if s.recipe == "fedsampling")
    return isinstance(build_strategy(config, strategy, {}).aggregate, DrawnNormalizedSum)


def fedsampling_scale_sentence(fs: dict) -> str:
    """What FedSampling's scale says, from the recorded size estimate (permanent reports: one N~ per run)."""
    p, e = fs["privacy"], fs["estimator"]
    scale = e["scale"]
    direction = f"{points(scale - 1)}% too {'long' if scale > 1 else 'short'}" if abs(scale - 1) >= 0.005 else "the right length"
    fixed = p["estimate_sd"] <= 1e-6 * max(p["estimate_mean"], 1.0)
    if fedsampling_divides_by_drawn():
        return (f"FedSampling's update is {direction} (scale {scale:.3f}) and points the right way (cosine {e['cosine']:.4f}): "
                "the library's default divides the summed gradients by the (noised) number of samples drawn, S, not by K, so "
                f"the size estimate sets only how many samples a round draws ({fs['cost']['samples']:.1f} here, against K = 64: "
                f"Ñ = {p['estimate_mean']:,.0f} estimates the *clipped* total {p['clipped_total']:,} at M = {p['M']}, the true one "
                f"is {p['total']:,}), not the length of the step; `fedsampling(protocol=\"paper\")` divides by K as Algorithm 1 does")
    if fixed:
        spread = (f"with permanent size reports (the default: one report per client per run) every round of a run uses "
                  f"the same Ñ, here {p['estimate_mean']:,.0f} (Eq. 2's standard error {p['estimate_se_theory']:,.0f}; the "
                  f"clipped total is {p['clipped_total']:,}, the true one {p['total']:,}), so the update's length is "
                  f"N/Ñ = {p['total'] / p['estimate_mean']:.3f} times the right one")
    else:
        spread = (f"Ñ varies over the draws (mean {p['estimate_mean']:,.0f}, sd {p['estimate_sd']:,.0f}; Eq. 2's standard "
                  f"error {p['estimate_se_theory']:,.0f}; clipped total {p['clipped_total']:,}, true total {p['total']:,})")
    return (f"FedSampling's update is {direction} (scale {scale:.3f}) and points the right way (cosine {e['cosine']:.4f}): "
            f"{spread}. Ñ estimates the *clipped* total at M = {p['M']}, so over runs (another seed, or fresh reports "
            f"with `permanent=False`) the update is too long on average: N / clipped total = {p['total'] / p['clipped_total']:.2f}, "
            "more with Ñ's noise (E[1/Ñ] > 1/E[Ñ]), less where Ñ is floored at the number of clients")


def size_weighted_sentence(weighted: dict) -> str:
    deciles = weighted["exploitation"]["by_size_decile"]
    ratio = deciles[-1]["inclusion"] / deciles[0]["inclusion"]
    return (f"size-weighted client sampling draws {weighted['cost']['samples']:.0f} samples a round, not 64, and uses the "
            f"samples of the largest clients (the largest tenth of the data, on clients of {deciles[-1]['min_size']}-"
            f"{deciles[-1]['max_size']} samples) {ratio:.0f} times as often as those of the smallest (clients of "
            f"{deciles[0]['min_size']}-{deciles[0]['max_size']})")


def fedsampling_bias_sentence(e: dict) -> str:
    """FedSampling's bias beside its scale: within noise, or what a pure rescaling gives."""
    z = e["bias_sq"] / e["bias_sq_se"]
    if abs(z) < 2:
        return f"Its bias ({e['bias']:.3f}, {z:.1f} standard errors of bias²) is within noise."
    return (f"Its bias ({e['bias']:.3f}) is close to |1 − scale| = {abs(1 - e['scale']):.3f}: a bias that only rescales the "
            "update acts like another learning rate.")


def diagnose_findings() -> str:
    _, fs, weighted = _diagnosis()
    return fedsampling_scale_sentence(fs) + "; " + size_weighted_sentence(weighted) + ".\n"


def diagnose_notes() -> str:
    """docs/diagnostics.md's reading of the quickstart table."""
    d, fs, weighted = _diagnosis()
    naive = d["strategies"]["Naive fixed ratio"]["estimator"]
    budget = [label for label, r in d["strategies"].items() if abs(r["cost"]["samples"] - 64) > 0.25 * 64]
    return (
        f"- The budget of about 64 samples per round holds for all but {', '.join(budget)}: size-weighted client sampling "
        f"draws {weighted['cost']['samples']:.0f} a round (16 draws proportional to size land on the big clients), so its "
        "variance is not comparable.\n"
        f"- {fedsampling_scale_sentence(fs)}. {fedsampling_bias_sentence(fs['estimator'])}\n"
        f"- The naive fixed ratio's bias ({naive['bias']:.3f}, {naive['bias_sq'] / naive['bias_sq_se']:.1f} standard errors of "
        "bias²) is small at the initial model, where client gradients differ little.\n"
    )


SAMPLERS = "diagnose-samplers"


def duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def samplers_measured() -> str:
    """How the samplers' table was made: the command, when, where, how long, how many draws."""
    meta, d = record(SAMPLERS, "meta.json"), record(SAMPLERS, "diagnostics.json")
    return (f"`{meta['command']}` ({meta['date']}, {meta['machine']}: {duration(meta['wall_s'])} wall, {meta['cpu_s']:.0f} s of CPU; fedsample "
            f"{meta['commit']}; R = {d['rounds']} draws per sampler at the initial model; Fashion-MNIST from "
            "`FEDSAMPLE_FASHION_MNIST_DIR`)\n")


def samplers_table() -> str:
    """The table and the per-sampler lines ``diagnose samplers`` writes (summary.md)."""
    return record(SAMPLERS, "summary.md").strip("\n") + "\n"


def calibration(sampler: dict) -> str:
    """The mean over draws of sum_{k in S} d_k / N with its standard error; "—" where the sampler declares no design
    weights (estimated probabilities)."""
    c = sampler.get("calibration")
    return "—" if c is None else f"{c['mean']:.2f} ± {c['se']:.2f}"


def samplers_calibration() -> str:
    """The compact table: bias, variance, calibration, cost and what the server learns, per sampler."""
    rows = ["| sampler | π | bias | variance | calibration Σd/N | clients contacted | trainings | kB up | server learns |",
            "|---|---|---|---|---|---|---|---|---|"]
    for label, r in record(SAMPLERS, "diagnostics.json")["strategies"].items():
        e, cost, sampler = r["estimator"], r["cost"], r["sampler"]
        rows.append(f"| {label} | {sampler['inclusion']} | {e['bias']:.3f} | {e['variance']:.3f} | {calibration(sampler)} | "
                    f"{cost['clients_contacted']:.0f} | {cost['local_trainings']:.0f} | {cost['bytes_up'] / 1000:.0f} | "
                    f"{', '.join(sampler['server_learns']) or '—'} |")
    return "\n".join(rows) + "\n"


#: The unbiased designs among the samplers (MD and the published exact samplers; FedSTS and ISFedAvg are exact but
#: target the clients' plain mean, not FedAvg's size-weighted g*).
UNBIASED_DESIGNS = ("size-weighted (MD)", "clustered (Alg. 1)", "clustered (Alg. 2)", "optimal", "optimal (AOCS)", "DELTA",
                    "DELTA (Poisson)")


def within_noise(estimator: dict) -> bool:
    """Whether the squared bias lies within two of its standard errors of 0."""
    return abs(estimator["bias_sq"]) <= 2 * estimator["bias_sq_se"]


def samplers_findings() -> str:
    """What the samplers' table shows, worded from its record (docs/samplers.md)."""
    d = record(SAMPLERS, "diagnostics.json")
    s = {label: r["estimator"] for label, r in d["strategies"].items()}
    cost = {label: r["cost"] for label, r in d["strategies"].items()}
    unbiased = [label for label in UNBIASED_DESIGNS if within_noise(s[label])]
    off = [f"{label} {s[label]['bias']:.3f}" for label in UNBIASED_DESIGNS if not within_noise(s[label])]
    md, uniform = s["size-weighted (MD)"]["variance"], s["uniform"]["variance"]
    alg1, alg2 = s["clustered (Alg. 1)"]["variance"], s["clustered (Alg. 2)"]["variance"]
    deltas = [s[label]["variance"] for label in ("DELTA", "DELTA (Poisson)", "DELTA (reference code)")]
    same_aocs = math.isclose(s["optimal"]["variance"], s["optimal (AOCS)"]["variance"], rel_tol=1e-9)
    aocs = "; its AOCS iteration gives the same probabilities here" if same_aocs else f"; AOCS {s['optimal (AOCS)']['variance']:.2f}"
    lowers = "lowers MD's variance, as its paper claims" if max(alg1, alg2) < md else "does not lower MD's variance on both algorithms"
    return (
        f"What it shows ({d['rounds']} draws; bias is ‖E ĝ − g*‖/‖g*‖, \"0.000\" where the squared bias is below its own "
        f"noise): of the unbiased designs, {', '.join(unbiased) or 'none'} are unbiased within two standard errors of their "
        f"squared bias{'' if not off else '; ' + ', '.join(off) + ' lie outside them'}. The adaptive samplers are biased as "
        f"declared: power-of-choice's updates are {points(s['pow-d (d=20)']['scale'] - 1)}% too long and lean on high-loss "
        f"clients (bias {s['pow-d (d=20)']['bias']:.2f} for pow-d, {s['cpow-d (d=20, b=64)']['bias']:.2f} for cpow-d, "
        f"{s['rpow-d (d=20)']['bias']:.2f} for rpow-d), Oort {s['Oort']['bias']:.2f}, Fed-CBS {s['Fed-CBS']['bias']:.2f}, "
        f"FedCor {s['FedCor']['bias']:.2f} and DivFL {s['DivFL']['bias']:.2f} (DivFL's variance, {s['DivFL']['variance']:.3f}: "
        f"at a fixed model it picks the same clients every draw). Clustered sampling {lowers} (Alg. 1 {alg1:.2f}, Alg. 2 "
        f"{alg2:.2f}, MD {md:.2f}, uniform {uniform:.2f}); optimal sampling reaches {s['optimal']['variance']:.2f} at the cost "
        f"of {cost['optimal']['local_trainings']:.0f} local trainings per round for {cost['optimal']['updates']:.1f} uploads"
        f"{aocs}. "
        f"DELTA's variance is {min(deltas):.2f}-{max(deltas):.2f} against uniform's {uniform:.2f}, and it probes every "
        f"client's full gradient each round ({cost['DELTA']['bytes_up'] / 1e6:.1f} MB up). FedSampling with exact sizes: "
        f"bias {s['FedSampling (K=6000, exact sizes)']['bias']:.3f}, variance {s['FedSampling (K=6000, exact sizes)']['variance']:.3f} "
        f"({cost['FedSampling (K=6000, exact sizes)']['samples']:,.0f} samples a round from every client).\n"
    )


def samplers_summary() -> str:
    """The README's two sentences on the samplers' table."""
    d = record(SAMPLERS, "diagnostics.json")
    s = {label: r["estimator"] for label, r in d["strategies"].items()}
    md = s["size-weighted (MD)"]["variance"]
    ratios = sorted(s[label]["variance"] / md for label in ("clustered (Alg. 1)", "clustered (Alg. 2)"))
    unbiased = sum(within_noise(s[label]) for label in UNBIASED_DESIGNS)
    largest = max(s, key=lambda label: s[label]["variance"])
    return (
        f"{unbiased} of the {len(UNBIASED_DESIGNS)} unbiased designs are unbiased within their noise at {d['rounds']} draws; "
        f"the adaptive samplers are biased as declared (power-of-choice's updates {points(s['pow-d (d=20)']['scale'] - 1)}% "
        f"too long; FedCor {s['FedCor']['bias']:.2f} and DivFL {s['DivFL']['bias']:.2f}, whose selections are deterministic). "
        f"Clustered sampling has {ratios[0]:.2f} to {ratios[1]:.2f} times MD's variance, optimal sampling "
        f"{s['optimal']['variance'] / md:.2f} times at {d['strategies']['optimal']['cost']['local_trainings']:.0f} local "
        f"trainings per round. The largest variance is {largest}'s ({s[largest]['variance']:.2f}).\n"
    )


IMPORTANCE = "diagnose-importance"
#: The ISFedAvg rows as docs/diagnostics.md showed them before ISFedAvg's agent probabilities followed eq. (23) with
#: each agent's E_k and B_k and alpha_k = 3 + 6/(E_k B_k): the same calls at R = 300 draws (no record holds them; the
#: current code reproduces the uniform row digit for digit at R = 300, and does not reproduce the approx row with
#: alpha = 3 given, since the change also put E_k and B_k into sigma^2_{s,k}).
ISFEDAVG_BEFORE: dict[str, Any] = {"draws": 300, "uniform": {"bias": 0.289, "variance": 2.81},
                                   "approx": {"bias": 0.328, "variance": 2.56, "variance_2se": 0.12, "mse": 2.67, "samples": 52}}


def importance_measured() -> str:
    meta = record(IMPORTANCE, "meta.json")
    draws = record(IMPORTANCE, "diagnostics.json")["rounds"]
    return (f"`{meta['command']} --out DIR` (R = {draws} draws per strategy; {meta['date']}, {meta['machine']}: "
            f"{meta['cpu_s']:.0f} s of CPU, {meta['wall_s']:.0f} s wall) gives:\n")


def importance_table() -> str:
    """The quickstart diagnosis of the importance designs: bias, bias², variance ± 2 SE of the MSE, MSE, samples."""
    d = record(IMPORTANCE, "diagnostics.json")
    lines = [f"| strategy (digits, {d['clients']} clients, R = {d['rounds']}) | bias | bias² ± SE | variance (± 2 SE of the MSE) | MSE | samples / round |",
             "|---|---|---|---|---|---|"]
    for label, r in d["strategies"].items():
        e = r["estimator"]
        lines.append(f"| {label} | {e['bias']:.3f} | {e['bias_sq']:.4f} ± {e['bias_sq_se']:.4f} | {e['variance']:.2f} ± "
                     f"{2 * e['mse_se']:.2f} | {e['mse']:.2f} | {r['cost']['samples']:.0f} |")
    return "\n".join(lines) + "\n"


def variance_cut(d: dict, design: str, baseline: str) -> tuple[float, float, float, str]:
    """``design``'s variance against ``baseline``'s: the relative cut, the difference in standard errors, the one-sided
    p and the verdict of Welch's t-test on the draws (the claim: a lower variance). The draws are independent across
    strategies; each side's standard error is its MSE's (the spread of the per-draw squared errors over R draws),
    which the variance shares up to the small bias² term."""
    from fedsample.reproduction.significance import welch
    from fedsample.reproduction.verdict import ordering_verdict

    a, b, R = d["strategies"][baseline]["estimator"], d["strategies"][design]["estimator"], d["rounds"]
    estimate = welch(a["variance"], a["mse_se"] * math.sqrt(R), R, b["variance"], b["mse_se"] * math.sqrt(R), R)
    p, verdict = ordering_verdict(estimate)
    return 1 - b["variance"] / a["variance"], estimate.d / estimate.se, p, verdict


def cut_words(cut: float) -> str:
    return f"{abs(cut) * 100:.0f}% {'below' if cut > 0 else 'above'}"


def deciles_relative(r: dict) -> tuple[float, float]:
    """The inclusion of the smallest and the largest tenth of the data (by client size), times the mean."""
    x = r["exploitation"]
    deciles = x["by_size_decile"]
    return deciles[0]["inclusion"] / x["mean"], deciles[-1]["inclusion"] / x["mean"]


def samples_shift(before: float, now: float) -> str:
    """What a change of the samples per round of L agents says of the agents chosen (nothing within one sample)."""
    if abs(now - before) <= 1:
        return ""
    return f": the chosen agents are {'smaller' if now < before else 'larger'} on average, so a round draws {'fewer' if now < before else 'more'} samples"


def importance_notes() -> str:
    """docs/diagnostics.md's reading of the importance table, and what the alpha_k change did to ISFedAvg (approx)."""
    d = record(IMPORTANCE, "diagnostics.json")
    s = d["strategies"]
    fedavg, ht = "FedAvg (m=16 uniform, size-weighted)", "Uniform m=16, Horvitz-Thompson"
    sts, sts_paper, isu, isa = "FedSTS (m=16, H=4)", "FedSTS (m=16, H=4, paper aggregation)", "ISFedAvg (L=16, uniform)", "ISFedAvg (L=16, approx)"
    v = {label: r["estimator"]["variance"] for label, r in s.items()}
    cut_sts, z_sts, p_sts, verdict_sts = variance_cut(d, sts, ht)
    cut_is, z_is, p_is, verdict_is = variance_cut(d, isa, isu)
    _, z_paper, p_paper, _ = variance_cut(d, sts_paper, sts)
    unbiased_for_mean = [ht, sts, sts_paper, isu, isa]
    biases = [s[label]["estimator"]["bias"] for label in unbiased_for_mean]
    f = s[fedavg]["estimator"]
    f_z = f["bias_sq"] / f["bias_sq_se"]
    fedavg_bias = (f"no measurable bias (bias² {f_z:.1f} standard errors from 0)" if abs(f_z) < 2
                   else f"a bias of {f['bias']:.3f} (bias² {f_z:.1f} standard errors from 0)")
    ratio = v[fedavg] / (sum(v[label] for label in unbiased_for_mean) / len(unbiased_for_mean))
    small_sts, large_sts = deciles_relative(s[sts])
    small_is, large_is = deciles_relative(s[isa])
    before, now = ISFEDAVG_BEFORE["approx"], s[isa]
    uniform_before = ISFEDAVG_BEFORE["uniform"]
    shift = samples_shift(before["samples"], now["cost"]["samples"])
    e = now["estimator"]
    return (
        f"   FedSTS's variance ({v[sts]:.2f}) is {cut_words(cut_sts)} uniform sampling with the same Horvitz-Thompson "
        f"aggregation ({v[ht]:.2f}), {z_sts:.1f} standard errors of the difference apart (Welch, one-sided p = {p_sts:.2g}: "
        f"**{verdict_sts}** at the 5% level); ISFedAvg's importance sampling ({v[isa]:.2f}) is {cut_words(cut_is)} its uniform "
        f"version ({v[isu]:.2f}), {z_is:.1f} standard errors apart (p = {p_is:.2g}: **{verdict_is}**). But both aggregations "
        "are unbiased for the *mean over clients* (1/N) Σ_k ∇f_k, not for g*: under size imbalance that mean is "
        f"{min(biases):.2f}-{max(biases):.2f} ||g*|| away from g* (their bias column), and FedAvg's size-weighted "
        f"aggregation of the same uniform cohort has {ratio:.2f} times their mean variance ({v[fedavg]:.2f}) and {fedavg_bias}. "
        f"Both importance designs {'prefer small clients' if small_sts > large_sts and small_is > large_is else 'differ in how they use client sizes'} (FedSTS uses the samples of the smallest tenth of the data "
        f"{small_sts:.1f} times the mean and those of the largest {large_sts:.2f} times; ISFedAvg (approx) {small_is:.1f} and "
        f"{large_is:.2f} times) and draw fewer samples ({s[sts]['cost']['samples']:.0f} and {now['cost']['samples']:.0f} against "
        f"{s[ht]['cost']['samples']:.0f}). The paper's own FedSTS aggregation (`aggregation=\"paper\"`) has variance "
        f"{v[sts_paper]:.2f} against the unbiased one's {v[sts]:.2f} ({abs(z_paper):.1f} standard errors apart).\n\n"
        "   ISFedAvg (approx) was re-measured after its agent probabilities came to follow eq. (23) with each agent's E_k "
        "and B_k in σ²_{s,k} and α_k = 3 + 6/(E_k B_k) instead of 3 ([isfedavg.md](isfedavg.md)): its row read bias "
        f"{before['bias']:.3f}, variance {before['variance']:.2f} ± {before['variance_2se']:.2f}, MSE {before['mse']:.2f} and "
        f"{before['samples']} samples a round before (R = {ISFEDAVG_BEFORE['draws']}), and reads bias {e['bias']:.3f}, variance "
        f"{e['variance']:.2f} ± {2 * e['mse_se']:.2f}, MSE {e['mse']:.2f} and {now['cost']['samples']:.0f} samples now "
        f"(R = {d['rounds']}){shift}. The "
        f"uniform row does not depend on them; it read bias {uniform_before['bias']:.3f} and variance "
        f"{uniform_before['variance']:.2f} at R = {ISFEDAVG_BEFORE['draws']} and "
        f"reads {s[isu]['estimator']['bias']:.3f} and {v[isu]:.2f} at R = {d['rounds']}.\n"
    )


def partition_measured() -> str:
    meta, stats = record("partition-digits-dirichlet", "meta.json"), record("partition-digits-dirichlet", "stats.json")
    sizes, mix = stats["sizes"], stats["label_mix"]
    return (f"`{meta['command']} --out DIR` writes `DIR/stats.json` and this `DIR/partition.png`: {stats['num_clients']} "
            f"clients of {sizes['min']} to {sizes['max']} digits (Gini {stats['imbalance']['gini']:.2f}), "
            f"{mix['mean_classes_per_client']:.1f} classes per client on average, the largest class {mix['mean_dominant_share'] * 100:.0f}% "
            "of a client's samples on average.\n\n![partition picture](img/partition-digits-dirichlet.png)\n")


FIRST_ROUND = "first-round"


def first_round_measured() -> str:
    meta, settings = record(FIRST_ROUND, "meta.json"), record(FIRST_ROUND, "first_round.json")["settings"]
    low, high = settings["range"]
    return (f"`{meta['command']}` on {meta['date']} ({meta['machine']}: {meta['wall_s']:.0f} s wall; fedsample {meta['commit']}): "
            f"the share of {settings['draws']:,} draws for which round 1's expected budget E[S₁]/K lands in [{low} K, {high} K] "
            f"(ε = {settings['epsilon']:g}, K = {settings['K']}, {settings['rows']:,} rows; 10% / 50% / 90% quantiles of E[S₁]/K in "
            f"brackets; the summed sizes with σ_S = {settings['count_noise']:g}):\n")


def first_round_table() -> str:
    def cell(c: dict) -> str:
        return f"{c['inside'] * 100:.0f}% ({c['q10']:.2f} / {c['q50']:.2f} / {c['q90']:.2f})"

    lines = ["| partition | clients | largest client | `M=\"rmse\"` (prior) | oracle RMSE M | best M for the range | "
             "bucket phase (ε 1 + 2) | **library default**: summed sizes |", "|---|---|---|---|---|---|---|---|"]
    for r in record(FIRST_ROUND, "first_round.json")["rows"]:
        lines.append(f"| {r['partition']} | {r['clients']:,} | {r['largest_share'] * 100:.0f}% | M = {r['prior_M']}: {cell(r['prior'])} | "
                     f"M = {r['oracle_M']}: {cell(r['oracle'])} | M = {r['best_M']}: {cell(r['best'])} | {cell(r['bucket'])} | "
                     f"{cell(r['summed'])} |")
    return "\n".join(lines) + "\n"


def first_round_findings() -> str:
    rows = record(FIRST_ROUND, "first_round.json")["rows"]

    def span(shares: list[float]) -> str:
        low, high = f"{min(shares) * 100:.0f}%", f"{max(shares) * 100:.0f}%"
        return low if low == high else f"{low[:-1]}–{high}"

    oracle = [max(r["oracle"]["inside"], r["best"]["inside"]) for r in rows]
    return (f"Over the {len(rows)} families the best M (an oracle) keeps round 1 in range in {span(oracle)} of draws and the "
            f"private bucket phase in {span([r['bucket']['inside'] for r in rows])}; the library's default, the sizes summed in "
            f"the secure sum, in {span([r['summed']['inside'] for r in rows])}.\n")


def claims_summary() -> str:
    from fedsample.reproduction.claims import claims_summary, stored_claims

    return claims_summary(stored_claims(REPRODUCTION.read_text()))


def claims_list() -> str:
    from fedsample.reproduction.claims import claims_list, stored_claims

    return claims_list(stored_claims(REPRODUCTION.read_text()))


REPRODUCTION = DOCS / "reproduction.md"

BLOCKS: dict[str, tuple[str, Callable[[], str]]] = {
    # name: (the record it renders, renderer)
    "quickstart-measured": ("quickstart", quickstart_measured),
    "quickstart-table": ("quickstart", quickstart_table),
    "quickstart-findings": ("quickstart", quickstart_findings),
    "diagnose-quickstart-measured": ("diagnose-quickstart-lognormal", diagnose_measured),
    "diagnose-quickstart-table": ("diagnose-quickstart-lognormal", diagnose_table),
    "diagnose-quickstart-findings": ("diagnose-quickstart-lognormal", diagnose_findings),
    "diagnose-quickstart-notes": ("diagnose-quickstart-lognormal", diagnose_notes),
    "diagnose-importance-measured": (IMPORTANCE, importance_measured),
    "diagnose-importance-table": (IMPORTANCE, importance_table),
    "diagnose-importance-notes": (IMPORTANCE, importance_notes),
    "partition-digits-dirichlet": ("partition-digits-dirichlet", partition_measured),
    "first-round-measured": (FIRST_ROUND, first_round_measured),
    "first-round-table": (FIRST_ROUND, first_round_table),
    "first-round-findings": (FIRST_ROUND, first_round_findings),
    "samplers-measured": (SAMPLERS, samplers_measured),
    "samplers-table": (SAMPLERS, samplers_table),
    "samplers-calibration": (SAMPLERS, samplers_calibration),
    "samplers-findings": (SAMPLERS, samplers_findings),
    "samplers-summary": (SAMPLERS, samplers_summary),
    "claims-summary": ("docs/reproduction.md's tables", claims_summary),
    "claims-list": ("docs/reproduction.md's tables", claims_list),
}


# --- the docs -------------------------------------------------------------------------------------------------------


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md")), *sorted(DOCS.glob("tutorials/*.md"))]


def rendered(text: str) -> str:
    """``text`` with every generated block re-rendered from its record."""
    def block(match: re.Match) -> str:
        name = match["name"]
        if name not in BLOCKS:
            return match[0]
        return f"<!-- generated: {name} -->\n{BLOCKS[name][1]()}<!-- end: {name} -->"

    return MARKER.sub(block, text)


def problems() -> list[str]:
    """Every way the docs differ from their records: a block that renders differently, a block of BLOCKS no doc
    holds, a marker without a block or without its end, a picture whose bytes are not those its record stored."""
    found: list[str] = []
    seen: set[str] = set()
    for path in documents():
        text = path.read_text()
        where = path.relative_to(ROOT)
        names = [m["name"] for m in MARKER.finditer(text)]
        opened = [m.group(2) for m in OPENING.finditer(text) if m.group(1) == "generated"]
        found += [f"{where}: marker '{n}' has no '<!-- end: {n} -->' line" for n in opened if n not in names]
        found += [f"{where}: block '{n}' is not one of docs/regenerate.py's BLOCKS" for n in names if n not in BLOCKS]
        seen.update(names)
        for match in MARKER.finditer(text):
            name = match["name"]
            if name in BLOCKS and match["body"] != BLOCKS[name][1]():
                found.append(f"{where}: block '{name}' differs from what its record ({BLOCKS[name][0]}) renders")
    found += [f"block '{n}' is in no doc" for n in BLOCKS if n not in seen]
    if stored_tables(REPRODUCTION.read_text()) != REPRODUCTION.read_text():
        found.append("docs/reproduction.md: a stored reproduction table is not in the current form (no Holm column): "
                     "run `python -m fedsample.reproduction.rederive docs/reproduction.md`")
    for name in COMMANDS:
        for picture, digest in record(name, "meta.json")["pictures"].items():
            if not (IMG / picture).exists() or sha256(IMG / picture) != digest:
                found.append(f"docs/img/{picture} is not the picture `{shown(COMMANDS[name].args)}` made for its record")
    return found


def stored_tables(text: str) -> str:
    """docs/reproduction.md's stored reproduction tables re-derived where they predate the current form (the Holm
    column: :mod:`fedsample.reproduction.rederive`); tables spliced from a run are left as they are."""
    from fedsample.reproduction.rederive import rederive

    return rederive(text)


def render() -> None:
    for path in documents():
        text = path.read_text()
        new = rendered(stored_tables(text) if path == REPRODUCTION else text)
        if new != text:
            path.write_text(new)
            print(f"rewrote {path.relative_to(ROOT)}")


def differences(expected: Any, got: Any, where: str = "") -> list[str]:
    """Where two sentinels' numbers differ: integers and strings exactly, floats to RTOL (relative) or ATOL."""
    if isinstance(expected, dict) and isinstance(got, dict):
        keys = sorted(set(expected) | set(got))
        return [d for k in keys for d in (differences(expected.get(k), got.get(k), f"{where}/{k}") if k in expected and k in got
                                        else [f"{where}/{k}: only in {'the record' if k in expected else 'the new run'}"])]
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return [f"{where}: {len(expected)} entries recorded, {len(got)} now"]
        return [d for i, (a, b) in enumerate(zip(expected, got)) for d in differences(a, b, f"{where}[{i}]")]
    if isinstance(expected, float) or isinstance(got, float):
        if isinstance(expected, (int, float)) and isinstance(got, (int, float)) and math.isclose(expected, got, rel_tol=RTOL, abs_tol=ATOL):
            return []
    elif expected == got:
        return []
    return [f"{where}: recorded {expected!r}, now {got!r}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--render", action="store_true", help="rewrite the docs from the stored records only")
    parser.add_argument("--check", action="store_true", help="exit 1 naming what differs; write nothing")
    parser.add_argument("--only", action="append", choices=sorted(COMMANDS), help="run only this command (repeatable)")
    args = parser.parse_args(argv)
    if args.check:
        found = problems()
        print("\n".join(found) if found else "the docs are what their records render")
        return 1 if found else 0
    if not args.render:
        sys.path.insert(0, str(ROOT / "src"))
        for name in args.only or COMMANDS:
            measure(name)
    render()
    return 0


if __name__ == "__main__":
    sys.exit(main())
