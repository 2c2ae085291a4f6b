"""Round types shared by every layer: the cohort, the round context, and the replies and their status.

A leaf module: it imports only the leaves :mod:`fedsample.rng` and :mod:`fedsample.messages` (and, for its
annotations only, under ``TYPE_CHECKING``: the Federation protocol, SizeInfo, Sample and the records' aliases), so that
sampling/, training/ and the federations use these types without importing :mod:`fedsample.strategy`.

A federation answers ``run(ids, request, round)`` with a :class:`ReplyList`: one reply per asked
client, in order. A reply is the procedure's report, or :class:`Failed` when the client did not answer in time,
raised, or sent something the server rejected; a failed client is left out of that round and named in the
round's record. :class:`ReplyList` is the one protocol for what the server may ask of a round's replies (the
positions that carry an update, the weighted sum of the updates, the summed loss, each summed statistic, the
size reports as numbers), in three kinds: :class:`Replies` computes them reply by reply, :class:`NumberReplies`
holds size reports as one array, and :class:`FusedReplies` asks an engine's :class:`ReplyBacking`, which computes
them its own way (the vectorized engine's one backward pass, Ray's partial sums on the workers, a secure sum).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, TypeVar, Iterable, Iterator, Mapping, Protocol, SupportsIndex, TypeGuard, overload

import numpy as np
import numpy.typing as npt
import torch

from fedsample.messages import SIZES, Params, ProbeReport, TrainReport
from fedsample.rng import SERVER, generator

if TYPE_CHECKING:  # types only: these modules import this one
    from fedsample.federation.base import Federation
    from fedsample.privacy.sizes import SizeInfo
    from fedsample.runtime.records import Record, State
    from fedsample.sampling.design import Sample

__all__ = [
    "Cohort", "Failed", "FederationLost", "FusedReplies", "NumberReplies", "Replies", "ReplyBacking", "ReplyList", "ReplyObjects",
    "RoundContext", "add_weighted_", "carries_update", "failed_positions", "is_failed", "loss_of", "not_summed", "position_index", "probe_reports", "summed_over",
    "replies_of", "reply_as", "rows_of", "train_report", "train_reports", "update_sum_of", "weighted_sum", "without",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Failed:
    """A client's reply that is missing or rejected in ``phase`` (a procedure name), with the reason; ``no_samples``:
    the client raised :class:`~fedsample.messages.NoSamples` (it holds no data to answer from)."""

    client: int
    phase: str
    reason: str
    no_samples: bool = False

    def record(self) -> dict[str, int | str]:
        """The entry in a round's ``failed`` list."""
        return {"client": self.client, "phase": self.phase, "reason": self.reason}


class FederationLost(RuntimeError):
    """The federation itself failed (e.g. a worker process holding clients died): not one client's failure,
    so it is never turned into :class:`Failed`; the run stops and ``resume`` continues from the last checkpoint."""


class RoundFailed(Exception):
    """Nothing usable arrived in a phase of the round: the round leaves the parameters unchanged."""


def is_failed(reply: object) -> TypeGuard[Failed]:
    """True for a :class:`Failed` reply (Failed is final: not meant to be subclassed)."""
    return reply.__class__ is Failed


def carries_update(reply: object) -> bool:
    """A reply from at least one local step (not :class:`Failed`, not None, not an empty training reply: a training
    report with 0 steps; any other reply, a size report or a sealed one, carries what it carries)."""
    return reply is not None and reply.__class__ is not Failed and (not isinstance(reply, TrainReport) or reply.steps != 0)


def failed_positions(replies: Iterable[object]) -> dict[int, Failed]:
    """Position -> reply for the :class:`Failed` replies; a C-level scan of the reply types comes first, so a
    large cohort without failures costs no Python loop."""
    replies = list(replies) if not isinstance(replies, list) else replies
    if Failed not in set(map(type, replies)):
        return {}
    return {i: r for i, r in enumerate(replies) if r.__class__ is Failed}


