"""Local solvers, aggregators and server optimizers."""

from fedsample.runtime import lazy

__all__ = ["aggregate", "dtypes", "functional", "layout", "local", "local_training", "random_layers", "schedule", "server"]

__getattr__, __dir__ = lazy.submodules(__name__, __path__)
