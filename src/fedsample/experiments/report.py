"""Tables and plots of an experiment's results.json document."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from fedsample.budget import ArmBudget, budget_warnings, comparison_note
from fedsample.runtime.records import JSON, JSONObject, as_int, as_list, as_number, as_object, as_optional_number, as_text

__all__ = ["budget_cell", "budget_lines", "caption", "columns", "markdown_text", "plot_curves", "rows", "summary_table"]

METRIC_TITLES = {"accuracy": "Accuracy", "macro_f1": "Macro-F1", "loss": "Loss"}
PERCENT = ("accuracy", "macro_f1")  # shown in percent in every table and picture (results.json keeps fractions)
ORACLE_TITLE = "Best round (oracle)"  # the best round on the test set: never a result
BUDGET_TITLE = "Samples/round (realised)"  # mean over seeds of the per-round mean [smallest-largest round]


def cell(stats: JSON, metric: str, seeds: int) -> str:
    """'mean ± sd' (accuracy and macro-F1 in percent, as the papers); the sd is left out for one seed, and
    the number of seeds is added when some seeds stopped (n < seeds); "—" when every seed stopped."""
    stats = as_object(stats, metric)
    mean, sd = as_optional_number(stats.get("mean"), "mean"), as_optional_number(stats.get("sd"), "sd")
    if mean is None:
        return "—"
    scale = percent_scale(metric)
    text = f"{mean * scale:.2f}"
    if sd is not None:
        text += f" ± {sd * scale:.2f}"
    return text + (f" (n={stats['n']})" if as_int(stats.get("n", seeds), "n") < seeds else "")


def percent_scale(metric: str) -> float:
    """100 for the metrics shown in percent (accuracy, macro-F1), 1 for the others (loss, MSE)."""
    return 100.0 if metric in PERCENT else 1.0


def best_metric(result: JSONObject) -> str | None:
    """The metric of the best-round column: accuracy, or the loss when there is none (regression)."""
    return next((m for m in ("accuracy", "loss") if m in as_object(result.get("best", {}), "best")), None)


def budget_cell(budget: ArmBudget) -> str:
    """The realised samples per round: 'mean [min-max]' over the rounds of every seed (:func:`fedsample.budget.arm_budget`);
    a sealed arm's figure, not released to the server, is marked as measured in simulation, or said not measured."""
    if budget["mean"] is None:
        return "not released (sealed; not measured)"
    text = f"{budget['mean']:.0f} [{budget['min']:.0f}–{budget['max']:.0f}]"
    return text + " (sealed; measured in simulation)" if budget.get("source") == "measured" else text


def budget_lines(document: JSONObject) -> list[str]:
    """The lines a run says under its table about budgets: each arm that did not sample its K (K/N~ >= 1, or the
    realised mean outside [0.67 K, 1.5 K]) and whether the arms compare at equal samples
    (:func:`fedsample.budget.comparison_note`)."""
    arms = {label: arm_budget(result) for label, result in strategies(document).items()}
    note = comparison_note(arms)
    return budget_warnings(arms) + ([note] if note else [])


def rows(document: JSONObject) -> list[tuple[str, dict[str, str]]]:
    """Per strategy, each final metric and the oracle best round's accuracy (``best``: the best round on the
    test set) as 'mean ± sd', the realised samples per round where the rounds know them, and the selected value of a grid (``selected``, e.g. 'lr=0.05')."""
    seeds = len(as_list(config_of(document)["seeds"], "seeds"))
    out = []
    for label, result in strategies(document).items():
        cells = {metric: cell(stats, metric, seeds) for metric, stats in as_object(result["final"], "final").items()}
        best = best_metric(result)
        if best:
            cells["best"] = cell(as_object(result["best"], "best")[best], best, seeds)
        budget = arm_budget(result)
        if budget:
            cells["budget"] = budget_cell(budget)
        if "selected" in result:
            selected = as_object(result["selected"], "selected")
            cells["selected"] = f"{selected['param']}={selected['value']}"
        out.append((label, cells))
    return out


