"""Reply validation: every client reply is checked before the server uses it (docs/reliability.md).

A rejected reply becomes :class:`fedsample.rounds.Failed` with the reason, so it is never averaged in and
the round's record names it. Checks:

- training updates: the same keys and shapes as the global parameters, finite values, a finite loss, a
  positive number of steps; the same report object in two slots is a duplicate (the second is rejected);
- size reports: integral, and in range ({1, ..., M-1} for randomized responses, >= 0 for exact sizes);
- probes: a finite loss and gradient norm (and finite compressed vectors).

Each screen reads the declared fields of the report its procedure answers with (:class:`~fedsample.messages.TrainReport`,
:class:`~fedsample.messages.ProbeReport`, :class:`~fedsample.messages.HeldReport`); a reply of any other type is
rejected as such, never probed for the fields.

Reply lists whose weighted sum is fused (:attr:`fedsample.rounds.ReplyList.fused`: the vectorized engine's
one-gradient cohorts, Ray's partial sums) never form the per-client updates unless asked. For them
:func:`screen_updates` checks the losses only (their updates are computed by the engine from the global
parameters, so their shapes are right by construction); the strategy checks the *aggregate* for non-finite
values and only then validates each client's update (:func:`screen_updates` with ``deep=True``) and
aggregates again without the bad ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from fedsample.messages import HeldReport, Params, ProbeReport, SizeQuery, TrainHeld, TrainPayload, TrainReport
from fedsample.rounds import Failed, NumberReplies, ReplyList, replies_of

__all__ = ["ProbeProblem", "params_finite", "probe_problem", "screen_sizes", "screen_updates", "tensor_finite"]


def update_problem(update: object, params: Params) -> str | None:
    """Why an update cannot be averaged into ``params`` (wrong keys, shapes or non-finite values), or None."""
    if not isinstance(update, dict) or set(update) != set(params):
        return "update does not have the model's parameters"
    keys = list(update)
    misshapen = next((i for i, k in enumerate(keys) if not _shaped_like(update[k], params[k])), len(keys))
    before = {k: update[k] for k in keys[:misshapen]}  # the first problem in key order is the one named
    if not params_finite(before):  # one wait for a device per update; the key is looked for only when one is bad
        return f"non-finite update of {next(k for k, v in before.items() if not tensor_finite(v))!r}"
    if misshapen < len(keys):
        key, value = keys[misshapen], update[keys[misshapen]]
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else ()  # not a tensor: no shape
        return f"update of {key!r} has shape {shape}, expected {tuple(params[key].shape)}"
    return None


def _shaped_like(value: object, param: torch.Tensor) -> bool:
    return isinstance(value, torch.Tensor) and tuple(value.shape) == tuple(param.shape)


def unexpected(report: object, kind: type) -> str:
    """The refusal of a reply that is not the report its procedure answers with (it is not read)."""
    return f"a reply of type {type(report).__name__} where a {kind.__name__} is expected"


def report_problem(report: object, params: Params, deep: bool) -> str | None:
    """Why a training report is rejected (not a :class:`~fedsample.messages.TrainReport`, or its declared fields
    out of range), or None. ``deep=False`` skips the update itself."""
    if not isinstance(report, TrainReport):
        return unexpected(report, TrainReport)
    loss, steps = report.loss, report.steps
    if not isinstance(loss, (int, float)) or not math.isfinite(loss):
        return f"non-finite loss {loss!r}"
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        return f"step count must be a positive integer, got {steps!r}"
    return update_problem(report.update, params) if deep else None


def screen_updates(replies: Sequence[object] | ReplyList, ids: np.ndarray, params: Params, deep: bool | None = None) -> ReplyList:
    """Training replies with every rejected one replaced by ``Failed(client, "train", reason)`` (the reply list's
    own abilities kept: :meth:`~fedsample.rounds.ReplyList.rejecting`).

    ``deep`` (default: unless the replies' sum is fused) also checks each update's keys, shapes and values; without
    it only the replies the list cannot vouch for are read (:meth:`~fedsample.rounds.ReplyList.suspect_positions`)."""
    if len(replies) != len(ids):
        raise RuntimeError(f"the federation answered {len(replies)} training replies for {len(ids)} clients")
    replies = replies_of(replies)
    deep = not replies.fused if deep is None else deep
    seen: set[int] = set()
    rejected: dict[int, Failed] = {}
    for i in (replies.received_positions() if deep else replies.suspect_positions()).tolist():
        reply = replies[i]
        problem = "duplicate reply" if id(reply) in seen else report_problem(reply, params, deep)
        seen.add(id(reply))
        if problem:
            rejected[i] = Failed(int(ids[i]), TrainPayload.procedure.name, problem)
    return replies.rejecting(rejected) if rejected else replies


def size_problem(value: object, M: int | None) -> str | None:
    """Why a size report is rejected (``M``: the randomized response's threshold, None for exact sizes)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return f"size report {value!r} is not a number"
    if not math.isfinite(float(value)) or float(value) != int(value):
        return f"size report {value!r} is not an integer"
    low, high = (0, math.inf) if M is None else (1, M - 1)
    if not low <= int(value) <= high:
        return f"size report {int(value)} is outside [{low}, {high}]"
    return None


def screen_sizes(replies: Sequence[object], ids: np.ndarray, M: int | None) -> tuple[np.ndarray, np.ndarray, list[Failed]]:
    """The ids and integer reports of the clients whose size report is valid, and the failures."""
    if len(replies) != len(ids):
        raise RuntimeError(f"the federation answered {len(replies)} size reports for {len(ids)} clients")
    ids = np.asarray(ids, dtype=np.int64)
    replies = replies_of(replies)
    whole = _all_valid_integers(replies, ids, M)
    if whole is not None:
        return whole
    values, lost = replies.numbers(), replies.failed
    if values is None:  # replies that are not all numbers: one by one
        return _screen_sizes_one_by_one(replies, ids, M)
    low, high = (0, np.inf) if M is None else (1, M - 1)
    with np.errstate(invalid="ignore"):
        good = np.isfinite(values) & (values == np.round(values)) & (values >= low) & (values <= high)
    good[np.fromiter(lost, dtype=np.int64, count=len(lost))] = False
    failed = [lost[i] if i in lost else Failed(int(ids[i]), SizeQuery.procedure.name, size_problem(values[i], M) or "invalid")
              for i in np.flatnonzero(~good).tolist()]
    return ids[good], values[good].astype(np.int64), failed


def _all_valid_integers(replies: ReplyList, ids: np.ndarray, M: int | None) -> tuple[np.ndarray, np.ndarray, list[Failed]] | None:
    """:func:`screen_sizes`'s answer where every client answered an integer in range (an engine's integer array,
    as the permanent reports repeated every round): read from the integers, with no pass through floats; None
    otherwise (a failure or a value out of range: the general screen names each)."""
    if not isinstance(replies, NumberReplies) or replies.failed or replies.values.dtype.kind not in "iu" or len(replies.values) == 0:
        return None
    values = replies.values
    low, high = (0, None) if M is None else (1, M - 1)
    if values.min() < low or (high is not None and values.max() > high):
        return None
    return ids.copy(), values.astype(np.int64), []


def _screen_sizes_one_by_one(replies: Sequence[object], ids: np.ndarray, M: int | None) -> tuple[np.ndarray, np.ndarray, list[Failed]]:
    kept: list[int] = []
    values: list[int] = []
    failed: list[Failed] = []
    for k, reply in zip(ids.tolist(), replies):
        problem = reply.reason if isinstance(reply, Failed) else size_problem(reply, M)  # Failed is final
        if problem is None and isinstance(reply, (int, float, np.integer, np.floating)):  # size_problem found a number
            kept.append(k)
            values.append(int(reply))
        else:
            failed.append(reply if isinstance(reply, Failed) else Failed(k, SizeQuery.procedure.name, problem or "invalid"))
    return np.asarray(kept, dtype=np.int64), np.asarray(values, dtype=np.int64), failed


@dataclass(frozen=True)
class ProbeProblem:
    """Why a probe reply is unusable: ``reason`` in words, and whether the client holds no samples (``no_samples``:
    it has nothing to probe; any other problem, a non-finite or lost probe, usually means the model diverged)."""

    reason: str
    no_samples: bool = False


def probe_problem(report: object) -> ProbeProblem | None:
    """Why a probe reply is unusable: Failed, not a :class:`~fedsample.messages.ProbeReport`, or non-finite
    statistics (None: it is usable)."""
    if isinstance(report, Failed):  # Failed is final
        return ProbeProblem(report.reason, no_samples=report.no_samples)
    if not isinstance(report, ProbeReport):
        return ProbeProblem(unexpected(report, ProbeReport))
    numbers = [report.loss, report.grad_norm, *report.extra.values()]
    if not all(v is None or (isinstance(v, (int, float)) and math.isfinite(v)) for v in numbers):  # None: not asked for
        return ProbeProblem(f"non-finite probe (loss {numbers[0]!r}, gradient norm {numbers[1]!r})")
    compressed = report.compressed
    if compressed is not None and not np.all(np.isfinite(compressed)):
        return ProbeProblem("non-finite compressed gradient")
    labels = report.label_counts
    if labels is not None and not (np.all(np.isfinite(labels)) and np.all(np.asarray(labels) >= 0)):
        return ProbeProblem("invalid label histogram (counts must be finite and non-negative)")
    return None


def held_problem(report: object) -> str | None:
    """Why a ``train_held`` reply is unusable: Failed, not a :class:`~fedsample.messages.HeldReport`, or not a
    finite non-negative norm."""
    if isinstance(report, Failed):  # Failed is final
        return report.reason
    if not isinstance(report, HeldReport):
        return unexpected(report, HeldReport)
    norm = report.norm
    if isinstance(norm, bool) or not isinstance(norm, (int, float)) or not math.isfinite(norm) or norm < 0:
        return f"update norm must be a finite number >= 0, got {norm!r}"
    return None


def screen_held(replies: Sequence[object] | ReplyList, ids: np.ndarray) -> ReplyList:
    """``train_held`` replies with every unusable one replaced by ``Failed(client, "train_held", reason)``."""
    replies = replies_of(replies)
    if len(replies) != len(ids):
        raise RuntimeError(f"the federation answered {len(replies)} update norms for {len(ids)} clients")
    rejected = {i: Failed(int(ids[i]), TrainHeld.procedure.name, problem) for i, r in enumerate(replies)
                if i not in replies.failed and (problem := held_problem(r))}
    return replies.rejecting(rejected) if rejected else replies


def shapes_of(params: Params) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The parameters' names and shapes (what a reply's update must have)."""
    return tuple((k, tuple(v.shape)) for k, v in params.items())


def like_shapes(shapes: Sequence[tuple[str, tuple[int, ...]]]) -> Params:
    """Parameters of the given names and shapes, without storage (to check a reply's shapes against)."""
    return {name: torch.empty(shape, device="meta") for name, shape in shapes}


def params_finite(params: Params) -> bool:
    """True when every parameter tensor is finite. The tensors that torch checks (those on a GPU, say) are folded
    into one flag per device, read once: reading a flag waits for the device, so a call waits once, not once per
    tensor (a FedSampling round asks twice: 8 waits for a 4-tensor MLP before, 2 now)."""
    flags: dict[torch.device, list[torch.Tensor]] = {}
    for value in params.values():
        if _checked_on_host(value):
            if not _host_finite(value):
                return False
        else:
            flags.setdefault(value.device, []).append(torch.isfinite(value).all())
    return all(bool(torch.stack(each).all()) for each in flags.values())


_HOST_CHECKED = (torch.float32, torch.float64)


def _checked_on_host(value: torch.Tensor) -> bool:
    """Float32/float64 strided tensors in host memory, which numpy checks."""
    return value.device.type == "cpu" and value.dtype in _HOST_CHECKED and value.layout == torch.strided


def _host_finite(value: torch.Tensor) -> bool:
    """numpy's finiteness test on the tensor's own memory (no copy)."""
    return bool(np.isfinite(value.detach().numpy()).all())


def tensor_finite(value: torch.Tensor) -> bool:
    """True when every entry of ``value`` is finite: float32/float64 tensors in host memory are checked by numpy
    (the same test, on the same memory without a copy; torch's CPU ``isfinite`` is several times slower), others by
    torch."""
    if _checked_on_host(value):
        return _host_finite(value)
    return bool(torch.isfinite(value).all())
