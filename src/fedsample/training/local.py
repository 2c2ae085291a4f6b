"""Local solvers: what a chosen client computes on the samples its data plan drew.

Each solver returns a pseudo-gradient ``update`` (a descent direction) and the number of local steps
taken: for SGD the update is ``w_global - w_local``; for FedSampling's one-gradient mode it is
``G_c = (1/K) * sum_{s in S_c} g_s`` (Qi et al. 2023, §3.2). The server then applies ``w - eta * aggregate``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch

from fedsample import checks
from fedsample.messages import ClientContext, LocalSample
from fedsample.training.dtypes import float_dtype
from fedsample.training.functional import Params, weighted_gradient, weighted_loss_fn
from fedsample.training.random_layers import generator_for, random_layers_of



@dataclass
class LocalResult:
    """The pseudo-gradient, the local steps taken (tau_k), the mean loss and, where the solver knows it,
    FedNova's effective number of steps ||a_k||_1 (Wang et al. 2020; None: a_k = tau_k)."""

    update: Params
    steps: int
    loss: float
    norm_steps: float | None = None


@dataclass(frozen=True)
@checks.constrained(
    lr=checks.POSITIVE, epochs=[checks.COUNT, None], steps=[checks.COUNT, None], batch_size=[checks.COUNT, None],
    momentum=checks.reals(0, 1, "[)"), weight_decay=checks.NON_NEGATIVE, prox_mu=checks.NON_NEGATIVE,
    lr_decay=checks.reals(0, 1, "(]"),
)
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
        if self.epochs is None and self.steps is None:
            checks.fail("epochs", None, "an integer >= 1 when steps is None (give exactly one of epochs or steps)", type(self).__name__)
        if self.epochs is not None and self.steps is not None:
            checks.fail("steps", self.steps, "None when epochs is given (give exactly one of epochs or steps)", type(self).__name__)

    def learning_rate(self, round: int) -> float:
        return self.lr * self.lr_decay**round

    def batches(self, sample: LocalSample, rng: np.random.Generator) -> list[np.ndarray]:
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

    def run(self, ctx: ClientContext, sample: LocalSample, params: Params, round: int, rng: np.random.Generator) -> LocalResult:
        """The local steps, each an in-place update of one working copy of the parameters; minibatches are
        gathered from the client's data by position (no copy of the drawn sample), dropout masks come from the
        client's stream (:mod:`fedsample.training.random_layers`)."""
        loss_fn = weighted_loss_fn(ctx.module, ctx.task)
        layers, lr = random_layers_of(ctx.module), self.learning_rate(round)
        generator = generator_for(rng) if layers is not None else None
        device, dtype = ctx.x.device, float_dtype(ctx.x)
        positions = torch.as_tensor(sample.indices, device=device)
        scale = None if sample.scale is None else torch.as_tensor(sample.scale, dtype=dtype, device=device)
        anchor = list(params.values())
        w = [v.detach().clone().requires_grad_(True) for v in anchor]
        buf = [torch.zeros_like(v) for v in anchor] if self.momentum else None
        losses = []
        for batch in self.batches(sample, rng):
            batch = torch.as_tensor(batch, device=device)
            rows = positions[batch]
            weights = torch.full((len(batch),), 1.0 / len(batch), dtype=dtype, device=device)
            if scale is not None:
                weights = weights * scale[batch]
            masks = layers.draw(generator, len(batch), dtype, device) if layers is not None else None
            with torch.enable_grad():
                loss = loss_fn(dict(zip(params, w)), ctx.x[rows], ctx.y[rows], weights, masks)
                grads = list(torch.autograd.grad(loss, w))
            with torch.no_grad():
                sgd_step_(w, grads, buf, anchor, lr, self.momentum, self.weight_decay, self.prox_mu)
            losses.append(loss.detach())  # no host sync per step (one at the end)
        update = {k: a - v.detach() for k, a, v in zip(params, anchor, w)}
        steps = len(losses)
        norm = effective_steps(steps, self.momentum, lr * self.prox_mu)
        mean_loss = float(torch.stack(losses).double().mean()) if losses else float("nan")
        return LocalResult(update=update, steps=steps, loss=mean_loss, norm_steps=norm)


def effective_steps(steps: int, momentum: float = 0.0, lr_mu: float = 0.0) -> float:
    """FedNova's ||a_k||_1 for ``steps`` steps of :func:`sgd_step_` (Wang et al. 2020, Eq. 7 and §5).

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
    This equals the three closed forms above and is exact for :func:`sgd_step_`. (The sum equals the L1
    norm while every a_{k,t} >= 0, i.e. for lr*mu < 1, as in any sane setting.)
    """
    e, b = 0.0, 0.0
    for _ in range(int(steps)):
        b = momentum * b + 1.0 + lr_mu * e
        e = e - b  # lr factored out: e here is (w - w_global) / lr
    return -e


