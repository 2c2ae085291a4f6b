"""The API reference's pages: one reStructuredText page per public module of fedsample, written before the
build reads its sources.

Each page (``docs/api/generated/MODULE.rst``, from ``docs/_templates/api/module.rst``) holds the module's
docstring (autodoc's ``automodule``), an autosummary table of the public names it defines and one autodoc
directive for each, a table of the names it re-exports linking to where they are documented, and its public
submodules (a toctree, so the reference is recursive over fedsample's packages). What counts as public, and
where a name is documented, is ``public_names`` (the same rule the build checks). The pages are written here,
rather than by autosummary's recursive generation, because autosummary resolves ``package.name`` to the
package's attribute first: ``fedsample.data.partition`` is the function ``partition``, and the module of that
name would get no page.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

import public_names

#: Where the pages go, relative to the source folder (ignored by git; rewritten when their text changes).
GENERATED = "docs/api/generated"


def render_pages(package: str, templates: Path) -> dict[str, str]:
    """``{module: page text}`` for every public module of ``package``."""
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(templates), keep_trailing_newline=True)
    environment.filters["underline"] = lambda text: f"{text}\n{'=' * len(text)}"
    template = environment.get_template("api/module.rst")
    return {name: template.render(fullname=name, page=page) for name, page in public_names.api_pages(package).items()}


def write_pages(app: Any) -> None:
    """Write the pages whose text changed and remove those of modules that are gone (``builder-inited``)."""
    folder = Path(app.srcdir) / GENERATED
    folder.mkdir(parents=True, exist_ok=True)
    pages = render_pages(app.config.public_names_package, Path(app.confdir) / "_templates")
    for name, text in pages.items():
        path = folder / f"{name}.rst"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    for stale in folder.glob("*.rst"):
        if stale.stem not in pages:
            stale.unlink()


def setup(app: Any) -> dict[str, Any]:
    """Register the page writer (after the public-name check: the check stops a build with undocumented names)."""
    app.setup_extension("public_names")
    app.connect("builder-inited", write_pages, priority=600)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
