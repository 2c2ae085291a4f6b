"""The one verb a strategy uses: run this procedure on these clients with these payloads."""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import numpy as np


class Federation(Protocol):
    """How client procedures are executed (in-process simulator, Ray, Flower). Strategies see only this."""

    @property
    def num_clients(self) -> int: ...

    def run(self, procedure: str, client_ids: np.ndarray, payload: Any | Sequence[Any], round: int) -> list[Any]:
        """Run ``procedure`` on each client in ``client_ids`` with ``payload`` (one for all, or one per
        client) and return the replies in the same order: every asked client's report (a client whose plan
        drew nothing sends an empty one), or :class:`fedsample.rounds.Failed` where a client did not answer or
        was rejected."""
        ...


def payload_for(payload: Any, position: int, per_client: bool) -> Any:
    return payload[position] if per_client else payload
