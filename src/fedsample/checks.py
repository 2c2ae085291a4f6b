"""One validation toolkit for parameters, in the manner of scikit-learn's parameter constraints.

A parameter is declared with *constraints*: :func:`integers` and :func:`reals` (intervals with open or closed
ends), :class:`Options` (a set of values, usually strings), :data:`BOOLEAN`, :class:`Each` (one value or a
sequence of them) and ``None`` where None is allowed.
A list of constraints means "any of these". Every refusal is one :class:`ParameterError` line of one template,

    "{owner}: {name} must be {requirement}, got {value!r}"

(without ``owner``: "{name} must be {requirement}, got {value!r}"). Numbers are strict: a bool is never a
number, ``1.5`` and ``2.0`` are not integers, numpy integers are integers, and reals are finite.

Where the rules are declared:

- a dataclass part: ``@constrained(name=constraint, ...)`` under ``@dataclass`` checks its fields before its
  own ``__post_init__`` runs (fields typed with a ``Literal`` are checked against its values without being
  named);
- a function (the recipes, ``simulate``): ``@arguments(owner, aliases=..., renamed=..., name=constraint, ...)``
  checks the given arguments (and ``Literal``-typed ones), maps a documented alias to its canonical name
  (refusing both at once) and refuses a renamed keyword with one line naming the new one (:func:`renames` answers
  which a function takes);
- anything else: :func:`check` one value, :func:`validate` a mapping, :func:`fail` for a rule that ties several
  values together (still the one template).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import numbers
import types
import typing
import weakref
from typing import Callable, Iterable, Literal, Mapping, NoReturn, Sequence, TypeGuard, TypeVar, Union, cast

import numpy as np

if typing.TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "BOOLEAN", "COUNT", "NON_NEGATIVE", "POSITIVE", "PROBABILITY", "SEED", "Constraint", "Each", "InstanceOf", "Interval", "Options",
    "Param", "ParameterError", "Renames", "arguments", "check", "constrained", "count", "fail", "in_interval", "inherited_rules",
    "integers", "message", "non_negative", "positive", "reals", "renames", "requirement", "validate",
]


class ParameterError(ValueError, TypeError):
    """A parameter outside its constraints (a ``ValueError``, and a ``TypeError`` as a wrong type is one):
    one line naming the owner, the parameter, what it must be and what it got. ``owner``, ``name`` and
    ``value`` are kept for callers that add where the value came from (a TOML key)."""

    def __init__(self, text: str, owner: str | None = None, name: str | None = None, value: object = None) -> None:
        super().__init__(text)
        self.owner, self.name, self.value = owner, name, value


def message(name: str, requirement: str, value: object, owner: str | None = None) -> str:
    """The one template: ``"{owner}: {name} must be {requirement}, got {value!r}"``."""
    text = f"{name} must be {requirement}, got {value!r}"
    return f"{owner}: {text}" if owner else text


def fail(name: str, value: object, requirement: str, owner: str | None = None, label: str | None = None) -> NoReturn:
    """Refuse ``value`` with the template (naming ``label`` or ``name``), also for a rule that no single constraint
    states (one value bounded by another)."""
    raise ParameterError(message(label or name, requirement, value, owner), owner, name, value)


# --- constraints ------------------------------------------------------------------------------------


class Constraint:
    """A set of admissible values: :meth:`satisfied_by` tells membership, ``str()`` says it in words."""

    def satisfied_by(self, value: object) -> bool:
        raise NotImplementedError

    def __str__(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self}>"


def is_integer(value: object) -> TypeGuard[numbers.Integral]:
    """An int or numpy integer, never a bool (``1.5``, ``2.0`` and ``True`` are not integers)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_real(value: object) -> TypeGuard[numbers.Real]:
    """A finite real number (int, float, numpy scalar), never a bool."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return False
    return math.isfinite(value)


def _bound(value: float, integer: bool) -> str:
    return str(int(value)) if integer else f"{value:g}"


@dataclasses.dataclass(frozen=True)
class Interval(Constraint):
    """Integers or finite reals between ``low`` and ``high`` (None: unbounded), ``closed`` giving the
    brackets: ``"[]"``, ``"[)"``, ``"(]"`` or ``"()"``."""

    kind: Literal["integer", "real"]
    low: float | None = None
    high: float | None = None
    closed: str = "[]"

    def __post_init__(self) -> None:
        if self.kind not in ("integer", "real") or self.closed not in ("[]", "[)", "(]", "()"):
            raise ValueError(f"Interval: kind must be 'integer' or 'real' and closed one of [], [), (], (); got {self!r}")

    def satisfied_by(self, value: object) -> bool:
        of_kind: Callable[[object], TypeGuard[numbers.Real]] = is_integer if self.kind == "integer" else is_real
        if not of_kind(value):
            return False
        left, right = self.closed[0], self.closed[1]  # a finite number: not below is at least, not at most is above
        if self.low is not None and (value < self.low if left == "[" else value <= self.low):
            return False
        return self.high is None or (value <= self.high if right == "]" else value < self.high)

    def __str__(self) -> str:
        integer = self.kind == "integer"
        left, right = self.closed[0], self.closed[1]
        if self.low is not None and self.high is not None:
            text = f"in {left}{_bound(self.low, integer)}, {_bound(self.high, integer)}{right}"
        elif self.low is not None:
            text = f"{'>=' if left == '[' else '>'} {_bound(self.low, integer)}"
        elif self.high is not None:
            text = f"{'<=' if right == ']' else '<'} {_bound(self.high, integer)}"
        else:
            return "an integer" if integer else "a finite number"
        return f"an integer {text}" if integer else text


def integers(low: int | None = None, high: int | None = None, closed: str = "[]") -> Interval:
    """Integers in the interval (``integers(1)``: an integer >= 1)."""
    return Interval("integer", low, high, closed)


def reals(low: float | None = None, high: float | None = None, closed: str = "[]") -> Interval:
    """Finite reals in the interval (``reals(0, 1, "[)")``: in [0, 1))."""
    return Interval("real", low, high, closed)


class Options(Constraint):
    """One of a few values (strings, mostly): ``Options("uniform", "size")``. A value matches an option of
    the same type only (``1`` is not ``True``, ``"1"`` is not ``1``)."""

    def __init__(self, *values: object) -> None:
        if not values:
            raise ValueError("Options needs at least one value")
        self.values = tuple(values)

    def satisfied_by(self, value: object) -> bool:
        return any(_matches(option, value) for option in self.values)

    def __str__(self) -> str:
        shown = [repr(v) for v in self.values]
        if len(shown) == 1:
            return shown[0]
        return f"one of {', '.join(shown[:-1])} or {shown[-1]}"


def _matches(option: object, value: object) -> bool:
    """``value`` is ``option``: equal, and a string only for a string, a bool only for a bool."""
    if isinstance(option, str) or isinstance(value, str):
        return isinstance(option, str) and isinstance(value, str) and option == value
    if isinstance(option, (bool, np.bool_)) != isinstance(value, (bool, np.bool_)):
        return False
    try:
        return bool(option == value)
    except Exception:  # noqa: BLE001 - an array or an odd object compared with an option is simply not it
        return False


@dataclasses.dataclass(frozen=True)
class InstanceOf(Constraint):
    """Instances of ``type``, described by ``description`` (``BOOLEAN``: ``bool``, "True or False")."""

    type: type
    description: str

    def satisfied_by(self, value: object) -> bool:
        return isinstance(value, self.type)

    def __str__(self) -> str:
        return self.description


@dataclasses.dataclass(frozen=True)
class Each(Constraint):
    """One value meeting ``constraint``, or a non-empty sequence (list, tuple, 1-D array) of such values
    (ISFedAvg's per-agent epochs E_k: one for all agents, or one per agent)."""

    constraint: Constraint

    def satisfied_by(self, value: object) -> bool:
        if self.constraint.satisfied_by(value):
            return True
        if isinstance(value, np.ndarray):
            value = list(value) if value.ndim == 1 else None
        return isinstance(value, (list, tuple)) and len(value) > 0 and all(self.constraint.satisfied_by(v) for v in value)

    def __str__(self) -> str:
        return f"{self.constraint}, or a sequence of such values"


#: True or False, and nothing else (not 0 or 1).
BOOLEAN = InstanceOf(bool, "True or False")
#: An integer >= 1.
COUNT = integers(1)
#: A real number > 0.
POSITIVE = reals(0, None, "()")
#: A real number >= 0.
NON_NEGATIVE = reals(0)
#: A real number in [0, 1].
PROBABILITY = reals(0, 1)


@dataclasses.dataclass(frozen=True)
class Param:
    """A parameter's constraints, with a ``label`` for the message where the bare name says too little
    (``Param(integers(1), label="number of strata H")``) and ``words`` where the generated requirement would
    say less than a phrase (``Param(POSITIVE, Options("none"), None, words="a number > 0 or 'none'")``)."""

    constraints: tuple[Constraint | None, ...]
    label: str | None = None
    words: str | None = None

    def __init__(self, *constraints: Constraint | None, label: str | None = None, words: str | None = None) -> None:
        object.__setattr__(self, "constraints", constraints)
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "words", words)