def weighted_sum(updates: Iterable[Params], weights: Sequence[float] | np.ndarray) -> Params:
    """sum_k w_k * Delta_k, key-wise, accumulated in place (:func:`add_weighted_`): no stacked copy of the cohort's
    updates (a cohort of 50 CNN updates would otherwise hold a second 300 MB copy while it is averaged); ``updates``
    may be produced one at a time."""
    total: Params | None = None
    for update, weight in zip(updates, np.asarray(weights, dtype=np.float64).tolist()):
        total = add_weighted_(total, update, weight)
    if total is None:
        raise ValueError("weighted_sum needs at least one update")
    return total


def add_weighted_(total: Params | None, update: Params, weight: float) -> Params:
    """``total + weight * update`` key by key, in place (``total`` None: zeros first): the one arithmetic of every
    update-by-update sum, so that a sum formed as the updates arrive equals one formed at the end, to the bit."""
    if total is None:
        total = {k: torch.zeros_like(v) for k, v in update.items()}
    for k, acc in total.items():
        acc.add_(update[k], alpha=weight)
    return total


@dataclass(frozen=True)
class Cohort:
    """Chosen client ids (unique, ascending), their inclusion probabilities pi_k (NaN where the sampler's are
    estimated, :class:`fedsample.parts.InclusionKind`), how many times each was drawn (with-replacement designs),
    the population size N, optional stratum labels, and optionally each member's expected number of draws
    E[multiplicity_k] (``expected_draws``: m p_k for m draws with replacement; None: a design without replacement,
    whose expected draws are pi_k)."""

    ids: np.ndarray
    inclusion: np.ndarray
    population: int
    multiplicity: np.ndarray | None = None
    strata: np.ndarray | None = None
    info: dict[str, object] = field(default_factory=dict)
    expected_draws: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.multiplicity is None:
            object.__setattr__(self, "multiplicity", np.ones(len(self.ids), dtype=np.int64))

    def design_weights(self) -> np.ndarray:
        """d_k such that sum_{k in S} d_k x_k is unbiased for sum_{all k} x_k: Horvitz-Thompson's 1 / pi_k, or with
        ``expected_draws`` Hansen-Hurwitz's multiplicity_k / E[multiplicity_k] (Hansen & Hurwitz 1943)."""
        if self.expected_draws is None:
            return 1.0 / np.asarray(self.inclusion, dtype=np.float64)
        return np.asarray(self.multiplicity, dtype=np.float64) / np.asarray(self.expected_draws, dtype=np.float64)

    @classmethod
    def from_sample(cls, sample: Sample, population: int, strata: np.ndarray | None = None, info: dict[str, object] | None = None,
                    expected_draws: np.ndarray | None = None) -> "Cohort":
        """From a :class:`fedsample.sampling.design.Sample` (ids, inclusion, multiplicity)."""
        return cls(sample.ids, sample.inclusion, population, sample.multiplicity, strata, {} if info is None else info, expected_draws)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class RoundContext:
    """What the parts of a strategy may use in one round: the federation, the global parameters, the
    server's randomness for this round, persistent strategy state, size information and a log.

    ``response_rate`` is the fraction of the asked clients whose training reply was valid in this round
    (1 when nobody failed); aggregators that weight by inclusion probabilities divide by it (the
    response-rate adjustment of docs/reliability.md)."""

    federation: Federation
    params: Params
    round: int
    seed: int
    state: State
    log: Record = field(default_factory=dict)
    sizes: SizeInfo | None = None
    response_rate: float = 1.0

    @property
    def num_clients(self) -> int:
        return self.federation.num_clients

    def rng(self, purpose: str) -> np.random.Generator:
        """The server's generator for ``purpose`` in this round (derived from seed and round)."""
        return generator(self.seed, self.round, SERVER, purpose)

    def require_sizes(self, exact: bool = False) -> SizeInfo:
        if self.sizes is None or (exact and not self.sizes.exact):
            raise RuntimeError("this part needs size reports the strategy did not collect")
        return self.sizes


