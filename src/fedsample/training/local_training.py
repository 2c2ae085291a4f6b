"""One local-training object: the settings of a chosen client's local SGD, given to a recipe once.

Every recipe with local SGD takes ``local: LocalTraining`` (in the manner of pfl-research's frozen
hyper-parameter objects) instead of repeating the solver's seven settings in its signature:

    fedavg(clients_per_round=5, local=LocalTraining(lr=0.1, steps=50, lr_decay=0.992))

The flat keywords the recipes took before (``lr``, ``epochs``, ``steps``, ``batch_size``, ``local_momentum``,
``weight_decay``, ``lr_decay``) keep working and are folded into the object by :func:`fold`, the one mechanism
(an experiment file may write either, or a ``[strategies.local]`` table of the object's fields). A setting given
both flat and in ``local`` is refused in one line.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from fedsample import checks
from fedsample.checks import COUNT, InstanceOf, Options, Param
from fedsample.training.local import SGD_SETTINGS, LocalOptimizer, LocalSGD, epochs_or_steps, sgd_terms_left_out
from fedsample.training.rules import Transform, add_proximal

__all__ = ["BATCH", "FLAT", "Batch", "LocalTraining", "fields_of", "fold"]


#: A local minibatch: a count, or "all" (None from Python): each client's whole drawn sample as one batch.
Batch = int | Literal["all"] | None
#: What a minibatch size admits (:data:`Batch`).
BATCH = Param(COUNT, Options("all"), None, words="an integer >= 1, or 'all' (each client's whole drawn sample; None from Python)")

_SETTINGS = {**SGD_SETTINGS, "batch_size": BATCH}  # a name, not a literal in the decorator: sphinx parses the module


@dataclass(frozen=True)
@checks.constrained(**_SETTINGS, transforms=InstanceOf(tuple, "a tuple of transformations (fedsample.training.rules)"))
class LocalTraining:
    """A client's local SGD (McMahan et al. 2017): ``epochs`` passes or ``steps`` steps (not both; one epoch where
    neither is given) of minibatches of ``batch_size`` rows of its drawn sample ("all" or None: the whole drawn sample as one batch),
    learning rate ``lr * lr_decay ** t`` in round t, heavy-ball ``momentum`` and ``weight_decay``
    (:class:`~fedsample.training.local.SGDStep`). ``transforms`` (a chain of :mod:`fedsample.training.rules`, e.g.
    ``(scale_by_adam(),)`` for a local Adam) replaces SGD's direction: the solver is then a
    :class:`~fedsample.training.local.LocalOptimizer`, and momentum and weight decay are transformations of the chain
    (``trace``, ``add_decayed_weights``). A method's own term of the local step (FedProx's ``prox_mu``) is the
    recipe's parameter, not a setting here."""

    lr: float = 0.05
    epochs: int | None = None
    steps: int | None = None
    batch_size: Batch = 32
    momentum: float = 0.0
    weight_decay: float = 0.0
    lr_decay: float = 1.0
    transforms: tuple[Transform, ...] = ()

    def __post_init__(self) -> None:
        if self.batch_size == "all":
            object.__setattr__(self, "batch_size", None)
        if self.epochs is None and self.steps is None:
            object.__setattr__(self, "epochs", 1)
        epochs_or_steps(self.epochs, self.steps, type(self).__name__)
        if self.transforms:
            sgd_terms_left_out(type(self).__name__, momentum=self.momentum, weight_decay=self.weight_decay)

    def solver(self, prox_mu: float = 0.0) -> LocalSGD:
        """The local solver these settings declare (with a method's proximal term ``prox_mu``, FedProx's mu: the
        first transformation of a chain)."""
        batch = None if self.batch_size == "all" else self.batch_size
        if self.transforms:
            chained = ((add_proximal(prox_mu),) if prox_mu else ()) + self.transforms
            return LocalOptimizer(lr=self.lr, epochs=self.epochs, steps=self.steps, batch_size=batch, lr_decay=self.lr_decay,
                                  transforms=chained)
        return LocalSGD(
            lr=self.lr, epochs=self.epochs, steps=self.steps, batch_size=batch, momentum=self.momentum,
            weight_decay=self.weight_decay, prox_mu=prox_mu, lr_decay=self.lr_decay,
        )


FLAT: dict[str, str] = {
    "lr": "lr", "epochs": "epochs", "steps": "steps", "batch_size": "batch_size", "local_momentum": "momentum",
    "weight_decay": "weight_decay", "lr_decay": "lr_decay",
}
"""The flat keywords of the recipes and the field of :class:`LocalTraining` each one sets."""


def fields_of(local: object, owner: str) -> dict[str, object]:
    """The settings ``local`` gives: every field of an object, the keys of a mapping (an experiment file's
    ``[strategies.local]`` table), each a field of :class:`LocalTraining`."""
    if isinstance(local, LocalTraining):
        return dict(vars(local))  # its fields, the transformations as they are
    if not isinstance(local, Mapping):
        checks.fail("local", local, "a LocalTraining or a mapping of its fields", owner)
    known = [f.name for f in dataclasses.fields(LocalTraining)]
    unknown = sorted(set(local) - set(known))
    if unknown:
        checks.fail("local", dict(local), f"a mapping of LocalTraining's fields ({', '.join(known)}); {unknown[0]!r} is none", owner)
    return dict(local)


def fold(
    owner: str, default: LocalTraining, local: object, flat: Mapping[str, object]
) -> LocalTraining:
    """The recipe ``owner``'s local training: its ``default`` with the settings of ``local`` and the ``flat``
    keywords (:data:`FLAT`) over it. A setting given both flat and in ``local`` is refused in one line. As the
    flat keywords always did, ``steps`` given replaces ``epochs`` (and ``epochs`` given alone replaces a
    default's ``steps``)."""
    given = {} if local is None else fields_of(local, owner)
    changes: dict[str, Any] = {FLAT[k]: v for k, v in flat.items()}  # the caller's values (object): LocalTraining's constraints check each when replace builds it
    for name, field in FLAT.items():
        if name in flat and field in given:
            checks.fail(name, flat[name], f"given once: in local= or flat, not both (local= has {field} = {given[field]!r})", owner)
    changes.update(given)
    if changes.get("steps") is not None and "epochs" not in given:
        changes["epochs"] = None  # flat: even over an explicit epochs, as the recipes always did
    elif changes.get("epochs") is not None and "steps" not in changes:
        changes["steps"] = None
    return dataclasses.replace(default, **changes)
