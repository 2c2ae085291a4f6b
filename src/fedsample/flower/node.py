"""A node's side: which client it is, its own data, and the ClientApp that serves the client procedures."""

from __future__ import annotations

import functools
import json
import pickle
from typing import Mapping, Sequence

import numpy as np
import torch
from torch import nn
from flwr.app import ConfigRecord, Context, Error, Message, RecordDict, UserConfigValue
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import Mod

from fedsample import client as procedures
from fedsample.client import ClientReply
from fedsample.messages import ClientContext, ClientState, procedure_of
from fedsample.data import load_dataset, partition
from fedsample.data.report import make_scheme
from fedsample.data.partition import AssignsRows, BuildsPartition
from fedsample.data.types import Dataset, FederatedData
from fedsample.flower.codec import Request, decode_request, encode_report
from fedsample.flower.config import AppConfig, RunConfig
from fedsample.flower.secagg import client_check, sealed_reply
from fedsample.models import model_from_name
from fedsample.rng import client_rng

__all__ = ["client_app", "client_context", "scheme_for", "serve"]

STATE = "fedsample-state"
BAD_REQUEST, PROCEDURE_FAILED = 400, 500


def client_id(node_config: Mapping[str, UserConfigValue]) -> int:
    """The fedsample client a node serves: ``client-id``, else ``partition-id`` of its node config."""
    for key in ("client-id", "partition-id"):
        if key in node_config:
            return int(node_config[key])
    raise ValueError("node config names no client: set partition-id=<k> (or client-id=<k> with data-path=<file.npz>)")


@functools.lru_cache(maxsize=4)
def _federated(config_json: str) -> tuple[Dataset, FederatedData]:
    config = AppConfig(**json.loads(config_json))
    dataset = load_dataset(config.dataset, **config.dataset_args)
    return dataset, partition(dataset, scheme_for(config, dataset.num_train), seed=config.data_seed)


def scheme_for(config: AppConfig, num_train: int) -> AssignsRows | BuildsPartition:
    """The configured partition scheme; ``lognormal`` without a ``mean`` gets ``num_train / num-clients``, so
    there is one partition per client."""
    args = dict(config.partition_args)
    if config.partition == "lognormal" and "mean" not in args:
        args["mean"] = num_train / config.num_clients
    return make_scheme(config.partition, **args)


def node_data(config: AppConfig, node_config: Mapping[str, UserConfigValue]) -> tuple[torch.Tensor, torch.Tensor, str, int, tuple[int, ...]]:
    """The node's own rows (x, y), task, number of classes and input shape: a file named by ``data-path``, or
    this client's partition of the configured dataset (built the same way on every node from ``data-seed``)."""
    if "data-path" in node_config:
        with np.load(str(node_config["data-path"])) as f:
            x, y = f["x"], f["y"]
            x = x.astype(np.int64) if x.dtype.kind in "iu" else x.astype(np.float32)  # token ids stay integers
        num_classes = int(node_config.get("num-classes", int(y.max()) + 1))
        return torch.as_tensor(x), torch.as_tensor(y.astype(np.int64)), "classification", num_classes, x.shape[1:]
    dataset, fed = _federated(config.json())
    k = client_id(node_config)
    if not 0 <= k < fed.num_clients:
        raise ValueError(f"partition-id {k} is outside the {fed.num_clients} partitions")
    rows = fed.client_indices(k)
    x, y = torch.as_tensor(dataset.x_train[rows]), torch.as_tensor(dataset.y_train[rows])
    return x, y, dataset.task, dataset.num_classes, dataset.input_shape


