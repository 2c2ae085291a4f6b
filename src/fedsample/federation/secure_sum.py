"""Secure-sum federation mode: for linear aggregators the server learns only the sum of the cohort's updates.

:class:`SecureSum` wraps any federation and simulates secure aggregation (Bonawitz et al. 2017; Flower's
SecAgg+ in a deployment) in-process: the clients' ``train`` replies stay inside the wrapper (the clients'
side of the door; and the ``send_held`` replies of a sampler that chooses among trained clients), and the strategy receives sealed replies (:class:`SealedCohort`), which answer exactly one question, the
weighted sum ``sum_k w_k * Delta_k`` with the weights the aggregator sends (they depend only on what the
server already holds: the cohort, inclusion probabilities and size reports), together with the cohort's summed
loss, the number of clients that took a step (two more coordinates of the same sum, for the round log) and
each summed statistic the plan declares (:class:`~fedsample.messages.SummedStatistic`, one more coordinate each).
Where a statistic declares noise (sigma > 0), its coordinate carries Gaussian noise: each of the m asked clients adds
a share N(0, sigma^2 / m) to its value (:func:`count_shares`, drawn from the client's own stream of the
(seed, round, client, purpose) cell, the statistic's ``purpose``), so the sum of the a that answer carries
N(0, sigma^2 a / m): the full sigma^2 when every asked client answers, less after dropouts (a client cannot know,
before it seals its reply, who else will answer); :func:`noised_count`, and the ledger accounts the actual a / m,
:mod:`fedsample.privacy.amplification`. Flower's SecAgg+ seals the same shares on the clients
(:mod:`fedsample.flower.secagg`), so both give the same noised sum. The count-only ``sum_sizes`` call
(:class:`~fedsample.messages.SizeSumRequest`, before FedSampling's first draw) is sealed the same way: each client's
size is the count, its noise share comes from the cell of :data:`SIZE_NOISE_PURPOSE` (its own, so that its release
and a training call's carry independent noise), and the server learns only the noised total (:class:`SummedSizes`).
A second sum is refused (two weight vectors would reveal single updates). Every asked client is counted
(empty replies add zero), so the server cannot tell who drew nothing.

Supported: aggregators that are linear with server-known weights (``Sum``, ``WeightedMean``,
``StratifiedMean``). FedNova needs each client's step count and fails with a clear error.

The layer that builds a run's federation applies it where the strategy declares ``secure_sum``
(:func:`with_secure_sum`; ``simulate`` and the Flower server do), around the failure model, giving the run's seed
(the clients' noise shares derive from it; without it, the one the federation inside declares); ``Strategy.round``
refuses readable replies for a strategy that declares it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, NoReturn, Protocol, cast

import numpy as np
from scipy.special import ndtri

from fedsample import validate
from fedsample.parts import conforms, summed_of
from fedsample.federation.base import Federation, KeepsSeed, client_states_of, load_client_states_into
from fedsample.messages import SIZES, ClientState, HeldRequest, SizeSumRequest, SummedStatistic, TrainPayload, TrainReport, payloads_for
from fedsample.rng import cell_key, client_streams, stream_uniforms
from fedsample.rounds import Failed, FusedReplies, NumberReplies, Replies, ReplyList, is_failed, not_summed, replies_of
from fedsample.training.functional import Params

__all__ = [
    "SIZE_NOISE_PURPOSE", "SealedCohort", "SecureSum", "SummedSizes", "count_shares", "noised_count",
    "sealed_replies", "sealed_statistic", "sealed_sums", "with_secure_sum",
]

#: The purpose of the random cell the summed sizes' noise comes from (``sum_sizes``; independent of a training call's).
SIZE_NOISE_PURPOSE = "secure sum: total-size noise"


class SecureSum(Federation):
    """A federation whose ``train`` answers are sealed: the server can ask for one weighted sum only. It keeps
    whatever client states the inner federation keeps (declared delegation). ``seed`` is the run's seed, which the
    clients' noise shares on a summed count derive from: given by whoever wraps (``simulate`` and the diagnostics
    give the run's), else the one ``inner`` declares (:class:`~fedsample.federation.base.KeepsSeed`: every engine);
    None where neither says it, which only a noised count refuses."""

    def __init__(self, inner: Federation, seed: int | None = None) -> None:
        self.inner = inner
        if seed is None and conforms(inner, KeepsSeed):
            seed = cast(KeepsSeed, inner).seed  # the seed the federation inside declares (a wrapper of the user's may hold None)
        self.seed = None if seed is None else int(seed)
        self._pending: dict[int, ReplyList] = {}
        self._counted: dict[int, dict[str, np.ndarray | None]] = {}  # each sealed statistic's noise shares of the
        # asked clients (None: an exact sum), by name
        self._calls = 0

    @property
    def num_clients(self) -> int:
        return self.inner.num_clients

    def client_states(self) -> dict[int, ClientState]:
        return client_states_of(self.inner)

    def load_client_states(self, states: dict[int, ClientState]) -> None:
        load_client_states_into(self.inner, states)

    def run(self, client_ids: np.ndarray, request: object, round: int) -> ReplyList:
        replies = replies_of(self.inner.run(client_ids, request, round))
        sent = payloads_for(request, len(client_ids))
        if not sent.procedure.sealed:
            return replies
        first = sent.at(0) if len(client_ids) else None
        summing_sizes = sent.procedure == SizeSumRequest.procedure
        checked = first if isinstance(first, (TrainPayload, HeldRequest)) else None  # the sealed requests but the size sum's
        replies = size_counts(replies, client_ids) if summing_sizes else client_side_check(replies, client_ids, checked)
        self._pending.clear()  # a cohort not summed by the next train call is never revealed
        self._counted.clear()
        self._calls += 1
        self._pending[self._calls] = replies
        ids = np.asarray(client_ids, dtype=np.int64)
        self._counted[self._calls] = {s.name: self.shares(s, ids, round) for s in sealed_sums(first)}
        token = self._calls
        return sealed_replies(self, token, len(replies), dict(replies.failed))

    def secure_sum(
        self, token: int, positions: np.ndarray, weights: np.ndarray
    ) -> tuple[Params | None, float, int, dict[str, float]]:
        """The one sum of a sealed cohort: (sum_k w_k Delta_k, sum of the trained clients' losses, how many
        trained, each summed statistic the replies carry with its noise, by name)."""
        replies = self._pending.pop(token, None)
        if replies is None:
            raise RuntimeError("secure sum: this cohort's sum was already revealed (one sum per round)")
        positions = np.asarray(positions, dtype=np.int64)
        total = replies.weighted_update_sum(positions, weights)
        if replies.fused and total is not None and not validate.params_finite(total):
            # one by one when a failed client's rows made the fused sum non-finite (0 * NaN); replies without an
            # update (None, or no step taken) add zero
            total = Replies(list(replies), dict(replies.failed)).weighted_update_sum(positions, weights)
        sums: dict[str, float] = {}
        for name, shares in self._counted.pop(token, {}).items():
            exact = summed_or_none(replies, name)
            if exact is not None:
                # every asked client's share was computed when the call was made: the answered ones' are
                # count_shares(answered ids) entry by entry, so this is noised_count(exact, ...) to the bit
                sums[name] = exact if shares is None else count_plus_shares(exact, answered_shares(shares, replies))
        return (total, *replies.summed_loss(), sums)

    def shares(self, statistic: SummedStatistic, ids: np.ndarray, round: int) -> np.ndarray | None:
        """The asked clients' noise shares on ``statistic``'s sum (:func:`count_shares`); None for an exact sum."""
        if statistic.noise <= 0:
            return None
        return count_shares(float(statistic.noise), len(ids), self.noise_seed(), int(round), ids, statistic.purpose)

    def noise_seed(self) -> int:
        """The run's seed, which the clients' noise shares derive from (given at construction, or declared by the
        federation inside)."""
        if self.seed is None:
            raise ValueError("secure sum: noise on a summed count needs the run's seed: give with_secure_sum(federation, seed=...) "
                             "(simulate does), or wrap a federation that declares it (KeepsSeed: every engine)")
        return self.seed


def with_secure_sum(federation: Federation, on: bool = True, seed: int | None = None) -> Federation:
    """``federation`` with its ``train`` replies sealed (``on``: a strategy's declared ``secure_sum``; ``seed``: the
    run's, for the clients' noise shares, :class:`SecureSum`); as it is otherwise, or when it already seals them."""
    return SecureSum(federation, seed) if on and not isinstance(federation, SecureSum) else federation


def client_side_check(replies: ReplyList, client_ids: np.ndarray, payload: TrainPayload | HeldRequest | None) -> ReplyList:
    """Each client checks its own reply before it enters the sum (the server cannot look inside a secure sum):
    a non-finite or malformed update is not sent, and the client counts as failed, which the server learns as
    in secure aggregation's dropout handling (:func:`fedsample.validate.screen_updates`, run on the clients'
    side)."""
    if payload is None:
        return replies
    params = validate.like_shapes(payload.shapes) if isinstance(payload, HeldRequest) else payload.params  # a HeldRequest: shapes only
    return validate.screen_updates(replies, np.asarray(client_ids), params)


@dataclass(frozen=True)
class SummedSizes:
    """The clients' sizes as the one summed statistic of a count-only ``sum_sizes`` call
    (:class:`~fedsample.messages.SizeSumRequest`, :class:`~fedsample.messages.SummedStatistic`): its noise from the
    cells of :data:`SIZE_NOISE_PURPOSE`, read as :data:`~fedsample.messages.SIZES`."""

    noise: float = 0.0
    name: str = SIZES
    purpose: str = SIZE_NOISE_PURPOSE
    released: str = "total size"
    symbol: str = "N"

    def of_cohort(self, counts: np.ndarray) -> np.ndarray:
        return np.asarray(counts, dtype=np.int64)


def sealed_sums(payload: object) -> tuple[SummedStatistic, ...]:
    """The summed statistics of a sealed call, each one more coordinate of the sum with its own noise: a
    :class:`~fedsample.messages.SizeSumRequest`'s the clients' sizes (:class:`SummedSizes`); a training payload's those
    its plan declares (:func:`~fedsample.parts.summed_of`); a held update's none (no new draw)."""
    if isinstance(payload, SizeSumRequest):
        return (SummedSizes(float(payload.count_noise)),)
    return summed_of(payload.plan) if isinstance(payload, TrainPayload) else ()


