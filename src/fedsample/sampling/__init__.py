"""Sampling: designs with inclusion probabilities, client samplers and data samplers."""

from fedsample.runtime import lazy

from fedsample.sampling import design

__all__ = ["design"]

__getattr__, __dir__ = lazy.submodules(__name__, __path__)