Spec = Constraint | None | Sequence[Constraint | None] | Param


#: A seed: what numpy's SeedSequence and the (seed, round, purpose) cells take.
SEED = Param(integers(0, 2**63 - 1), words="an integer in [0, 2^63)")


def _unpack(spec: Spec) -> tuple[tuple[Constraint | None, ...], str | None]:
    if isinstance(spec, Param):
        return spec.constraints, spec.label
    if spec is None or isinstance(spec, Constraint):
        return (spec,), None
    return tuple(spec), None


def requirement(spec: Spec) -> str:
    """What ``spec`` admits, in words: "an integer >= 1 or None"."""
    if isinstance(spec, Param) and spec.words:
        return spec.words
    constraints, _ = _unpack(spec)
    words = ["None" if c is None else str(c) for c in constraints]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def satisfied(spec: Spec, value: object) -> bool:
    """Whether ``value`` meets any of ``spec``'s constraints (None admits None)."""
    constraints, _ = _unpack(spec)
    return any(value is None if c is None else c.satisfied_by(value) for c in constraints)


T = TypeVar("T")


def check(name: str, value: T, *constraints: Constraint | Param | None, owner: str | None = None, label: str | None = None) -> T:
    """``value`` if it meets one of ``constraints`` (or the one :class:`Param` given); otherwise a
    :class:`ParameterError` with the template (naming ``label`` or ``name``)."""
    if len(constraints) == 1 and isinstance(constraints[0], Param):
        given = constraints[0]
        spec: Param = given if label is None else Param(*given.constraints, label=label, words=given.words)
    else:
        plain = [c for c in constraints if not isinstance(c, Param)]
        if len(plain) < len(constraints):
            raise TypeError(f"check({name!r}): a Param is given alone, not among other constraints")
        spec = Param(*plain, label=label)
    validate(owner, {name: value}, {name: spec})
    return value


