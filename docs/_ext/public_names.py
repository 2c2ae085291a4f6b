"""Every public name of fedsample has a docstring: the rule the documentation site enforces, and what its API
pages list.

*Public*: a module's ``__all__`` where it has one, else every name not starting with ``_`` that the module
defines (a class or function whose ``__module__`` is the module, or a name its source assigns at top level).
Modules: every module and package under ``fedsample`` whose dotted name has no part starting with ``_``.

*Its docstring*: a module's, class's or function's own ``__doc__`` (not one inherited from a base class, nor
the ``Name(field, ...)`` line a dataclass or named tuple writes for itself); for anything else (a constant, a
type alias, an instance) the string literal under its assignment or the ``#:`` comment above it, as autodoc
reads them.

A name listed in a package's ``__all__`` but defined in another public module under the same name (a
re-export, ``fedsample.data.Dataset``) is documented where it is defined; the package's page links there.

Used three ways: :func:`setup` makes it a Sphinx extension that stops the build listing every undocumented
public name (``docs/conf.py``); :func:`api_pages` is what each module's API page documents
(``docs/_ext/api_pages.py``, ``docs/_templates/api/module.rst``); ``tests/test_docs_names.py`` runs
:func:`undocumented` in the test suite. It imports no Sphinx at module level.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
import re
from types import ModuleType
from typing import Any, Iterator

PACKAGE = "fedsample"


# --- which modules, which names ---------------------------------------------------------------------------


def module_names(package: str = PACKAGE) -> list[str]:
    """Every public module and package under ``package`` (itself included), imported on the way; sorted."""
    root = importlib.import_module(package)
    found = [package]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}.", onerror=_reraise):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.append(info.name)
    return sorted(found)


def _reraise(name: str) -> None:
    importlib.import_module(name)  # walk_packages swallows a package's import error: raise it here


def public_names(module: ModuleType) -> list[str]:
    """``module.__all__`` where it has one, else the names not starting with ``_`` that the module defines."""
    listed = getattr(module, "__all__", None)
    if listed is not None:
        return list(listed)
    assigned = _top_level(module)
    names = []
    for name, value in vars(module).items():
        if name.startswith("_") or inspect.ismodule(value):
            continue
        if getattr(value, "__module__", None) == module.__name__ and (inspect.isclass(value) or inspect.isroutine(value)):
            names.append(name)
        elif name in assigned:
            names.append(name)
    return names


def home(module: ModuleType, name: str) -> str:
    """The dotted name under which ``module.name`` is documented: where it is defined, when that module is a
    public fedsample module listing it under the same name; else ``module.name`` itself."""
    here = f"{module.__name__}.{name}"
    package = module.__name__.split(".", 1)[0]
    value = getattr(module, name)
    if inspect.ismodule(value):
        return value.__name__
    if name in _top_level(module):
        return here
    if inspect.isclass(value) or inspect.isroutine(value):
        candidates = [getattr(value, "__module__", None)]
    else:  # data has no __module__: the public module whose source assigns the same object under this name
        candidates = [m for m in _all_public_modules(package) if name in _top_level(_module(m)) and vars(_module(m)).get(name) is value]
    for candidate in candidates:
        if candidate and candidate != module.__name__ and candidate in _all_public_modules(package):
            defining = _module(candidate)
            if name in public_names(defining) and getattr(defining, name, None) is value:
                return f"{candidate}.{name}"
    return here


def docstring(module: ModuleType, name: str) -> str:
    """The docstring of ``module.name`` by the rules above; ``""`` when it has none."""
    value = getattr(module, name)
    if inspect.ismodule(value):
        return (value.__doc__ or "").strip()
    if inspect.isclass(value):
        own = (vars(value).get("__doc__") or "").strip()
        return "" if re.fullmatch(rf"{re.escape(value.__name__)}\(.*\)", own, flags=re.S) else own
    if inspect.isroutine(value):
        return (getattr(value, "__doc__", None) or "").strip()
    return _attribute_docs(module).get(name, "")


# --- the check --------------------------------------------------------------------------------------------


def undocumented(package: str = PACKAGE) -> list[str]:
    """The dotted names, each once where it is documented, of every public module and name under ``package``
    without a docstring; sorted."""
    missing: set[str] = set()
    for modname in module_names(package):
        module = _module(modname)
        if not (module.__doc__ or "").strip():
            missing.add(modname)
        for name in public_names(module):
            if not hasattr(module, name):
                missing.add(f"{modname}.{name} (listed in __all__ but not defined)")
                continue
            where = home(module, name)
            if where != f"{modname}.{name}" and not inspect.ismodule(getattr(module, name)):
                continue  # documented (and checked) where it is defined
            if not docstring(module, name):
                missing.add(where)
    return sorted(missing)


# --- what the API pages document ----------------------------------------------------------------------------


def api_members(modname: str) -> list[tuple[str, str]]:
    """``(directive, name)`` for every public name ``modname`` defines (re-exports and submodules left out), in
    source order: ``autoexception``, ``autoclass``, ``autofunction`` or ``autodata``."""
    module = _module(modname)
    rows = []
    for name in public_names(module):
        value = getattr(module, name, None)
        if inspect.ismodule(value) or home(module, name) != f"{modname}.{name}":
            continue
        if inspect.isclass(value):
            directive = "autoexception" if issubclass(value, BaseException) else "autoclass"
        elif inspect.isroutine(value):
            directive = "autofunction"
        else:
            directive = "autodata"
        rows.append((directive, name))
    order = _source_order(module)
    return sorted(rows, key=lambda row: order.get(row[1], len(order)))


def reexports(modname: str) -> list[tuple[str, str]]:
    """``(name, documented_at)`` for the public names of ``modname`` documented in another module."""
    module = _module(modname)
    rows = []
    for name in public_names(module):
        if inspect.ismodule(getattr(module, name, None)):
            continue
        where = home(module, name)
        if where != f"{modname}.{name}":
            rows.append((name, where))
    return sorted(rows)


def submodules(modname: str) -> list[str]:
    """The public modules directly inside package ``modname`` (short names, sorted)."""
    prefix = f"{modname}."
    return [m[len(prefix):] for m in _all_public_modules(modname.split(".", 1)[0]) if m.startswith(prefix) and "." not in m[len(prefix):]]


def api_pages(package: str = PACKAGE) -> dict[str, dict[str, list]]:
    """For each public module, what its API page lists: ``members`` (:func:`api_members`), ``reexports``
    (``(name, target)``, the target relative to the module where it lies inside it) and ``submodules`` (full
    names, with the first sentence of each one's docstring)."""
    pages = {}
    for modname in module_names(package):
        inside = f"{modname}."
        pages[modname] = {
            "members": api_members(modname),
            "reexports": [(name, target[len(inside):] if target.startswith(inside) else target) for name, target in reexports(modname)],
            "submodules": [(f"{inside}{name}", first_sentence(_module(f"{inside}{name}").__doc__ or "")) for name in submodules(modname)],
        }
    return pages


@functools.cache
def documented_at(package: str = PACKAGE) -> dict[str, str]:
    """``{re-exported name: where it is documented}`` over every public module (``fedsample.simulate`` ->
    ``fedsample.simulation.simulate``)."""
    return {f"{modname}.{name}": target for modname in module_names(package) for name, target in reexports(modname)}


def first_sentence(text: str) -> str:
    """The first sentence of a docstring's first paragraph, on one line."""
    paragraph = " ".join(inspect.cleandoc(text).split("\n\n", 1)[0].split())
    match = re.match(r"(.+?\.)(\s|$)", paragraph)
    return match.group(1) if match else paragraph


# --- the Sphinx extension ------------------------------------------------------------------------------------


def check_before_build(app: Any) -> None:
    """Stop the build, listing them, when a public name has no docstring (Sphinx's ``builder-inited``)."""
    from sphinx.errors import ExtensionError
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    missing = undocumented(app.config.public_names_package)
    for name in missing:
        logger.warning("public name without a docstring: %s", name, type="fedsample", subtype="undocumented")
    if missing:
        raise ExtensionError(
            f"{len(missing)} public name(s) of {app.config.public_names_package} have no docstring (listed above); "
            "public = a module's __all__, else its names not starting with '_' (docs/_ext/public_names.py)"
        )


def setup(app: Any) -> dict[str, Any]:
    """Register the check (run once the builder is set up, before any page is read)."""
    app.add_config_value("public_names_package", PACKAGE, "env")
    app.connect("builder-inited", check_before_build)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


# --- reading a module's source -------------------------------------------------------------------------------


@functools.cache
def _all_public_modules(package: str = PACKAGE) -> tuple[str, ...]:
    return tuple(module_names(package))


def _module(modname: str) -> ModuleType:
    return importlib.import_module(modname)


@functools.cache
def _tree(modname: str) -> ast.Module | None:
    try:
        source = inspect.getsource(_module(modname))
    except (OSError, TypeError):
        return None
    return ast.parse(source)


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Top-level statements, those inside top-level ``if``/``try`` blocks included."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _statements(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _statements(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])


def _targets(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _top_level(module: ModuleType) -> set[str]:
    """The names ``module``'s source assigns at top level (``x = ...``, ``x: T = ...``)."""
    tree = _tree(module.__name__)
    return {name for node in _statements(tree.body) for name in _targets(node)} if tree else set()


def _source_order(module: ModuleType) -> dict[str, int]:
    tree = _tree(module.__name__)
    order: dict[str, int] = {}
    for node in _statements(tree.body) if tree else []:
        names = [node.name] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else _targets(node)
        for name in names:
            order.setdefault(name, node.lineno)
    return order


def _attribute_docs(module: ModuleType) -> dict[str, str]:
    """Each top-level assignment's docstring: the string literal statement right after it, or the ``#:``
    comment lines right above it (or ``#:`` after it on its line)."""
    tree = _tree(module.__name__)
    if tree is None:
        return {}
    lines = inspect.getsource(module).splitlines()
    docs: dict[str, str] = {}
    for body in _bodies(tree):
        for node, following in zip(body, body[1:] + [None]):
            names = _targets(node)
            if not names:
                continue
            text = ""
            if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant) and isinstance(following.value.value, str):
                text = following.value.value
            else:
                text = _comment_doc(lines, node)
            if text.strip():
                for name in names:
                    docs[name] = inspect.cleandoc(text)
    return docs


def _bodies(tree: ast.Module) -> Iterator[list[ast.stmt]]:
    yield tree.body
    for node in _statements(tree.body):
        if isinstance(node, ast.If):
            yield node.body
            yield node.orelse
        elif isinstance(node, ast.Try):
            yield node.body


def _comment_doc(lines: list[str], node: ast.stmt) -> str:
    first = lines[node.lineno - 1]
    if "#:" in first:
        return first.split("#:", 1)[1].strip()
    above = []
    index = node.lineno - 2
    while index >= 0 and lines[index].strip().startswith("#:"):
        above.insert(0, lines[index].strip()[2:].strip())
        index -= 1
    return "\n".join(above)
