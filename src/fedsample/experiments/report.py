"""Tables and plots of an experiment's results.json document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedsample.budget import budget_warnings, comparison_note

__all__ = ["budget_cell", "budget_lines", "caption", "columns", "markdown_text", "plot_curves", "rows", "summary_table"]

METRIC_TITLES = {"accuracy": "Accuracy", "macro_f1": "Macro-F1", "loss": "Loss"}
PERCENT = ("accuracy", "macro_f1")  # shown in percent in every table and picture (results.json keeps fractions)
ORACLE_TITLE = "Best round (oracle)"  # the best round on the test set: never a result
BUDGET_TITLE = "Samples/round (realised)"  # mean over seeds of the per-round mean [smallest-largest round]


def cell(stats: dict[str, Any], metric: str, seeds: int) -> str:
    """'mean ± sd' (accuracy and macro-F1 in percent, as the papers); the sd is left out for one seed, and
    the number of seeds is added when some seeds stopped (n < seeds); "—" when every seed stopped."""
    if stats.get("mean") is None:
        return "—"
    scale = percent_scale(metric)
    text = f"{stats['mean'] * scale:.2f}"
    if stats.get("sd") is not None:
        text += f" ± {stats['sd'] * scale:.2f}"
    return text + (f" (n={stats['n']})" if stats.get("n", seeds) < seeds else "")


def percent_scale(metric: str) -> float:
    """100 for the metrics shown in percent (accuracy, macro-F1), 1 for the others (loss, MSE)."""
    return 100.0 if metric in PERCENT else 1.0


def best_metric(result: dict[str, Any]) -> str | None:
    """The metric of the best-round column: accuracy, or the loss when there is none (regression)."""
    return next((m for m in ("accuracy", "loss") if m in result.get("best", {})), None)


def budget_cell(budget: dict[str, Any]) -> str:
    """The realised samples per round: 'mean [min-max]' over the rounds of every seed (:func:`fedsample.budget.arm_budget`);
    a sealed arm's figure, not released to the server, is marked as measured in simulation, or said not measured."""
    if budget["mean"] is None:
        return "not released (sealed; not measured)"
    text = f"{budget['mean']:.0f} [{budget['min']:.0f}–{budget['max']:.0f}]"
    return text + " (sealed; measured in simulation)" if budget.get("source") == "measured" else text


def budget_lines(document: dict[str, Any]) -> list[str]:
    """The lines a run says under its table about budgets: each arm that did not sample its K (K/N~ >= 1, or the
    realised mean outside [0.67 K, 1.5 K]) and whether the arms compare at equal samples
    (:func:`fedsample.budget.comparison_note`)."""
    arms = {label: result.get("budget") for label, result in document["strategies"].items()}
    note = comparison_note(arms)
    return budget_warnings(arms) + ([note] if note else [])


def rows(document: dict[str, Any]) -> list[tuple[str, dict[str, str]]]:
    """Per strategy, each final metric and the oracle best round's accuracy (``best``: the best round on the
    test set) as 'mean ± sd', the realised samples per round where the rounds know them, and the selected value of a grid (``selected``, e.g. 'lr=0.05')."""
    seeds = len(document["config"]["seeds"])
    out = []
    for label, result in document["strategies"].items():
        cells = {metric: cell(stats, metric, seeds) for metric, stats in result["final"].items()}
        best = best_metric(result)
        if best:
            cells["best"] = cell(result["best"][best], best, seeds)
        if result.get("budget"):
            cells["budget"] = budget_cell(result["budget"])
        if "selected" in result:
            cells["selected"] = f"{result['selected']['param']}={result['selected']['value']}"
        out.append((label, cells))
    return out


def columns(table_rows: list[tuple[str, dict[str, str]]]) -> list[tuple[str, str]]:
    """The (key, title) of each column some row has: final metrics, the oracle best round, selected grid value."""
    titles = {**METRIC_TITLES, "best": ORACLE_TITLE, "budget": BUDGET_TITLE, "selected": "Selected"}
    return [(key, title) for key, title in titles.items() if any(key in cells for _, cells in table_rows)]


def caption(document: dict[str, Any]) -> str:
    """What the numbers are: rounds, seeds, the sample standard deviation, units, and that the best round is
    an oracle."""
    config = document["config"]
    seeds = config["seeds"]
    return (
        f"Final round ({config['rounds']} rounds), mean ± sd ({len(seeds)} seeds: {seeds}; sd = sample standard "
        "deviation, ddof = 1) of the test metrics; accuracy and macro-F1 in %. "
        f"{ORACLE_TITLE} = oracle: best round on the test set, picked by the test metric itself (an optimistic "
        "bound, not a result)."
    )


def summary_table(document: dict[str, Any]) -> str:
    """A markdown table of final-round metrics and the oracle best round (mean ± sd over seeds)."""
    config = document["config"]
    table_rows = rows(document)
    cols = columns(table_rows)
    lines = [
        f"# {markdown_text(config['name'])}",
        "",
        f"{config.get('description', '')}".strip(),
        "",
        caption(document) + selection_note(document),
        "",
        "| strategy | " + " | ".join(title for _, title in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for label, cells in table_rows:
        lines.append(f"| {markdown_text(label)} | " + " | ".join(markdown_text(cells.get(k, "—")) for k, _ in cols) + " |")
    said = budget_lines(document)
    if said:
        lines += [""] + [f"- {markdown_text(line)}" for line in said]
    stopped = [reason for result in document["strategies"].values() for reason in result.get("status", []) if reason != "ok"]
    if stopped:
        lines += ["", "Runs that stopped (left out of the means):", ""] + [f"- {markdown_text(r)}" for r in stopped]
    return "\n".join(lines) + "\n"


def selection_note(document: dict[str, Any]) -> str:
    """How grid values were selected, when some strategy has a grid."""
    chosen = [r["selected"] for r in document["strategies"].values() if "selected" in r]
    return f" Grid values selected by {chosen[0]['by']} on the validation split." if chosen else ""


def markdown_text(text: str) -> str:
    """Plain text inside a markdown table cell: '|', '\\' and markup characters escaped."""
    return "".join("\\" + ch if ch in "\\|*_`[]<>#" else ch for ch in text)


def plot_text(text: str) -> str:
    """Plain text for matplotlib: '$' would start mathtext, a leading '_' would hide a legend entry."""
    text = text.replace("$", r"\$")
    return " " + text if text.startswith("_") else text


def plot_curves(document: dict[str, Any], path: Path, metric: str = "accuracy") -> None:
    """Test ``metric`` per round, one line per strategy (mean over seeds) with a min-max band over seeds; accuracy
    and macro-F1 in percent, as in the tables."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from fedsample.figures import save_figure

    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for label, result in document["strategies"].items():
        curves = [[(r["round"], r[metric]) for r in history if r.get(metric) is not None] for history in result["history"]]
        curves = [c for c in curves if c]  # a seed that stopped has no curve
        if not curves or not curves[0]:
            continue
        rounds = np.array([t for t, _ in curves[0]])
        values = np.array([[v for _, v in c] for c in curves]) * percent_scale(metric)
        (line,) = ax.plot(rounds, values.mean(axis=0), label=plot_text(label))
        if len(values) > 1:
            ax.fill_between(rounds, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.2)
    ax.set_xlabel("round")
    unit = " (%)" if metric in PERCENT else ""
    ax.set_ylabel(f"test {METRIC_TITLES.get(metric, metric).lower()}{unit}")
    ax.set_title(plot_text(f"{document['config']['name']}: test {metric} (mean over seeds, band = min–max)"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path, format="png", dpi=110)
