"""See the sampling: bias, variance, data exploitation, cost and privacy of any strategy's round, measured at
a fixed model (``fedsample.diagnose``; ``fedsample diagnose`` on the command line; docs/diagnostics.md).

Names load on first use, so the command line's parser stays cheap."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Diagnosis", "diagnose", "write_diagnosis"]
_HOME = {"Diagnosis": "measure", "diagnose": "measure", "write_diagnosis": "report"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"fedsample.diagnostics.{_HOME[name]}"), name)
    raise AttributeError(f"module 'fedsample.diagnostics' has no attribute {name!r}")
