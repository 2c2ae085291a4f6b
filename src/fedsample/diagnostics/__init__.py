"""See the sampling: bias, variance, data exploitation, cost and privacy of any strategy's round, measured at
a fixed model (``fedsample.diagnose``; ``fedsample diagnose`` on the command line; docs/diagnostics.md)."""

from fedsample.diagnostics.measure import Diagnosis, diagnose

__all__ = ["Diagnosis", "diagnose"]
