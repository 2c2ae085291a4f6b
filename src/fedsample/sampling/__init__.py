"""Sampling: designs with inclusion probabilities, client samplers and data samplers."""

from fedsample.sampling import design

__all__ = ["design"]
