"""Local update rules as chains of transformations (in the manner of optax's ``GradientTransformation`` and
``chain``): a local step turns the minibatch gradient g into a direction d through each transformation in turn,
then steps w <- w - lr * d.

:class:`~fedsample.training.local.SGDStep` (local SGD) is the chain ``add_decayed_weights(weight_decay)``,
``add_proximal(prox_mu)``, ``trace(momentum)``; a local Adam is ``add_decayed_weights(weight_decay)``,
``scale_by_adam(beta1, beta2, eps)``. Every engine steps a rule through :meth:`Rule.apply_`, one client's
parameters or a stack of clients' (a leading client dimension: every transformation here is elementwise), so a
chain runs on the loop and on the vectorized engine's stacked clients alike. The state of a chain is one list of
tensors shaped as the parameters (``slots`` of them per parameter, each transformation's in turn), which the
vectorized engine slices to the clients still stepping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
import torch

__all__ = ["Chain", "Rule", "Transform", "add_decayed_weights", "add_proximal", "chain", "scale_by_adam", "trace"]

Tensors = list[torch.Tensor] | tuple[torch.Tensor, ...]


class Transform(Protocol):
    """One stage of a local rule: ``update(d, w, anchor, state, step)`` returns the next direction from ``d``
    (never changing ``d`` in place: it may be the gradient itself), updating its ``state`` (``slots`` lists shaped
    as ``w``) in place; ``anchor`` is the global model (broadcasting against stacked ``w``), ``step`` the 1-based
    local step."""

    @property
    def slots(self) -> int: ...

    def update(self, d: Tensors, w: Tensors, anchor: Tensors, state: list[Tensors], step: int) -> Tensors: ...


@dataclass(frozen=True)
class add_decayed_weights:  # noqa: N801 - named as optax names its transformations
    """d + weight_decay * w (an l2 term of the local loss)."""

    weight_decay: float
    slots: ClassVar[int] = 0

    def update(self, d: Tensors, w: Tensors, anchor: Tensors, state: list[Tensors], step: int) -> Tensors:
        return torch._foreach_add(d, w, alpha=self.weight_decay)


@dataclass(frozen=True)
class add_proximal:  # noqa: N801
    """d + mu * (w - w_global): FedProx's proximal gradient (Li et al. 2020)."""

    mu: float
    slots: ClassVar[int] = 0

    def update(self, d: Tensors, w: Tensors, anchor: Tensors, state: list[Tensors], step: int) -> Tensors:
        return torch._foreach_add(d, [wi - ai for wi, ai in zip(w, anchor)], alpha=self.mu)


@dataclass(frozen=True)
class trace:  # noqa: N801
    """Heavy-ball momentum: b <- momentum * b + d, the direction b."""

    momentum: float
    slots: ClassVar[int] = 1

    def update(self, d: Tensors, w: Tensors, anchor: Tensors, state: list[Tensors], step: int) -> Tensors:
        (buf,) = state
        torch._foreach_mul_(buf, self.momentum)
        torch._foreach_add_(buf, d)
        return buf


@dataclass(frozen=True)
class scale_by_adam:  # noqa: N801
    """Adam's direction (Kingma & Ba 2015, Algorithm 1): m <- beta1 m + (1 - beta1) d, v <- beta2 v + (1 - beta2) d^2,
    the direction (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) at the t-th local step."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    slots: ClassVar[int] = 2

    def update(self, d: Tensors, w: Tensors, anchor: Tensors, state: list[Tensors], step: int) -> Tensors:
        m, v = state
        torch._foreach_mul_(m, self.beta1)
        torch._foreach_add_(m, d, alpha=1.0 - self.beta1)
        torch._foreach_mul_(v, self.beta2)
        torch._foreach_addcmul_(v, d, d, value=1.0 - self.beta2)
        denominator = torch._foreach_div(list(v), 1.0 - self.beta2**step)
        torch._foreach_sqrt_(denominator)
        torch._foreach_add_(denominator, self.eps)
        direction = torch._foreach_div(m, denominator)
        torch._foreach_div_(direction, 1.0 - self.beta1**step)
        return direction


class Rule:
    """A local rule: its ``transforms`` in order, then w <- w - lr * d (:meth:`apply_`). The engines ask it for
    its state (:meth:`init`) and whether it is local SGD's rule (``linear``: :class:`~fedsample.training.local.SGDStep`,
    whose update is linear in the gradients; the one-step union, the low-rank form, the fused layers and FedNova's
    a_k are transformations of that rule, and another rule is stepped as it is, on every engine)."""

    lr: float

    @property
    def transforms(self) -> tuple[Transform, ...]:
        raise NotImplementedError

    @property
    def linear(self) -> bool:
        return False

    @property
    def fusable(self) -> bool:
        return False

    @property
    def is_gradient(self) -> bool:
        return False

    @property
    def slots(self) -> int:
        """State tensors per parameter (0: a stateless rule)."""
        return sum(t.slots for t in self.transforms)

    def init(self, w: Tensors) -> list[torch.Tensor]:
        """The rule's zero state for parameters ``w`` (stacked or not): ``slots`` tensors per parameter."""
        return [torch.zeros_like(v) for _ in range(self.slots) for v in w]

    def apply_(self, w: list[torch.Tensor], g: Tensors, state: list[torch.Tensor], anchor: Tensors, step: int = 1) -> None:
        """One local step in place: d = g through every transformation, then w <- w - lr * d; ``state`` (from
        :meth:`init`, or its rows of the clients still stepping) is updated in place, ``g`` left as it is."""
        d: Tensors = g
        at, n = 0, len(w)
        for t in self.transforms:
            slots: list[Tensors] = [state[at + i * n : at + (i + 1) * n] for i in range(t.slots)]
            d = t.update(d, w, anchor, slots, step)
            at += t.slots * n
        torch._foreach_add_(w, d, alpha=-self.lr)

    def first_step_(self, g: list[torch.Tensor], w0: list[torch.Tensor]) -> list[torch.Tensor]:
        """The update w0 - w1 of one step from w0, in place in ``g``: a linear rule's (the engines ask no other)."""
        raise NotImplementedError(f"{type(self).__name__} is not linear: its first step is taken as any other")

    def effective_table(self, top: int) -> np.ndarray | None:
        """FedNova's ||a||_1 for 0..top steps; None where the rule is not linear (FedNova refuses such a rule:
        :func:`fedsample.strategy.rules.steps_normalize_under_a_linear_rule`)."""
        return None


@dataclass(frozen=True)
class Chain(Rule):
    """The local rule of ``transforms`` at learning rate ``lr`` (:func:`chain`)."""

    lr: float
    steps: tuple[Transform, ...]

    def __post_init__(self) -> None:
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"Chain: lr must be > 0, got {self.lr!r}")

    @property
    def transforms(self) -> tuple[Transform, ...]:
        return self.steps


def chain(*transforms: Transform, lr: float) -> Chain:
    """The local rule that applies ``transforms`` in order, then w <- w - lr * d (optax's ``chain`` with
    ``scale(-lr)`` last): ``chain(add_decayed_weights(1e-4), scale_by_adam(), lr=1e-3)`` is a local Adam."""
    return Chain(lr, tuple(transforms))
