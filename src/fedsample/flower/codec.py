"""Client procedures as Flower records: what the server sends and what a node may answer.

A request is one ``RecordDict``: a ``ConfigRecord`` ``"fedsample"`` (the procedure's name, client id, seed, round)
with the request's global parameters in an ``ArrayRecord`` ``"params"`` and the rest of the request (size query,
data plan, local solver: fedsample dataclasses, its type among them) pickled in ``"payload"``. The procedure's name
is the one the request's type declares (:class:`fedsample.messages.Procedure`), written here and in the message
type, for the node's handler and the logs; what a node runs and how a reply is read follow the request's type. A node runs the code its
SuperLink's app ships, so it already trusts the server; the server trusts no node: replies are typed
records (integers, floats, arrays) read back field by field, never unpickled, and :class:`MalformedReply`
names the first thing wrong (a missing field, a wrong shape, a non-finite number).
"""

from __future__ import annotations

import dataclasses
import math
import pickle
from typing import Mapping, TypeAlias

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, ConfigRecordValues, MetricRecord, MetricRecordValues, RecordDict

from fedsample.client import ClientReply, ClientRequest
from fedsample.messages import HeldReport, HeldRequest, ProbeReport, ProbeRequest, SizeQuery, TrainHeld, TrainPayload, TrainReport, procedure_of
from fedsample.validate import like_shapes
from fedsample.training.functional import Params

__all__ = ["MalformedReply", "decode_report", "decode_request", "encode_report", "encode_request", "request_of", "size_of"]

HEADER, PARAMS, PAYLOAD = "fedsample", "params", "payload"
REPORT, ARRAYS = "report", "arrays"
STATISTIC = "statistic."  #: the prefix of a reply statistic's metric (fedsample.messages.ReplyStatistic)
TRAIN_FIELDS = frozenset({"steps", "loss", "norm_steps", "rows_trained"})  #: a train report's own metrics; any other unprefixed one is a summed statistic
#: A reply's report record as the server reads it, field by field: a ``ConfigRecord``'s fields or a ``MetricRecord``'s
#: (whose values are among a ``ConfigRecord``'s).
Fields: TypeAlias = Mapping[str, ConfigRecordValues]


class MalformedReply(ValueError):
    """A node's reply that does not have the shape of the procedure's report."""


@dataclasses.dataclass(frozen=True)
class Request:
    """What a node reads from a request message: the client it is for, the seed and round of its streams, and the
    request itself."""

    client: int
    seed: int
    round: int
    payload: ClientRequest


def request_of(payload: object) -> ClientRequest:
    """``payload`` as a request a node answers (:data:`fedsample.client.ClientRequest`); a TypeError naming its type
    otherwise."""
    if not isinstance(payload, ClientRequest):
        raise TypeError(f"a Flower node answers the requests of fedsample.client.PROCEDURES, not a {type(payload).__name__}")
    return payload


# --- server -> node ----------------------------------------------------------------------------------


def encode_request(client: int, seed: int, round: int, payload: ClientRequest) -> RecordDict:
    """The request for one client: header, pickled rest and, for a request that carries the model, the global
    parameters (an ``ArrayRecord``; the pickled request holds an empty dict in their place)."""
    header = ConfigRecord({"procedure": procedure_of(payload).name, "client": int(client), "seed": int(seed), "round": int(round)})
    if isinstance(payload, (TrainPayload, ProbeRequest)):  # the requests that carry the model
        rest = dataclasses.replace(payload, params={})
        return RecordDict({HEADER: header, PAYLOAD: ConfigRecord({"blob": pickle.dumps(rest)}), PARAMS: arrays_of(payload.params)})
    return RecordDict({HEADER: header, PAYLOAD: ConfigRecord({"blob": pickle.dumps(payload)})})


def decode_request(content: RecordDict) -> Request:
    """The node's side of :func:`encode_request` (parameters back as torch tensors); a ValueError where the content
    is not a request :func:`encode_request` wrote."""
    header, pickled = content.config_records[HEADER], content.config_records[PAYLOAD]
    blob = pickled["blob"]
    if not isinstance(blob, bytes):
        raise ValueError(f"the request's payload is a {type(blob).__name__}, not a pickled request")
    payload = request_of(pickle.loads(blob))  # from the server the node serves
    if isinstance(payload, (TrainPayload, ProbeRequest)) and PARAMS in content.array_records:
        payload = dataclasses.replace(payload, params=params_of(content.array_records[PARAMS]))
    return Request(_header_int(header, "client"), _header_int(header, "seed"), _header_int(header, "round"), payload)


