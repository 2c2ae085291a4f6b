"""Local solvers, aggregators and server optimizers."""

from fedsample import lazy

__getattr__, __dir__ = lazy.submodules(__name__, __path__)