class ReplyList(Sequence[object]):
    """The protocol of a federation's answer: one reply per asked client, in order, and what the server may ask
    of them. There are three kinds: :class:`Replies` (the replies themselves, every ability computed reply by
    reply), :class:`NumberReplies` (size reports as one array) and :class:`FusedReplies` (an engine's answer whose
    abilities its :class:`ReplyBacking` computes its own way: the vectorized engine's one backward pass, Ray's partial
    sums on the workers, a secure sum). What the server may ask:

    - ``failed``: position -> :class:`Failed` (never in a sum); :meth:`failures` lists them in cohort order;
    - :meth:`received_positions`: the positions whose reply carries an update (not failed, not empty);
    - :meth:`weighted_update_sum`: ``sum_i w_i * Delta_{positions_i}``, the linear aggregators' one question;
    - :meth:`summed_loss`: (sum of the losses of the clients that took a step, how many did);
    - :meth:`summed`: a summed statistic's sum over the cohort, by name (:class:`~fedsample.messages.SummedStatistic`,
      e.g. the samples the cohort drew: the self-normalized FedSampling update's S);
    - :meth:`rows_trained`: the rows the cohort's local steps read, with repeats (the realised budget);
    - :meth:`numbers`: the replies as numbers (size reports), NaN where failed;
    - :meth:`rejecting`: the same replies with some positions rejected (validation), its other abilities kept;
    - :meth:`widened`: the same replies placed at some positions of a larger cohort, its abilities kept.

    ``fused`` says that :meth:`weighted_update_sum` is formed without building each client's update (so a
    non-finite sum, not each update, is what the server checks first); ``sealed`` that single replies cannot be
    read at all (a secure sum: the server gets only the sums)."""

    failed: dict[int, Failed]

    @property
    def fused(self) -> bool:
        return False

    @property
    def sealed(self) -> bool:
        return False

    @abstractmethod
    def rejecting(self, failures: dict[int, Failed]) -> "ReplyList":
        """A copy in which the positions of ``failures`` hold their :class:`Failed` (validation's rejections),
        with the other replies and every fused ability of this list kept."""

    def widened(self, live: np.ndarray, size: int, failed: dict[int, Failed]) -> "ReplyList":
        """These replies as those of the clients at ``live`` (ascending positions of a larger cohort of ``size``),
        the other positions holding their :class:`Failed` in ``failed`` (e.g. clients the failure model dropped
        before they were asked); here a plain :class:`Replies` list, the kinds that hold more keep it."""
        live = np.asarray(live, dtype=np.int64)
        items: list[object] = [failed.get(i) for i in range(int(size))]
        for i, reply in zip(live.tolist(), self):
            items[i] = reply
        return Replies(items, {**failed, **{int(live[j]): f for j, f in self.failed.items()}})

    def report(self, position: int) -> TrainReport:
        """The train report at a received ``position`` (:meth:`received_positions`), refused where the reply there
        is not one (:func:`train_report`)."""
        return train_report(self[position])

    def failures(self) -> list[Failed]:
        """The Failed replies, in cohort order."""
        return [self.failed[i] for i in sorted(self.failed)]

    def without_failed(self, positions: np.ndarray) -> np.ndarray:
        """``positions`` less the failed ones."""
        return without(positions, self.failed)

    def received_positions(self) -> np.ndarray:
        """Positions of the replies that carry an update: neither :class:`Failed`, None, nor empty (a reply
        that took no step: its plan drew nothing and its update is zero)."""
        return np.array([i for i, r in enumerate(self) if i not in self.failed and carries_update(r)], dtype=np.int64)

    def suspect_positions(self) -> np.ndarray:
        """The received positions whose reply a shallow screen (:func:`fedsample.validate.screen_updates` without
        ``deep``: the loss, the step count, one object per client) must read: every one here; an engine that builds
        its reports itself names only those it cannot vouch for."""
        return self.received_positions()

    def weighted_update_sum(self, positions: np.ndarray, weights: np.ndarray) -> Params | None:
        """``sum_i weights_i * Delta_{positions_i}`` over the positions whose reply carries an update (empty
        replies add zero, failed ones nothing); None when none does."""
        return update_sum_of(self.__getitem__, self.failed, positions, weights)

    def summed_loss(self) -> tuple[float, int]:
        """(sum of the losses of the replies that took a step, how many did), in cohort order."""
        return loss_of(self.__getitem__, self.received_positions())

    def summed(self, name: str) -> int | float:
        """The sum over the received replies of the summed statistic ``name`` (their ``sums``, sent only where the plan
        declares it, :class:`~fedsample.messages.SummedStatistic`); a ValueError when a reply does not carry it; a
        float where the sum is noised (a secure sum's)."""
        return summed_over(self.__getitem__, self.received_positions(), name)

    def summed_names(self) -> tuple[str, ...]:
        """The names of the summed statistics every received reply carries (in the first one's order; () where none
        was received): those :meth:`summed` sums."""
        return names_carried(self.__getitem__, self.received_positions())

    def sums(self) -> dict[str, int | float]:
        """Every summed statistic the received replies all carry (:meth:`summed_names`), summed (:meth:`summed`), by
        name: what the round's record logs; {} where they carry none."""
        return {name: self.summed(name) for name in self.summed_names()}

    def rows_trained(self) -> int | None:
        """The rows the received replies' local steps read, with repeats, summed (the realised budget of a client
        sampler's round, :func:`fedsample.budget.realised_samples`); a reply that took no step counts 0; None where a
        received reply that stepped does not say."""
        return rows_of(self.__getitem__, self.received_positions())

    def numbers(self) -> np.ndarray | None:
        """The replies as floats (size reports), NaN where failed; None when a reply that did not fail is not a
        number (then each reply is checked on its own)."""
        values = np.full(len(self), np.nan)
        for i, r in enumerate(self):
            if i in self.failed:
                continue
            if isinstance(r, (bool, np.bool_)) or not isinstance(r, (int, float, np.integer, np.floating)):
                return None
            values[i] = r
        return values


