"""The public face does not depend on import order: every module is reachable as an attribute chain from
``import fedsample as fs`` in a fresh import of fedsample (``fs.privacy.accounting``, ``fs.rounds``, ...), and
the layout keeps its promises (no module outside ``fedsample.flower`` imports flwr; no import circle)."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys

import pytest

import fedsample

HAS_FLWR = importlib.util.find_spec("flwr") is not None


def all_modules() -> list[str]:
    names = [info.name for info in pkgutil.walk_packages(fedsample.__path__, "fedsample.")]
    return sorted(n for n in names if HAS_FLWR or not n.startswith("fedsample.flower"))


def fresh_fedsample():
    """``import fedsample`` as a fresh interpreter would see it: every fedsample module forgotten first (the
    third-party modules stay imported, which does not change what fedsample's own imports do)."""
    for name in [n for n in sys.modules if n == "fedsample" or n.startswith("fedsample.")]:
        del sys.modules[name]
    return importlib.import_module("fedsample")


@pytest.fixture
def restore_modules():
    saved = {n: m for n, m in sys.modules.items() if n == "fedsample" or n.startswith("fedsample.")}
    yield
    for name in [n for n in sys.modules if n == "fedsample" or n.startswith("fedsample.")]:
        del sys.modules[name]
    sys.modules.update(saved)


def test_there_are_modules_to_check():
    modules = all_modules()
    assert "fedsample.privacy.accounting" in modules and "fedsample.rounds" in modules and len(modules) > 80


@pytest.mark.parametrize("name", [m for m in all_modules() if m.count(".") <= 2])
def test_every_module_is_an_attribute_of_a_fresh_import(name, restore_modules):
    fs = fresh_fedsample()
    value = fs
    for part in name.split(".")[1:]:
        value = getattr(value, part)
    # a module whose main function has its name is shadowed by it (``fs.data.partition`` is the function)
    assert value.__name__ == name or value.__module__ == name


@pytest.mark.parametrize("name", ["simulate", "diagnose", "Strategy", "SimulationResult"])
def test_top_level_names_load_on_first_use(name, restore_modules):
    assert callable(getattr(fresh_fedsample(), name))


def test_an_unknown_name_is_an_attribute_error(restore_modules):
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        fresh_fedsample().nothing_here  # noqa: B018


def test_dir_lists_the_lazy_submodules(restore_modules):
    fs = fresh_fedsample()
    assert {"privacy", "rounds", "messages", "simulate"} <= set(dir(fs))
    assert {"accounting", "attacks", "command"} <= set(dir(fs.privacy))


def public_modules() -> list[str]:
    """Every module a user may import: no part of its dotted name starts with an underscore."""
    return [name for name in all_modules() if not any(part.startswith("_") for part in name.split("."))]


@pytest.mark.parametrize("name", ["fedsample", *public_modules()])
def test_every_public_module_declares_its_public_names(name):
    module = importlib.import_module(name)
    declared = getattr(module, "__all__", None)
    assert isinstance(declared, list) and declared, f"{name} defines no __all__"
    assert all(isinstance(n, str) for n in declared)
    assert not [n for n in declared if n.startswith("_")], f"{name}.__all__ names private names"
    assert len(set(declared)) == len(declared), f"{name}.__all__ repeats a name"
    missing = [n for n in declared if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"


def test_the_public_names_are_what_a_star_import_gives():
    namespace: dict = {}
    exec("from fedsample.privacy.sizes import *", namespace)
    assert {"ExactSizes", "RandomizedSizes", "SizeInfo"} <= set(namespace) and "np" not in namespace
