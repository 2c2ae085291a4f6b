"""Partition schemes by name, partition statistics, and the partition picture (for ``fedsample partition``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
import numpy as np

from fedsample.data.partition import IID, AssignsRows, BuildsPartition, Dirichlet, LocalLongTail, LogNormalSizes, Natural, Shards
from fedsample.data.stats import partition_stats
from fedsample.data.types import FederatedData
from fedsample.outputs import Marker, written_results
from fedsample.runtime.records import JSONObject

__all__ = ["SCHEMES", "make_scheme", "partition_stats", "write_partition_files", "write_partition_report"]

SCHEMES = {
    "iid": IID,
    "dirichlet": Dirichlet,
    "shards": Shards,
    "lognormal": LogNormalSizes,
    "llt": LocalLongTail,
    "natural": Natural,
}
"""The partition schemes by their name in experiment files and on the command line."""


def _coerce(scheme: str, name: str, kind: str, value: object) -> object:
    """Turn a command-line string into the field's type; other values pass through."""
    if not isinstance(value, str) or kind.startswith("str"):
        return value
    try:
        if kind.startswith("int"):
            return int(value)
        if kind.startswith("float"):
            return float(value)
        if kind.startswith("bool"):
            low = value.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError
    except ValueError:
        raise ValueError(f"scheme {scheme!r}: parameter {name}={value!r} is not a valid {kind.split(' ')[0]}") from None
    return value


def make_scheme(name: str, **params: object) -> AssignsRows | BuildsPartition:
    """Build a partition scheme from its name (iid, dirichlet, shards, lognormal, llt, natural) and its
    parameters; string values (from a command line) are converted to the parameter's type."""
    key = name.strip().lower()
    if key not in SCHEMES:
        raise ValueError(f"unknown partition scheme {name!r}; known: {', '.join(SCHEMES)}")
    cls = SCHEMES[key]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(params) - set(fields))
    if unknown:
        raise ValueError(f"scheme {key!r}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(fields)}")
    required = [f for f, spec in fields.items()
                if spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING]
    missing = [f for f in required if f not in params]
    if missing:
        raise ValueError(f"scheme {key!r}: missing parameter(s) {', '.join(missing)} (all: {', '.join(fields)})")
    values = {p: _coerce(key, p, str(fields[p].type), v) for p, v in params.items()}
    scheme: AssignsRows | BuildsPartition = cls(**values)
    return scheme


def _subset(sizes: np.ndarray, limit: int) -> tuple[np.ndarray, str]:
    """All clients when few; otherwise ``limit`` clients evenly spaced over the size ranking (largest first)."""
    k = len(sizes)
    if k <= limit:
        return np.arange(k), f"label mix of all {k} clients"
    ranked = np.argsort(-sizes, kind="stable")
    picked = ranked[np.unique(np.linspace(0, k - 1, limit).round().astype(np.int64))]
    return picked, f"label mix of {len(picked)} of {k:,} clients (sorted by size, largest first, evenly spaced ranks)"


PARTITION_FILES = ("stats.json", "partition.png")


def partition_marker(fed: FederatedData | None = None) -> Marker:
    """The folder's fingerprint (``partition.json``): the dataset, the scheme and the number of clients (recorded,
    never compared: a partition is not resumed, so a folder can be checked before the partition exists)."""
    inputs: JSONObject = {} if fed is None else {"dataset": fed.dataset.name, "scheme": str(fed.scheme), "clients": fed.num_clients}
    return Marker("partition", PARTITION_FILES, inputs, subject="partition")


def write_partition_report(fed: FederatedData, out_dir: Path, max_clients: int = 50, overwrite: bool = False) -> None:
    """Write ``stats.json`` (:func:`partition_stats`) and ``partition.png`` (:func:`write_partition_files`) into
    ``out_dir`` (created if needed; its parent must exist), with its ``partition.json`` marker, all moved into
    place together. A folder holding results (of any fedsample command) is refused unless ``overwrite``; a
    folder that cannot be written is refused before anything is computed (:mod:`fedsample.outputs`)."""
    with written_results(Path(out_dir), partition_marker(fed), overwrite=overwrite) as folder:
        write_partition_files(fed, folder, max_clients)


def write_partition_files(fed: FederatedData, folder: Path, max_clients: int = 50, stats_name: str = "stats.json") -> None:
    """Write ``stats_name`` (:func:`partition_stats`) and ``partition.png`` into the existing ``folder``: a
    histogram of client sizes on log axes and a clients × labels heatmap of the label mix (Figure 1 of the IWDS
    paper); with more than ``max_clients`` clients the heatmap shows a size-sorted subset and says so."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    out_dir = Path(folder)
    stats = partition_stats(fed)
    (out_dir / stats_name).write_text(json.dumps(stats, indent=1) + "\n")

    sizes = fed.sizes()
    fig = Figure(figsize=(14, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax_h, ax_m = fig.subplots(1, 2, width_ratios=[1, 1.6])
    positive = sizes[sizes > 0]
    low = float(positive.min()) / 1.1 if len(positive) else 1.0
    high = float(positive.max()) * 1.1 if len(positive) else 2.0
    heights, _, _ = ax_h.hist(positive, bins=np.logspace(np.log10(low), np.log10(high), 40),
                              color="tab:blue", edgecolor="white", linewidth=0.4)
    ax_h.set_xscale("log")
    ax_h.set_xlabel("client size (samples, log scale)")
    if heights.max(initial=0) > 50:
        ax_h.set_yscale("log")
        ax_h.set_ylabel("number of clients (log scale)")
    else:
        ax_h.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax_h.set_ylabel("number of clients")
    empty = int(np.sum(sizes == 0))
    title = f"client sizes: {fed.num_clients:,} clients, Gini {stats['imbalance']['gini']:.2f}"
    ax_h.set_title(title + (f"\n({empty} empty clients not shown)" if empty else ""), fontsize=10)

    if stats["label_counts"] is None:
        ax_m.axis("off")
        ax_m.text(0.5, 0.5, f"{fed.dataset.task} targets: no label mix", ha="center", va="center")
    else:
        counts = np.asarray(stats["label_counts"])
        picked, heading = _subset(sizes, max_clients)
        mat = counts[picked].T  # labels × clients
        totals = mat.sum(axis=0, keepdims=True)
        share = np.divide(mat, totals, out=np.zeros(mat.shape), where=totals > 0)
        im = ax_m.imshow(share, aspect="auto", cmap="viridis", interpolation="nearest", origin="lower", vmin=0, vmax=1)
        fig.colorbar(im, ax=ax_m, label="share of the client's samples (numbers: counts)" if mat.shape[1] <= 12 else "share of the client's samples")
        ax_m.set_xlabel("client")
        ax_m.set_ylabel("label")
        step = max(1, len(picked) // 25)
        ax_m.set_xticks(np.arange(0, len(picked), step), [str(int(c)) for c in picked[::step]], rotation=90, fontsize=7)
        c = mat.shape[0]
        ax_m.set_yticks(np.arange(0, c, max(1, c // 25)))
        if mat.shape[1] <= 12 and c <= 20:
            for (i, j), v in np.ndenumerate(mat):
                ax_m.text(j, i, str(int(v)), ha="center", va="center", fontsize=7,
                          color="black" if share[i, j] > 0.5 else "white")
        ax_m.set_title(heading, fontsize=10)
    fig.suptitle(f"{fed.dataset.name} — {fed.scheme}", fontsize=11)
    fig.savefig(out_dir / "partition.png", dpi=110)
