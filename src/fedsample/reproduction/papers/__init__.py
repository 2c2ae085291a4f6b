"""One module per paper, each defining ``PAPER`` (a :class:`fedsample.reproduction.spec.Paper`)."""

from fedsample.runtime import lazy

__all__ = ["fedsampling", "fedstas", "isfedavg", "iwds"]

__getattr__, __dir__ = lazy.submodules(__name__, __path__)
