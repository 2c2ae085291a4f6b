"""Read fedsample's docstrings as written. They are plain reST with one habit reST does not share: a bar is a
bar, as in ``|C|`` (a set's size) or ``|d|`` (an absolute value), where reST would read a substitution. fedsample
defines no substitutions, so every ``|`` outside a ``literal``, a role's target and a literal block (after
``::``) is escaped before autodoc and autosummary parse the docstring; the source is left as it is.
"""

from __future__ import annotations

import re
from typing import Any

#: Inline literals and roles: the spans whose bars stay as they are.
KEPT = re.compile(r"``.+?``|:[\w:.-]+:`[^`]*`|`[^`]*`_?")


def escape_bars(line: str) -> str:
    """``line`` with each bar outside a kept span escaped."""
    out, start = [], 0
    for match in KEPT.finditer(line):
        out.append(line[start:match.start()].replace("|", "\\|"))
        out.append(match.group(0))
        start = match.end()
    out.append(line[start:].replace("|", "\\|"))
    return "".join(out)


def indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def read_bars(lines: list[str]) -> None:
    """Escape the bars of a docstring's ``lines`` in place, literal blocks left alone."""
    block_indent: int | None = None  # the indent of the line that opened the literal block being read
    for index, line in enumerate(lines):
        if block_indent is not None:
            if not line.strip() or indent(line) > block_indent:
                continue
            block_indent = None
        if line.rstrip().endswith("::"):
            block_indent = indent(line)
        lines[index] = escape_bars(line)


def process(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """``autodoc-process-docstring``: autodoc's entries and autosummary's tables both read through it."""
    if name.startswith(f"{app.config.public_names_package}.") or name == app.config.public_names_package:
        read_bars(lines)


def setup(app: Any) -> dict[str, Any]:
    """Register the reader."""
    app.setup_extension("public_names")
    app.connect("autodoc-process-docstring", process)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
