"""pfl-research (or Flower) and fedsample alternated on one peers workload, for ratios read within one run on a
shared machine: each repetition runs every side once, one after the other in its own process, and each side's
ratio to the peer is taken within that repetition (paired), in wall time and in CPU time of the side's process.

    python benchmarks/peers/alternate.py [--only cifar] [--threads 2] [--repeat 5] [--rounds 3]
        [--sides pfl fedsample-auto] [--code DIR ...] [--reference NAME] [--cifar10 DIR] [--out FILE] [--smoke]

``--code DIR ...``: the fedsample sides run once per checkout given (its ``src`` and ``benchmarks/peers``; default
this one), named ``fedsample-auto@DIR``: the code before and after a change, alternated with the peer. The peer
runs from this checkout. ``--reference NAME``: the runner the ratios divide by (default the peer; e.g.
``fedsample-auto@DIR`` of the code before a change). Every line carries the load average (``os.getloadavg``) after it. The CPU time of a side
is its process's (all threads) over the warm rounds; pfl's intra-op threads spin while they wait, which counts
as CPU time, so its CPU ratio flatters the side that does not spin: read both. Writes ``FILE.json`` and
``FILE.md`` (default ``results/alternate-WORKLOAD``; in smoke mode a temporary folder)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from _common import SMOKE_HELP, header, machine, progress  # noqa: E402
from data_files import cifar_rows, fashion_mnist_rows, write_rows  # noqa: E402
from run import ROOT, cifar_sides, side, small_sides  # noqa: E402
from table import peer_of  # noqa: E402
from workload import TINY, workload_named  # noqa: E402


def runners(workload: str, path: str, threads: int, rounds: int, sides: list[str], code: list[Path]) -> list[tuple[str, str, list[str], Path]]:
    """(name, python, args, checkout) of the sides asked for: the peer's from this checkout, fedsample's from each
    checkout in ``code`` (named ``NAME@DIR`` when more than one)."""
    cifar = workload_named(workload).base == "cifar"
    listed = cifar_sides(path, workload, threads, rounds) if cifar else small_sides(path, workload, rounds, (1.0,))
    chosen = [s for s in listed if s[0].startswith(tuple(sides))]
    out = []
    for name, python, args in chosen:
        if not name.startswith("fedsample"):
            out.append((name, python, args, ROOT))
            continue
        for root in code:
            script = [str(root / "benchmarks" / "peers" / Path(args[0]).name), *args[1:]]
            out.append((name if len(code) == 1 else f"{name}@{root}", python, script, root))
    return out


def summary(results: list[dict[str, Any]], peer: str) -> list[dict[str, Any]]:
    """Per runner: its median wall and CPU s/round over the repetitions (min-max), and its paired ratios to the
    peer's (median, min-max), wall and CPU."""
    by_rep: dict[int, dict[str, dict[str, Any]]] = {}
    for r in results:
        by_rep.setdefault(r["repetition"], {})[r["name"]] = r
    names = list(dict.fromkeys(r["name"] for r in results))
    rows = []
    for name in names:
        mine = [rep[name] for rep in by_rep.values() if name in rep and not rep[name].get("error")]
        row: dict[str, Any] = {"name": name, "runs": len(mine)}
        for key in ("s_per_round", "cpu_s_per_round"):
            values = [r[key] for r in mine if r.get(key) is not None]
            row[key] = _spread(values)
            pairs = [rep[name][key] / rep[peer][key] for rep in by_rep.values()
                     if name in rep and peer in rep and rep[name].get(key) and rep[peer].get(key)]
            row[f"{key}_x_peer"] = _spread(pairs)
        rows.append(row)
    return rows


def _spread(values: list[float]) -> dict[str, float] | None:
    return {"median": float(np.median(values)), "min": min(values), "max": max(values)} if values else None


def markdown(rows: list[dict[str, Any]], about: dict[str, Any], workload: str, threads: int, peer: str) -> str:
    """The summary as markdown, machine line first; ratios to ``peer`` (the reference runner)."""
    head = (f"Machine: {about['cpu']}, {about['cores']} cores, torch {about['torch']}; {about['date_utc']} UTC; load average "
            f"{about['load_average']} (start) → {about.get('load_average_end', '?')} (end). Workload {workload}, {threads} "
            f"thread(s); every side once per repetition, ratios to {peer} paired within a repetition.\n\n"
            f"| runner | runs | s/round, median (min–max) | × {peer}, wall: median (min–max) | CPU s/round | × {peer}, CPU |\n"
            "|---|---|---|---|---|---|\n")
    return head + "\n".join(f"| {r['name']} | {r['runs']} | {_fmt(r['s_per_round'])} | {_fmt(r['s_per_round_x_peer'])} | "
                            f"{_fmt(r['cpu_s_per_round'])} | {_fmt(r['cpu_s_per_round_x_peer'])} |" for r in rows) + "\n"


def _fmt(s: dict[str, float] | None) -> str:
    return "—" if s is None else f"{s['median']:.3g} ({s['min']:.3g}–{s['max']:.3g})"


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="cifar", help="the workload (cifar, small-STEPS)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="warm rounds timed per side run after round 1")
    parser.add_argument("--sides", nargs="+", default=None, help="name prefixes (default: the peer and fedsample-auto)")
    parser.add_argument("--code", nargs="+", type=Path, default=[ROOT], help="checkouts whose fedsample sides run")
    parser.add_argument("--reference", default=None, help="the runner ratios divide by (default: the peer)")
    parser.add_argument("--cifar10", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    header(args.smoke)
    workload = f"{TINY}{args.only}" if args.smoke else args.only
    w = workload_named(workload)
    peer = peer_of(workload)
    threads = 1 if w.base != "cifar" else args.threads
    repeat, rounds = (1, 1) if args.smoke else (args.repeat, args.rounds)
    with tempfile.TemporaryDirectory(prefix="fedsample-alternate-") as work:
        out = Path(work) / "alternate" if args.smoke else Path(args.out or HERE / "results" / f"alternate-{workload}")
        path = Path(work) / f"{workload}.npz"
        source = write_rows(path, cifar_rows(w, cifar_dir=args.cifar10) if w.base == "cifar" else fashion_mnist_rows(w))
        sides = runners(workload, str(path), threads, rounds, args.sides or [peer, "fedsample-auto"], [c.resolve() for c in args.code])
        about = machine()
        results = []
        plan = [(i, s) for i in range(repeat) for s in sides]
        for i, (name, python, script, root) in progress(plan, lambda p: f"repetition {p[0] + 1}, {p[1][0]}"):
            result = {**side(name, python, script, threads, root), "name": name, "repetition": i, "workload": workload,
                      "threads": threads, "data": source, "load_average_after": [round(v, 2) for v in os.getloadavg()]}
            print(json.dumps(result), flush=True)
            results.append(result)
        about["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
        reference = args.reference or peer
        rows = summary(results, reference)
        out.parent.mkdir(parents=True, exist_ok=True)
        text = markdown(rows, about, workload, threads, reference)
        out.with_suffix(".md").write_text(text)
        out.with_suffix(".json").write_text(json.dumps({"machine": about, "results": results, "rows": rows}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
