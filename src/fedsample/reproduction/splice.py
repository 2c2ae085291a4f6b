"""Put a reproduction's tables into a document such as docs/reproduction.md: the text between
``<!-- reproduction:PAPER:PROFILE -->`` and ``<!-- /reproduction:PAPER:PROFILE -->`` is replaced by the
tables of OUT/reproduction.json (headings one level down, under the paper's section).

    python -m fedsample.reproduction.splice docs/reproduction.md runs/reproduce-iwds-cuda/reproduction.json
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from fedsample.reproduction.table import markdown
from fedsample.runtime.records import JSONObject, as_object, as_text

__all__ = ["main", "markers"]


def markers(paper: str, profile: str) -> tuple[str, str]:
    """The comments that open and close the section of ``paper`` under ``profile`` in a document."""
    return f"<!-- reproduction:{paper}:{profile} -->", f"<!-- /reproduction:{paper}:{profile} -->"


def splice(text: str, document: JSONObject, level: int = 3) -> str:
    """``text`` with the section between the document's markers replaced by its tables; a ValueError line
    when the markers are missing."""
    begin, end = markers(as_text(document["paper"], "paper"), as_text(document["profile"], "profile"))
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise ValueError(f"no section {begin} ... {end} in the document")
    section = f"{begin}\n{markdown(document, level)}{end}"
    return pattern.sub(lambda _: section, text, count=1)


def main(argv: list[str] | None = None) -> int:
    """``python -m fedsample.reproduction.splice DOC.md OUT/reproduction.json ...``: splice each; the exit code."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m fedsample.reproduction.splice DOC.md OUT/reproduction.json [...]", file=sys.stderr)
        return 2
    doc = Path(args[0])
    try:
        text = doc.read_text()
        for source in args[1:]:
            text = splice(text, as_object(json.loads(Path(source).read_text()), source))
    except (OSError, ValueError, KeyError) as error:
        print(f"fedsample: error: {error}", file=sys.stderr)
        return 2
    doc.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
