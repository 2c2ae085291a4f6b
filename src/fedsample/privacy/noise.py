"""Client-level DP for the update: clipping and Gaussian noise (the Gaussian mechanism, Dwork & Roth 2014,
Thm 3.22; McMahan et al. 2018's per-client clipping). Accounted by :mod:`fedsample.privacy.accounting`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedsample import checks
from fedsample.rng import ClientRandom

__all__ = ["UpdateNoise"]


@dataclass(frozen=True)
@checks.constrained(clip=checks.POSITIVE, noise_multiplier=checks.NON_NEGATIVE)
class UpdateNoise:
    """Client-level DP for the update (the Gaussian mechanism, Dwork & Roth 2014, Thm 3.22; McMahan et al.
    2018's per-client clipping): the client scales its update to L2 norm at most ``clip`` and adds
    N(0, (noise_multiplier * clip)^2) to every coordinate. Changing all of one client's data (or replacing it
    by nothing: a zero update) moves the clipped update by at most ``clip``, so each released update is a
    Gaussian mechanism with noise multiplier ``noise_multiplier``; :mod:`fedsample.privacy.accounting` composes the
    rounds. This budget is separate from the size report's epsilon."""

    clip: float
    noise_multiplier: float

    def clipped(self, update: dict) -> dict:
        """The update scaled by min(1, clip / ||update||_2) (the norm over all tensors together)."""
        norm = math.sqrt(sum(float((v.double() ** 2).sum()) for v in update.values()))
        factor = min(1.0, self.clip / norm) if norm > 0 else 1.0
        return {k: v * factor for k, v in update.items()}

    def privatize(self, update: dict, rng: "np.random.Generator | ClientRandom") -> dict:
        """Clip, then add Gaussian noise of standard deviation noise_multiplier * clip (from the client's rng)."""
        import torch

        sigma = self.noise_multiplier * self.clip
        out = {}
        for k, v in self.clipped(update).items():
            noise = rng.normal(0.0, 1.0, size=tuple(v.shape)) if sigma > 0 else np.zeros(tuple(v.shape))
            out[k] = v + torch.as_tensor(sigma * noise, dtype=v.dtype)
        return out
