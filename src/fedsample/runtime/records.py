"""The one alias for JSON values: what a round record, a config, a summary or a checkpoint's JSON holds."""

from __future__ import annotations

from typing import Any, TypeAlias

__all__ = ["JSON", "JSONObject", "Record", "State"]

#: A JSON value (``json.dumps`` writes it, ``json.loads`` reads it back).
JSON: TypeAlias = str | int | float | bool | None | list["JSON"] | dict[str, "JSON"]
#: A JSON object: a record, a config table, an event.
JSONObject: TypeAlias = dict[str, JSON]

#: A strategy's server-held state between rounds, by key: its parts' arrays and counters, the privacy ledger (saved
#: in checkpoints); each part reads back the values it wrote.
State: TypeAlias = dict[str, Any]
#: A round's log or record, by figure name: numbers (numpy scalars among them), strings, lists, per-part dicts.
Record: TypeAlias = dict[str, Any]
