"""The one alias for JSON values: what a config, a summary or a checkpoint's JSON holds; the round record's type
(:data:`Record`, its figures :data:`RecordValue`, its own keys :data:`ROUND_KEYS`); and the readers that narrow a
value of a record or of a document read back (results.json, reproduction.json, timing.json, markers) to the type
its field holds, with a one-line error naming the field where the record or document does not hold it."""

from __future__ import annotations

from typing import Any, Mapping, Sequence, TypeAlias, cast

import numpy as np

__all__ = ["JSON", "JSONObject", "ROUND_KEYS", "Record", "RecordValue", "RecordView", "State", "as_int", "as_list", "as_number", "as_object", "as_optional_number", "as_entries", "as_table", "as_text", "count_in", "entries_in",
           "is_round_key", "table_in"]

#: A JSON value (``json.dumps`` writes it, ``json.loads`` reads it back).
JSON: TypeAlias = str | int | float | bool | None | list["JSON"] | dict[str, "JSON"]
#: A JSON object: a record, a config table, an event.
JSONObject: TypeAlias = dict[str, JSON]

#: A strategy's server-held state between rounds, by key: its parts' arrays and counters, the privacy ledger (saved
#: in checkpoints); each part reads back the values it wrote. Arrays and tensors among them: not JSON.
State: TypeAlias = dict[str, Any]
#: One figure of a round's record: a number (a numpy scalar among them), a string, a flag, None (not known), or a
#: list or table of figures (``failed``: one entry per failed reply; ``clamped``: the settings moved into range, by
#: name; SecAgg+'s ``dropped``: why, by client id). Read-only containers, so that a JSON value (a record read back)
#: is one.
RecordValue: TypeAlias = (str | int | float | bool | None | np.generic | Sequence["RecordValue"] | Mapping[str, "RecordValue"]
                          | Mapping[int, "RecordValue"])
#: A round's log or record, by figure name (:data:`ROUND_KEYS`, and the summed statistics' names).
Record: TypeAlias = dict[str, RecordValue]
#: A round record as its readers take it: one being written (:data:`Record`) or read back from JSON (:data:`JSONObject`).
RecordView: TypeAlias = Mapping[str, RecordValue]

ROUND_KEYS: frozenset[str] = frozenset({
    # the round (fedsample.strategy.record, fedsample.strategy.round) and the run (fedsample.simulation, fedsample.flower.server)
    "round", "cohort", "updates", "train_loss", "answered", "failed", "dropped", "params_unchanged", "faults_uncorrected",
    "realised_samples", "target_samples", "realised_measured", "local_trainings", "clients_contacted", "size_estimate",
    "size_M", "rejected_aggregate", "train_clients", "secure_aggregation",
    # the cohort's inclusion probabilities (fedsample.strategy.record.inclusion_figures)
    "inclusion", "bias", "inclusion_min", "inclusion_mean", "inclusion_max", "effective_cohort", "weight_cv",
    "design_weight_total",
    # the privacy spent (fedsample.privacy.accounting.SPEND_KEYS, fedsample.privacy.ledger.Ledger.round_figures)
    "size_reports", "size_epsilon", "size_epsilon_advanced", "size_delta", "update_epsilon", "update_delta",
    "privacy_epsilon", "privacy_epsilon_no_amplification", "privacy_delta", "privacy_unit", "privacy_threat",
    "privacy_relation", "privacy_method", "privacy_amplification", "privacy_unprotected",
    # the test metrics (fedsample.evaluation.evaluate)
    "loss", "accuracy", "macro_f1", "mse",
    # the library's parts' own figures (fedsample.sampling, fedsample.training.aggregate)
    "clamped", "sampler_probes", "sampler_probe_bytes", "sampler_lost_probes", "sampler_lost_probes_instead",
    "sampler_zero_score_clients", "ratio", "eta", "steered_total", "summed_total", "strata_nonempty", "strata_unanswered",
    "clients_with_update", "clusters", "agent_p_max", "beta", "exploration_rate", "sending_probability_sum",
    "sending_probability_max", "candidates", "tau_eff",
})
"""The round record's own figure names: what the round, the run and the library's parts write in it. The record
logs each summed statistic of the clients' replies (:class:`fedsample.messages.SummedStatistic`) under the
statistic's own name beside them, so a statistic named like one of these is refused where the strategy is built
(:func:`fedsample.strategy.rules.summed_statistics_keep_their_names`). FedSampling's drawn count is such a statistic
(``"samples"``, :data:`fedsample.sampling.data.DRAWN`): the record's entry for it is the statistic, not a key of
its own."""


