"""Model specifications. A spec is a small frozen dataclass; ``build(input_shape, num_classes)`` makes the
``torch.nn.Module`` whose parameters the strategies move around as plain tensor dicts.

One module per family: :mod:`.basic` (logreg, mlp, cnn, pfl_cnn), :mod:`.text` (textcnn, transformer, on
int64 token ids), :mod:`.images` (resnet, vgg9). Every model runs in both engines (functional, vmappable; no
BatchNorm running statistics). ``docs/models.md`` lists them with their parameter counts.
"""

from __future__ import annotations

from fedsample.runtime import lazy

import dataclasses
from typing import Any

import torch
from torch import nn

from fedsample.models.basic import CNN, MLP, LogisticRegression, PflCNN
from fedsample.models.images import VGG9, ResNet
from fedsample.models.text import TextCNN, Transformer, check_token_ids

__all__ = [
    "CNN", "LogisticRegression", "MLP", "MODELS", "ModelSpec", "PflCNN", "ResNet", "TextCNN", "Transformer", "VGG9",
    "check_inputs", "initial_parameters", "model_from_name",
]

#: Any of the model specs.
ModelSpec = LogisticRegression | MLP | CNN | PflCNN | TextCNN | Transformer | ResNet | VGG9

#: Every model spec by its name (``"mlp"``, ...): what :func:`model_from_name` reads.
MODELS = {spec.name: spec for spec in (LogisticRegression, MLP, CNN, PflCNN, TextCNN, Transformer, ResNet, VGG9)}


def model_from_name(name: str, **params: Any) -> ModelSpec:
    """The spec ``name`` with ``params``; an unknown name or parameter is one ``ValueError`` line listing the
    known ones, and each spec checks its values."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    spec = MODELS[name]
    known = [f.name for f in dataclasses.fields(spec)]
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"model {name!r}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(known) or 'none'}")
    return spec(**params)


def check_inputs(module: nn.Module, x: torch.Tensor) -> None:
    """One ``ValueError`` line where ``x`` cannot feed ``module`` in a way torch would only report deep inside
    a forward (token ids outside a text model's vocabulary, float inputs to a text model)."""
    check_token_ids(module, x)


def initial_parameters(module: nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Re-initialise ``module`` with torch's default initialisers under a seed derived from ``seed``
    (the global torch RNG is forked, not disturbed) and return its parameters as a detached dict."""
    from fedsample.rng import torch_seed

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(torch_seed(seed))
        for layer in module.modules():
            reset = getattr(layer, "reset_parameters", None)
            if callable(reset):
                reset()
    return {name: p.detach().clone() for name, p in module.named_parameters()}

__getattr__, __dir__ = lazy.submodules(__name__, __path__)
