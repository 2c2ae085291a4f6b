"""Helpers shared by the model specs: output width, their parameters' constraints (:mod:`fedsample.checks`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedsample import checks

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["DROPOUT", "DROPOUTS", "NORM", "WIDTHS", "as_tuple", "outputs", "pair"]


def outputs(num_classes: int) -> int:
    """The output width: one logit per class, or one output for regression (``num_classes == 0``)."""
    return num_classes if num_classes > 0 else 1


#: Layer widths: one integer >= 1 or a list of them (a TOML list becomes a tuple, :func:`as_tuple`).
WIDTHS = checks.Param(checks.Each(checks.COUNT), words="integers >= 1 (one, or a list)")
#: A dropout probability, and a pair of them.
DROPOUT = checks.Param(checks.reals(0, 1, "[)"), words="a dropout probability in [0, 1)")
#: Dropout probabilities, one or several.
DROPOUTS = checks.Param(checks.Each(checks.reals(0, 1, "[)")), words="dropout probabilities in [0, 1)")
#: The normalization after a convolution: GroupNorm or none.
NORMS = ("group", "none")
#: One of ``NORMS``.
NORM = checks.Param(checks.Options(*NORMS), words=f"one of {', '.join(map(repr, NORMS))}")


def as_tuple(spec: DataclassInstance, *names: str) -> dict[str, tuple[object, ...]]:
    """Make each (already checked) field ``spec.<name>`` a tuple, in place on a frozen dataclass (a TOML file gives
    lists, a single value means one layer); the tuples, by name."""
    tuples = {name: tuple(value) if isinstance(value, (list, tuple)) else (value,)
              for name, value in checks.declared_values(spec, names).items()}
    for name, value in tuples.items():
        object.__setattr__(spec, name, value)
    return tuples


def pair(spec: DataclassInstance, name: str) -> None:
    """``spec.<name>`` holds exactly two values (as a tuple)."""
    value = as_tuple(spec, name)[name]
    if len(value) != 2:
        checks.fail(name, value, "two values", type(spec).__name__)
