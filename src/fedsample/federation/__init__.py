"""Federations run client procedures on chosen clients and return their reports."""

from fedsample.federation.base import Federation
from fedsample.federation.simulator import Simulator

__all__ = ["Federation", "Simulator"]
