"""Saving a matplotlib figure: the labels' characters the font has no glyph for (an emoji in a strategy label)
are one warning line per picture instead of matplotlib's warning per character and per drawing pass."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["GLYPH", "save_figure"]

GLYPH = re.compile(r"Glyph \d+ \((.*)\) missing from font")
"""matplotlib's missing-glyph warning; its group is the character's name, gathered into one line per picture."""


def save_figure(fig: Figure, path: Path, rect: tuple[float, float, float, float] | None = None, **options: Any) -> None:
    """``fig.tight_layout(rect=rect)`` then ``fig.savefig(path, **options)`` (``options``: matplotlib's savefig
    keywords, passed on as they are); the missing glyphs are named once."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.tight_layout(rect=rect)
        fig.savefig(path, **options)
    missing = []
    for warning in caught:
        found = GLYPH.search(str(warning.message))
        if found is None:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        elif found.group(1) not in missing:
            missing.append(found.group(1))
    if missing:
        warnings.warn(f"{Path(path).name}: the font has no glyph for {', '.join(missing)} (drawn as boxes)", UserWarning, stacklevel=2)