def without(positions: np.ndarray, failed: Mapping[int, Failed]) -> np.ndarray:
    """``positions`` less those in ``failed``."""
    if not failed:
        return positions
    return positions[~np.isin(positions, np.fromiter(failed, dtype=np.int64, count=len(failed)))]


def reply_as(reply: object, kind: type[T], call: str) -> T:
    """A reply of a ``call`` read as the ``kind`` it must be; any other object refused in one line naming it (a
    federation that answered something else)."""
    if isinstance(reply, kind):
        return reply
    raise wrong_reply(reply, kind, call)


def wrong_reply(reply: object, kind: type, call: str) -> TypeError:
    """The one-line refusal of a reply of a ``call`` that is not the ``kind`` it must be."""
    return TypeError(f"a {call} call's reply is a {type(reply).__name__}, not a {kind.__name__}: {reply!r:.80}")


def train_report(reply: object) -> TrainReport:
    """A received reply of a ``train`` call read as the :class:`~fedsample.messages.TrainReport` it must be
    (:func:`reply_as`, written out: it is read once per received reply)."""
    if isinstance(reply, TrainReport):
        return reply
    raise wrong_reply(reply, TrainReport, "train")


def probe_reports(replies: Iterable[object]) -> list[ProbeReport | Failed]:
    """A ``probe`` call's replies read as what they must be, in one pass: each a
    :class:`~fedsample.messages.ProbeReport` or :class:`Failed` (a lost probe); any other object refused in one line
    naming it."""
    items = list(replies)
    out = [r for r in items if isinstance(r, (ProbeReport, Failed))]
    if len(out) < len(items):
        wrong = next(r for r in items if not isinstance(r, (ProbeReport, Failed)))
        raise TypeError(f"a probe's reply is a {type(wrong).__name__}, not a ProbeReport: {wrong!r:.80}")
    return out


def train_reports(replies: list[object]) -> list[TrainReport]:
    """Received replies of a ``train`` call read as the :class:`~fedsample.messages.TrainReport` s they must be, checked
    by one C-level scan of their types (:func:`all_train_reports`); a wrong one refused in one line naming it."""
    if all_train_reports(replies):
        return replies
    raise wrong_reply(next(r for r in replies if not isinstance(r, TrainReport)), TrainReport, "train")


