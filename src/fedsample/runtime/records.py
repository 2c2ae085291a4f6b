"""The one alias for JSON values: what a config, a summary or a checkpoint's JSON holds; the round record's type
(:data:`Record`, its figures :data:`RecordValue`, its own keys :data:`ROUND_KEYS`); and the readers that narrow a
value of a record or of a document read back (results.json, reproduction.json, timing.json, markers) to the type
its field holds, with a one-line error naming the field where the record or document does not hold it; the
strategy's server-held :data:`State` and the readers of a part's table in it (:func:`part_state`), checked the same
way."""

from __future__ import annotations

import functools
import numbers
import types
from typing import Iterable, Mapping, Sequence, TypeAlias, TypeVar, Union, cast, get_args, get_origin, get_type_hints

import numpy as np

__all__ = ["JSON", "JSONObject", "ROUND_KEYS", "Record", "RecordValue", "RecordView", "State", "Table", "as_int", "as_list", "as_number", "as_object", "as_optional_number", "as_entries", "as_table", "as_text", "count_in", "entries_in", "numbers_in",
           "held_state", "is_round_key", "opened_state", "part_state", "table_in"]

#: A JSON value (``json.dumps`` writes it, ``json.loads`` reads it back).
JSON: TypeAlias = str | int | float | bool | None | list["JSON"] | dict[str, "JSON"]
#: A JSON object: a record, a config table, an event.
JSONObject: TypeAlias = dict[str, JSON]

#: A strategy's server-held state between rounds, by key: its parts' arrays and counters, the privacy ledger (saved
#: in checkpoints); each part reads back the values it wrote, a table through :func:`part_state` (its ``TypedDict``
#: checked), a single value by ``isinstance``. Arrays and tensors among them: not JSON.
State: TypeAlias = dict[str, object]
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
(:func:`fedsample.strategy.rules.summed_statistics_are_sealed`). FedSampling's drawn count is such a statistic
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


def numbers_in(records: Iterable[RecordView], key: str) -> list[float]:
    """The numbers the ``records`` hold under ``key``, in order, those that hold none (or None) left out
    (:func:`as_optional_number` names the key where one holds something else)."""
    return [value for record in records if (value := as_optional_number(record.get(key), key)) is not None]


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


#: A part's table in the state: a ``TypedDict`` naming what it keeps (a plain dict at run time, saved as one).
Table = TypeVar("Table", bound=Mapping[str, object])


def part_state(state: State, key: str, kind: type[Table]) -> Table | None:
    """The table a part keeps under ``key`` (None where it keeps none yet), checked against its ``TypedDict``
    ``kind``: a dict holding ``kind``'s required keys, each value of its declared type (the outer type: an array's
    dtype or a list's items are not read); otherwise a one-line ``TypeError`` naming the key."""
    value = state.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError(f"state[{key!r}]: expected a {kind.__name__} table, the state holds {type(value).__name__}")
    hints = declared(kind)
    missing = sorted(required(kind) - value.keys())
    wrong = [name for name, held in value.items() if name not in hints or not holds(held, hints[name])]
    if missing or wrong:
        raise TypeError(f"state[{key!r}]: not a {kind.__name__} table ({'missing ' + ', '.join(missing) if missing else ''}"
                        f"{'; ' if missing and wrong else ''}{'unexpected ' + ', '.join(map(str, wrong)) if wrong else ''})")
    return cast(Table, value)  # checked above: a dict of kind's keys, each holding its declared type


def held_state(state: State, key: str, kind: type[Table]) -> Table:
    """:func:`part_state` of a table the part has written (a one-line ``KeyError`` naming the key where it has not)."""
    held = part_state(state, key, kind)
    if held is None:
        raise KeyError(f"state[{key!r}]: no {kind.__name__} table kept yet")
    return held


def opened_state(state: State, key: str, kind: type[Table], first: Table | None = None) -> Table:
    """:func:`part_state`, the table ``first`` put under ``key`` first where there is none (by default an empty one,
    for a ``kind`` whose every key is optional: filled as the part learns)."""
    held = part_state(state, key, kind)
    if held is not None:
        return held
    if first is not None:
        state[key] = first
        return first
    if required(kind):
        raise TypeError(f"state[{key!r}]: a {kind.__name__} table starts with its required keys, not empty")
    empty: dict[str, object] = {}
    state[key] = empty
    return cast(Table, empty)  # an empty dict: every key of kind is optional (checked above)


@functools.cache
def required(kind: type) -> frozenset[str]:
    """The keys the ``TypedDict`` ``kind`` requires (typing's ``__required_keys__``; none for another class)."""
    return frozenset(getattr(kind, "__required_keys__", ()))


@functools.cache
def declared(kind: type) -> dict[str, object]:
    """The declared type of each key of the ``TypedDict`` ``kind`` (read once per kind)."""
    return get_type_hints(kind)


def holds(value: object, hint: object) -> bool:
    """Whether ``value`` is of the declared type ``hint`` (its outer type; a Python or numpy number of the numeric
    tower where an ``int`` or a ``float`` is declared, a member of a union, None where None is)."""
    if type(value) is hint:  # the common case, without typing's introspection
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = get_origin(hint)
    if origin is Union or origin is types.UnionType:
        return any(holds(value, arm) for arm in get_args(hint))
    if hint is float:
        return isinstance(value, numbers.Real)
    if hint is int:
        return isinstance(value, numbers.Integral)
    if hint is object:
        return True
    kind = origin if origin is not None else hint
    return isinstance(kind, type) and isinstance(value, kind)
