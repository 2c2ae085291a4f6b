"""The example's choices: Fashion-MNIST where it is installed, digits otherwise; an optional injected fault."""

from __future__ import annotations

from fedsample.runtime.telemetry import quiet_flower

quiet_flower()  # Flower's telemetry off in this process too (unless the user set FLWR_TELEMETRY_ENABLED=1)

import numpy as np  # noqa: E402
from flwr.app import Array, ArrayRecord, Context, Message  # noqa: E402
from flwr.clientapp.typing import ClientAppCallable  # noqa: E402

from fedsample.data import load_dataset  # noqa: E402


def dataset_settings() -> dict:
    """Run-config overrides: digits when Fashion-MNIST's files are not on this machine."""
    try:
        load_dataset("fashion-mnist")
    except (FileNotFoundError, ValueError):
        return {"dataset": "digits"}
    return {}


def injected_faults(message: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """A Flower mod for fault drills: a node started with ``--node-config "fault='nan'"`` answers every
    training request with NaN updates (every array of its reply; under SecAgg+ the vector it would mask, which
    the client's own check then keeps out of the sum). The server must never average them in."""
    reply = call_next(message, context)
    if context.node_config.get("fault") != "nan" or reply.has_error():
        return reply
    for name, arrays in list(reply.content.array_records.items()):
        reply.content.array_records[name] = ArrayRecord({k: Array(np.full_like(a.numpy(), np.nan)) for k, a in arrays.items()})
    return reply
