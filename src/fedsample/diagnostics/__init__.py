"""See the sampling: bias, variance, data exploitation, cost and privacy of any strategy's round, measured at
a fixed model (``fedsample.diagnose``; ``fedsample diagnose`` on the command line; docs/diagnostics.md).

Names load on first use, so the command line's parser stays cheap."""

from __future__ import annotations

from fedsample.runtime import lazy

__all__ = ["Diagnosis", "diagnose", "write_diagnosis"]

__getattr__, __dir__ = lazy.submodules(
    __name__, __path__, {"Diagnosis": "measure", "diagnose": "measure", "write_diagnosis": "report"}
)
