"""Lazy submodules: ``package.name`` imports ``package/name.py`` on first use, in a fresh interpreter too.

A package's ``__init__`` sets ``__getattr__, __dir__ = lazy.submodules(__name__, __path__)`` so that every
submodule is reachable as an attribute without being imported up front (``import fedsample`` stays cheap, and
``fs.privacy.accounting`` works whatever was imported before). A leaf module: it imports nothing of fedsample.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Any, Callable, Iterable

__all__ = ["submodules"]


def submodules(package: str, path: Iterable[str], names: dict[str, str] | None = None) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: a submodule (any module or package in ``path``, found by
    :func:`pkgutil.iter_modules`) is imported when first read; ``names`` maps further attribute names to the
    submodule that defines them (``{"simulate": "simulation"}``)."""
    found = sorted(info.name for info in pkgutil.iter_modules(list(path)))
    names = dict(names or {})

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        if name in found:
            module: ModuleType = importlib.import_module(f"{package}.{name}")
            return module
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(found) | set(names) | set(globals_of(package)))

    return __getattr__, __dir__


def globals_of(package: str) -> Iterable[str]:
    """The names already defined in ``package`` (for ``dir()``)."""
    module = importlib.import_module(package)
    return vars(module).keys()
