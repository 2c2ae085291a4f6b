"""The one call into ``torch.autograd.Function.apply``, which torch leaves unannotated: a custom autograd function
applied to its inputs, its output stated as the tensor it is (pyproject.toml's ``untyped_calls_exclude`` names
torch's ``Function`` for this call)."""

from __future__ import annotations

import torch

__all__ = ["applied"]


def applied(function: type[torch.autograd.Function], *inputs: object) -> torch.Tensor:
    """``function.apply(*inputs)``: the forward of ``function`` on ``inputs``, its backward recorded in the graph."""
    output: torch.Tensor = function.apply(*inputs)
    return output