def _header_int(header: ConfigRecord, name: str) -> int:
    value = header[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"the request's {name!r} is {value!r}, not an integer")
    return value


def arrays_of(params: Params) -> ArrayRecord:
    """A parameter dict as an ArrayRecord (numpy arrays, names kept)."""
    return ArrayRecord({k: torch.as_tensor(v).detach().cpu() for k, v in params.items()})


def params_of(record: ArrayRecord) -> Params:
    """An ArrayRecord back as a parameter dict of torch tensors."""
    return {k: torch.from_numpy(np.array(a.numpy())) for k, a in record.items()}


# --- node -> server ----------------------------------------------------------------------------------


def encode_report(request: ClientRequest, report: ClientReply | None) -> RecordDict:
    """The report to ``request`` as typed records: an integer size, a probe's statistics, an update's norm
    (:class:`~fedsample.messages.TrainHeld`) or a training update (:class:`~fedsample.messages.TrainPayload`,
    :class:`~fedsample.messages.HeldRequest`); a ValueError for a report that does not answer ``request``."""
    if isinstance(request, SizeQuery):
        return RecordDict({REPORT: ConfigRecord({"size": size_of(report)})})
    if report is None:  # a client that drew no sample sends nothing
        return RecordDict({REPORT: ConfigRecord({"empty": True})})
    if isinstance(request, ProbeRequest) and isinstance(report, ProbeReport):
        return _encode_probe(report)
    if isinstance(request, TrainHeld) and isinstance(report, HeldReport):
        return RecordDict({REPORT: MetricRecord({"norm": float(report.norm)})})
    if isinstance(request, (TrainPayload, HeldRequest)) and isinstance(report, TrainReport):
        metrics: dict[str, MetricRecordValues] = {"steps": int(report.steps), "loss": float(report.loss)}
        if report.norm_steps is not None:
            metrics["norm_steps"] = float(report.norm_steps)
        metrics.update(summed_metrics(report.sums))  # only those the plan declares (the self-normalized FedSampling's drawn count)
        if report.rows_trained is not None:  # the rows its steps read (the realised budget)
            metrics["rows_trained"] = int(report.rows_trained)
        metrics.update({STATISTIC + name: float(v) for name, v in report.statistics.items()})  # those the payload asks
        return RecordDict({REPORT: MetricRecord(metrics), ARRAYS: arrays_of(report.update)})
    raise ValueError(f"no report encoding for a {type(report).__name__} answering a {type(request).__name__}")


def size_of(report: ClientReply | None) -> int:
    """A size report as the integer it is (a numpy integer narrowed to ``int``); a ValueError for anything else."""
    if not isinstance(report, (int, np.integer)) or isinstance(report, bool):
        raise ValueError(f"a size report is an integer, not a {type(report).__name__}")
    return int(report)


def _encode_probe(report: ProbeReport) -> RecordDict:
    metrics: dict[str, MetricRecordValues] = {k: float(v) for k, v in (("loss", report.loss), ("grad_norm", report.grad_norm)) if v is not None}
    metrics.update({f"extra.{k}": float(v) for k, v in report.extra.items()})
    arrays = {k: v for k, v in (("gradient", report.gradient), ("compressed", report.compressed), ("label_counts", report.label_counts))
              if v is not None}
    content = RecordDict({REPORT: MetricRecord(metrics)})
    if arrays:
        content[ARRAYS] = ArrayRecord({k: torch.as_tensor(np.asarray(v)) for k, v in arrays.items()})
    return content


def decode_report(content: RecordDict, request: ClientRequest) -> ClientReply | None:
    """Read and check one reply to ``request``; :class:`MalformedReply` if it is wrong."""
    try:
        record = content[REPORT]
    except KeyError:
        raise MalformedReply("no 'report' record") from None
    if isinstance(record, ArrayRecord):
        raise MalformedReply("the 'report' record holds arrays, not fields")
    if isinstance(request, SizeQuery):
        return _size(record)
    if isinstance(record, ConfigRecord) and record.get("empty") is True:
        return None
    if isinstance(request, ProbeRequest):
        return _probe(record, content, request)
    if isinstance(request, TrainHeld):
        norm = _number(record, "norm")
        if norm < 0:
            raise MalformedReply(f"negative update norm {norm}")
        return HeldReport(norm)
    if isinstance(request, TrainPayload):
        return _train(record, content, request.params)
    if isinstance(request, HeldRequest):  # the update kept from TrainHeld: checked against the shapes the request names
        return _train(record, content, like_shapes(request.shapes))
    raise MalformedReply(f"no report is expected for a {type(request).__name__}")