def sgd_step_(
    w: list[torch.Tensor], g: list[torch.Tensor], buf: list[torch.Tensor] | None, anchor: list[torch.Tensor],
    lr: float, momentum: float, weight_decay: float, prox_mu: float,
) -> None:
    """One SGD step in place: d = g + weight_decay*w + prox_mu*(w - anchor); b = momentum*b + d; w = w - lr*b.
    Zero terms cost nothing; ``w`` and ``buf`` are updated in place (``anchor`` broadcasts against stacked
    ``w``), ``g`` is left as it is."""
    d = g
    if weight_decay:
        d = torch._foreach_add(d, w, alpha=weight_decay)
    if prox_mu:
        d = torch._foreach_add(d, [wi - ai for wi, ai in zip(w, anchor)], alpha=prox_mu)
    if buf is not None:
        torch._foreach_mul_(buf, momentum)
        torch._foreach_add_(buf, d)
        d = buf
    torch._foreach_add_(w, d, alpha=-lr)


def sgd_step(
    w: Params, g: Params, buf: Params | None, anchor: Params, lr: float, momentum: float, weight_decay: float, prox_mu: float
) -> tuple[Params, Params | None]:
    """:func:`sgd_step_` on copies: returns the new parameters and momentum buffer, leaves the inputs alone."""
    new_w = {k: v.detach().clone() for k, v in w.items()}
    new_buf = {k: v.clone() for k, v in buf.items()} if buf is not None else None
    with torch.no_grad():
        sgd_step_(list(new_w.values()), [g[k] for k in w], None if new_buf is None else list(new_buf.values()),
                  [anchor[k] for k in w], lr, momentum, weight_decay, prox_mu)
    return new_w, new_buf


@dataclass(frozen=True)
@checks.constrained(rho=checks.Param(checks.NON_NEGATIVE, label="rho (the l2 term of the local risk)"))
class EpochSGD(LocalSGD):
    """ISFedAvg's local solver (Rizk, Vlaski & Sayed 2022): local SGD over the minibatches an
    :class:`~fedsample.sampling.importance.ImportanceBatches` plan drew: one step per epoch block, in
    order, each step w <- w - lr * (1/B) * sum_b scale_b * grad Q(w; x_b) (Eq. 8 with the plan's scales).
    ``epochs``, ``steps`` and ``batch_size`` of :class:`LocalSGD` are not used with such a plan (it fixes them
    per agent); under any other data plan (a ``data=`` override) this is plain :class:`LocalSGD`.

    ``rho`` is the l2 term of the paper's risk, Q_k(w; x) = loss(w; x) + rho ||w||^2 (Eqs. 2 and 55), so every
    local step's estimate of grad P_k carries 2 rho w with the same factor 1/(K p_k E_k) as the data term
    (``LocalSample.step_scale``): the fixed point is that of (1/K) sum_k P_k. A plain weight decay lambda w per
    step instead would count the regularizer E_k times per round (the data term is divided by E_k, the
    decay is not). Eq. 8 multiplies each sampled point's copy of 2 rho w by 1/(N_k p_b^(k)) too, whose
    minibatch mean has expectation 1; we add that expectation, exactly: same mean, no sampling noise on
    the regularizer (identical to Eq. 8 for full batches)."""

    rho: float = 0.0

    def batches(self, sample: LocalSample, rng: np.random.Generator) -> list[np.ndarray]:
        if sample.block is None:
            return super().batches(sample, rng)
        return [np.arange(start, start + sample.block) for start in range(0, len(sample), sample.block)]

    def run(self, ctx: ClientContext, sample: LocalSample, params: Params, round: int, rng: np.random.Generator) -> LocalResult:
        """:meth:`LocalSGD.run` with the regularizer's gradient 2 rho * step_scale * w added to every step."""
        decay = self.weight_decay + 2.0 * self.rho * sample.step_scale
        return LocalSGD.run(dataclasses.replace(self, weight_decay=decay, rho=0.0), ctx, sample, params, round, rng)


@dataclass(frozen=True)
@checks.constrained(K=[checks.COUNT, None])
class OneGradient:
    """One gradient at the global model over the drawn sample, normalized by ``K`` (FedSampling,
    §3.2: G_c = (1/K) * sum_{s in S_c} g_s) or, with ``K=None``, by the local sample size
    (the naive method of §3.3: G_c = (1/|S_c|) * sum g_s). Per-sample ``scale`` from the plan multiplies g_s."""

    K: int | None = None

    def run(self, ctx: ClientContext, sample: LocalSample, params: Params, round: int, rng: np.random.Generator) -> LocalResult:
        x, y = ctx.x[sample.indices], ctx.y[sample.indices]
        dtype = float_dtype(x)
        norm = self.K if self.K is not None else len(sample.indices)
        weights = torch.full((len(sample.indices),), 1.0 / norm, dtype=dtype, device=x.device)
        if sample.scale is not None:
            weights = weights * torch.as_tensor(sample.scale, dtype=dtype, device=x.device)
        layers = random_layers_of(ctx.module)
        masks = layers.draw(generator_for(rng), len(x), dtype, x.device) if layers is not None else None
        g, loss = weighted_gradient(ctx.module, ctx.task)(params, x, y, weights, masks)
        return LocalResult(update=g, steps=1, loss=float(loss) * norm / len(sample.indices))


LocalSolver = LocalSGD | EpochSGD | OneGradient
