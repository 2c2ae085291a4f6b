"""The shared parameter checks: accepted values pass, each rejection names the parameter and the range."""

import math

import pytest

from fedsample import checks


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, "x", None, True])
def test_positive_rejects(value):
    with pytest.raises(ValueError, match=r"^lr must be > 0"):
        checks.positive("lr", value)


def test_positive_accepts_and_optional():
    checks.positive("lr", 1e-9)
    checks.positive("batch", None, optional=True)


@pytest.mark.parametrize("value", [0, 1.5, -2, True, math.nan])
def test_count_rejects(value):
    with pytest.raises(ValueError, match=r"^m must be an integer >= 1"):
        checks.count("m", value)


@pytest.mark.parametrize(
    "value, closed, ok",
    [(0.0, "[)", True), (1.0, "[)", False), (0.0, "(]", False), (1.0, "(]", True), (0.5, "()", True), (-0.1, "[]", False)],
)
def test_in_interval_brackets(value, closed, ok):
    if ok:
        checks.in_interval("q", value, 0, 1, closed)
    else:
        with pytest.raises(ValueError, match=rf"^q must be in \{closed[0]}0, 1\{closed[1]}"):
            checks.in_interval("q", value, 0, 1, closed)


def test_non_negative():
    checks.non_negative("mu", 0)
    with pytest.raises(ValueError, match="mu must be >= 0"):
        checks.non_negative("mu", -1e-3)