def _integer(record: Fields, name: str) -> int:
    value = record.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise MalformedReply(f"field {name!r} is {value!r}, expected int")
    return value


def _number(record: Fields, name: str) -> float:
    """A finite number's field as a float."""
    value = record.get(name)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise MalformedReply(f"field {name!r} is {value!r}, expected a number")
    return _finite(name, float(value))


def _finite(name: str, value: float) -> float:
    if not math.isfinite(value):
        raise MalformedReply(f"non-finite {name}: {value}")
    return value


def _size(record: Fields) -> int:
    size = _integer(record, "size")
    if size < 0:
        raise MalformedReply(f"negative size report {size}")
    return size


def _probe(record: Fields, content: RecordDict, request: ProbeRequest) -> ProbeReport:
    """A probe reply with the statistics ``request`` asked for (``statistics``: the loss and gradient norm, the loss,
    or the label histogram only)."""
    asked = request.statistics
    loss = None if asked == "labels" else _number(record, "loss")
    grad_norm = _number(record, "grad_norm") if asked == "gradient" else None
    extra = {k.removeprefix("extra."): _number(record, k) for k in record if k.startswith("extra.")}
    arrays = {k: _finite_array(k, a.numpy()) for k, a in content.array_records.get(ARRAYS, {}).items()}
    labels = arrays.get("label_counts")
    if asked == "labels" and (labels is None or labels.ndim != 1 or np.any(labels < 0)):
        raise MalformedReply("no label histogram (a 1-D array of non-negative counts)")
    return ProbeReport(loss, grad_norm, gradient=arrays.get("gradient"), extra=extra, compressed=arrays.get("compressed"),
                       label_counts=labels)


def _train(record: Fields, content: RecordDict, sent: Params) -> TrainReport:
    steps = _integer(record, "steps")
    loss = _number(record, "loss")
    norm_steps = _number(record, "norm_steps") if "norm_steps" in record else None
    if ARRAYS not in content.array_records:
        raise MalformedReply("no update arrays")
    update = params_of(content.array_records[ARRAYS])
    _check_like(update, sent)
    rows_trained = _integer(record, "rows_trained") if "rows_trained" in record else None
    if rows_trained is not None and rows_trained < 0:
        raise MalformedReply(f"negative count of rows trained {rows_trained}")
    statistics = {k.removeprefix(STATISTIC): _number(record, k) for k in record if k.startswith(STATISTIC)}
    return TrainReport(update=update, steps=steps, loss=loss, norm_steps=norm_steps, rows_trained=rows_trained,
                       statistics=statistics, sums=_sums(record))


def summed_metrics(sums: Mapping[str, int]) -> dict[str, int]:
    """A report's summed statistics (:attr:`~fedsample.messages.TrainReport.sums`) as metrics, each under its own name
    (e.g. ``"samples"``, FedSampling's drawn count); a name that is one of the report's own metrics or carries the
    reply statistics' prefix cannot be told apart on the other side, and is refused."""
    metrics = {name: int(v) for name, v in sums.items()}
    clashing = sorted(name for name in sums if name in TRAIN_FIELDS or name.startswith(STATISTIC))
    if clashing:
        raise ValueError(f"the Flower codec cannot carry summed statistics named {clashing}: the names of a train report's metrics")
    return metrics


def _sums(record: Fields) -> dict[str, int]:
    """The summed statistics of a train report's metrics: every one that is neither the report's own nor a reply
    statistic, each a count >= 0 (:func:`summed_metrics`)."""
    sums = {k: _integer(record, k) for k in record if k not in TRAIN_FIELDS and not k.startswith(STATISTIC)}
    negative = {k: v for k, v in sums.items() if v < 0}
    if negative:
        raise MalformedReply(f"negative drawn-sample count statistic {negative}")
    return sums


def _finite_array(name: str, array: np.ndarray) -> np.ndarray:
    if not np.all(np.isfinite(array)):
        raise MalformedReply(f"non-finite values in {name}")
    return array


def _check_like(update: Params, sent: Params) -> None:
    """An update has the global parameters' names and shapes, and only finite values."""
    if set(update) != set(sent):
        raise MalformedReply(f"update names {sorted(update)} differ from the model's {sorted(sent)}")
    for k, v in update.items():
        if tuple(v.shape) != tuple(sent[k].shape):
            raise MalformedReply(f"update {k!r} has shape {tuple(v.shape)}, expected {tuple(sent[k].shape)}")
        if not bool(torch.isfinite(v).all()):
            raise MalformedReply(f"non-finite values in update {k!r}")
