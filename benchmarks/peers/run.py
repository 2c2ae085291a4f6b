"""One command, one table: fedsample (loop, vectorized, auto) against pfl-research on its CIFAR-10 workload,
Flower on 1,000 × 2-sample clients at 1 and 5 local steps, and the hand-written floor, at 1 and 2 torch
threads. Every measurement runs in its own process (peak RSS = that process's ``ru_maxrss``).

    python benchmarks/peers/run.py [--rounds 2] [--threads 1 2] [--cifar10 DIR] [--only cifar small-1 small-5]

pfl and Flower run from their own virtual environments (``benchmarks/peers/setup_venvs.sh``; override with
PFL_PYTHON / FLWR_PYTHON). Writes ``results.md`` and ``results.json`` under ``--out``."""

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

from data_files import cifar_rows, fashion_mnist_rows, write_rows  # noqa: E402
from table import as_json, machine, markdown, rows  # noqa: E402
from workload import workload_named  # noqa: E402

BACKENDS = ("loop", "vectorized", "auto")
PFL_PYTHON = os.environ.get("PFL_PYTHON", ".venv-pfl/bin/python")
FLWR_PYTHON = os.environ.get("FLWR_PYTHON", ".venv-flwr/bin/python")
SIDE_TIMEOUT_S = 1200


def side(name: str, python: str, args: list[str], threads: int) -> dict[str, Any]:
    """Run one side in its own process; its ``RESULT`` line, or the reason it gave none."""
    if not Path(python).exists():
        return {"name": name, "error": f"{python} missing: run benchmarks/peers/setup_venvs.sh"}
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT / "src")])}
    try:
        out = subprocess.run([python, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=SIDE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"name": name, "error": f"timed out after {SIDE_TIMEOUT_S} s"}
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return {**json.loads(line[len("RESULT "):]), "name": name}
    last = (out.stderr.strip().splitlines() or ["no output"])[-1]
    return {"name": name, "error": f"exit {out.returncode}: {last[:300]}"}


def cifar_sides(path: str, threads: int, rounds: int) -> list[tuple[str, str, list[str]]]:
    """(name, python, args) of every runner on the CIFAR-10 workload."""
    r = str(rounds)
    sides = [("pfl", PFL_PYTHON, [str(HERE / "pfl_side.py"), path, str(threads), r])]
    sides += [(f"floor-{k}", sys.executable, [str(HERE / "floor.py"), k, path, "cifar", str(threads), r]) for k in ("round", "central")]
    sides += [(f"fedsample-{b}", sys.executable, [str(HERE / "fedsample_side.py"), path, "cifar", b, str(threads), r]) for b in BACKENDS]
    return sides


def small_sides(path: str, workload: str, rounds: int) -> list[tuple[str, str, list[str]]]:
    """(name, python, args) of every runner on a small-clients workload; Flower once per ``num_cpus``."""
    r = str(rounds)
    cpus = sorted({1, os.cpu_count() or 1})
    sides = [("flower", FLWR_PYTHON, [str(HERE / "flower_side.py"), path, workload, str(c), r]) for c in cpus]
    sides += [("floor-round", sys.executable, [str(HERE / "floor.py"), "round", path, workload, "1", r])]
    sides += [(f"fedsample-{b}", sys.executable, [str(HERE / "fedsample_side.py"), path, workload, b, "1", r]) for b in BACKENDS]
    return sides


def measure(only: list[str], threads: list[int], rounds: int, cifar_dir: str | None, work: Path) -> list[dict[str, Any]]:
    """Every side of every workload in ``only``; CIFAR-10 at each thread count, the small clients at 1."""
    results = []
    for workload in only:
        path = work / f"{workload}.npz"
        rows_ = cifar_rows(cifar_dir=cifar_dir) if workload == "cifar" else fashion_mnist_rows(workload_named(workload))
        source = write_rows(path, rows_)
        del rows_
        runs = [(t, s) for t in threads for s in cifar_sides(str(path), t, rounds)] if workload == "cifar" else \
            [(1, s) for s in small_sides(str(path), workload, rounds)]
        for t, (name, python, args) in runs:
            result = {**side(name, python, args, t), "workload": workload, "threads": t}
            result.setdefault("data", source)
            print(json.dumps(result), flush=True)
            results.append(result)
        path.unlink()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="warm rounds timed after round 1 (default 2)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--only", nargs="+", default=["cifar", "small-1", "small-5"])
    parser.add_argument("--cifar10", default=None, help="folder of CIFAR-10's python pickles (else synthetic rows)")
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--append", action="store_true", help="add to the measurements already in OUT/results.json")
    args = parser.parse_args(argv)
    if args.rounds < 1 or min(args.threads) < 1:
        parser.error("--rounds and --threads must be >= 1")
    for name in args.only:
        workload_named(name)
    out = Path(args.out)
    earlier = json.loads((out / "results.json").read_text()) if args.append else {}
    about = earlier.get("machine") or machine()
    with tempfile.TemporaryDirectory(prefix="fedsample-peers-") as work:
        results = earlier.get("results", []) + measure(args.only, args.threads, args.rounds, args.cifar10, Path(work))
    about["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(markdown(rows(results), about))
    (out / "results.json").write_text(as_json(results, about))
    print(markdown(rows(results), about))


if __name__ == "__main__":
    main()
