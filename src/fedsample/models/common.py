"""Helpers shared by the model specs: output width, parameter checks, one-line input errors."""

from __future__ import annotations

from typing import Any


def outputs(num_classes: int) -> int:
    """The output width: one logit per class, or one output for regression (``num_classes == 0``)."""
    return num_classes if num_classes > 0 else 1


def int_tuple(spec: Any, name: str, minimum: int = 1) -> None:
    """Make ``spec.<name>`` (a list from a TOML file, or a tuple) a non-empty tuple of ints >= ``minimum``,
    in place on a frozen dataclass; one ``ValueError`` line otherwise."""
    value = getattr(spec, name)
    items = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    if not items or any(isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in items):
        raise ValueError(f"{type(spec).__name__} {name} must be integers >= {minimum}, got {value!r}")
    object.__setattr__(spec, name, items)


def at_least(spec: Any, minimum: int, *names: str) -> None:
    """Every ``spec.<name>`` is an int >= ``minimum`` (one ``ValueError`` line naming the first that is not)."""
    for name in names:
        value = getattr(spec, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{type(spec).__name__} {name} must be an integer >= {minimum}, got {value!r}")


def probability(spec: Any, name: str) -> None:
    """``spec.<name>`` is a dropout probability in [0, 1)."""
    value = getattr(spec, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{type(spec).__name__} {name} must be a dropout probability in [0, 1), got {value!r}")


def one_of(spec: Any, name: str, options: tuple[str, ...]) -> None:
    value = getattr(spec, name)
    if value not in options:
        raise ValueError(f"{type(spec).__name__} {name} must be one of {', '.join(map(repr, options))}, got {value!r}")