def sealed_statistic(payload: object) -> SummedStatistic | None:
    """The one summed statistic of a sealed call (:func:`sealed_sums`), for a sum that carries at most one (Flower's
    SecAgg+ tally, :mod:`fedsample.flower.secagg`); None where there is none, a ValueError where there are more."""
    sums = sealed_sums(payload)
    if len(sums) > 1:
        raise ValueError(f"this secure sum seals one summed statistic; the plan declares {len(sums)}: {[s.name for s in sums]}")
    return sums[0] if sums else None


def count_shares(sigma: float, asked: int, seed: int, round: int, clients: np.ndarray, purpose: str) -> np.ndarray:
    """Each client's share of the noise on a summed count, N(0, sigma^2 / asked), from the client's own
    counter-based stream of the (seed, round, ``purpose``) cell (the summed statistic's
    :attr:`~fedsample.messages.SummedStatistic.purpose`, :data:`SIZE_NOISE_PURPOSE` for the summed sizes; its first uniform u, read as Phi^-1(u + 2^-54), the midpoint of
    its 2^-53 cell): the same number whether one client draws it (a Flower node) or the secure sum draws a cohort's
    at once."""
    clients = np.asarray(clients, dtype=np.int64)
    if sigma <= 0 or clients.size == 0:
        return np.zeros(clients.shape)
    first = np.uint64(0)  # each client's first draw in the cell (one position for all: no array of zeros)
    u = stream_uniforms(client_streams(cell_key(seed, round, purpose), clients), first)
    u += 2.0**-54  # in place, as the rest: the same arithmetic with no new array per step (about 40 us of 570)
    shares: np.ndarray = ndtri(u, out=u)
    shares *= sigma / np.sqrt(asked)
    return shares