def validate(owner: str | None, values: Mapping[str, object], spec: Mapping[str, Spec]) -> None:
    """Check every value of ``values`` that ``spec`` constrains, in ``spec``'s order; the first refusal
    raises (one line)."""
    for name, rule in spec.items():
        if name in values and not satisfied(rule, values[name]):
            _, label = _unpack(rule)
            fail(name, values[name], requirement(rule), owner, label)


# --- Literal annotations as options ------------------------------------------------------------------


def literal_spec(annotation: object) -> Spec | None:
    """The constraint a ``Literal[...]`` annotation states (``Literal["a", "b"] | None`` admits None too);
    None for any other annotation."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return Options(*typing.get_args(annotation))
    if origin in (Union, types.UnionType):
        args = typing.get_args(annotation)
        literals = [a for a in args if typing.get_origin(a) is Literal]
        others = [a for a in args if a is not type(None) and typing.get_origin(a) is not Literal]
        if literals and not others:
            options = Options(*[v for a in literals for v in typing.get_args(a)])
            return [options, None] if type(None) in args else options
    return None


def _literal_specs(owner: object, names: Iterable[str]) -> dict[str, Spec]:
    """The Literal-derived constraints of ``names`` among ``owner``'s annotations (a class or function)."""
    hints = typing.get_type_hints(owner)
    found = {name: literal_spec(hints[name]) for name in names if name in hints}
    return {name: spec for name, spec in found.items() if spec is not None}


# --- declarations -------------------------------------------------------------------------------------

C = TypeVar("C", bound=type)


def declared_values(obj: DataclassInstance, names: Iterable[str] | None = None) -> dict[str, object]:
    """The values of a dataclass's declared fields, by name: all of ``obj``'s fields in their declared order, or
    those in ``names``. The one place fedsample reads its own dataclasses' fields by name (capabilities records,
    :func:`constrained`'s rules, a part's description, model specs, the Flower app's settings)."""
    wanted = [f.name for f in dataclasses.fields(obj)] if names is None else names
    return {name: getattr(obj, name) for name in wanted}


_RULES: weakref.WeakKeyDictionary[type, dict[str, Spec]] = weakref.WeakKeyDictionary()
"""Each :func:`constrained` class's rules (its own and those it inherits), by class."""


def inherited_rules(cls: type) -> dict[str, Spec]:
    """The rules of the nearest :func:`constrained` class ``cls`` derives from (none: {})."""
    return next((_RULES[base] for base in cls.__mro__ if base in _RULES), {})