def all_train_reports(replies: list[object]) -> TypeGuard[list[TrainReport]]:
    """True where every reply is a :class:`~fedsample.messages.TrainReport` (one test per distinct type)."""
    return all(issubclass(kind, TrainReport) for kind in set(map(type, replies)))


def update_sum_of(reply: Callable[[int], object], failed: Mapping[int, Failed], positions: np.ndarray, weights: np.ndarray) -> Params | None:
    """``sum_i weights_i * Delta_{positions_i}`` reply by reply (``reply(i)``: the reply at position i) over the
    replies that carry an update and are not in ``failed`` (empty replies add zero, failed ones nothing); None when
    none does."""
    asked = [(reply(int(i)), w) for i, w in zip(np.asarray(positions).tolist(), np.asarray(weights, dtype=np.float64).tolist())
             if int(i) not in failed]
    keep = [(r, w) for r, w in asked if carries_update(r)]
    if not keep:
        return None
    reports = train_reports([r for r, _ in keep])
    return weighted_sum((r.update for r in reports), [w for _, w in keep])  # each update read as it is added


def loss_of(reply: Callable[[int], object], received: np.ndarray) -> tuple[float, int]:
    """(sum of the losses of the ``received`` replies, how many), in cohort order."""
    got = train_reports([reply(i) for i in received.tolist()])
    return float(sum(r.loss for r in got)), len(got)


def summed_over(reply: Callable[[int], object], received: np.ndarray, name: str) -> int:
    """The ``received`` replies' values of the summed statistic ``name`` (their ``sums``), summed; a ValueError when
    one does not carry it (:func:`not_summed`)."""
    counts = [r.sums.get(name) for r in train_reports([reply(i) for i in received.tolist()])]
    if any(c is None for c in counts):
        raise not_summed(name)
    return int(sum(c for c in counts if c is not None))


def names_carried(reply: Callable[[int], object], received: np.ndarray) -> tuple[str, ...]:
    """The names of the summed statistics every one of the ``received`` replies carries, in the first one's order (a
    call's replies carry those their plans declare: a :class:`~fedsample.messages.PerClient` plan's members may
    declare different ones); () where none was received or the first carries none."""
    first = train_report(reply(int(received[0]))).sums if len(received) else {}
    if not first:  # the rest are not read: no name is carried by all
        return ()
    common = set(first).intersection(*(r.sums for r in train_reports([reply(i) for i in received[1:].tolist()])))
    return tuple(name for name in first if name in common)


def not_summed(name: str) -> ValueError:
    """The refusal of a sum of ``name`` the replies do not carry (the plan does not declare it)."""
    return ValueError(f"these replies carry no summed statistic {name!r}: the plan does not declare it in its capabilities' "
                      "summed (e.g. FedSampling's drawn-sample count, FedSamplingData(count_drawn=True))")


def rows_of(reply: Callable[[int], object], received: np.ndarray) -> int | None:
    """The rows the ``received`` replies' local steps read, summed (0 for a reply that took no step); None where one
    that stepped does not say."""
    got = train_reports([reply(i) for i in received.tolist()])
    counts = [0 if r.steps == 0 else r.rows_trained for r in got]
    if any(c is None for c in counts):
        return None
    return int(sum(c for c in counts if c is not None))


class Replies(list[object], ReplyList):
    """The plain reply list: the replies themselves (a list), every ability computed reply by reply.
    ``failed`` maps the positions that hold :class:`Failed` to it (found by a scan when not given)."""

    def __init__(self, items: Iterable[object] = (), failed: dict[int, Failed] | None = None) -> None:
        super().__init__(items)
        self.failed = failed if failed is not None else failed_positions(self)

    def rejecting(self, failures: dict[int, Failed]) -> "Replies":
        out = type(self).__new__(type(self))  # a copy of the same class, no __init__ again
        list.extend(out, self)
        out.__dict__.update(self.__dict__)
        out.failed = {**self.failed, **failures}
        for i, f in failures.items():
            list.__setitem__(out, i, f)
        return out