def noised_count(
    count: int, sigma: float, answered: np.ndarray, asked: int, seed: int, round: int, purpose: str
) -> float:
    """The summed count S (a summed statistic's, the noise from the cells of its ``purpose``) plus the noise shares
    (:func:`count_shares`) of the ``answered`` clients of the ``asked`` ones, each N(0, sigma^2 / asked):
    S + N(0, sigma^2 * a / asked) for a answering clients (the server sees neither a share nor the shares' sum, only
    S plus it)."""
    return count_plus_shares(count, count_shares(sigma, asked, seed, round, answered, purpose))


def answered_shares(shares: np.ndarray, replies: ReplyList) -> np.ndarray:
    """The noise shares (one per asked client, in cohort order) of the clients whose reply entered the sum: all of
    them, as they are, where none failed (no copy of 30,000 shares), else those at the answered positions."""
    if not replies.failed:
        return shares
    answered: np.ndarray = shares[replies.without_failed(np.arange(len(shares), dtype=np.int64))]
    return answered


def count_plus_shares(count: float, shares: np.ndarray) -> float:
    """S + the sum of the answered clients' noise shares (:func:`noised_count`)."""
    return float(count) + float(shares.sum()) if shares.size else float(count)


def summed_or_none(replies: ReplyList, name: str) -> float | None:
    """The cohort's values of the summed statistic ``name``, summed (one more coordinate of the secure sum); None when
    the replies do not carry it."""
    try:
        return replies.summed(name)
    except ValueError:
        return None


