"""The one alias for JSON values: what a round record, a config, a summary or a checkpoint's JSON holds, and the
readers that narrow a value of a document read back (results.json, reproduction.json, timing.json, markers) to the
type its field holds, with a one-line error naming the field where the document does not hold it; the strategy's
server-held :data:`State` and the reader of a part's table in it (:func:`part_state`), checked the same way."""

from __future__ import annotations

import functools
import numbers
import types
from typing import Any, Mapping, TypeAlias, TypeVar, Union, cast, get_args, get_origin, get_type_hints

__all__ = [
    "JSON", "JSONObject", "Record", "State", "Table", "as_int", "as_list", "as_number", "as_object", "as_optional_number", "as_text",
    "held_state", "opened_state", "part_state",
]

#: A JSON value (``json.dumps`` writes it, ``json.loads`` reads it back).
JSON: TypeAlias = str | int | float | bool | None | list["JSON"] | dict[str, "JSON"]
#: A JSON object: a record, a config table, an event.
JSONObject: TypeAlias = dict[str, JSON]

#: A strategy's server-held state between rounds, by key: its parts' arrays and counters, the privacy ledger (saved
#: in checkpoints); each part reads back the values it wrote. Arrays and tensors among them: not JSON.
State: TypeAlias = dict[str, object]
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
    missing = sorted(set(getattr(kind, "__required_keys__", ())) - value.keys())
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


def opened_state(state: State, key: str, kind: type[Table]) -> Table:
    """:func:`part_state`, an empty table put under ``key`` first where there is none (a ``kind`` whose every key is
    optional: filled as the part learns)."""
    held = part_state(state, key, kind)
    if held is not None:
        return held
    if getattr(kind, "__required_keys__", ()):
        raise TypeError(f"state[{key!r}]: a {kind.__name__} table starts with its required keys, not empty")
    empty: dict[str, object] = {}
    state[key] = empty
    return cast(Table, empty)  # an empty dict: every key of kind is optional (checked above)


@functools.cache
def declared(kind: type) -> dict[str, object]:
    """The declared type of each key of the ``TypedDict`` ``kind`` (read once per kind)."""
    return get_type_hints(kind)


def holds(value: object, hint: object) -> bool:
    """Whether ``value`` is of the declared type ``hint`` (its outer type; a Python or numpy number of the numeric
    tower where an ``int`` or a ``float`` is declared, a member of a union, None where None is)."""
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
