"""Channels-last training on the CPU: a convolutional model's minibatches in (N, H, W, C) memory order.

torch's CPU convolutions (oneDNN) compute in a channels-inner layout whatever the tensors' layout; fed
channels-last inputs they skip the reorders around every call, and torch's ``max_pool2d`` has a vectorized
channels-last kernel where its contiguous (N, C, H, W) kernel is scalar, so a convolutional local step is faster
with channels-last inputs (``benchmarks/channels_last.py``; figures in ``benchmarks/README.md``). The
values are the same up to float rounding (the kernels sum in another order), not to the bit.

The engines' training copy of a model (:func:`fedsample.training.random_layers.prepare`) therefore converts
its 4-D floating-point inputs to channels-last (:func:`channels_last_inputs`, a forward pre-hook) when
:func:`channels_last_suits` says so: the inputs are 4-D floating point on the CPU with more than one channel,
the model has an ``nn.Conv2d``, and a forward and backward of one sample in channels-last layout runs and agrees
with the contiguous one (a ``.view`` that needs contiguous activations fails there, and the model trains as it is).
Its ``nn.MaxPool2d`` layers become :class:`LayoutKeepingMaxPool2d`: torch's backward takes a slow path when
the incoming gradient's layout differs from the input's (≈ 0.94 against 0.13 ms on a 10 × 64 × 28 × 28
input), which a ``Flatten`` after the pool causes; the layer hands it the gradient in the input's layout,
the same numbers to the bit. A ``ReLU`` followed by a ``MaxPool2d`` in an ``nn.Sequential`` runs pool first
(:func:`pool_before_relu`): max(relu(a), relu(b), ...) = relu(max(a, b, ...)) exactly, gradients included, and
the ReLU's forward and backward then pass over a quarter of the elements (2 x 2 pools).

The decision depends only on the model, the data and the device, so every federation (in-process, worker
pool, Ray, Flower) and any number of client threads trains with the same layout and the same numbers. Under
``torch.func`` transforms (the vectorized engine's ``vmap``) the hook and the layer leave tensors as they are.
"""

from __future__ import annotations

from typing import Any, TypeGuard

import torch
from torch import nn
from torch._C._functorch import is_functorch_wrapped_tensor

from fedsample.training.autograd import applied

__all__ = [
    "LayoutKeepingMaxPool2d", "channels_last_inputs", "channels_last_suits", "convolutional", "max_pools", "pool_before_relu",
]

_CHANNELS_LAST = torch.channels_last
_PROBE_TOLERANCE = 1e-4
"""Relative agreement asked of the channels-last probe's outputs and gradients (float rounding is ~1e-7)."""


def _plain(x: object) -> TypeGuard[torch.Tensor]:
    """A real 4-D floating-point CPU tensor (not one inside a ``torch.func`` transform)."""
    return (isinstance(x, torch.Tensor) and x.dim() == 4 and x.is_floating_point() and x.device.type == "cpu"
            and not is_functorch_wrapped_tensor(x))


class _MaxPool2dKeepingLayout(torch.autograd.Function):
    """``max_pool2d`` whose backward receives the gradient in the layout of the pooled input."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, kernel: list[int], stride: list[int], padding: list[int],
                dilation: list[int], ceil_mode: bool) -> torch.Tensor:
        out: torch.Tensor
        out, indices = torch.ops.aten.max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)
        ctx.save_for_backward(x, indices)
        ctx.geometry = (kernel, stride, padding, dilation, ceil_mode)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, indices = ctx.saved_tensors
        grad = grad.contiguous(memory_format=_layout_of(x))
        return (torch.ops.aten.max_pool2d_with_indices_backward(grad, x, *ctx.geometry, indices),
                None, None, None, None, None)


def _layout_of(x: torch.Tensor) -> torch.memory_format:
    """channels-last for a tensor laid out so (and not also contiguous), else contiguous."""
    return _CHANNELS_LAST if x.is_contiguous(memory_format=_CHANNELS_LAST) and not x.is_contiguous() else torch.contiguous_format


def _pair(v: int | tuple[int, ...]) -> list[int]:
    return [v, v] if isinstance(v, int) else list(v)


class LayoutKeepingMaxPool2d(nn.MaxPool2d):
    """``nn.MaxPool2d`` whose backward gets the gradient in its input's memory layout (module docstring): the
    same outputs and gradients to the bit, without torch's slow mixed-layout backward."""

    @classmethod
    def like(cls, pool: nn.MaxPool2d) -> "LayoutKeepingMaxPool2d":
        """This layer with ``pool``'s settings."""
        return cls(pool.kernel_size, pool.stride, pool.padding, pool.dilation, pool.return_indices, pool.ceil_mode)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _plain(x) or self.return_indices:
            pooled: torch.Tensor = super().forward(x)
            return pooled
        stride = self.stride if self.stride is not None else self.kernel_size
        return applied(_MaxPool2dKeepingLayout, x, _pair(self.kernel_size), _pair(stride), _pair(self.padding),
                       _pair(self.dilation), self.ceil_mode)


