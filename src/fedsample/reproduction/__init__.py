"""Reproducing the papers' tables: claims as data (:mod:`.spec`), one module per paper (:mod:`.papers`)."""

from fedsample.runtime import lazy

__all__ = [
    "collect", "command", "consistency", "environment", "isfedavg_msd", "papers", "rederive", "registry", "rows",
    "significance", "spec", "splice", "table", "verdict",
]

__getattr__, __dir__ = lazy.submodules(__name__, __path__)
