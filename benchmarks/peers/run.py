"""One command, one table: fedsample (loop, vectorized, auto) against pfl-research on its CIFAR-10 workload,
Flower on 1,000 × 2-sample clients at 1 and 5 local steps, and the hand-written floor, at 1 and 2 torch
threads. Every measurement runs in its own process (peak RSS = that process's ``ru_maxrss``).

    python benchmarks/peers/run.py [--rounds 2] [--threads 1 2] [--cifar10 DIR] [--only cifar small-1 small-5] [--smoke]

pfl and Flower run from their own virtual environments (``benchmarks/peers/setup_venvs.sh``; override with
PFL_PYTHON / FLWR_PYTHON); where one is missing, its rows say so and a ``skipped:`` line names it. Flower runs
once per ``num_cpus`` of its sweep (per-client CPUs in its simulation backend: 0.125 … 2, i.e. 16 … 1 client
actors on this machine's cores) and the table keeps the fastest, with the whole sweep in its note. Writes
``results.md`` and ``results.json`` under ``--out``.

``--smoke``: the ``tiny-`` workloads (20 CIFAR-shaped users of 50 images, 2 per round; 50 clients of 2 samples,
1 local step), 1 warm round, 1 thread, Flower at ``num_cpus=1`` only, results in a temporary folder (the
committed results are left alone); figures printed, not meaningful."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(HERE.parent)]

from _common import SMOKE_HELP, header, machine, progress, skipped  # noqa: E402
from data_files import cifar_rows, fashion_mnist_rows, write_rows  # noqa: E402
from table import as_json, markdown, merged, rows  # noqa: E402
from workload import TINY, workload_named  # noqa: E402

BACKENDS = ("loop", "vectorized", "auto")
PFL_PYTHON = os.environ.get("PFL_PYTHON", str(ROOT / ".venv-pfl/bin/python"))
FLWR_PYTHON = os.environ.get("FLWR_PYTHON", str(ROOT / ".venv-flwr/bin/python"))
FLOWER_NUM_CPUS = (0.125, 0.25, 0.5, 1, 2)  # per client actor; the table keeps the fastest
SMOKE_FLOWER_NUM_CPUS = (1,)
SIDE_TIMEOUT_S = 1200


def missing(python: str) -> str | None:
    """Why ``python`` cannot run a side (None: it can)."""
    if Path(python).exists():
        return None
    return f"{python} missing: the peers' virtual environments are made by benchmarks/peers/setup_venvs.sh (or name one in PFL_PYTHON / FLWR_PYTHON)"


def side(name: str, python: str, args: list[str], threads: int, root: Path = ROOT) -> dict[str, Any]:
    """Run one side in its own process; its ``RESULT`` line, or the reason it gave none. ``root``: the checkout
    whose ``src`` and ``benchmarks/peers`` the side imports (another one to time its code, ``alternate.py --code``)."""
    why = missing(python)
    if why:
        return {"name": name, "error": why}
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join([str(root / "benchmarks" / "peers"), str(root / "src")])}
    try:
        out = subprocess.run([python, *args], capture_output=True, text=True, env=env, cwd=root, timeout=SIDE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"name": name, "error": f"timed out after {SIDE_TIMEOUT_S} s"}
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return {**json.loads(line[len("RESULT "):]), "name": name}
    last = (out.stderr.strip().splitlines() or ["no output"])[-1]
    return {"name": name, "error": f"exit {out.returncode}: {last[:300]}"}


def cifar_sides(path: str, workload: str, threads: int, rounds: int) -> list[tuple[str, str, list[str]]]:
    """(name, python, args) of every runner on the CIFAR-10 workload."""
    r = str(rounds)
    sides = [("pfl", PFL_PYTHON, [str(HERE / "pfl_side.py"), path, str(threads), r, workload])]
    sides += [(f"floor-{k}", sys.executable, [str(HERE / "floor.py"), k, path, workload, str(threads), r]) for k in ("round", "central")]
    sides += [(f"fedsample-{b}", sys.executable, [str(HERE / "fedsample_side.py"), path, workload, b, str(threads), r]) for b in BACKENDS]
    return sides


def small_sides(path: str, workload: str, rounds: int, num_cpus: tuple[float, ...]) -> list[tuple[str, str, list[str]]]:
    """(name, python, args) of every runner on a small-clients workload; Flower once per ``num_cpus``."""
    r = str(rounds)
    sides = [("flower", FLWR_PYTHON, [str(HERE / "flower_side.py"), path, workload, f"{c:g}", r]) for c in num_cpus]
    sides += [("floor-round", sys.executable, [str(HERE / "floor.py"), "round", path, workload, "1", r])]
    sides += [(f"fedsample-{b}", sys.executable, [str(HERE / "fedsample_side.py"), path, workload, b, "1", r]) for b in BACKENDS]
    return sides


def say_what_is_missing(runs: list[tuple[int, tuple[str, str, list[str]]]], workload: str) -> None:
    """One ``skipped:`` line per peer whose virtual environment is missing (its rows carry the reason too)."""
    for name, python in sorted({(name, python) for _, (name, python, _) in runs}):
        why = missing(python)
        if why:
            skipped(f"{name} on {workload}", why)


def measure(only: list[str], threads: list[int], rounds: int, cifar_dir: str | None, work: Path,
            num_cpus: tuple[float, ...] = FLOWER_NUM_CPUS, sides: list[str] | None = None) -> list[dict[str, Any]]:
    """Every side (or those whose names start with one of ``sides``) of every workload in ``only``; CIFAR-10 at
    each thread count, the small clients at 1."""
    results = []
    for workload in only:
        w = workload_named(workload)
        cifar = w.base == "cifar"
        path = work / f"{workload}.npz"
        rows_ = cifar_rows(w, cifar_dir=cifar_dir) if cifar else fashion_mnist_rows(w)
        source = write_rows(path, rows_)
        del rows_
        runs = [(t, s) for t in threads for s in cifar_sides(str(path), workload, t, rounds)] if cifar else \
            [(1, s) for s in small_sides(str(path), workload, rounds, num_cpus)]
        runs = [run for run in runs if sides is None or run[1][0].startswith(tuple(sides))]
        say_what_is_missing(runs, workload)
        label = lambda run, workload=workload: f"{workload}, {run[1][0]}" + (f" num_cpus={run[1][2][3]}" if run[1][0] == "flower" else "") + f", {run[0]} thread(s)"  # noqa: E731
        for t, (name, python, args) in progress(runs, label):
            result = {**side(name, python, args, t), "workload": workload, "threads": t,
                      "load_average_after": [round(v, 2) for v in os.getloadavg()]}
            result.setdefault("data", source)
            if name == "flower":
                result.setdefault("num_cpus", float(args[3]))
            print(json.dumps(result), flush=True)
            results.append(result)
        path.unlink()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="warm rounds timed after round 1 (default 2)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--only", nargs="+", default=["cifar", "small-1", "small-5"])
    parser.add_argument("--num-cpus", type=float, nargs="+", default=list(FLOWER_NUM_CPUS),
                        help=f"Flower's per-client CPUs to sweep (default {' '.join(map(str, FLOWER_NUM_CPUS))})")
    parser.add_argument("--cifar10", default=None, help="folder of CIFAR-10's python pickles (else synthetic rows)")
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--append", action="store_true",
                        help="add to the measurements already in OUT/results.json (a runner measured again replaces its earlier rows)")
    parser.add_argument("--sides", nargs="+", default=None,
                        help="run only the runners whose names start with one of these (pfl, flower, floor, fedsample, fedsample-auto, ...)")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.rounds < 1 or min(args.threads) < 1 or min(args.num_cpus) <= 0:
        parser.error("--rounds and --threads must be >= 1, --num-cpus > 0")
    for name in args.only:
        workload_named(name)
    header(args.smoke)
    with tempfile.TemporaryDirectory(prefix="fedsample-peers-") as work:
        if args.smoke:
            args.only, args.threads, args.rounds, args.append = [f"{TINY}cifar", f"{TINY}small-1"], [1], 1, False
            args.num_cpus, args.out = list(SMOKE_FLOWER_NUM_CPUS), str(Path(work) / "results")
            skipped("Flower's num_cpus sweep", f"smoke mode runs num_cpus={SMOKE_FLOWER_NUM_CPUS[0]} only (the full run sweeps {list(FLOWER_NUM_CPUS)})")
        out = Path(args.out)
        earlier = json.loads((out / "results.json").read_text()) if args.append else {}
        about = earlier.get("machine") or machine()
        results = merged(earlier.get("results", []),
                         measure(args.only, args.threads, args.rounds, args.cifar10, Path(work), tuple(args.num_cpus), args.sides))
        about["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.md").write_text(markdown(rows(results), about))
        (out / "results.json").write_text(as_json(results, about))
    print(markdown(rows(results), about))


if __name__ == "__main__":
    main()
