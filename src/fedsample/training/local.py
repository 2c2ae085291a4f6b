"""Local solvers: what a chosen client computes on the samples its data plan drew.

Each solver returns a pseudo-gradient ``update`` (a descent direction) and the number of local steps
taken: for SGD the update is ``w_global - w_local``; for FedSampling's one-gradient mode it is
``G_c = (1/K) * sum_{s in S_c} g_s`` (Qi et al. 2023, §3.2). The server then applies ``w - eta * aggregate``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedsample import checks
from fedsample.training.functional import Params, tree_map, weighted_gradient, zeros_like

if TYPE_CHECKING:
    from fedsample.client import ClientContext, LocalSample


@dataclass
class LocalResult:
    """The pseudo-gradient, the local steps taken (tau_k), the mean loss and, where the solver knows it,
    FedNova's effective number of steps ||a_k||_1 (Wang et al. 2020; None: a_k = tau_k)."""

    update: Params
    steps: int
    loss: float
    norm_steps: float | None = None


@dataclass(frozen=True)
class LocalSGD:
    """Minibatch SGD for ``epochs`` passes or ``steps`` steps over the drawn sample (McMahan et al. 2017).

    ``batch_size=None`` takes the whole drawn sample as one batch. With ``momentum`` the heavy-ball buffer
    b <- momentum * b + g is used; ``weight_decay`` adds lambda * w to g; ``prox_mu`` adds FedProx's
    proximal gradient mu * (w - w_global) (Li et al. 2020). The learning rate in round t is
    ``lr * lr_decay ** t``.
    """

    lr: float = 0.05
    epochs: int | None = 1
    steps: int | None = None
    batch_size: int | None = 32
    momentum: float = 0.0
    weight_decay: float = 0.0
    prox_mu: float = 0.0
    lr_decay: float = 1.0

    def __post_init__(self) -> None:
        checks.positive("lr", self.lr)
        checks.positive("batch_size", self.batch_size, optional=True)
        if (self.epochs is None) == (self.steps is None):
            raise ValueError("LocalSGD needs exactly one of epochs or steps")
        checks.positive("epochs", self.epochs, optional=True)
        checks.positive("steps", self.steps, optional=True)
        checks.in_interval("momentum", self.momentum, 0, 1)
        checks.non_negative("weight_decay", self.weight_decay)
        checks.non_negative("prox_mu (FedProx mu)", self.prox_mu)
        checks.in_interval("lr_decay", self.lr_decay, 0, 1, closed="(]")

    def learning_rate(self, round: int) -> float:
        return self.lr * self.lr_decay**round

    def batches(self, sample: "LocalSample", rng: np.random.Generator) -> list[np.ndarray]:
        """Positions (into the drawn sample) of each minibatch: shuffled passes without replacement, or,
        when the plan gives a sampling distribution, batches drawn with replacement from it."""
        n = len(sample.indices)
        b = n if self.batch_size is None else min(self.batch_size, n)
        if sample.probs is not None:
            count = self.steps if self.steps is not None else self.epochs * math.ceil(n / b)
            return list(rng.choice(n, size=(count, b), replace=True, p=sample.probs))
        if self.steps is not None:
            passes = math.ceil(self.steps * b / n)
            order = np.concatenate([rng.permutation(n) for _ in range(passes)])
            return [order[i * b : (i + 1) * b] for i in range(self.steps)]
        order = np.concatenate([rng.permutation(n) for _ in range(self.epochs)])
        per_epoch = math.ceil(n / b)
        return [order[e * n : (e + 1) * n][i * b : (i + 1) * b] for e in range(self.epochs) for i in range(per_epoch)]

    def run(self, ctx: "ClientContext", sample: "LocalSample", params: Params, round: int, rng: np.random.Generator) -> LocalResult:
        grad_fn = weighted_gradient(ctx.module, ctx.task)
        lr = self.learning_rate(round)
        x, y = ctx.x[sample.indices], ctx.y[sample.indices]
        scale = None if sample.scale is None else torch.as_tensor(sample.scale, dtype=x.dtype, device=x.device)
        w = {k: v.clone() for k, v in params.items()}
        buf = zeros_like(params) if self.momentum else None
        losses = []
        for batch in self.batches(sample, rng):
            batch = torch.as_tensor(batch, device=x.device)
            weights = torch.full((len(batch),), 1.0 / len(batch), dtype=x.dtype, device=x.device)
            if scale is not None:
                weights = weights * scale[batch]
            g, loss = grad_fn(w, x[batch], y[batch], weights)
            w, buf = sgd_step(w, g, buf, params, lr, self.momentum, self.weight_decay, self.prox_mu)
            losses.append(float(loss))
        update = tree_map(lambda a, b: a - b, params, w)
        steps = len(losses)
        norm = effective_steps(steps, self.momentum, lr * self.prox_mu)
        return LocalResult(update=update, steps=steps, loss=float(np.mean(losses)), norm_steps=norm)


