"""What a paper claims, as data: the figures it reports and the orderings it asserts, each tied to the
experiment (a preset) or the study that measures ours.

A paper module in :mod:`fedsample.reproduction.papers` defines one :class:`Paper` named ``PAPER``;
``fedsample reproduce NAME`` runs its presets and studies and writes the paper's numbers beside ours with a
verdict per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Literal, Mapping, Sequence

from fedsample.budget import ArmBudget
from fedsample.experiments.stats import LOWER_IS_BETTER  # smaller is better for these metrics, larger for the rest

__all__ = ["Comparison", "Figure", "Paper", "Study", "Which", "with_seeds_needed"]

# "final": the last round (a grid's value selected on the validation split); "best": the oracle, the best round
# on the test set (Figures only, for information; no verdict).
Which = Literal["final", "best"]
"""Which round a :class:`Figure` or :class:`Comparison` reads: ``"final"``, or ``"best"`` (the oracle; see above)."""


@dataclass(frozen=True)
class Figure:
    """One number the paper reports, to be set beside ours.

    ``source`` names a preset (run by the reproduction) or a :class:`Study` of the same paper; ``label`` is
    the strategy label in that source. ``paper`` is the paper's figure in ``unit`` (None where the paper
    only plots it; say where in ``claim``). ``unit="%"`` means our value (a fraction) is shown x100.
    ``which``: "final", the last round's metric (on a grid, the value selected on the validation split), or
    "best", the oracle: each seed's best evaluated round on the test set, picked by the test metric itself.
    An oracle row is shown for information and never gets a matches/differs verdict.
    """

    claim: str
    source: str
    label: str
    paper: float | None
    metric: str = "accuracy"
    which: Which = "final"
    unit: str = "%"
    note: str = ""


@dataclass(frozen=True)
class Comparison:
    """An ordering the paper asserts: ``better`` beats ``worse`` on ``metric`` in ``source``, tested as
    docs/reproduction.md states (:mod:`fedsample.reproduction.verdict`).

    ``tie=True``: the paper claims the two are equal (e.g. FedSampling matches centralized training), tested
    for equivalence within ±``margin`` (in display units: accuracy points, dB), with ``margin_reason`` saying
    in one line why that margin. ``paired=True``: the two sides' runs pair by seed (same source: the runs of
    one seed share the partition, the validation split and the initial weights), so the paired t-test on
    per-seed differences is used instead of Welch's. ``effect``: the paper's stated gap (display units) that an
    ordering's seeds are planned for (None: :data:`fedsample.reproduction.verdict.STATED_EFFECT`; a tie's is its
    margin). ``seeds_needed``: the seeds per arm planned before the comparison runs (None: not stated); the
    seeds are fixed in advance, and seeds added after a look are a declared sequential design or a new
    comparison (docs/reproduction.md). ``which`` is always "final": a verdict never uses the oracle best round
    on the test set.

    ``budget``: what each side may spend (samples per round, optimizer steps per round), stated under the claim.
    ``premise``: the label of a reference that must not trail ``worse`` for the claim to be answerable, e.g.
    centralized training for "FedSampling beats FedAvg" (the paper's premise: centralized >= every FL baseline).
    Where the premise's own test ("premise beats worse", paired like the claim) is reversed, the claim's
    verdict is "not comparable", with the premise's numbers (:func:`fedsample.reproduction.rows.comparison_row`).
    """

    claim: str
    source: str
    better: str
    worse: str
    metric: str = "accuracy"
    which: Which = "final"
    tie: bool = False
    note: str = ""
    paired: bool = False
    margin: float | None = None
    margin_reason: str = ""
    seeds_needed: int | None = None
    budget: str = ""
    premise: str = ""
    effect: float | None = None

    def __post_init__(self) -> None:
        if self.premise and self.premise in (self.better, self.worse):
            raise ValueError(f"premise: a third label the claim's sides are checked against, got {self.premise!r}")
        if self.which != "final":
            raise ValueError(f"which: a comparison uses the final round, got {self.which!r} (the best round on the test set is an oracle)")
        if self.margin is not None and not (self.tie and self.margin > 0):
            raise ValueError(f"margin: a positive equivalence margin of a tie claim, got {self.margin!r} (tie={self.tie})")
        if self.seeds_needed is not None and self.seeds_needed < 2:
            raise ValueError(f"seeds_needed must be >= 2, got {self.seeds_needed}")

    @property
    def higher_is_better(self) -> bool:
        return self.metric not in LOWER_IS_BETTER


def with_seeds_needed(comparisons: Sequence[Comparison], needed: Mapping[tuple[str, str, str], int]) -> tuple[Comparison, ...]:
    """The comparisons with ``seeds_needed`` filled in from ``{(source, better, worse): seeds per arm}``."""
    return tuple(replace(c, seeds_needed=needed.get((c.source, c.better, c.worse), c.seeds_needed)) for c in comparisons)


#: One label's measurements in a study: {metric: [one value per seed], and optionally "budget": the arm's realised
#: budget as results.json records it (fedsample.budget.arm_budget)}.
StudyMeasures = Mapping[str, Sequence[float | None] | ArmBudget | None]
# run(device, seeds, out) -> {label: its StudyMeasures}
StudyRun = Callable[[str, Sequence[int], Path], Mapping[str, StudyMeasures]]


@dataclass(frozen=True)
class Study:
    """A measurement that is not an experiment preset (e.g. ISFedAvg's mean-square deviation in dB on the
    paper's regression generator). ``cost`` says how long it takes and on what; ``seeds``: the seeds it runs
    unless ``--seeds`` is given (empty: 0, 1, 2)."""

    name: str
    run: StudyRun
    cost: str
    description: str = ""
    seeds: tuple[int, ...] = ()


@dataclass(frozen=True)
class Paper:
    """A paper's reproduction: which presets run on which profile (``"cpu"``: small stand-ins that run on
    a laptop; ``"cuda"``: the paper's models and data sizes), the studies, and the rows of the table."""

    name: str
    citation: str
    presets: Mapping[str, tuple[str, ...]]
    figures: tuple[Figure, ...] = ()
    comparisons: tuple[Comparison, ...] = ()
    studies: tuple[Study, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