class NumberReplies(ReplyList):
    """Replies that are numbers (size reports), held as one array: 10^6 reports cost one numpy array, never a
    Python object each. ``failed`` positions read as their :class:`Failed`."""

    def __init__(self, values: np.ndarray, failed: dict[int, Failed] | None = None) -> None:
        self.values = np.asarray(values)
        self.failed = dict(failed or {})

    def __len__(self) -> int:
        return len(self.values)

    @overload
    def __getitem__(self, position: SupportsIndex) -> object: ...

    @overload
    def __getitem__(self, position: slice) -> list[object]: ...

    def __getitem__(self, position: SupportsIndex | slice) -> object:
        """The number at ``position`` (its :class:`Failed` where failed), or a list of them for a slice."""
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(len(self)))]
        i = position_index(position, len(self))
        return self.failed[i] if i in self.failed else self.values[i]

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        values = self.numbers() if self.failed else self.values
        return values if dtype is None else values.astype(dtype)

    def __repr__(self) -> str:
        return f"NumberReplies({self.values!r}, failed={len(self.failed)})"

    def received_positions(self) -> np.ndarray:
        return self.without_failed(np.arange(len(self), dtype=np.int64))

    def weighted_update_sum(self, positions: np.ndarray, weights: np.ndarray) -> None:
        """Numbers carry no update."""
        return None

    def summed_loss(self) -> tuple[float, int]:
        """Numbers carry no loss: (0.0, 0)."""
        return 0.0, 0

    def summed(self, name: str) -> int:
        """The received numbers, summed: they are sizes (:data:`~fedsample.messages.SIZES`, the sum of a ``sum_sizes``
        call); any other name is refused (:func:`not_summed`)."""
        if name != SIZES:
            raise not_summed(name)
        return int(np.sum(np.asarray(self.values, dtype=np.int64)[self.received_positions()]))

    def summed_names(self) -> tuple[str, ...]:
        """Size reports: their sum is the sizes'."""
        return (SIZES,)

    def numbers(self) -> np.ndarray:
        values = self.values.astype(np.float64)
        values[np.fromiter(self.failed, dtype=np.int64, count=len(self.failed))] = np.nan
        return values

    def rejecting(self, failures: dict[int, Failed]) -> "NumberReplies":
        return NumberReplies(self.values, {**self.failed, **failures})

    def widened(self, live: np.ndarray, size: int, failed: dict[int, Failed]) -> "NumberReplies":
        """Still one array: the numbers at ``live``, zero (and failed) elsewhere."""
        live = np.asarray(live, dtype=np.int64)
        values = np.zeros(int(size), dtype=self.values.dtype)
        values[live] = self.values
        return NumberReplies(values, {**failed, **{int(live[j]): f for j, f in self.failed.items()}})


class ReplyBacking(Protocol):
    """What an engine keeps of a ``train`` call's replies (on its side, on its workers, sealed in a secure sum),
    and the fused abilities of :class:`FusedReplies` it computes from it. Positions are the backing's own (0 ..
    len - 1); ``failed`` and ``received`` arguments are in them too."""

    @property
    def sealed(self) -> bool:
        """Single replies cannot be read (a secure sum)."""
        ...

    def __len__(self) -> int: ...

    def reply(self, position: int) -> object:
        """The reply at ``position`` (made when read where the engine holds numbers only)."""
        ...

    def report(self, position: int) -> TrainReport:
        """The train report at a received ``position`` (:func:`train_report` where the backing holds objects of no
        declared type; an AttributeError where single replies cannot be read, a sealed one's)."""
        ...

    def received(self) -> np.ndarray:
        """Ascending positions of the replies that carry an update, rejections aside."""
        ...

    def weighted_update_sum(self, positions: np.ndarray, weights: np.ndarray, failed: Mapping[int, Failed]) -> Params | None:
        """``sum_i weights_i * Delta_{positions_i}``, the positions in ``failed`` adding nothing."""
        ...

    def summed_loss(self, received: np.ndarray) -> tuple[float, int]:
        """(sum of the ``received`` replies' losses, how many), in cohort order."""
        ...

    def summed(self, name: str, received: np.ndarray) -> int | float:
        """The ``received`` replies' values of the summed statistic ``name``, summed."""
        ...

    def summed_names(self, received: np.ndarray) -> tuple[str, ...]:
        """The names of the summed statistics every one of the ``received`` replies carries (those :meth:`summed` sums)."""
        ...

    def rows_trained(self, received: np.ndarray) -> int | None:
        """The ``received`` replies' rows trained, summed; None where not known."""
        ...

    def suspects(self, received: np.ndarray) -> np.ndarray:
        """The ``received`` positions a shallow screen must read."""
        ...