@functools.lru_cache(maxsize=4)
def _module(model: str, args_json: str, shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The model architecture, built once per process (procedures call it functionally with the sent parameters)."""
    return model_from_name(model, **json.loads(args_json)).build(shape, num_classes)


def client_context(config: AppConfig, node_config: Mapping[str, UserConfigValue], state: ClientState) -> ClientContext:
    """The ``ClientContext`` the procedures run on: this node's data, the model, its own held state."""
    x, y, task, num_classes, shape = node_data(config, node_config)
    module = _module(config.model, json.dumps(config.model_args, sort_keys=True), tuple(shape), num_classes)
    return ClientContext(client_id(node_config), x, y, module, task, num_classes, state=state)


def load_state(context: Context) -> ClientState:
    """The client-held state kept in the node's Flower context (never sent); a ValueError where the context holds
    something else under its key."""
    record = context.state.config_records.get(STATE)  # as save_state wrote it
    if record is None:
        return {}
    blob = record["blob"]
    state = pickle.loads(blob) if isinstance(blob, bytes) else None
    if not isinstance(state, dict):
        raise ValueError(f"the node's context keeps a {type(state).__name__} as {STATE!r}, not the client's state")
    return state


def save_state(context: Context, state: ClientState) -> None:
    if state:
        context.state.config_records[STATE] = ConfigRecord({"blob": pickle.dumps(state)})


class WrongClient(ValueError):
    """A request for a client this node does not serve."""


def answer(message: Message, context: Context, settings: RunConfig) -> tuple[Request, ClientReply]:
    """Run the requested procedure for this node's client with the client's own randomness: (the request, the
    procedure's report); the client-held state is saved in the node's context."""
    config = AppConfig.from_run_config({**context.run_config, **settings})
    request = decode_request(message.content)
    if request.client != client_id(context.node_config):
        raise WrongClient(f"this node serves client {client_id(context.node_config)}, not {request.client}")
    state = load_state(context)
    ctx = client_context(config, context.node_config, state)
    rng = client_rng(request.seed, request.round, request.client, procedure_of(request.payload).stream)
    report = procedures.procedure_for(request.payload)(ctx, request.payload, rng)
    save_state(context, ctx.state)
    return request, report


def serve(message: Message, context: Context, settings: RunConfig) -> Message:
    """A ``query.<procedure>`` message's answer: the report as typed records, or an error reply with the reason."""
    try:
        request, report = answer(message, context, settings)
        return Message(encode_report(request.payload, report), reply_to=message)
    except WrongClient as error:
        return Message(Error(BAD_REQUEST, str(error)), reply_to=message)
    except Exception as error:  # the node answers with the reason; the server records the client as failed
        return Message(Error(PROCEDURE_FAILED, f"{type(error).__name__}: {error}"), reply_to=message)


def serve_sealed(message: Message, context: Context, settings: RunConfig) -> Message:
    """A ``train`` message inside SecAgg+'s collect-masked-vectors stage (:mod:`fedsample.flower.secagg`): the
    report packed as the vector the SecAgg+ client mod masks; a failure raises (the node answers with an error,
    the client drops out of the sum)."""
    request, report = answer(message, context, settings)
    return sealed_reply(message, request, report)


def identify(message: Message, context: Context) -> Message:
    """Answer the server's roll call with the client this node serves."""
    return Message(RecordDict({"identity": ConfigRecord({"client": client_id(context.node_config)})}), reply_to=message)


def client_app(settings: RunConfig | None = None, mods: Sequence[Mod] | None = None) -> ClientApp:
    """A Flower ``ClientApp`` serving fedsample's client procedures (``query.report_size``, ``query.probe``,
    ``query.train``) on the node's own data, and ``train`` inside Flower's SecAgg+ (``secaggplus_mod``, then
    :func:`~fedsample.flower.secagg.client_check`) for a server in secure-sum mode. ``settings`` override the run
    config (e.g. in ``run_simulation``, which takes none); ``mods`` are Flower client mods around each handler
    (inside SecAgg+ for the sealed ``train``: they see the client's vector before it is masked)."""
    settings, mods = dict(settings or {}), list(mods or [])
    app = ClientApp()
    app.query("identify", mods=mods)(identify)
    for request_type in procedures.PROCEDURES:
        app.query(request_type.procedure.name, mods=mods)(lambda message, context: serve(message, context, settings))
    app.train(mods=[secaggplus_mod, client_check, *mods])(lambda message, context: serve_sealed(message, context, settings))
    return app