def is_round_key(name: str) -> bool:
    """Whether ``name`` is one of the round record's own figure names (:data:`ROUND_KEYS`, and the privacy
    epsilon of each neighbouring relation, ``privacy_epsilon[<relation>]``)."""
    return name in ROUND_KEYS or name.startswith("privacy_epsilon[")


def malformed(value: RecordValue, what: str, kind: str) -> ValueError:
    """The one-line error of a document whose field ``what`` holds ``value`` where ``kind`` belongs."""
    return ValueError(f"{what}: expected {kind}, the document holds {type(value).__name__} {value!r:.60}")


def as_object(value: JSON, what: str) -> JSONObject:
    """``value``, a JSON object (``what`` names the field in the error otherwise)."""
    if not isinstance(value, dict):
        raise malformed(value, what, "an object")
    return value


def as_list(value: JSON, what: str) -> list[JSON]:
    """``value``, a JSON array (``what`` names the field in the error otherwise)."""
    if not isinstance(value, list):
        raise malformed(value, what, "an array")
    return value


def as_number(value: RecordValue, what: str) -> float:
    """``value``, a JSON number, as it was read (an integer stays one, so it prints the same; a bool is no number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise malformed(value, what, "a number")
    return value


def as_optional_number(value: RecordValue, what: str) -> float | None:
    """``value``, a JSON number or null (:func:`as_number`)."""
    return None if value is None else as_number(value, what)


def as_int(value: RecordValue, what: str) -> int:
    """``value``, a JSON integer (a bool is none)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise malformed(value, what, "an integer")
    return value


def as_text(value: RecordValue, what: str) -> str:
    """``value``, a JSON string."""
    if not isinstance(value, str):
        raise malformed(value, what, "a string")
    return value


def count_in(record: RecordView, key: str) -> int:
    """The count the record holds under ``key`` (0 where it holds none: a counter not started), an integer
    (:func:`as_int` names the key otherwise)."""
    return as_int(record.get(key, 0), key)


def entries_in(record: Record, key: str) -> list[RecordValue]:
    """The list of entries the record holds under ``key`` (``failed``), started empty where it holds none, to which
    the caller adds; a value of another kind is refused naming the key."""
    entries = record.setdefault(key, [])
    if not isinstance(entries, list):
        raise malformed(entries, key, "a list")
    return entries


def table_in(record: Record, key: str) -> dict[str, RecordValue]:
    """The table of figures by name the record holds under ``key`` (``clamped``), started empty where it holds
    none, to which the caller adds; a value of another kind is refused naming the key."""
    table = record.setdefault(key, {})
    if not isinstance(table, dict):
        raise malformed(table, key, "a table of figures by name")
    as_table(table, key)
    return cast(dict[str, RecordValue], table)  # a dict whose every key as_table just saw to be a str


def as_table(value: RecordValue, what: str) -> Mapping[str, RecordValue]:
    """``value``, a table of figures by name (a failed reply's entry, the ``clamped`` settings), as a record being
    written or read back holds it; another value, or a table by client id, is refused naming ``what``."""
    if not isinstance(value, Mapping) or not all(isinstance(name, str) for name in value):
        raise malformed(value, what, "a table of figures by name")
    return cast(Mapping[str, RecordValue], value)  # a mapping whose every key was just seen to be a str


def as_entries(value: RecordValue, what: str) -> Sequence[RecordValue]:
    """``value``, a list of figures (``failed``); a string or another value is refused naming ``what``."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise malformed(value, what, "a list")
    return value
