"""The one alias for JSON values: what a round record, a config, a summary or a checkpoint's JSON holds, and the
readers that narrow a value of a document read back (results.json, reproduction.json, timing.json, markers) to the
type its field holds, with a one-line error naming the field where the document does not hold it."""

from __future__ import annotations

from typing import Any, TypeAlias

__all__ = ["JSON", "JSONObject", "Record", "State", "as_int", "as_list", "as_number", "as_object", "as_optional_number", "as_text"]

#: A JSON value (``json.dumps`` writes it, ``json.loads`` reads it back).
JSON: TypeAlias = str | int | float | bool | None | list["JSON"] | dict[str, "JSON"]
#: A JSON object: a record, a config table, an event.
JSONObject: TypeAlias = dict[str, JSON]

#: A strategy's server-held state between rounds, by key: its parts' arrays and counters, the privacy ledger (saved
#: in checkpoints); each part reads back the values it wrote. Arrays and tensors among them: not JSON.
State: TypeAlias = dict[str, Any]
#: A round's log or record, by figure name: numbers (numpy scalars among them), strings, lists, per-part dicts.
Record: TypeAlias = dict[str, Any]


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