def constrained(**spec: Spec) -> Callable[[C], C]:
    """Class decorator (under ``@dataclass``): the fields named in ``spec`` and the ``Literal``-typed fields are
    checked, in that order, before the class's own ``__post_init__`` runs; the owner in messages is the class
    name. Constraints are inherited by subclasses that are constrained too; :func:`inherited_rules` answers a class's
    rules (for docs and for callers that reuse them)."""

    def decorate(cls: C) -> C:
        rules = {**inherited_rules(cls), **spec}
        own = cls.__dict__.get("__post_init__")
        parent = next((base.__dict__["__post_init__"] for base in cls.__mro__[1:] if "__post_init__" in base.__dict__), None)
        literals: dict[type, dict[str, Spec]] = {}  # per class: a subclass that is not constrained has fields of its own

        def __post_init__(self: DataclassInstance) -> None:
            kind = type(self)
            if kind not in literals:
                names = [f.name for f in dataclasses.fields(self)] if dataclasses.is_dataclass(self) else []
                literals[kind] = {k: v for k, v in _literal_specs(kind, names).items() if k not in rules}
            validate(kind.__name__, declared_values(self, (*rules, *literals[kind])), {**rules, **literals[kind]})
            if own is not None:
                own(self)
            elif parent is not None:  # the nearest parent's, as a dataclass runs it
                parent(self)

        _RULES[cls] = rules
        cls.__post_init__ = __post_init__  # type: ignore[attr-defined]  # the method this decorator gives the class
        return cls

    return decorate


F = TypeVar("F", bound=Callable[..., object])


@dataclasses.dataclass(frozen=True)
class Renames:
    """The keywords a function takes beside its parameters' names (:func:`arguments`): ``aliases`` (a documented
    alias -> its canonical parameter, the papers' symbols) and ``renamed`` (an old name -> its new name, refused
    naming it)."""

    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    renamed: Mapping[str, str] = dataclasses.field(default_factory=dict)


_RENAMES: weakref.WeakKeyDictionary[Callable[..., object], Renames] = weakref.WeakKeyDictionary()
"""Each :func:`arguments` function's :class:`Renames`, by the function it returns."""


def renames(fn: Callable[..., object]) -> Renames:
    """The aliases and renamed keywords that ``fn``'s :func:`arguments` declares (none: an empty :class:`Renames`)."""
    return _RENAMES.get(fn, Renames())


def arguments(
    owner: str | None = None, *, aliases: Mapping[str, str] | None = None, renamed: Mapping[str, str] | None = None,
    **spec: Spec,
) -> Callable[[F], F]:
    """Function decorator: ``aliases`` (old name -> canonical name, the papers' symbols kept as documented
    aliases) are mapped to their canonical keyword, and giving both is one line; a ``renamed`` keyword is
    refused with one line naming its new name; then every given argument named in ``spec``, and every given
    ``Literal``-typed one, is checked. The owner in messages is ``owner`` (default: the function's name); an
    argument given under an alias is named as given. :func:`renames` answers them for the returned function."""
    declared = Renames(dict(aliases or {}), dict(renamed or {}))
    aliases, renamed = declared.aliases, declared.renamed

    def decorate(fn: F) -> F:
        who = owner or fn.__name__
        signature = inspect.signature(fn)
        literals: dict[str, Spec] | None = None

        @functools.wraps(fn)
        def wrapper(*args: object, **kwargs: object) -> object:
            nonlocal literals
            given_as = {}
            for old, new in renamed.items():
                if old in kwargs:
                    raise ParameterError(f"{who}: {old} was renamed {new}", who, old, kwargs[old])
            for alias, canonical in aliases.items():
                if alias in kwargs:
                    if canonical in kwargs:
                        raise ParameterError(
                            f"{who}: {alias} and {canonical} name the same parameter; give one", who, alias, kwargs[alias]
                        )
                    kwargs[canonical] = kwargs.pop(alias)
                    given_as[canonical] = alias
            if literals is None:
                literals = {k: v for k, v in _literal_specs(fn, signature.parameters).items() if k not in spec}
            try:
                bound = signature.bind_partial(*args, **kwargs).arguments
            except TypeError:
                return fn(*args, **kwargs)  # Python's own message for a wrong call
            for name, rule in {**spec, **literals}.items():
                if name in bound and not satisfied(rule, bound[name]):
                    _, label = _unpack(rule)
                    fail(given_as.get(name, name), bound[name], requirement(rule), who, None if name in given_as else label)
            return fn(*args, **kwargs)

        _RENAMES[wrapper] = declared
        return cast(F, wrapper)

    return decorate


# --- the older helpers (one call, one value) -----------------------------------------------------------


def positive(name: str, value: object, optional: bool = False) -> None:
    """``value`` is a finite number > 0 (or None when ``optional``)."""
    check(name, value, POSITIVE, *([None] if optional else []))


def non_negative(name: str, value: object) -> None:
    """``value`` is a finite number >= 0."""
    check(name, value, NON_NEGATIVE)


def count(name: str, value: object) -> None:
    """``value`` is an integer >= 1."""
    check(name, value, COUNT)


def in_interval(name: str, value: object, low: float, high: float, closed: str = "[)") -> None:
    """``value`` lies in the interval from ``low`` to ``high``, ``closed`` giving its brackets ("[)", "(]", ...)."""
    check(name, value, reals(low, high, closed))
