"""The one alias for JSON values: what a round record, a config, a summary or a checkpoint's JSON holds, and the
readers that narrow a value of a document read back (results.json, reproduction.json, timing.json, markers) to the
type its field holds, with a one-line error naming the field where the document does not hold it."""

from __future__ import annotations

from typing import Any, TypeAlias

__all__ = ["JSON", "JSONObject", "ROUND_KEYS", "Record", "State", "as_int", "as_list", "as_number", "as_object", "as_optional_number", "as_text", "is_round_key"]

#: A JSON value (``json.dumps`` writes it, ``json.loads`` reads it back).
JSON: TypeAlias = str | int | float | bool | None | list["JSON"] | dict[str, "JSON"]
#: A JSON object: a record, a config table, an event.
JSONObject: TypeAlias = dict[str, JSON]

#: A strategy's server-held state between rounds, by key: its parts' arrays and counters, the privacy ledger (saved
#: in checkpoints); each part reads back the values it wrote. Arrays and tensors among them: not JSON.
State: TypeAlias = dict[str, Any]
#: A round's log or record, by figure name: numbers (numpy scalars among them), strings, lists, per-part dicts.
Record: TypeAlias = dict[str, Any]

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


def malformed(value: JSON, what: str, kind: str) -> ValueError:
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


def as_number(value: JSON, what: str) -> float:
    """``value``, a JSON number, as it was read (an integer stays one, so it prints the same; a bool is no number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise malformed(value, what, "a number")
    return value


def as_optional_number(value: JSON, what: str) -> float | None:
    """``value``, a JSON number or null (:func:`as_number`)."""
    return None if value is None else as_number(value, what)


def as_int(value: JSON, what: str) -> int:
    """``value``, a JSON integer (a bool is none)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise malformed(value, what, "an integer")
    return value


def as_text(value: JSON, what: str) -> str:
    """``value``, a JSON string."""
    if not isinstance(value, str):
        raise malformed(value, what, "a string")
    return value
