"""The site as the repository: what the Markdown pages link to that is not a page, and what the site must show.

- A link to a folder or file of the repository that is not a page of the site (``[examples/flower/](examples/flower/)``)
  works on GitHub; in the site it becomes the path, in code style, ``(in the repository)``. A link to a path that
  does not exist is left to MyST, which reports it: the build fails on it.
- Every picture in ``docs/img/`` is shown on some page (a picture the tool makes that no page shows is a warning).
- ``index.html`` at the site's root opens the start page (``docs/index.html``: the source folder is the
  repository, so the pages keep their places).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

logger = logging.getLogger(__name__)

PICTURES = "docs/img"


class RepositoryPaths(SphinxPostTransform):
    """Turn MyST's unresolved links to existing repository paths into the path as text (before MyST's resolver
    reports them as missing)."""

    default_priority = 8  # MyST's reference resolver runs at 9

    def run(self, **kwargs: Any) -> None:
        srcdir = Path(self.env.srcdir)
        here = PurePosixPath(self.env.docname).parent
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst" or node.get("refdomain"):
                continue
            target = str(node["reftarget"]).split("#", 1)[0]
            if not target or "://" in target:
                continue
            path = (srcdir / here / target).resolve()
            if not path.exists() or srcdir.resolve() not in (path, *path.parents):
                continue
            shown = path.relative_to(srcdir.resolve()).as_posix() + ("/" if path.is_dir() else "")
            text = node.astext()
            replacement: list[nodes.Node] = [nodes.literal(shown, shown)]
            if text.strip().rstrip("/") != shown.rstrip("/"):
                replacement.insert(0, nodes.Text(f"{text} ("))
                replacement.append(nodes.Text(")"))
            replacement.append(nodes.Text(" (in the repository)"))
            node.replace_self(replacement)


def check_pictures(app: Any, env: Any) -> None:
    """Warn about each picture in docs/img/ that no page shows (``env-check-consistency``)."""
    folder = Path(env.srcdir) / PICTURES
    shown = {Path(name).as_posix() for name in env.images}
    for picture in sorted(folder.glob("*.png")):
        name = picture.relative_to(env.srcdir).as_posix()
        if name not in shown:
            logger.warning("picture not shown on any page: %s", name, type="fedsample", subtype="picture")


def root_index(app: Any, exception: Exception | None) -> None:
    """Write ``index.html`` at the site's root, opening the start page (``build-finished``)."""
    if exception is not None or app.builder.format != "html":
        return
    start = app.builder.get_target_uri(app.config.root_doc)
    (Path(app.outdir) / "index.html").write_text(
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>fedsample</title>'
        f'<meta http-equiv="refresh" content="0; url={start}"></head>'
        f'<body><a href="{start}">fedsample documentation</a></body></html>\n',
        encoding="utf-8",
    )


def setup(app: Any) -> dict[str, Any]:
    """Register the link transform, the picture check and the root index."""
    app.add_post_transform(RepositoryPaths)
    app.connect("env-check-consistency", check_pictures)
    app.connect("build-finished", root_index)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
