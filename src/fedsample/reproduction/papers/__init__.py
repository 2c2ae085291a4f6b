"""One module per paper, each declaring ``PAPER`` (a :class:`fedsample.reproduction.spec.Paper`); nothing else lives here."""

from fedsample.runtime import lazy

__all__ = ["fedsampling", "fedstas", "isfedavg", "iwds"]

__getattr__, __dir__ = lazy.submodules(__name__, __path__)
