"""What a paper claims, as data: the figures it reports and the orderings it asserts, each tied to the
experiment (a preset) or the study that measures ours.

A paper module in :mod:`fedsample.reproduction.papers` defines one :class:`Paper` named ``PAPER``;
``fedsample reproduce NAME`` runs its presets and studies and writes the paper's numbers beside ours with a
verdict per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Mapping, Sequence

from fedsample.experiments.stats import LOWER_IS_BETTER  # smaller is better for these metrics, larger for the rest

Which = Literal["final", "best"]


@dataclass(frozen=True)
class Figure:
    """One number the paper reports, to be set beside ours.

    ``source`` names a preset (run by the reproduction) or a :class:`Study` of the same paper; ``label`` is
    the strategy label in that source. ``paper`` is the paper's figure in ``unit`` (None where the paper
    only plots it; say where in ``claim``). ``unit="%"`` means our value (a fraction) is shown x100.
    ``which``: the final round's metric or the best evaluated round's (the papers differ; say which they use).
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
    """An ordering the paper asserts: ``better`` beats ``worse`` on ``metric`` in ``source``
    (``tie=True``: the paper claims the two are equal, e.g. FedSampling matches centralized training)."""

    claim: str
    source: str
    better: str
    worse: str
    metric: str = "accuracy"
    which: Which = "final"
    tie: bool = False
    note: str = ""

    @property
    def higher_is_better(self) -> bool:
        return self.metric not in LOWER_IS_BETTER


# run(device, seeds, out) -> {label: {metric: [one value per seed]}}
StudyRun = Callable[[str, Sequence[int], Path], Mapping[str, Mapping[str, Sequence[float]]]]


@dataclass(frozen=True)
class Study:
    """A measurement that is not an experiment preset (e.g. ISFedAvg's mean-square deviation in dB on the
    paper's regression generator). ``cost`` says how long it takes and on what."""

    name: str
    run: StudyRun
    cost: str
    description: str = ""


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