class ReplyObjects:
    """A backing that holds its reply objects in ``self.replies`` (a list): the abilities an engine does not fuse,
    computed reply by reply as :class:`Replies` computes them (an engine's backing overrides what it fuses)."""

    replies: Sequence[object]
    sealed = False

    def __len__(self) -> int:
        return len(self.replies)

    def reply(self, position: int) -> object:
        return self.replies[position]

    def report(self, position: int) -> TrainReport:
        """The train report at a received ``position`` (:func:`train_report`)."""
        return train_report(self.replies[position])

    def received(self) -> np.ndarray:
        return np.array([i for i, r in enumerate(self.replies) if carries_update(r)], dtype=np.int64)

    def weighted_update_sum(self, positions: np.ndarray, weights: np.ndarray, failed: Mapping[int, Failed]) -> Params | None:
        return update_sum_of(self.reply, failed, positions, weights)

    def summed_loss(self, received: np.ndarray) -> tuple[float, int]:
        return loss_of(self.reply, received)

    def summed(self, name: str, received: np.ndarray) -> int | float:
        return summed_over(self.reply, received, name)

    def summed_names(self, received: np.ndarray) -> tuple[str, ...]:
        return names_carried(self.reply, received)

    def rows_trained(self, received: np.ndarray) -> int | None:
        return rows_of(self.reply, received)

    def suspects(self, received: np.ndarray) -> np.ndarray:
        return received


