"""A local SGD step of each convolutional model: the engines' channels-last training copy ÷ the contiguous one.

Each model's training copy (``random_layers.prepare``) is built twice, by the rule (channels-last where it
suits, ``fedsample.training.layout``) and with ``channels_last=False``; a step is what the loop engine runs: a
forward through ``torch.func.functional_call``, the loss's gradient and the SGD update, on one torch thread.
The figure is the median of back-to-back step-time ratios (``_common.paired_median_ratio``), and the largest
difference of the two copies' updates after one step (float rounding: the layouts sum in other orders).
Models: pfl-research's CIFAR-10 CNN (batch 10), VGG-9 without and with GroupNorm, the ResNet (batch 16) on
3x32x32 inputs, and the two-layer CNN on 1x28x28 (one channel: the rule keeps its layout, ratio ≈ 1).
``--smoke``: 8x8 inputs and 3 pairs.
Run: python benchmarks/channels_last.py [--smoke]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from _common import arguments, emit, footer, header, paired_median_ratio, progress

from fedsample import models
from fedsample.training import layout, random_layers

CASES = [  # name, model spec, input shape, batch
    ("pfl_cnn", models.PflCNN(), (3, 32, 32), 10),
    ("vgg9", models.VGG9(), (3, 32, 32), 16),
    ("vgg9_group", models.VGG9(norm="group"), (3, 32, 32), 16),
    ("resnet", models.ResNet(), (3, 32, 32), 16),
    ("cnn_1ch", models.CNN(), (1, 28, 28), 32),
]


def sgd_step(module: torch.nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """One step from ``params``: the loss's gradient through ``functional_call``, then w - 0.01 g."""
    w = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    loss = F.cross_entropy(torch.func.functional_call(module, w, (x,)), y)
    grads = torch.autograd.grad(loss, list(w.values()))
    return {k: v.detach() - 0.01 * g for (k, v), g in zip(w.items(), grads)}


def compare(name: str, spec, shape: tuple[int, ...], batch: int, smoke: bool) -> None:
    shape = (shape[0], 8, 8) if smoke else shape
    torch.manual_seed(0)
    module = spec.build(shape, 10)
    x, y = torch.randn(batch, *shape), torch.randint(0, 10, (batch,))
    fast = random_layers.prepare(module, x[:1]).module
    plain = random_layers.prepare(module, x[:1], channels_last=False).module
    params = {k: v.detach() for k, v in module.named_parameters()}
    chosen = layout.channels_last_suits(plain, x[:1])
    a, b = sgd_step(fast, params, x, y), sgd_step(plain, params, x, y)
    emit(f"{name}_channels_last", str(chosen))
    emit(f"{name}_update_max_abs_difference", max(float((a[k] - b[k]).abs().max()) for k in a))
    emit(f"{name}_step_ratio", paired_median_ratio(lambda: sgd_step(fast, params, x, y), lambda: sgd_step(plain, params, x, y),
                                                   pairs=3 if smoke else 40))


def main() -> None:
    args = arguments(__doc__).parse_args()
    header(args.smoke)
    for name, spec, shape, batch in progress(CASES, lambda c: c[0]):
        compare(name, spec, shape, batch, args.smoke)
    footer()


if __name__ == "__main__":
    main()
