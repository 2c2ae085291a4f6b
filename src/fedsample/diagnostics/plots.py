"""The pictures of a diagnosis (matplotlib's Agg canvas, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedsample.diagnostics.exploitation import drawn_label_counts
from fedsample.diagnostics.measure import Diagnosis
from fedsample.figures import save_figure
from fedsample.diagnostics.document import DiagnosisDocument

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_estimator", "plot_exploitation", "plot_labels"]

EXAMPLE_CLIENTS = 8


def _figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=90)
    FigureCanvasAgg(fig)
    return fig


def plot_exploitation(document: DiagnosisDocument, path: Path) -> None:
    """Mean per-sample inclusion frequency of each client-size decile, relative to the strategy's overall
    mean (1 = uniform exploitation, FedSampling's Definition 3.1): one small panel per strategy on a shared log
    scale, so that lines lying on 1 do not hide each other."""
    labels = list(document["strategies"])
    cols = min(len(labels), 5)
    rows = -(-len(labels) // cols)
    fig = _figure(2.0 * cols + 0.8, 2.3 * rows + 0.9)
    axes = fig.subplots(rows, cols, sharey=True, squeeze=False)
    deciles = next(iter(document["strategies"].values()))["exploitation"]["by_size_decile"]
    ticks = np.arange(1, len(deciles) + 1)
    for i, ax in enumerate(axes.flat):
        if i >= len(labels):
            ax.axis("off")
            continue
        x = document["strategies"][labels[i]]["exploitation"]
        rel = [d["inclusion"] / x["mean"] if x["mean"] > 0 else np.nan for d in x["by_size_decile"]]
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.plot(ticks, rel, marker="o", ms=3.5, lw=1.2, color=f"C{i % 10}")
        ax.set_yscale("log")
        ax.set_title(labels[i], fontsize=7.5)
        ax.set_xticks(ticks, [f"{d['min_size']}-{d['max_size']}" for d in deciles], fontsize=5.5, rotation=90)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(alpha=0.25, which="both", axis="y")
    for ax in axes[:, 0]:
        ax.set_ylabel("inclusion / mean (log)", fontsize=7.5)
    fig.supxlabel("tenths of the data, by the size of the client holding it (client sizes)", fontsize=8)
    fig.suptitle("How often a sample is used, by the size of its client (dashed: as often as the average sample)", fontsize=9)
    save_figure(fig, path)


def _bars(ax: Axes, y: np.ndarray, values: np.ndarray, low: np.ndarray, high: np.ndarray, color: str, digits: int) -> None:
    """Horizontal bars with an error interval [low, high] and each value written beside its bar, so that a bar too
    short to see at the scale of the longest still reads."""
    ax.barh(y, values, xerr=[values - low, high - values], color=color, alpha=0.7)
    top = float(np.nanmax(high)) if len(high) else 1.0
    for yi, v, h in zip(y, values, high):
        ax.text(h + 0.02 * top, yi, f"{v:.{digits}f}", va="center", fontsize=7)
    ax.set_xlim(0, top * 1.25 if top > 0 else 1.0)


def plot_estimator(document: DiagnosisDocument, path: Path) -> None:
    """Bias (with 2 standard errors of bias^2 as an interval) and variance (2 standard errors of the MSE) of each
    strategy's ĝ, relative to g*; every bar carries its number."""
    labels = list(document["strategies"])
    est = [document["strategies"][k]["estimator"] for k in labels]
    fig = _figure(8.5, 0.45 * len(labels) + 1.4)
    y = np.arange(len(labels))
    ax = fig.add_subplot(1, 2, 1)
    bias = np.array([e["bias"] for e in est])
    lo = np.sqrt(np.maximum([e["bias_sq"] - 2 * e["bias_sq_se"] for e in est], 0))
    hi = np.sqrt(np.maximum([e["bias_sq"] + 2 * e["bias_sq_se"] for e in est], 0))
    _bars(ax, y, bias, np.minimum(lo, bias), np.maximum(hi, bias), "tab:red", 3)
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("bias  ||E ĝ - g*|| / ||g*||", fontsize=8)
    ax = fig.add_subplot(1, 2, 2)
    variance = np.array([e["variance"] for e in est])
    spread = 2 * np.array([e["mse_se"] for e in est])
    _bars(ax, y, variance, np.maximum(variance - spread, 0), variance + spread, "tab:blue", 3)
    ax.set_yticks(y, [])
    ax.invert_yaxis()
    ax.set_xlabel("variance  E||ĝ - E ĝ||² / ||g*||²", fontsize=8)
    save_figure(fig, path)


def plot_labels(diagnosis: Diagnosis, path: Path) -> None:
    """Label mix of the samples drawn from the largest clients, per strategy (top panel: the clients' data), one
    bar per client named by its id and size, one colour per label with a legend."""
    fed = diagnosis.data
    sizes = fed.sizes()
    clients = np.argsort(sizes, kind="stable")[::-1][:EXAMPLE_CLIENTS]
    panels = {"data held": drawn_label_counts(np.ones(len(fed.dataset.y_train)), fed, clients)}
    panels.update({label: drawn_label_counts(d.inclusion, fed, clients) for label, d in diagnosis.draws.items()})
    fig = _figure(8, 1.45 * len(panels) + 1.0)
    classes = fed.dataset.num_classes
    cmap = __import__("matplotlib").colormaps["tab10" if classes <= 10 else "tab20"]
    names = [f"client {int(k)} (n={int(sizes[k])})" for k in clients]
    for i, (label, counts) in enumerate(panels.items()):
        ax = fig.add_subplot(len(panels), 1, i + 1)
        share = counts / np.maximum(counts.sum(1, keepdims=True), 1e-12)
        left = np.zeros(len(clients))
        for c in range(share.shape[1]):
            ax.barh(np.arange(len(clients)), share[:, c], left=left, color=cmap(c % cmap.N), label=str(c))
            left += share[:, c]
        ax.set_yticks(np.arange(len(clients)), names, fontsize=5.5)
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.set_title(label, fontsize=8, loc="left")
        if i < len(panels) - 1:
            ax.set_xticks([])
        else:
            ax.set_xlabel(f"label share of the samples held (top) or drawn over all rounds, {EXAMPLE_CLIENTS} largest clients", fontsize=8)
    handles, legend_labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, legend_labels, title="label", loc="upper right", ncol=min(classes, 10), fontsize=7, title_fontsize=7,
               frameon=False)
    save_figure(fig, path, rect=(0, 0, 1, 1 - 0.35 / (1.45 * len(panels) + 1.0)))