def effective_steps(steps: int, momentum: float = 0.0, lr_mu: float = 0.0) -> float:
    """FedNova's ||a_k||_1 for ``steps`` steps of :func:`sgd_step` (Wang et al. 2020, Eq. 7 and §5).

    The local update of SGD-type solvers is w_global - w_local = lr * sum_t a_{k,t} * g_t (g_t the
    minibatch gradient at step t, weight decay counted as part of g_t, as in the authors' code), and
    FedNova normalizes it by ||a_k||_1 = sum_t a_{k,t}. Closed forms (the paper's cases):

    - plain SGD: a_k = [1, ..., 1], ||a_k||_1 = tau_k;
    - heavy-ball momentum rho (b <- rho*b + g, w <- w - lr*b): the gradient of step t (0-based) enters
      every later buffer, a_{k,t} = (1 - rho^(tau_k - t)) / (1 - rho), so
      ||a_k||_1 = (tau_k - rho*(1 - rho^tau_k)/(1 - rho)) / (1 - rho);
    - FedProx's proximal term with lr*mu: a_{k,t} = (1 - lr*mu)^(tau_k - 1 - t), so
      ||a_k||_1 = (1 - (1 - lr*mu)^tau_k) / (lr*mu).

    Momentum and the proximal term together have no closed form in the paper; because the dynamics of
    e = w - w_global are linear, sum_t a_{k,t} is the response to a constant unit gradient, computed here by
    that scalar recursion (e_0 = b_0 = 0; b <- rho*b + 1 + mu*e; e <- e - lr*b; ||a||_1 = -e_tau / lr).
    This equals the three closed forms above and is exact for :func:`sgd_step`. (The sum equals the L1
    norm while every a_{k,t} >= 0, i.e. for lr*mu < 1, as in any sane setting.)
    """
    e, b = 0.0, 0.0
    for _ in range(int(steps)):
        b = momentum * b + 1.0 + lr_mu * e
        e = e - b  # lr factored out: e here is (w - w_global) / lr
    return -e


def sgd_step(
    w: Params, g: Params, buf: Params | None, anchor: Params, lr: float, momentum: float, weight_decay: float, prox_mu: float
) -> tuple[Params, Params | None]:
    """One SGD step: d = g + weight_decay*w + prox_mu*(w - anchor); b = momentum*b + d; w = w - lr*b."""
    d = {k: g[k] + weight_decay * w[k] + prox_mu * (w[k] - anchor[k]) for k in w}
    if buf is not None:
        buf = {k: momentum * buf[k] + d[k] for k in w}
        d = buf
    return {k: w[k] - lr * d[k] for k in w}, buf


@dataclass(frozen=True)
class OneGradient:
    """One gradient at the global model over the drawn sample, normalized by ``K`` (FedSampling,
    §3.2: G_c = (1/K) * sum_{s in S_c} g_s) or, with ``K=None``, by the local sample size
    (the naive method of §3.3: G_c = (1/|S_c|) * sum g_s). Per-sample ``scale`` from the plan multiplies g_s."""

    K: int | None = None

    def __post_init__(self) -> None:
        checks.positive("K", self.K, optional=True)

    def run(self, ctx: "ClientContext", sample: "LocalSample", params: Params, round: int, rng: np.random.Generator) -> LocalResult:
        x, y = ctx.x[sample.indices], ctx.y[sample.indices]
        norm = self.K if self.K is not None else len(sample.indices)
        weights = torch.full((len(sample.indices),), 1.0 / norm, dtype=x.dtype, device=x.device)
        if sample.scale is not None:
            weights = weights * torch.as_tensor(sample.scale, dtype=x.dtype, device=x.device)
        g, loss = weighted_gradient(ctx.module, ctx.task)(params, x, y, weights)
        return LocalResult(update=g, steps=1, loss=float(loss) * norm / len(sample.indices))


LocalSolver = LocalSGD | OneGradient
