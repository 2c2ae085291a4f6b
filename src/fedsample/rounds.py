"""Round types shared by every layer (a leaf module: it imports nothing from fedsample).

A federation answers ``run(procedure, ids, payload, round)`` with one reply per asked client, in order.
A reply is the procedure's report, or :class:`Failed` when the client did not answer in time, raised,
or sent something the server rejected; a failed client is left out of that round and named in the
round's record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Failed:
    """A client's reply that is missing or rejected in ``phase`` (a procedure name), with the reason."""

    client: int
    phase: str
    reason: str


def is_failed(reply: Any) -> bool:
    """True for a :class:`Failed` reply."""
    return isinstance(reply, Failed)
