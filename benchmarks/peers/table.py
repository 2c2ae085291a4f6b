"""The peers table: one row per (workload, threads, runner) with s/round, the ratio to the hand-written floor
and to the workload's peer (pfl-research on CIFAR-10, Flower on the small clients), the time to the first
round and the peak RSS; markdown for the README, JSON for machines. Pure functions of the measurements."""

from __future__ import annotations

import json
from typing import Any

FLOOR = "floor-round"


def peer_of(workload: str) -> str:
    """pfl-research on its CIFAR-10 workload, Flower on the small clients (``tiny-`` workloads alike)."""
    return "pfl" if workload.removeprefix("tiny-") == "cifar" else "flower"


def _seconds(result: dict[str, Any]) -> float | None:
    return None if result.get("error") else result["s_per_round"]


def best_per_runner(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per (workload, threads, name): the fastest successful one (Flower's ``num_cpus`` sweep),
    else the first failure; the others stay in the JSON as ``tried``."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["workload"], r["threads"], r["name"]), []).append(r)
    best = []
    for group in groups.values():
        ok = [r for r in group if _seconds(r) is not None]
        chosen = dict(min(ok, key=_seconds) if ok else group[0])
        if len(group) > 1:
            chosen["tried"] = [{k: r.get(k) for k in ("num_cpus", "s_per_round", "error") if k in r} for r in group]
        best.append(chosen)
    return best


def merged(earlier: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The measurements of ``new`` added to ``earlier``, where a runner measured again (same workload, threads and
    name) replaces its earlier measurements instead of joining them (``run.py --append``): the table compares
    runs taken together, never the best of an old and a new try."""
    again = {(r["workload"], r["threads"], r["name"]) for r in new}
    return [r for r in earlier if (r["workload"], r["threads"], r["name"]) not in again] + new


def ratio(result: dict[str, Any], reference: dict[str, Any] | None) -> float | None:
    """s/round of ``result`` ÷ s/round of ``reference`` (None when either is missing or failed)."""
    if reference is None or _seconds(result) is None or _seconds(reference) is None:
        return None
    return _seconds(result) / _seconds(reference)


def rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows: each best result with ``x_floor`` and ``x_peer`` added."""
    best = best_per_runner(results)
    index = {(r["workload"], r["threads"], r["name"]): r for r in best}
    out = []
    for r in best:
        floor = index.get((r["workload"], r["threads"], FLOOR))
        peer = index.get((r["workload"], r["threads"], peer_of(r["workload"])))
        out.append({**r, "x_floor": ratio(r, floor), "x_peer": ratio(r, peer)})
    return out


def _fmt(value: float | None, digits: str = ".3g", suffix: str = "") -> str:
    return "—" if value is None else f"{value:{digits}}{suffix}"


def markdown(table_rows: list[dict[str, Any]], about: dict[str, Any]) -> str:
    """The table as markdown, machine line first."""
    head = (f"Machine: {about['cpu']}, {about['cores']} cores, torch {about['torch']}; {about['date_utc']} UTC; "
            f"load average {about['load_average']} (start) → {about.get('load_average_end', '?')} (end).\n\n"
            "| workload | threads | runner | s/round | × floor | × peer | time to round 1 (s) | peak RSS (MiB) | note |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in table_rows:
        note = r.get("error") or "; ".join(str(x) for x in (r.get("data"), r.get("engine"), _cpus(r), r.get("rss_note")) if x)
        lines.append(f"| {r['workload']} (peer: {peer_of(r['workload'])}) | {r['threads']} | {r['name']} | "
                     f"{_fmt(_seconds(r), '.3g')} | {_fmt(r['x_floor'], '.2f', '×')} | {_fmt(r['x_peer'], '.3g', '×')} | "
                     f"{_fmt(r.get('time_to_first_round_s'), '.3g')} | {_fmt(_rss(r), '.0f')} | {note} |")
    return head + "\n".join(lines) + "\n"


def _cpus(r: dict[str, Any]) -> str:
    """Flower's ``num_cpus`` and, for a sweep, every value tried with its s/round (or why it has none)."""
    if "num_cpus" not in r:
        return ""
    tried = r.get("tried", [])
    if len(tried) < 2:
        return f"num_cpus={r['num_cpus']:g}"
    sweep = ", ".join(f"{t.get('num_cpus', '?'):g}: " + (f"{t['s_per_round']:.3g} s" if t.get("s_per_round") is not None else str(t.get("error", "?")))
                      for t in tried)
    return f"num_cpus={r['num_cpus']:g}, the fastest of the sweep ({sweep})"


def _rss(r: dict[str, Any]) -> float | None:
    values = [r[k] for k in ("peak_rss_mb", "largest_child_rss_mb") if r.get(k) is not None]
    return max(values) if values else None


def as_json(results: list[dict[str, Any]], about: dict[str, Any]) -> str:
    """The machine, every raw measurement (``--append`` reads them back) and the table's rows."""
    return json.dumps({"machine": about, "results": results, "rows": rows(results)}, indent=1)
