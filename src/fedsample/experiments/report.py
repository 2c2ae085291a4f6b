"""Tables and plots of an experiment's results.json document."""

from __future__ import annotations

from pathlib import Path

METRIC_TITLES = {"accuracy": "Accuracy", "macro_f1": "Macro-F1", "loss": "Loss"}


def rows(document: dict) -> list[tuple[str, dict[str, str]]]:
    """Per strategy, each final metric as 'mean ± std' (accuracy and macro-F1 in percent, as the papers)."""
    out = []
    for label, result in document["strategies"].items():
        cells = {}
        for metric, stats in result["final"].items():
            scale = 1.0 if metric == "loss" else 100.0
            cells[metric] = f"{stats['mean'] * scale:.2f} ± {stats['std'] * scale:.2f}"
        out.append((label, cells))
    return out


def summary_table(document: dict) -> str:
    """A markdown table of final metrics (mean ± std over seeds)."""
    config = document["config"]
    metrics = [m for m in METRIC_TITLES if any(m in cells for _, cells in rows(document))]
    lines = [
        f"# {markdown_text(config['name'])}",
        "",
        f"{config.get('description', '')}".strip(),
        "",
        f"Final metrics after {config['rounds']} rounds, mean ± std over seeds {config['seeds']} "
        "(accuracy and macro-F1 in %).",
        "",
        "| strategy | " + " | ".join(METRIC_TITLES[m] for m in metrics) + " |",
        "|---|" + "---|" * len(metrics),
    ]
    for label, cells in rows(document):
        lines.append(f"| {markdown_text(label)} | " + " | ".join(cells.get(m, "—") for m in metrics) + " |")
    stopped = [reason for result in document["strategies"].values() for reason in result.get("status", []) if reason != "ok"]
    if stopped:
        lines += ["", "Runs that stopped (left out of the means):", ""] + [f"- {markdown_text(r)}" for r in stopped]
    return "\n".join(lines) + "\n"


def markdown_text(text: str) -> str:
    """Plain text inside a markdown table cell: '|', '\\' and markup characters escaped."""
    return "".join("\\" + ch if ch in "\\|*_`[]<>#" else ch for ch in text)


def plot_text(text: str) -> str:
    """Plain text for matplotlib: '$' would start mathtext, a leading '_' would hide a legend entry."""
    text = text.replace("$", r"\$")
    return " " + text if text.startswith("_") else text


def plot_curves(document: dict, path: Path, metric: str = "accuracy") -> None:
    """Test ``metric`` per round, one line per strategy (mean over seeds) with a min-max band over seeds."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for label, result in document["strategies"].items():
        curves = [[(r["round"], r[metric]) for r in history if r.get(metric) is not None] for history in result["history"]]
        curves = [c for c in curves if c]  # a seed that stopped has no curve
        if not curves or not curves[0]:
            continue
        rounds = np.array([t for t, _ in curves[0]])
        values = np.array([[v for _, v in c] for c in curves])
        (line,) = ax.plot(rounds, values.mean(axis=0), label=plot_text(label))
        if len(values) > 1:
            ax.fill_between(rounds, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.2)
    ax.set_xlabel("round")
    ax.set_ylabel(f"test {METRIC_TITLES.get(metric, metric).lower()}")
    ax.set_title(plot_text(f"{document['config']['name']}: test {metric} (mean over seeds, band = min–max)"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
