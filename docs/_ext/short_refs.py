"""Read fedsample's docstrings as written: a cross-reference by a short name (``:func:`partition_stats```,
``:func:`design.poisson```, a ``Params`` annotation) resolves to the one documented fedsample object whose dotted
name ends with it.

Sphinx resolves a Python reference from the current module and class outward; the docstrings also name objects
of sibling modules by their last parts. When Sphinx finds nothing (``missing-reference``), this looks for
documented objects named ``*.TARGET``; when several match, the ones sharing the longest leading part of their
name with the module being documented win, and the reference resolves only if one is left. A name a package
re-exports (``fedsample.simulate``) resolves to where it is documented (``fedsample.simulation.simulate``); an
annotation Python kept as one string (``"TrainReport | None"``) resolves part by part.

A reference to a fedsample object that exists but is not public (a module's helper outside its ``__all__``, an
instance attribute set in ``__init__``) has no page to link to: it is shown as the code it names, unlinked. A
reference to nothing, or an ambiguous one, stays a missing reference, which ``sphinx-build -n -W`` reports.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from typing import Any

from docutils import nodes
from sphinx.util.nodes import make_refnode

import public_names


def candidates(objects: dict[str, Any], target: str) -> list[str]:
    """The documented names equal to ``target`` or ending with ``.target``."""
    suffix = f".{target}"
    return [name for name in objects if name == target or name.endswith(suffix)]


def closest(names: list[str], module: str | None) -> list[str]:
    """The names sharing the most leading dotted parts with ``module``."""
    if not module or len(names) < 2:
        return names
    parts = module.split(".")

    def shared(name: str) -> int:
        count = 0
        for mine, theirs in zip(parts, name.split(".")):
            if mine != theirs:
                break
            count += 1
        return count

    best = max(shared(name) for name in names)
    return [name for name in names if shared(name) == best]


def resolve(app: Any, env: Any, node: Any, contnode: nodes.Element) -> nodes.Element | None:
    """A ``missing-reference`` handler for the Python domain."""
    if node.get("refdomain") != "py":
        return None
    target = str(node["reftarget"]).lstrip(".~")
    if " | " in target:
        return resolve_union(app, env, node, target)
    module, cls = node.get("py:module"), node.get("py:class")
    row = summary_row_object(env, node)
    if row is not None:  # a summary in an autosummary table: read from the object the row describes
        module, cls = row
        node["py:module"], node["py:class"] = module, cls
    found = resolve_one(app, env, node, contnode, target)
    if found is None and exists(target, module, cls):
        return contnode  # an internal name: shown, not linked
    return found


def summary_row_object(env: Any, node: Any) -> tuple[str, str | None] | None:
    """``(module, class or None)`` of the object whose autosummary row holds ``node``, or None."""
    parent = node.parent
    while parent is not None and not isinstance(parent, nodes.row):
        parent = parent.parent
    tables = _ancestors(parent, nodes.table)
    if parent is None or not any("autosummary" in " ".join(t.get("classes", [])).split() for t in tables):
        return None
    name = parent[0].astext().split("(", 1)[0].strip()
    domain = env.get_domain("py")
    found = closest(candidates(domain.objects, name), node.get("py:module"))
    if len(found) != 1:
        return None
    full = found[0]
    parts = full.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        modname = ".".join(parts[:cut])
        if modname in domain.modules:
            rest = parts[cut:]
            is_class = domain.objects[full].objtype in ("class", "exception")
            cls = ".".join(rest) if is_class else (".".join(rest[:-1]) or None)
            return modname, cls
    return None


def _ancestors(node: Any, kind: type) -> list[Any]:
    found = []
    while node is not None:
        if isinstance(node, kind):
            found.append(node)
        node = node.parent
    return found


def resolve_one(app: Any, env: Any, node: Any, contnode: nodes.Element, target: str) -> nodes.Element | None:
    """The reference to the one documented object ``target`` names, or None."""
    target = public_names.documented_at().get(target, target)
    domain = env.get_domain("py")
    found = closest(candidates(domain.objects, target), node.get("py:module"))
    if len(found) != 1:
        return None
    entry = domain.objects[found[0]]
    return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, found[0])


def resolve_union(app: Any, env: Any, node: Any, target: str) -> nodes.Element | None:
    """``A | B | None`` as references joined by bars, when every part but ``None`` resolves."""
    out = nodes.inline()
    for index, part in enumerate(target.split(" | ")):
        if index:
            out += nodes.Text(" | ")
        text = nodes.literal(part, part) if isinstance(node[0], nodes.literal) else nodes.Text(part)
        if part == "None":
            out += text
            continue
        reference = resolve_one(app, env, node, nodes.inline("", "", text), part)
        if reference is None:
            return None
        out += reference
    return out


def exists(target: str, module: str | None, cls: str | None) -> bool:
    """Whether ``target``, read from ``module`` (and ``cls`` in it) outward as Python would look it up in the
    source, names a fedsample object: a module, an attribute, or an instance attribute a class's code sets."""
    bases = [f"{module}.{cls}"] if module and cls else []
    parts = module.split(".") if module else []
    bases += [".".join(parts[:i]) for i in range(len(parts), 0, -1)] + [""]
    for base in bases:
        dotted = f"{base}.{target}" if base else target
        if dotted.startswith("fedsample") and _lookup(dotted):
            return True
    if module and (imported := _imported(module).get(target.split(".", 1)[0])):  # e.g. under `if TYPE_CHECKING:`
        if _lookup(imported + target[len(target.split(".", 1)[0]):]):
            return True
    if module and "." not in target:  # a method or attribute of one of the module's classes, named from the module
        try:
            classes = [v for v in vars(importlib.import_module(module)).values() if inspect.isclass(v)]
        except ImportError:
            return False
        return any(v.__module__ == module and hasattr(v, target) for v in classes)
    return False


def _imported(module: str) -> dict[str, str]:
    """``{name: dotted name}`` for every fedsample name ``module``'s source imports at top level, those imported
    only for type checking (``if TYPE_CHECKING:``, absent at run time) included."""
    try:
        tree = public_names._tree(module)
    except ImportError:
        return {}
    found = {}
    for node in public_names._statements(tree.body) if tree else []:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("fedsample"):
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return found


def _lookup(dotted: str) -> bool:
    names = dotted.split(".")
    for cut in range(len(names), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(names[:cut]))
        except ImportError:
            continue
        for index, name in enumerate(names[cut:], start=cut):
            if hasattr(value, name):
                value = getattr(value, name)
            elif inspect.isclass(value) and index == len(names) - 1:
                return _sets_attribute(value, name)
            else:
                return False
        return True
    return False


def _sets_attribute(cls: type, name: str) -> bool:
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return False
    return re.search(rf"\bself\.{re.escape(name)}\b\s*(:[^=]*)?=", source) is not None


def setup(app: Any) -> dict[str, Any]:
    """Register the resolver."""
    app.connect("missing-reference", resolve)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
