"""An in-process stand-in for Flower's Grid whose nodes run fedsample's real ClientApp (the tests of
``FlowerFederation``'s reply handling and of SecAgg+ on Flower). Each message reaches its node as a copy
rebuilt from its serialized objects, as Flower's transport delivers it; what the server pulls is kept in
``pulled`` (everything the ServerApp saw)."""

from __future__ import annotations

import json

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Error, Message, RecordDict
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents

from fedsample.flower import client_app
from fedsample.flower.node import serve

SETTINGS = {"dataset": "digits", "partition-args": json.dumps({"sigma": 1.0}), "model": "logreg", "num-clients": 8}
CLIENT_APP_RAISED_EXCEPTION = 2  # Flower's error code for a ClientApp that raised


def nan_arrays(message: Message, context: Context, call_next) -> Message:
    """A client mod for node configs with ``fault="nan"``: every array of the reply becomes NaN (before SecAgg+
    masks it, when the reply is a sealed ``train`` vector)."""
    reply = call_next(message, context)
    if context.node_config.get("fault") != "nan" or reply.has_error():
        return reply
    for name, arrays in list(reply.content.array_records.items()):
        reply.content.array_records[name] = ArrayRecord({k: type(a)(np.full_like(a.numpy(), np.nan)) for k, a in arrays.items()})
    return reply


def transported(message: Message) -> Message:
    """``message`` as its receiver gets it: rebuilt from its serialized objects (no object shared with the sender)."""
    contents = {oid: obj.deflate() for oid, obj in get_all_nested_objects(message).items()}
    copy = inflate_object_from_contents(message.object_id, contents)
    copy.metadata.__dict__["_message_id"] = message.metadata.message_id
    return copy


def stage_of(message: Message) -> str | None:
    """The SecAgg+ stage a ``train`` message carries."""
    configs = message.content.config_records.get(RECORD_KEY_CONFIGS)
    return None if configs is None else str(configs[Key.STAGE])


class FakeGrid:
    """Delivers each message to node ``n`` (serving client n) at once. ``faults`` maps a node to what it does
    instead of answering normally: "silent", "error", "malformed" or "nan" (its reply's arrays NaN), or
    "silent@<stage>" (no answer to that SecAgg+ stage: setup, share_keys, collect_masked_vectors, unmask)."""

    def __init__(self, faults: dict[int, str], num_nodes: int = 8, settings: dict | None = None) -> None:
        self.faults, self.replies, self.pulled = faults, {}, []
        settings = settings or SETTINGS
        self.contexts = {n: Context(0, n, {"partition-id": n, "fault": faults.get(n, "")}, RecordDict(), settings)
                         for n in range(num_nodes)}
        self.app = client_app(mods=[nan_arrays])

    def get_node_ids(self):
        return list(self.contexts)

    def push_messages(self, messages):
        ids = []
        for m in messages:
            m.metadata.__dict__["_message_id"] = m.object_id  # what Flower's grids do on push
            reply = self.answer(m)
            if reply is not None:
                self.replies[m.metadata.message_id] = reply
            ids.append(m.metadata.message_id)
        return ids

    def pull_messages(self, ids):
        got = [self.replies.pop(i) for i in ids if i in self.replies]
        self.pulled.extend(got)
        return got

    def answer(self, m: Message) -> Message | None:
        node = m.metadata.dst_node_id
        fault = self.faults.get(node, "")
        if m.metadata.message_type == "train":  # SecAgg+: the whole ClientApp, mods included
            if fault == f"silent@{stage_of(m)}":
                return None
            try:
                return self.app(transported(m), self.contexts[node])
            except Exception as error:  # as Flower's runtime answers for a ClientApp that raised
                return Message(Error(CLIENT_APP_RAISED_EXCEPTION, f"{type(error)}:<'{error}'>"), reply_to=m)
        if fault == "silent":
            return None
        if fault == "error":
            return Message(Error(500, "out of memory"), reply_to=m)
        if fault == "malformed":
            return Message(RecordDict({"report": ConfigRecord({"size": "many"})}), reply_to=m)
        return self.app(transported(m), self.contexts[node]) if fault == "nan" else serve(m, self.contexts[node], {})
