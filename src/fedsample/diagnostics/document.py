"""The diagnosis as a document (diagnostics.json, summary.md's table, the pictures): what
:func:`~fedsample.diagnostics.measure.diagnose` measured of each strategy (:class:`StrategyResult`) and what the
command line adds (:class:`DiagnosisNotes`), typed field by field."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from fedsample.diagnostics.exploitation import Exploitation
from fedsample.runtime.records import JSONObject

if TYPE_CHECKING:
    from fedsample.experiments.config import GridValue

__all__ = [
    "Calibration", "Cost", "DiagnosedGrid", "DiagnosisDocument", "DiagnosisNotes", "Replayed", "RunCheck", "SamplerSummary",
    "SizePrivacy", "StrategyResult",
]


class Cost(TypedDict):
    """Per-round means of a strategy's draws (:func:`~fedsample.diagnostics.measure.cost_summary`)."""

    samples: float
    samples_sd: float
    clients_contacted: float
    updates: float
    bytes_up: float
    local_trainings: float
    probes: float


class Calibration(TypedDict):
    """The mean over the draws of sum_{k in S} d_k / N, its standard error and the rounds counted."""

    mean: float
    se: float
    rounds: int


class Replayed(TypedDict):
    """An estimated sampler's inclusion frequencies replayed from its state: draws, their sum, min and max."""

    draws: int
    expected_cohort: float
    min: float
    max: float


class _SamplerFigures(TypedDict):
    inclusion: str
    bias: str | None
    rounds_by_kind: dict[str, int]
    server_learns: list[str]
    trains_first: bool
    probes: float
    probe_bytes: float


class SamplerSummary(_SamplerFigures, total=False):
    """What the client sampler declares and what its draws show (:func:`~fedsample.diagnostics.measure.sampler_summary`):
    ``calibration`` where more than one draw carries design weights, ``replayed`` for an estimated sampler that
    offers ``estimate_inclusion``."""

    calibration: Calibration
    replayed: Replayed


class SizePrivacy(TypedDict):
    """Randomized size reports' epsilon per round, alpha and the standard error of N~
    (:func:`~fedsample.diagnostics.measure.privacy_summary`)."""

    epsilon_per_round: float
    M: int | str
    alpha: float
    scope: str
    total: int
    clipped_total: int
    estimate_mean: float | None
    estimate_sd: float | None
    estimate_se_theory: float | None


class StrategyResult(TypedDict):
    """One strategy's entry (:func:`~fedsample.diagnostics.measure.measure_strategy`): the estimator's statistics
    relative to g* (:func:`~fedsample.diagnostics.estimator.estimator_statistics`), exploitation, cost, privacy
    (randomized size reports only, else None), the sampler and the seconds it took."""

    estimator: dict[str, float]
    exploitation: Exploitation
    cost: Cost
    privacy: SizePrivacy | None
    sampler: SamplerSummary
    seconds: float


class DiagnosedGrid(TypedDict):
    """The grid a diagnosed strategy was taken from: its parameter, the value diagnosed (the first) and all values."""

    param: str
    value: GridValue
    values: list[GridValue]


class RunCheck(TypedDict):
    """The run check of :func:`~fedsample.diagnostics.command.run_checks`: its rounds and, per strategy, "ok" or
    why it diverged."""

    rounds: int
    status: dict[str, str]


class DiagnosisNotes(TypedDict, total=False):
    """What else the diagnosis used or found (the command line's): the failure model, each grid strategy's grid,
    the run check and the warnings raised."""

    faults: JSONObject | None
    grid: dict[str, DiagnosedGrid]
    run_check: RunCheck | None
    warnings: list[JSONObject]


class _DiagnosisFigures(TypedDict):
    rounds: int
    seed: int
    basis: JSONObject
    g_star_norm: float
    clients: int
    samples: int
    strategies: dict[str, StrategyResult]


class DiagnosisDocument(_DiagnosisFigures, DiagnosisNotes, total=False):
    """diagnostics.json: the draws, seed, gradient basis, ||g*||, the data's clients and samples, each strategy's
    :class:`StrategyResult`, and the notes where the command line gives them
    (:meth:`~fedsample.diagnostics.measure.Diagnosis.to_dict`, :func:`~fedsample.diagnostics.report.write_diagnosis`)."""
