"""Functional model evaluation: a model is a module plus a parameter dict, run through
``torch.func.functional_call`` so that local training can be batched over clients with ``vmap``."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from fedsample.messages import Params as Params  # re-exported: the parameters these functions take
from fedsample.training.random_layers import Masks, injected

__all__ = [
    "flatten", "losses_of_outputs", "per_sample_gradients", "per_sample_losses", "same_params", "weighted_gradient",
    "weighted_loss_fn", "zeros_like",
]


def per_sample_losses(module: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor, task: str, masks: Masks | None = None) -> torch.Tensor:
    """Loss of each sample: cross-entropy for classification, squared error for regression. ``masks``: the
    dropout masks of this forward (:mod:`fedsample.training.random_layers`; None: dropout off)."""
    with injected(masks):
        out = functional_call(module, params, (x,))
    return losses_of_outputs(out, y, task)


def losses_of_outputs(out: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    """Per-sample loss of the model's outputs ``out``: cross-entropy of the logits (classification) or squared error."""
    if task == "regression":
        return (out.reshape(-1) - y.reshape(-1)) ** 2
    return F.cross_entropy(out, y, reduction="none")


def weighted_loss_fn(module: nn.Module, task: str) -> Callable[..., torch.Tensor]:
    """``loss(params, x, y, w) = sum_i w_i * l_i(params)``: every solver expresses its estimator through ``w``
    (1/B for a minibatch mean, 1/K for FedSampling's G_c, importance weights for ISFedAvg)."""

    def loss(params: Params, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, masks: Masks | None = None) -> torch.Tensor:
        return torch.sum(w * per_sample_losses(module, params, x, y, task, masks))

    return loss


def weighted_gradient(module: nn.Module, task: str) -> Callable[..., tuple[Params, torch.Tensor]]:
    """``(params, x, y, w) -> (gradient dict, weighted loss)`` of :func:`weighted_loss_fn`, by reverse-mode
    autograd through ``functional_call``: the fastest form for one client at a time."""
    loss_fn = weighted_loss_fn(module, task)

    def gradient(params: Params, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, masks: Masks | None = None) -> tuple[Params, torch.Tensor]:
        leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        loss = loss_fn(leaves, x, y, w, masks)
        grads = torch.autograd.grad(loss, list(leaves.values()))
        return dict(zip(leaves, grads)), loss.detach()

    return gradient


def zeros_like(params: Params) -> Params:
    """Zeros shaped as ``params``."""
    return {k: torch.zeros_like(v) for k, v in params.items()}


def same_params(a: Params, b: Params) -> bool:
    """Whether ``a`` and ``b`` are the same model: the same names, each tensor the same object or equal."""
    return a.keys() == b.keys() and all(a[k] is b[k] or torch.equal(a[k], b[k]) for k in a)


def flatten(params: Params) -> torch.Tensor:
    """The parameters as one vector, in the dict's order."""
    return torch.cat([v.reshape(-1) for v in params.values()])


def per_sample_gradients(module: nn.Module, task: str, params: Params, x: torch.Tensor, y: torch.Tensor, chunk_size: int | None = 1024) -> torch.Tensor:
    """The gradient of each sample's loss, flattened: a ``(n, num_parameters)`` tensor, by
    ``torch.func.vmap(grad(.))`` over samples (in chunks of ``chunk_size`` to bound memory)."""
    from torch.func import grad, vmap

    def one(p: Params, xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        return per_sample_losses(module, p, xi.unsqueeze(0), yi.unsqueeze(0), task).sum()

    detached = {k: v.detach() for k, v in params.items()}
    chunk = chunk_size if chunk_size is not None and len(x) > chunk_size else None
    grads = vmap(grad(one), in_dims=(None, 0, 0), chunk_size=chunk)(detached, x, y)
    return torch.cat([g.reshape(len(x), -1) for g in grads.values()], dim=1)
