"""Fingerprints of a run: everything that determines its numbers, so that a resume never mixes runs.

A checkpoint stores the fingerprint of the run that wrote it; ``simulate(..., callbacks=[Checkpoint(path,
resume=True)])`` compares it field by field with the run being resumed and refuses, naming the fields that differ.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Mapping

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # a type only: runtime/ imports nothing of fedsample's domain
    from fedsample.data.types import FederatedData

__all__ = ["differences", "run_fingerprint"]


def digest(*arrays: str | npt.ArrayLike) -> str:
    """A short blake2b digest of arrays and strings (their bytes, shapes and dtypes)."""
    h = hashlib.blake2b(digest_size=12)
    for a in arrays:
        if isinstance(a, str):
            h.update(a.encode())
            continue
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def data_fingerprint(data: FederatedData) -> str:
    """The dataset (name, shapes, every 1000th-stride sample of the features, all labels) and the partition
    (the rows of every client)."""
    ds = data.dataset
    stride = max(1, len(ds.x_train) // 1000)
    return digest(ds.name, np.asarray(ds.x_train)[::stride], np.asarray(ds.y_train), np.asarray(ds.x_test)[::stride],
                  np.asarray(data.order), np.asarray(data.offsets))


def run_fingerprint(strategy: object, data: FederatedData, model: object, seed: int, settings: Mapping[str, object]) -> dict[str, str]:
    """Field -> value of everything that determines a run's numbers (``settings``: backend-independent
    simulation settings such as ``eval_every`` and the failure model)."""
    from fedsample import __version__

    return {
        "strategy": repr(strategy),
        "seed": str(seed),
        "data": data_fingerprint(data),
        "model": repr(model),
        **{name: repr(value) for name, value in sorted(settings.items())},
        "version": __version__,
    }


def differences(saved: dict[str, str], current: dict[str, str]) -> list[str]:
    """The fields whose values differ (or that only one side has)."""
    return sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