def strategies(document: JSONObject) -> dict[str, JSONObject]:
    """A results.json document's results by strategy label."""
    return {label: as_object(result, label) for label, result in as_object(document["strategies"], "strategies").items()}


def config_of(document: JSONObject) -> JSONObject:
    """A results.json document's experiment config."""
    return as_object(document["config"], "config")


def arm_budget(result: JSONObject) -> ArmBudget | None:
    """A strategy's realised budget (:func:`fedsample.budget.arm_budget`, written by the runner), None where the rounds
    did not know it; an object read back as the :class:`~fedsample.budget.ArmBudget` the runner wrote (its fields not
    checked one by one)."""
    budget = result.get("budget")
    return None if not budget else cast(ArmBudget, as_object(budget, "budget"))


def columns(table_rows: list[tuple[str, dict[str, str]]]) -> list[tuple[str, str]]:
    """The (key, title) of each column some row has: final metrics, the oracle best round, selected grid value."""
    titles = {**METRIC_TITLES, "best": ORACLE_TITLE, "budget": BUDGET_TITLE, "selected": "Selected"}
    return [(key, title) for key, title in titles.items() if any(key in cells for _, cells in table_rows)]


def caption(document: JSONObject) -> str:
    """What the numbers are: rounds, seeds, the sample standard deviation, units, and that the best round is
    an oracle."""
    config = config_of(document)
    seeds = as_list(config["seeds"], "seeds")
    return (
        f"Final round ({config['rounds']} rounds), mean ± sd ({len(seeds)} seeds: {seeds}; sd = sample standard "
        "deviation, ddof = 1) of the test metrics; accuracy and macro-F1 in %. "
        f"{ORACLE_TITLE} = oracle: best round on the test set, picked by the test metric itself (an optimistic "
        "bound, not a result)."
    )


def summary_table(document: JSONObject) -> str:
    """A markdown table of final-round metrics and the oracle best round (mean ± sd over seeds)."""
    config = config_of(document)
    table_rows = rows(document)
    cols = columns(table_rows)
    lines = [
        f"# {markdown_text(as_text(config['name'], 'name'))}",
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
    stopped = [as_text(reason, "status") for result in strategies(document).values() for reason in as_list(result.get("status", []), "status")
               if reason != "ok"]
    if stopped:
        lines += ["", "Runs that stopped (left out of the means):", ""] + [f"- {markdown_text(r)}" for r in stopped]
    return "\n".join(lines) + "\n"


def selection_note(document: JSONObject) -> str:
    """How grid values were selected, when some strategy has a grid."""
    chosen = [as_object(r["selected"], "selected") for r in strategies(document).values() if "selected" in r]
    return f" Grid values selected by {chosen[0]['by']} on the validation split." if chosen else ""


def round_record(record: JSON) -> JSONObject:
    return as_object(record, "round record")


def markdown_text(text: str) -> str:
    """Plain text inside a markdown table cell: '|', '\\' and markup characters escaped."""
    return "".join("\\" + ch if ch in "\\|*_`[]<>#" else ch for ch in text)


def plot_text(text: str) -> str:
    """Plain text for matplotlib: '$' would start mathtext, a leading '_' would hide a legend entry."""
    text = text.replace("$", r"\$")
    return " " + text if text.startswith("_") else text


def plot_curves(document: JSONObject, path: Path, metric: str = "accuracy") -> None:
    """Test ``metric`` per round, one line per strategy (mean over seeds) with a min-max band over seeds; accuracy
    and macro-F1 in percent, as in the tables."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from fedsample.figures import save_figure

    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for label, result in strategies(document).items():
        curves = [[(as_number(r["round"], "round"), as_number(r[metric], metric)) for r in map(round_record, as_list(history, "history"))
                   if r.get(metric) is not None] for history in as_list(result["history"], "history")]
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
    ax.set_title(plot_text(f"{config_of(document)['name']}: test {metric} (mean over seeds, band = min–max)"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path, format="png", dpi=110)