def size_counts(replies: ReplyList, client_ids: np.ndarray) -> NumberReplies:
    """The ``sum_sizes`` replies as the secure sum holds them (on the clients' side): one array of sizes, no update,
    their sum as the count (:meth:`~fedsample.rounds.NumberReplies.summed`). Each is checked by its client
    before it enters the sum (a size that is not a non-negative integer is not sent: the client counts as failed,
    :func:`fedsample.validate.size_problem`)."""
    sizes, failed = np.zeros(len(replies), dtype=np.int64), {}
    for i, (k, reply) in enumerate(zip(np.asarray(client_ids).tolist(), replies)):
        if is_failed(reply):
            failed[i] = reply
            continue
        problem = validate.size_problem(reply, None)
        if problem is None and isinstance(reply, (int, float, np.integer, np.floating)):  # a number (size_problem said so), narrowed
            sizes[i] = int(reply)
        else:
            failed[i] = Failed(int(k), SizeSumRequest.procedure.name, problem or f"size report {reply!r} is not a number")
    return NumberReplies(sizes, failed)


class _Sealed:
    """One client's sealed reply: the server sees that it arrived, nothing of its content."""

    __slots__ = ()

    def __getattr__(self, name: str) -> NoReturn:
        raise not_visible(repr(name))


def not_visible(what: str) -> AttributeError:
    """The refusal of a read of a sealed client's ``what``: the server sees that it arrived, nothing of its content."""
    return AttributeError(
        f"secure-sum mode: a client's {what} is not visible to the server; use an aggregator that is linear "
        "with server-known weights (Sum, WeightedMean, StratifiedMean)"
    )


_SEALED = _Sealed()


class SecureSummer(Protocol):
    """What reveals a sealed cohort's one sum (:meth:`SecureSum.secure_sum`; Flower's SecAgg+ cohorts)."""

    def secure_sum(self, token: int, positions: np.ndarray, weights: np.ndarray) -> tuple[Params | None, float, int, dict[str, float]]: ...


class SealedCohort:
    """The backing (:class:`~fedsample.rounds.ReplyBacking`) of what the server holds after a secure-sum ``train``
    call: one sealed reply per asked client and, once asked, the weighted sum (``summer`` computes it; see
    :class:`SecureSum`). Its sums come from the one secure sum; nothing else can be read."""

    sealed = True

    def __init__(self, summer: SecureSummer, token: int, count: int) -> None:
        self._summer, self._token, self._count = summer, token, count
        self._loss: tuple[float, int] | None = None
        self._sums: dict[str, float] = {}

    def __len__(self) -> int:
        return self._count

    def reply(self, position: int) -> _Sealed:
        return _SEALED

    def report(self, position: int) -> TrainReport:
        raise not_visible("report")

    def received(self) -> np.ndarray:
        """Every asked client: the server cannot tell an empty reply from another (a client that did not answer is
        known, as in secure aggregation's dropout handling)."""
        return np.arange(self._count, dtype=np.int64)

    def weighted_update_sum(self, positions: np.ndarray, weights: np.ndarray, failed: Mapping[int, Failed]) -> Params | None:
        """``sum_i weights_i * Delta_{positions_i}``, revealed once (the failed clients are left out on the clients'
        side)."""
        total, loss_sum, trained, self._sums = self._summer.secure_sum(self._token, positions, weights)
        self._loss = (loss_sum, trained)
        return total

    def summed_loss(self, received: np.ndarray) -> tuple[float, int]:
        """(sum of the trained clients' losses, how many took a step), from the same secure sum; (0.0, 0)
        before the sum is revealed."""
        return self._loss if self._loss is not None else (0.0, 0)

    def summed(self, name: str, received: np.ndarray) -> float:
        """The cohort's values of the summed statistic ``name``, from the same secure sum
        (after the update's sum), with the plan's noise (a float then)."""
        if self._loss is None:
            raise RuntimeError(f"the summed {name!r} comes with the secure sum of the update: ask for that sum first")
        if name not in self._sums:
            raise not_summed(name)
        return self._sums[name]

    def summed_names(self, received: np.ndarray) -> tuple[str, ...]:
        """The summed statistics of the secure sum (none before the update's sum is revealed)."""
        return tuple(self._sums)

    def rows_trained(self, received: np.ndarray) -> None:
        """Unknown: a sealed reply's rows trained are not read, nor summed into the secure sum (the realised budget
        of a secure-summed client sampler is not recorded, only what a summed statistic releases)."""
        return None

    def suspects(self, received: np.ndarray) -> np.ndarray:
        return received


def sealed_replies(summer: SecureSummer, token: int, count: int, failed: dict[int, Failed]) -> FusedReplies:
    """The sealed answer of ``count`` asked clients (``failed``: those left out of the sum), revealed by ``summer``."""
    return FusedReplies(SealedCohort(summer, token, count), failed)
