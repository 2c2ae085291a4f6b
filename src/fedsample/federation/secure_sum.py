"""Secure-sum federation mode: for linear aggregators the server learns only the sum of the cohort's updates.

:class:`SecureSum` wraps any federation and simulates secure aggregation (Bonawitz et al. 2017; Flower's
SecAgg+ in a deployment) in-process: the clients' ``train`` replies stay inside the wrapper (the clients'
side of the door), and the strategy receives :class:`SealedReplies`, which answer exactly one question, the
weighted sum ``sum_k w_k * Delta_k`` with the weights the aggregator sends (they depend only on what the
server already holds: the cohort, inclusion probabilities and size reports), together with the cohort's summed
loss, the number of clients that took a step (two more coordinates of the same sum, for the round log) and
the number of samples they drew (for the self-normalized FedSampling update).
A second sum is refused (two weight vectors would reveal single updates). Every asked client is counted
(empty replies add zero), so the server cannot tell who drew nothing.

Supported: aggregators that are linear with server-known weights (``Sum``, ``WeightedMean``,
``StratifiedMean``). FedNova needs each client's step count and fails with a clear error.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fedsample import validate
from fedsample.rounds import Failed, carries_update, failed_positions
from fedsample.training.aggregate import drawn_total, weighted_sum
from fedsample.training.functional import Params


class SecureSum:
    """A federation whose ``train`` answers are sealed: the server can ask for one weighted sum only."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._pending: dict[int, Sequence[Any]] = {}
        self._counted: dict[int, bool] = {}  # whether the cohort's plan asked for drawn counts (summed then)
        self._calls = 0

    @property
    def num_clients(self) -> int:
        return self.inner.num_clients

    def client_states(self) -> dict:
        return self.inner.client_states() if hasattr(self.inner, "client_states") else {}

    def load_client_states(self, states: dict) -> None:
        if hasattr(self.inner, "load_client_states"):
            self.inner.load_client_states(states)

    def run(self, procedure: str, client_ids: np.ndarray, payload: Any | Sequence[Any], round: int) -> Any:
        replies = self.inner.run(procedure, client_ids, payload, round)
        if procedure != "train":
            return replies
        replies = client_side_check(replies, client_ids, payload)
        self._pending.clear()  # a cohort not summed by the next train call is never revealed
        self._counted.clear()
        self._calls += 1
        self._pending[self._calls] = replies
        first = payload[0] if isinstance(payload, (list, tuple)) else payload
        self._counted[self._calls] = bool(getattr(first.plan, "report_count", False))
        token = self._calls
        return SealedReplies(self, token, len(replies), failed_positions(replies))

    def secure_sum(self, token: int, positions: np.ndarray, weights: np.ndarray) -> tuple[Params, float, int, int | None]:
        """The one sum of a sealed cohort: (sum_k w_k Delta_k, sum of the trained clients' losses, how many
        trained, how many samples they drew: None where the replies do not carry the count)."""
        replies = self._pending.pop(token, None)
        if replies is None:
            raise RuntimeError("secure sum: this cohort's sum was already revealed (one sum per round)")
        fused = getattr(replies, "weighted_update_sum", None)
        positions = np.asarray(positions, dtype=np.int64)
        total = fused(positions, weights) if fused is not None else None
        if total is None or not validate.params_finite(total):
            # one by one (also when a failed client's rows made the fused backward non-finite: 0 * NaN);
            # replies without an update (None, or no step taken) add zero
            keep = [j for j, i in enumerate(positions.tolist()) if carries_update(replies[i])]
            updates = [replies[int(positions[j])].update for j in keep]
            total = weighted_sum(updates, np.asarray(weights, dtype=np.float64)[keep]) if keep else None
        drawn = summed_samples(replies) if self._counted.pop(token, False) else None
        return (total, *summed_loss(replies), drawn)


def client_side_check(replies: Sequence[Any], client_ids: np.ndarray, payload: Any) -> Sequence[Any]:
    """Each client checks its own reply before it enters the sum (the server cannot look inside a secure sum):
    a non-finite or malformed update is not sent, and the client counts as failed, which the server learns as
    in secure aggregation's dropout handling (:func:`fedsample.validate.screen_updates`, run on the clients'
    side)."""
    first = payload[0] if isinstance(payload, (list, tuple)) else payload
    return validate.screen_updates(replies, np.asarray(client_ids), first.params)


def summed_loss(replies: Sequence[Any]) -> tuple[float, int]:
    """(sum of the losses of the replies that took a step, how many did); the engine's batched replies sum
    their own loss array."""
    batched = getattr(replies, "summed_loss", None)
    if batched is not None:
        return batched()
    trained = [r for r in replies if carries_update(r)]
    return float(sum(r.loss for r in trained)), len(trained)


def summed_samples(replies: Sequence[Any]) -> int | None:
    """The cohort's drawn samples, summed (one more coordinate of the secure sum); None when not reported."""
    try:
        return drawn_total(replies)
    except ValueError:
        return None


class _Sealed:
    """One client's sealed reply: the server sees that it arrived, nothing of its content."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"secure-sum mode: a client's {name!r} is not visible to the server; use an aggregator that is linear "
            "with server-known weights (Sum, WeightedMean, StratifiedMean)"
        )


_SEALED = _Sealed()


class SealedReplies(Sequence):
    """What the server holds after a secure-sum ``train`` call: one sealed reply per asked client and, once
    asked, the weighted sum (the federation computes it; see :class:`SecureSum`)."""

    def __init__(self, federation: SecureSum, token: int, count: int, failed: dict[int, Failed] | None = None) -> None:
        self._federation, self._token, self._count = federation, token, count
        self._loss: tuple[float, int] | None = None
        self._drawn: int | None = None
        self.failed = failed or {}

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, position: int) -> _Sealed:  # type: ignore[override]
        if not -self._count <= position < self._count:
            raise IndexError(position)
        return self.failed.get(position % self._count, _SEALED)

    def received_positions(self) -> np.ndarray:
        """Every asked client that answered: the server cannot tell an empty reply from another (a client
        that did not answer is known, as in secure aggregation's dropout handling)."""
        return np.setdiff1d(np.arange(self._count), np.fromiter(self.failed, dtype=np.int64, count=len(self.failed)))

    def failures(self) -> list[Failed]:
        """The clients that did not answer (or failed), in cohort order."""
        return [self.failed[i] for i in sorted(self.failed)]

    def weighted_update_sum(self, positions: np.ndarray, weights: np.ndarray) -> Params:
        """``sum_i weights_i * Delta_{positions_i}``, revealed once."""
        total, loss_sum, trained, self._drawn = self._federation.secure_sum(self._token, positions, weights)
        self._loss = (loss_sum, trained)
        return total

    def summed_loss(self) -> tuple[float, int]:
        """(sum of the trained clients' losses, how many took a step), from the same secure sum; (0.0, 0)
        before the sum is revealed."""
        return self._loss if self._loss is not None else (0.0, 0)

    def drawn_total(self) -> int:
        """The samples the cohort drew, summed, from the same secure sum (after the update's sum)."""
        if self._loss is None:
            raise RuntimeError("the drawn count comes with the secure sum of the update: ask for that sum first")
        if self._drawn is None:
            raise ValueError("normalize='drawn' needs each client's drawn count in the secure sum, which this federation does not send")
        return self._drawn
