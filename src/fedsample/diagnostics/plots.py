"""The pictures of a diagnosis (matplotlib's Agg canvas, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedsample.diagnostics.exploitation import drawn_label_counts
from fedsample.diagnostics.measure import Diagnosis

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_estimator", "plot_exploitation", "plot_labels"]

EXAMPLE_CLIENTS = 8


def _figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=90)
    FigureCanvasAgg(fig)
    return fig


def plot_exploitation(document: dict, path: Path) -> None:
    """Mean per-sample inclusion frequency of each client-size decile, relative to the strategy's overall
    mean (1 = uniform exploitation, FedSampling's Definition 3.1), one line per strategy."""
    fig = _figure(7, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    for label, r in document["strategies"].items():
        x = r["exploitation"]
        rel = [d["inclusion"] / x["mean"] if x["mean"] > 0 else 0.0 for d in x["by_size_decile"]]
        ax.plot(np.arange(1, len(rel) + 1), rel, marker="o", label=label)
    deciles = next(iter(document["strategies"].values()))["exploitation"]["by_size_decile"]
    ax.set_xticks(np.arange(1, len(deciles) + 1), [f"{d['min_size']}-{d['max_size']}" for d in deciles], fontsize=7)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xlabel("tenths of the data, by the size of the client holding it (client sizes)")
    ax.set_ylabel("inclusion / mean inclusion")
    ax.set_title("How often a sample is used, by the size of its client", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def plot_estimator(document: dict, path: Path) -> None:
    """Bias (with 2 standard errors of bias^2 as an interval) and variance of each strategy's ĝ, relative to g*."""
    labels = list(document["strategies"])
    est = [document["strategies"][k]["estimator"] for k in labels]
    fig = _figure(8, 3.4)
    y = np.arange(len(labels))
    ax = fig.add_subplot(1, 2, 1)
    bias = np.array([e["bias"] for e in est])
    lo = np.sqrt(np.maximum([e["bias_sq"] - 2 * e["bias_sq_se"] for e in est], 0))
    hi = np.sqrt(np.maximum([e["bias_sq"] + 2 * e["bias_sq_se"] for e in est], 0))
    ax.barh(y, bias, xerr=[bias - lo, hi - bias], color="tab:red", alpha=0.7)
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("bias  ||E ĝ - g*|| / ||g*||")
    ax = fig.add_subplot(1, 2, 2)
    ax.barh(y, [e["variance"] for e in est], xerr=[2 * e["mse_se"] for e in est], color="tab:blue", alpha=0.7)
    ax.set_yticks(y, [])
    ax.invert_yaxis()
    ax.set_xlabel("variance  E||ĝ - E ĝ||² / ||g*||²")
    fig.tight_layout()
    fig.savefig(path)


def plot_labels(diagnosis: Diagnosis, path: Path) -> None:
    """Label mix of the samples drawn from the largest clients, per strategy (top row: the clients' data)."""
    fed = diagnosis.data
    clients = np.argsort(fed.sizes(), kind="stable")[::-1][:EXAMPLE_CLIENTS]
    panels = {"data held": drawn_label_counts(np.ones(len(fed.dataset.y_train)), fed, clients)}
    panels.update({label: drawn_label_counts(d.inclusion, fed, clients) for label, d in diagnosis.draws.items()})
    fig = _figure(7, 1.3 * len(panels) + 0.6)
    cmap = __import__("matplotlib").colormaps["tab10"]
    for i, (label, counts) in enumerate(panels.items()):
        ax = fig.add_subplot(len(panels), 1, i + 1)
        share = counts / np.maximum(counts.sum(1, keepdims=True), 1e-12)
        left = np.zeros(len(clients))
        for c in range(share.shape[1]):
            ax.barh(np.arange(len(clients)), share[:, c], left=left, color=cmap(c % 10))
            left += share[:, c]
        ax.set_yticks([])
        ax.set_xlim(0, 1)
        ax.set_title(label, fontsize=8, loc="left")
        if i < len(panels) - 1:
            ax.set_xticks([])
    fig.axes[-1].set_xlabel(f"label share of drawn samples, {EXAMPLE_CLIENTS} largest clients (one bar each)")
    fig.tight_layout()
    fig.savefig(path)
