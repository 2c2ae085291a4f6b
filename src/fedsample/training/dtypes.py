"""The floating-point type of the numbers that go with a batch of inputs (sample weights, dropout masks)."""

from __future__ import annotations

import torch

__all__ = ["float_dtype"]


def float_dtype(x: torch.Tensor) -> torch.dtype:
    """``x``'s own type when it is floating point, else torch's default float type: inputs may be int64 token
    ids, whose weights and dropout masks must still be floats."""
    return x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
