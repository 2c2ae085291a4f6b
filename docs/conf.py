"""Sphinx configuration of fedsample's documentation site.

Build it (the `docs` extra) from the repository's root; the site opens at ``docs/_build/html/index.html``:

    sphinx-build -W --keep-going -n -c docs -b html . docs/_build/html

The source folder is the repository itself, so that the site's pages are the Markdown files where they live
(``README.md``, ``docs/*.md``, ``benchmarks/README.md``) and every relative link between them resolves in the
site as it does on GitHub; ``include_patterns`` says which files are pages. The API reference is generated from
the docstrings (``docs/api/``), and ``docs/_ext/public_names.py`` stops the build when a public name has none.
Nothing is fetched from the network: no intersphinx; references to other projects' types are ignored by name
below.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS.parent / "src"), str(DOCS / "_ext")]

from fedsample import __version__  # noqa: E402

project = "fedsample"
author = "the fedsample authors"
copyright = "the fedsample authors, MIT license"
release = version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.viewcode",
    "public_names",  # every public name has a docstring (the build stops listing those without)
    "api_pages",  # one page per public module (docs/api/generated/), from docs/_templates/api/module.rst
    "short_refs",  # a reference by a short name (:func:`design.poisson`) resolves to the one object it names
    "plain_docstrings",  # a bar in a docstring is a bar (|C|), not a reST substitution
    "repository_links",  # links to files of the repository that are not pages; every picture shown; index.html
]

# --- which files are pages ----------------------------------------------------------------------------------
root_doc = "docs/index"
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
include_patterns = ["README.md", "benchmarks/README.md", "docs/*.md", "docs/tutorials/*.md", "docs/api/*.md", "docs/api/generated/*.rst"]
exclude_patterns = [".*", "**/.*", "docs/_build", "docs/_templates", "runs", "out", "build", "dist", "venv", "**/__pycache__"]
templates_path = [str(DOCS / "_templates")]  # absolute: autosummary reads it from the source folder

# --- MyST: the Markdown pages as GitHub shows them ----------------------------------------------------------
myst_heading_anchors = 6  # `page.md#a-heading` links: GitHub's heading slugs, on every heading level


# --- the API reference (docs/_ext/api_pages.py writes the pages; autosummary's tables, autodoc's entries) ----
autosummary_generate = False  # the pages are written by api_pages (a shadowed module would get none)
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True  # `x=DEFAULT` rather than the default's repr
autodoc_inherit_docstrings = False  # a class without a docstring shows none, not its base's (the check catches it)
add_module_names = False

# --- cross-references: every one must resolve (sphinx-build -n), except to other projects' types -------------
nitpicky = True
# No intersphinx (no network in CI): references to the types of the libraries fedsample builds on (numpy, torch,
# scipy, ...) and of the standard library cannot resolve here; they are ignored by their package's name. A
# reference to a fedsample name that does not resolve still fails the build.
THIRD_PARTY = [
    "numpy", "np", "torch", "nn", "scipy", "sklearn", "matplotlib", "pydantic", "annotated_types", "rich", "datasets",
    "flwr", "flwr_datasets", "ray", "mlflow", "wandb", "dp_accounting", "tensorboard", "pandas", "pyarrow",
]
nitpick_ignore_regex = [
    (r"py:.*", rf"({'|'.join(THIRD_PARTY)})(\..*)?"),
    # the standard library and builtins (no Python inventory offline), by module or by the bare names typing gives
    (r"py:.*", rf"({'|'.join(sorted(sys.stdlib_module_names))})\..*"),
    (r"py:.*", r"(int|float|str|bytes|bool|list|dict|tuple|set|frozenset|object|type|None|Ellipsis|complex|slice"
               r"|range|callable|Exception|ValueError|TypeError|KeyError|RuntimeError|OSError|BaseException"
               r"|KeyboardInterrupt|NotImplementedError|AttributeError|ImportError|ModuleNotFoundError)"),
    (r"py:.*", r"(Any|Callable|Iterable|Iterator|Sequence|Mapping|MutableMapping|Literal|Optional|Union|Protocol"
               r"|TypeVar|Generic|NamedTuple|ClassVar|Self|NoReturn|Path|ModuleType|Enum|IntEnum"
               r"|DataclassInstance)"),  # typeshed's protocol of a dataclass instance (for type checkers only)
    # fedsample's private names (a private base class in a signature) and type variables: documented nowhere
    (r"py:.*", r"(fedsample\.[\w.]*\.)?_\w+"),
    (r"py:class", r"(fedsample\.[\w.]*\.)?[A-Z]"),
]

# --- HTML -------------------------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"fedsample {release}"
html_static_path: list[str] = []
html_show_sourcelink = False
