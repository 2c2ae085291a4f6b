"""The example's choices: Fashion-MNIST where it is installed, digits otherwise; an optional injected fault."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message
from flwr.clientapp.typing import ClientAppCallable

from fedsample.data import load_dataset


def dataset_settings() -> dict:
    """Run-config overrides: digits when Fashion-MNIST's files are not on this machine."""
    try:
        load_dataset("fashion-mnist")
    except (FileNotFoundError, ValueError):
        return {"dataset": "digits"}
    return {}


def injected_faults(message: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """A Flower mod for fault drills: a node started with ``--node-config "fault='nan'"`` answers every
    training request with NaN updates (the server must reject them)."""
    reply = call_next(message, context)
    if context.node_config.get("fault") != "nan" or reply.has_error() or "arrays" not in reply.content.array_records:
        return reply
    arrays = reply.content.array_records["arrays"]
    reply.content.array_records["arrays"] = ArrayRecord({k: Array(np.full_like(a.numpy(), np.nan)) for k, a in arrays.items()})
    return reply
