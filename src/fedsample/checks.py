"""Parameter checks shared by the strategy parts: each raises one ``ValueError`` naming the parameter."""

from __future__ import annotations

import math


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def positive(name: str, value: object, optional: bool = False) -> None:
    """``value`` is a finite number > 0 (or None when ``optional``)."""
    if value is None and optional:
        return
    number = _number(value)
    if number is None or number <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


def non_negative(name: str, value: object) -> None:
    """``value`` is a finite number >= 0."""
    number = _number(value)
    if number is None or number < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")


def count(name: str, value: object) -> None:
    """``value`` is an integer >= 1."""
    number = _number(value)
    if number is None or number != int(number) or number < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def in_interval(name: str, value: object, low: float, high: float, closed: str = "[)") -> None:
    """``value`` lies in the interval from ``low`` to ``high``, ``closed`` giving its brackets ("[)", "(]", ...)."""
    number = _number(value)
    left, right = closed
    ok = number is not None and (low <= number if left == "[" else low < number) and (
        number <= high if right == "]" else number < high
    )
    if not ok:
        raise ValueError(f"{name} must be in {left}{low:g}, {high:g}{right}, got {value!r}")