class FusedReplies(ReplyList):
    """An engine's answer to a ``train`` call whose abilities come from its :class:`ReplyBacking` (``backing``):
    the vectorized engine's cohort (one backward pass) or low-rank factors, the loop engine's running sum, a
    worker pool's partial sums, a secure sum's one sum, the diagnostics' linear reports. ``fused``: the weighted sum
    is formed without building each client's update.

    ``live`` (None: every position) places the backing's replies in a larger cohort of ``size`` (:meth:`widened`);
    ``failed`` holds the rejections (:meth:`rejecting`) and the unasked positions' :class:`Failed`, each backing
    ability leaving the former out and mapping positions."""

    def __init__(self, backing: ReplyBacking, failed: dict[int, Failed] | None = None,
                 live: np.ndarray | None = None, size: int | None = None, unasked: dict[int, Failed] | None = None) -> None:
        self.backing, self.live = backing, live
        self.size = len(backing) if live is None or size is None else int(size)
        self._rejected = dict(failed or {})  # backing position -> Failed
        self._unasked = dict(unasked or {})  # cohort position -> Failed, where live leaves a position out
        self._inner: np.ndarray | None = None  # cohort position -> backing position (-1: not asked), with live
        if live is not None:
            self._inner = np.full(self.size, -1, dtype=np.int64)
            self._inner[live] = np.arange(len(live))
        self.failed = {**self._unasked, **{self._outer(j): f for j, f in self._rejected.items()}}

    @property
    def fused(self) -> bool:
        return True

    @property
    def sealed(self) -> bool:
        return self.backing.sealed

    def _outer(self, position: int) -> int:
        return position if self.live is None else int(self.live[position])

    def _to_outer(self, positions: np.ndarray) -> np.ndarray:
        return positions if self.live is None else self.live[positions]

    def _to_inner(self, positions: np.ndarray) -> np.ndarray:
        return positions if self._inner is None else self._inner[np.asarray(positions, dtype=np.int64)]

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, position: SupportsIndex) -> object: ...

    @overload
    def __getitem__(self, position: slice) -> list[object]: ...

    def __getitem__(self, position: SupportsIndex | slice) -> object:
        """The reply at ``position`` (its :class:`Failed` where failed or not asked), or a list of them for a slice."""
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(len(self)))]
        i = position_index(position, self.size)
        if i in self.failed:
            return self.failed[i]
        return self.backing.reply(i if self._inner is None else int(self._inner[i]))

    def __iter__(self) -> Iterator[object]:
        return (self[i] for i in range(self.size))

    def report(self, position: int) -> TrainReport:
        """The backing's train report at a received ``position`` (:meth:`ReplyBacking.report`)."""
        i = position_index(position, self.size)
        if i in self.failed:
            return train_report(self.failed[i])  # refused: a Failed is no report
        return self.backing.report(i if self._inner is None else int(self._inner[i]))

    def _received(self) -> np.ndarray:
        """The backing's received positions less the rejected, in its positions."""
        return without(self.backing.received(), self._rejected)

    def received_positions(self) -> np.ndarray:
        return self._to_outer(self._received())  # ascending: live and the backing's positions are

    def suspect_positions(self) -> np.ndarray:
        return self._to_outer(self.backing.suspects(self._received()))

    def weighted_update_sum(self, positions: np.ndarray, weights: np.ndarray) -> Params | None:
        return self.backing.weighted_update_sum(self._to_inner(positions), weights, self._rejected)

    def summed_loss(self) -> tuple[float, int]:
        return self.backing.summed_loss(self._received())

    def summed(self, name: str) -> int | float:
        return self.backing.summed(name, self._received())

    def summed_names(self) -> tuple[str, ...]:
        return self.backing.summed_names(self._received())

    def rows_trained(self) -> int | None:
        return self.backing.rows_trained(self._received())

    def numbers(self) -> None:
        """A train call's replies are updates, never numbers."""
        return None

    def rejecting(self, failures: dict[int, Failed]) -> "FusedReplies":
        """The same backing with ``failures`` rejected (only a reply that arrived can be); sealed replies are checked
        on the clients' side."""
        if self.sealed:
            raise TypeError("sealed replies are checked on the clients' side; the server cannot reject one")
        inner = {int(self._to_inner(np.array([i]))[0]): f for i, f in failures.items()}
        if any(j < 0 for j in inner):
            raise ValueError("only a reply that arrived can be rejected")
        return FusedReplies(self.backing, {**self._rejected, **inner}, self.live, self.size, self._unasked)

    def widened(self, live: np.ndarray, size: int, failed: dict[int, Failed]) -> "FusedReplies":
        """The same backing, its positions mapped through ``live`` as well."""
        live = np.asarray(live, dtype=np.int64)
        unasked = {**failed, **{int(live[i]): f for i, f in self._unasked.items()}}
        return FusedReplies(self.backing, self._rejected, live if self.live is None else live[self.live], size, unasked)


def position_index(position: SupportsIndex, size: int) -> int:
    """A sequence index: negative ones count from the end; out of range is an IndexError."""
    i = int(position)
    i = i + size if i < 0 else i
    if not 0 <= i < size:
        raise IndexError(position)
    return i


def replies_of(answer: Sequence[object] | np.ndarray) -> ReplyList:
    """A federation's answer as a :class:`ReplyList`: itself where it is one (every fedsample federation's), a
    numeric array as :class:`NumberReplies`, any other sequence (a federation written elsewhere that answers a
    list) as plain :class:`Replies`."""
    if isinstance(answer, ReplyList):
        return answer
    if isinstance(answer, np.ndarray) and answer.ndim == 1 and answer.dtype.kind in "iuf":
        return NumberReplies(answer)
    return Replies(answer)
