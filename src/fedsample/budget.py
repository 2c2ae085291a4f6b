"""The realised budget: how many samples a round actually trained on, for every kind of arm (issue 38).

A comparison of sampling methods at "equal samples" means something only when the arms' realised counts agree.
FedSampling keeps each sample with probability K/N~ (Qi et al. 2023, §3.2), so it draws about K N / N~ rows,
not K: an estimate N~ far below the true total N gives many times the budget K (and K/N~ >= 1 keeps every
row). A client sampler's arm trains, per client, the rows its local steps read, with repeats (the sum of its
minibatches' widths: ``epochs x n_k`` for epochs, ``steps x min(batch, n_k)`` for steps), which each reply carries
(:class:`~fedsample.messages.TrainReport`'s ``rows_trained``).

- :func:`realised_samples`: one round's figure (the round record's ``realised_samples``);
- :func:`budget_summary`: its mean and range over a run's rounds;
- :func:`budget_warning`: the one line a run prints when the realised mean leaves [0.67 K, 1.5 K] or K/N~ >= 1;
- :func:`equal_budgets`: whether arms' realised means agree within a stated relative tolerance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Mapping, Sequence, TypedDict

import numpy as np

from fedsample.runtime.records import RecordView, as_table, numbers_in

if TYPE_CHECKING:
    from fedsample.rounds import ReplyList

__all__ = [
    "ArmBudget", "BUDGET_RANGE", "BudgetSummary", "EQUAL_BUDGET_TOLERANCE", "Source", "arm_budget", "budget_summary", "budget_warning", "budget_warnings", "comparison_note",
    "equal_budgets",
    "realised_samples",
]

BUDGET_RANGE = (0.67, 1.5)
"""A realised mean outside [0.67 K, 1.5 K] is said in one line (:func:`budget_warning`)."""

EQUAL_BUDGET_TOLERANCE = 0.10
"""Arms compare at "equal samples" when every realised mean is within 10% of their average (:func:`equal_budgets`)."""

Source = Literal["released", "measured", "not measured"]
"""Where a realised figure comes from: told to the server, measured by the simulation of sealed rounds, or neither."""


class BudgetSummary(TypedDict):
    """One run's realised samples per round (:func:`budget_summary`): mean and range (None where not measured), the
    rounds counted, the rounds whose K/N~ was capped at 1, and where the figures come from."""

    mean: float | None
    min: float | None
    max: float | None
    rounds: int
    clamped_rounds: int
    source: Source


class ArmBudget(BudgetSummary):
    """One arm's realised budget over its seeds (:func:`arm_budget`, results.json's ``budget``): the summary's figures,
    FedSampling's K where the rounds carry it, and each seed's :class:`BudgetSummary`."""

    K: float | None
    per_seed: list[BudgetSummary | None]


def realised_samples(drawn: float | None, replies: ReplyList) -> float | None:
    """One round's realised samples: the cohort's drawn count where its clients report it (FedSampling's
    self-normalized plan: sum_c |S_c|, noised when the plan noises it), else the rows the received ``replies``
    (a :class:`~fedsample.rounds.ReplyList`) trained on, with repeats, summed (:meth:`~fedsample.rounds.ReplyList.rows_trained`:
    exact, from each client's own count); None where neither is known (sealed replies of a client sampler under a
    secure sum, noised replies, a solver that does not count its rows)."""
    if drawn is not None:
        return float(drawn)
    rows = replies.rows_trained()
    return None if rows is None else float(rows)


def measured_figure(record: RecordView, rows: int | None) -> dict[str, float | None]:
    """What a round's record adds of the simulation's own measurement (:mod:`fedsample.runtime.measured`): where the
    round trained (``updates``) but the server was told no realised figure (sealed replies: a private drawn count,
    noised replies), ``{"realised_measured": rows}``, the rows the engine saw its clients train (None: an engine that
    cannot measure them, as a real deployment cannot); nothing where the server knows the figure or nothing trained.
    Added by ``simulate`` after the round, so that no strategy part, ledger or sampler reads it."""
    if not record.get("updates") or record.get("realised_samples") is not None:
        return {}
    return {"realised_measured": None if rows is None else float(rows)}


def budget_summary(history: Sequence[RecordView]) -> BudgetSummary | None:
    """``{"mean", "min", "max", "rounds", "clamped_rounds", "source"}`` of one run's realised samples per round
    (``clamped_rounds``: rounds whose FedSampling ratio K/N~ was capped at 1): the figures the server was told
    (the records' ``realised_samples``, ``source`` "released"), else those the simulation measured of sealed rounds
    (``realised_measured``, ``source`` "measured": never told to the server); where the rounds were sealed and not
    measured (an engine that cannot, :func:`measured_figure`), ``{"mean": None, ..., "source": "not measured"}``;
    None where no round has either (a run that predates the record)."""
    clamped = sum(1 for r in history if "ratio" in as_table(r.get("clamped") or {}, "clamped"))
    released = [float(v) for v in numbers_in(history, "realised_samples")]
    measured = [float(v) for v in numbers_in(history, "realised_measured")]
    values = released or measured
    source: Source = "released" if released else "measured"
    if not values:
        if any("realised_measured" in r for r in history):
            return {"mean": None, "min": None, "max": None, "rounds": 0, "clamped_rounds": clamped, "source": "not measured"}
        return None
    return {"mean": float(np.mean(values)), "min": min(values), "max": max(values), "rounds": len(values), "clamped_rounds": clamped,
            "source": source}


def budget_warning(label: str, summary: BudgetSummary | None, K: float | None) -> str | None:
    """The one line saying that an arm did not sample its budget K: K/N~ >= 1 in some round (every row kept), or
    the realised mean outside [0.67 K, 1.5 K] (:data:`BUDGET_RANGE`); None where the arm has no K or stayed inside.
    A sealed arm's figure (``source`` "measured": the server was not told it) is said to be measured in simulation."""
    if summary is None or summary["mean"] is None or not K:
        return None
    low, high = BUDGET_RANGE
    ratio = summary["mean"] / K
    clamped = summary.get("clamped_rounds", 0)
    if not clamped and low <= ratio <= high:
        return None
    why = f"K/N~ >= 1 in {clamped} of {summary['rounds']} rounds (every row kept)" if clamped else f"outside [{low} K, {high} K]"
    measured = " (sealed: measured in simulation, not released to the server)" if summary.get("source") == "measured" else ""
    return (f"{label}: realised {summary['mean']:.0f} samples per round{measured} ({ratio:.2f} K, range {summary['min']:.0f}-"
            f"{summary['max']:.0f}) against K = {K:g}: {why}")


def equal_budgets(means: Mapping[str, float], tolerance: float = EQUAL_BUDGET_TOLERANCE) -> bool:
    """True when every arm's realised mean is within ``tolerance`` (relative) of the arms' average: the condition for
    a comparison to say "equal samples"; False for fewer than two arms with a figure."""
    values = np.array([v for v in means.values() if v is not None], dtype=np.float64)
    if len(values) < 2 or values.mean() <= 0:
        return False
    return bool(np.all(np.abs(values / values.mean() - 1) <= tolerance))


def arm_budget(histories: Sequence[Sequence[RecordView]]) -> ArmBudget | None:
    """One arm's realised budget over its seeds (results.json's ``budget``): the mean of the seeds' per-round means,
    the smallest and largest round, the rounds whose K/N~ was capped, FedSampling's K where the rounds carry it,
    where the figures come from (``source``: "released", "measured" in simulation, or "not measured" where sealed
    rounds could not be measured: :func:`budget_summary`) and each seed's :func:`budget_summary`; None where no
    round of any seed has a figure or a sealed mark."""
    seeds = [budget_summary(history) for history in histories]
    known = [s for s in seeds if s is not None and s["mean"] is not None]
    if not known:
        sealed = [s for s in seeds if s is not None]
        return {"mean": None, "min": None, "max": None, "rounds": 0, "clamped_rounds": sum(s["clamped_rounds"] for s in sealed), "K": None,
                "source": "not measured", "per_seed": seeds} if sealed else None
    targets = {v for history in histories for v in numbers_in(history, "target_samples")}
    sources = {s["source"] for s in known}
    lows, highs = [s["min"] for s in known if s["min"] is not None], [s["max"] for s in known if s["max"] is not None]
    return {
        "mean": float(np.mean([s["mean"] for s in known])), "min": min(lows), "max": max(highs),
        "rounds": sum(s["rounds"] for s in known), "clamped_rounds": sum(s["clamped_rounds"] for s in known),
        "K": targets.pop() if len(targets) == 1 else None, "source": "released" if sources == {"released"} else "measured",
        "per_seed": seeds,
    }


def budget_warnings(arms: Mapping[str, ArmBudget | None]) -> list[str]:
    """The :func:`budget_warning` line of every arm (label -> :func:`arm_budget`) that did not sample its K."""
    lines = [budget_warning(label, arm, arm.get("K")) if arm else None for label, arm in arms.items()]
    return [line for line in lines if line is not None]


def comparison_note(arms: Mapping[str, ArmBudget | None], tolerance: float = EQUAL_BUDGET_TOLERANCE) -> str | None:
    """What a table may say of its arms' budgets: "equal samples" (realised means within ``tolerance`` of their
    average, :func:`equal_budgets`) or "unequal budgets" with each arm's mean, the figures the simulation measured
    of sealed arms (the server was not told them) marked so and used as theirs; None where fewer than two arms
    have a figure."""
    means = {label: arm["mean"] for label, arm in arms.items() if arm and arm["mean"] is not None}
    if len(means) < 2:
        return None
    measured = [label for label, arm in arms.items() if label in means and arm and arm.get("source") == "measured"]
    figures = ", ".join(f"{label} {mean:.0f}" + (" (measured in simulation)" if label in measured else "") for label, mean in means.items())
    figures += " samples per round" + (f"; {len(measured)} sealed arm(s): not released to the server, measured in simulation" if measured else "")
    if equal_budgets(means, tolerance):
        return f"Equal samples: realised means within {tolerance:.0%} of their average ({figures})."
    return f"Unequal budgets: realised means differ by more than {tolerance:.0%} ({figures})."