def max_pools(module: nn.Module) -> list[tuple[str, nn.MaxPool2d]]:
    """``module``'s ``nn.MaxPool2d`` layers (exactly that class, not returning indices), with their names."""
    return [(name, m) for name, m in module.named_modules() if type(m) is nn.MaxPool2d and not m.return_indices]


def pool_before_relu(module: nn.Module) -> int:
    """Swap, in every ``nn.Sequential`` of ``module``, each ``nn.ReLU`` directly followed by an ``nn.MaxPool2d``
    (exactly those classes, no hooks on either, no indices returned) so the pool runs first; returns the number
    of pairs swapped. The same numbers to the bit: relu is non-decreasing, so relu(max_i a_i) = max_i relu(a_i),
    and the gradient reaches the same element or is zero in both orders (a window whose maximum is positive picks
    the same first maximal element; one whose maximum is <= 0 passes a zero gradient either way; a NaN wins both
    ways). The ReLU then runs on the pooled tensor, a quarter of the elements for a 2 x 2 pool."""
    swapped = 0
    for seq in [m for m in module.modules() if type(m) is nn.Sequential]:
        names = list(seq._modules)
        for a, b in zip(names, names[1:]):
            relu, pool = seq._modules[a], seq._modules[b]
            if type(relu) is nn.ReLU and type(pool) is nn.MaxPool2d and not pool.return_indices and not (_hooked(relu) or _hooked(pool)):
                seq._modules[a], seq._modules[b] = pool, relu
                swapped += 1
    return swapped


def _hooked(m: nn.Module) -> bool:
    return bool(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks)


def _to_channels_last(module: nn.Module, args: tuple[object, ...]) -> tuple[object, ...] | None:
    """Forward pre-hook: the first input in channels-last layout when it is a plain 4-D float CPU tensor."""
    if args and _plain(args[0]):
        return (args[0].contiguous(memory_format=_CHANNELS_LAST), *args[1:])
    return None


def channels_last_inputs(module: nn.Module) -> None:
    """Convert, from now on, ``module``'s 4-D floating-point CPU inputs to channels-last layout (a forward
    pre-hook on ``module``; functional calls through ``torch.func.functional_call`` run it too)."""
    module.register_forward_pre_hook(_to_channels_last)


def convolutional(module: nn.Module, sample: torch.Tensor) -> bool:
    """Whether ``module`` has an ``nn.Conv2d`` and ``sample`` is a 4-D floating-point CPU batch of more than one
    channel: the models :func:`channels_last_suits` considers (one channel is laid out alike in both layouts, and
    torch keeps the activations of such an input contiguous)."""
    return _plain(sample) and sample.shape[1] > 1 and any(isinstance(m, nn.Conv2d) for m in module.modules())


def channels_last_suits(module: nn.Module, sample: torch.Tensor) -> bool:
    """Whether ``module`` trains on ``sample``'s kind of inputs in channels-last layout (module docstring): it is
    :func:`convolutional`, and a forward and backward of one sample in channels-last layout runs and agrees
    with the contiguous one within ``_PROBE_TOLERANCE`` (random operations are seeded alike for both, so
    a model whose draws land elsewhere in the other layout disagrees and keeps its layout)."""
    if not convolutional(module, sample):
        return False
    x = sample[:1]
    try:
        with torch.random.fork_rng(devices=[]):
            plain = _output_and_gradients(module, x)
            last = _output_and_gradients(module, x.contiguous(memory_format=_CHANNELS_LAST))
    except Exception:  # noqa: BLE001 - a forward that needs contiguous activations (e.g. .view): keep the layout
        return False
    return len(plain) == len(last) and all(
        torch.allclose(a, b, rtol=_PROBE_TOLERANCE, atol=_PROBE_TOLERANCE * max(1.0, float(a.abs().max()))) for a, b in zip(plain, last)
    )


def _output_and_gradients(module: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The output of ``module`` on ``x`` and the gradients of its sum with respect to the parameters, torch's
    generator seeded first (the module's own gradients are left untouched)."""
    torch.manual_seed(0)
    params = [p for p in module.parameters() if p.requires_grad]
    with torch.enable_grad():
        out = module(x)
        grads = torch.autograd.grad(out.float().sum(), params, allow_unused=True) if params else ()
    return [out.detach()] + [g for g in grads if g is not None]
