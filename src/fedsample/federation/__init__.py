"""Federations run client procedures on chosen clients and return their reports."""

from fedsample.runtime import lazy

from fedsample.federation.base import Federation
from fedsample.federation.simulator import Simulator

__all__ = ["Federation", "Simulator"]

__getattr__, __dir__ = lazy.submodules(__name__, __path__)
