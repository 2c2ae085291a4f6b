"""A local SGD step of a model's inner linear layers, fused into one in-place matrix product per layer.

For a linear layer z = h W^T + b the gradient of a minibatch's loss is G = delta^T h (delta = dL/dz, the rows'
weights included), so the plain SGD step (:class:`fedsample.training.local.SGDStep` without momentum or a
proximal term) is

    W <- (1 - lr * weight_decay) * W - lr * delta^T h,        b <- (1 - lr * weight_decay) * b - lr * sum_rows delta,

which ``W.addmm_(delta^T, h, beta=1 - lr * weight_decay, alpha=-lr)`` computes in one pass over W. Autograd
instead writes G (a second copy of W's size), and the step then reads W and G and writes W again: for a wide
layer after convolutions (pfl-research's CIFAR-10 CNN: 12,544 x 128, 6.4 MB, batch 10) these products are
bound by memory, not arithmetic, and the unfused form moves W's size six times a step against four.

:class:`FusedLinears` does this for the ``nn.Linear`` layers of a client's module of at least
:data:`FUSED_MIN_WEIGHTS` weights that are *inner*: called once
per forward on an input that depends on trained parameters (so autograd reaches their output and hands it
delta; found by hooks on the client's first step, which runs unfused). From the second step on their weights
leave autograd's inputs and are stepped in place inside the layer's backward: when autograd hands the layer its
output gradient delta, the backward passes over W once, in blocks of :data:`FUSED_BLOCK_COLUMNS` columns that
stay in a core's cache, computing each block's share of the input gradient delta W (for the layers below) and
then stepping that block, where autograd's backward and a separate step would pass over W twice (measured in
``benchmarks/README.md``, issue 41).
The numbers equal the unfused step's up to float rounding (the product is summed inside one GEMM with the step's
scaling; tested at a relative 1e-5 after five steps).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fedsample.training.autograd import applied

__all__ = ["FUSED_BLOCK_COLUMNS", "FUSED_MIN_WEIGHTS", "FusedLinears"]

FUSED_MIN_WEIGHTS = 2**18
"""The smallest weight matrix (elements; 1 MiB in float32, above a core's L2 cache) whose step is fused: smaller
ones stay in cache, where the unfused step costs little more, and keep autograd's numbers to the bit."""

FUSED_BLOCK_COLUMNS = 2048
"""Columns of W per block of the fused backward: 2,048 columns of a 128-row layer are 1 MiB in float32, a core's L2
cache here, so a block's step reads it from cache after its share of the input gradient did."""


class _SteppedInBackward(torch.autograd.Function):
    """The output of a fused layer (computed already) whose backward computes the input gradient delta W and
    takes the layer's SGD step, block by block of W's columns (module docstring)."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, output: torch.Tensor, layer: "_Stepped") -> torch.Tensor:
        ctx.save_for_backward(h)
        ctx.layer = layer
        return output.view_as(output)

    @staticmethod
    def backward(ctx: Any, delta: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        (h,) = ctx.saved_tensors
        layer = ctx.layer
        w, bias, lr, beta = layer.weight, layer.bias, layer.lr, layer.beta
        d2, h2 = delta.reshape(-1, delta.shape[-1]), h.reshape(-1, h.shape[-1])
        grad = torch.empty_like(h2) if ctx.needs_input_grad[0] else None
        with torch.no_grad():
            for start in range(0, w.shape[1], FUSED_BLOCK_COLUMNS):
                block = slice(start, start + FUSED_BLOCK_COLUMNS)
                if grad is not None:
                    torch.mm(d2, w[:, block], out=grad[:, block])
                w[:, block].addmm_(d2.t(), h2[:, block], beta=beta, alpha=-lr)
            if bias is not None:
                if beta != 1.0:
                    bias.mul_(beta)
                bias.add_(d2.sum(0), alpha=-lr)
        layer.stepped = True
        return (None if grad is None else grad.reshape(h.shape)), None, None


class _Stepped:
    """A fused layer's working weight and bias and its step's scalars (W <- beta W - lr delta^T h), and whether
    this step's backward stepped it."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, lr: float, weight_decay: float) -> None:
        self.weight, self.bias, self.lr, self.beta = weight, bias, lr, 1.0 - lr * weight_decay
        self.stepped = False


class FusedLinears:
    """Hooks on a module's ``nn.Linear`` layers for one client's local training (remove them with :meth:`close`).

    ``weights`` (parameter name -> the client's working tensor) are the tensors the training steps at learning rate
    ``lr`` with ``weight_decay``; after the first :meth:`found` call the inner layers' weights and biases are
    stepped in their backward (and by :meth:`step_` where a step's backward did not reach them) instead of by
    autograd and the step rule."""

    def __init__(self, module: nn.Module, weights: dict[str, torch.Tensor], lr: float, weight_decay: float) -> None:
        self.weights, self.lr, self.weight_decay = weights, lr, weight_decay
        self.names: dict[nn.Module, str] = {}
        for prefix, layer in module.named_modules():
            key = f"{prefix}.weight" if prefix else "weight"
            if type(layer) is nn.Linear and key in weights and weights[key].numel() >= FUSED_MIN_WEIGHTS:
                self.names[layer] = prefix
        self.calls: dict[str, int] = {}
        self.inner: dict[str, bool] = {}
        self.fused: set[str] = set()
        self.kept: dict[str, _Stepped] = {}
        self._hooks = [layer.register_forward_hook(self._forward) for layer in self.names]

    def _forward(self, layer: nn.Module, inputs: tuple[object, ...], output: torch.Tensor) -> torch.Tensor | None:
        prefix = self.names[layer]
        h = inputs[0]
        if prefix not in self.fused:  # the first step: which layers are inner
            self.calls[prefix] = self.calls.get(prefix, 0) + 1
            self.inner[prefix] = self.inner.get(prefix, True) and isinstance(h, torch.Tensor) and h.requires_grad
            return None
        if not output.requires_grad:  # its input no longer depends on trained parameters: it would not be stepped
            raise RuntimeError(f"fused linear layer {prefix!r}: its output has no gradient after the first step")
        stepped = _Stepped(self.weights[_key(prefix, "weight")], self.weights.get(_key(prefix, "bias")), self.lr, self.weight_decay)
        self.kept[prefix] = stepped
        return applied(_SteppedInBackward, h, output.detach(), stepped)

    def found(self) -> list[str]:
        """After the first step's forward: the parameter names of the inner layers (weights and biases), which
        later steps fuse; their other layers stay with autograd."""
        self.fused = {p for p, n in self.calls.items() if n == 1 and self.inner.get(p)}
        if not self.fused:
            self.close()
        return [_key(p, k) for p in sorted(self.fused) for k in ("weight", "bias")]

    def step_(self) -> None:
        """After a step's backward: the step of every fused layer its backward did not reach (its loss does not
        depend on the layer: g = 0, so W <- beta W), in place."""
        for stepped in self.kept.values():
            if not stepped.stepped and stepped.beta != 1.0:
                stepped.weight.mul_(stepped.beta)
                if stepped.bias is not None:
                    stepped.bias.mul_(stepped.beta)
        self.kept.clear()

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()


def _key(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name
