"""Every public name of fedsample has a docstring: the rule the documentation site's build enforces
(``docs/_ext/public_names.py``), run here so the suite shows it before anyone builds the site.

Public = a module's ``__all__`` where it has one, else every name not starting with ``_`` that the module
defines. The rule itself is checked on small generated packages, with and without ``__all__``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

EXT = Path(__file__).resolve().parents[1] / "docs" / "_ext"


@pytest.fixture(scope="module")
def public_names():
    sys.path.insert(0, str(EXT))
    try:
        yield importlib.import_module("public_names")
    finally:
        sys.path.remove(str(EXT))


@pytest.fixture
def make_package(tmp_path, monkeypatch):
    """Write a package ``{module: source}`` under a fresh name (``PKG`` in a source stands for it); return it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made = []

    def make(files: dict[str, str]) -> str:
        name = f"docsnames_{uuid.uuid4().hex[:8]}"
        root = tmp_path / name
        root.mkdir()
        for module, source in files.items():
            (root / f"{module}.py").write_text(textwrap.dedent(source).replace("PKG", name), encoding="utf-8")
        made.append(name)
        return name

    yield make
    for name in made:
        for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            del sys.modules[module]


def test_every_public_name_of_fedsample_has_a_docstring(public_names):
    pytest.importorskip("flwr", reason="the check imports every module; fedsample.flower needs the flower extra")
    missing = public_names.undocumented("fedsample")
    assert not missing, f"{len(missing)} public name(s) without a docstring:\n" + "\n".join(missing)


MODULE_WITHOUT_ALL = '''
    """A module without __all__."""
    import json
    from os import path
    from dataclasses import dataclass

    #: Documented by a comment above it.
    ABOVE = 1
    UNDER = 2
    """Documented by the string under it."""
    BARE = 3
    _PRIVATE = 4


    def documented():
        """Has one."""


    def bare():
        pass


    def _helper():
        pass


    class Base:
        """The base's docstring."""


    class Inherits(Base):
        pass


    @dataclass
    class Record:
        x: int
'''


def test_without_all_every_name_the_module_defines_is_public(public_names, make_package):
    package = make_package({"__init__": '"""A package."""\n', "mod": MODULE_WITHOUT_ALL})
    assert public_names.undocumented(package) == sorted(
        f"{package}.mod.{name}" for name in ("BARE", "Inherits", "Record", "bare")
    )


def test_with_all_only_the_listed_names_are_public(public_names, make_package):
    source = MODULE_WITHOUT_ALL.replace(
        '"""A module without __all__."""', '"""A module with __all__."""\n    __all__ = ["documented", "UNDER", "bare", "gone"]'
    )
    package = make_package({"__init__": '"""A package."""\n', "mod": source})
    assert public_names.undocumented(package) == [
        f"{package}.mod.bare",
        f"{package}.mod.gone (listed in __all__ but not defined)",
    ]


def test_a_reexport_is_checked_where_it_is_defined_and_a_module_needs_a_docstring(public_names, make_package):
    package = make_package({
        "__init__": '"""A package re-exporting."""\nfrom PKG.inner import Thing\n__all__ = ["Thing"]\n',
        "inner": "class Thing:\n    pass\n",
    })
    assert public_names.undocumented(package) == [f"{package}.inner", f"{package}.inner.Thing"]
