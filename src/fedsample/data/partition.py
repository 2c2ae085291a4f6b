"""Partitioners: each scheme is a frozen dataclass; ``partition`` turns it into a FederatedData."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsample.data.types import Dataset, FederatedData


@dataclass(frozen=True)
class IID:
    """Shuffle and cut into ``num_clients`` near-equal parts."""

    num_clients: int

    def __post_init__(self) -> None:
        if self.num_clients < 1:
            raise ValueError(f"IID: num_clients must be >= 1, got {self.num_clients}")

    def assign(self, dataset: Dataset, rng: np.random.Generator) -> list[np.ndarray]:
        if self.num_clients > dataset.num_train:
            raise ValueError(f"IID: {self.num_clients} clients for {dataset.num_train} samples")
        return np.array_split(rng.permutation(dataset.num_train), self.num_clients)


@dataclass(frozen=True)
class LogNormalSizes:
    """FedSampling's size-imbalanced partition (Qi et al. 2023, §4.1): client sizes drawn proportional to
    LogNormal(0, sigma) and rescaled to the given mean; the number of clients is n_train / mean.
    Every client holds at least one sample and every sample is assigned exactly once."""

    mean: float = 2.0
    sigma: float = 4.0

    def __post_init__(self) -> None:
        if self.mean < 1:
            raise ValueError(f"LogNormalSizes: mean must be >= 1, got {self.mean}")
        if self.sigma < 0:
            raise ValueError(f"LogNormalSizes: sigma must be >= 0, got {self.sigma}")

    def sizes(self, n: int, rng: np.random.Generator) -> np.ndarray:
        clients = max(1, int(round(n / self.mean)))
        weights = rng.lognormal(0.0, self.sigma, size=clients)
        spare = n - clients  # one sample each, the rest proportional to the log-normal weights
        shares = weights / weights.sum() * spare
        sizes = 1 + np.floor(shares).astype(np.int64)
        remainder = n - sizes.sum()
        sizes[np.argsort(shares - np.floor(shares))[::-1][:remainder]] += 1
        return sizes

    def assign(self, dataset: Dataset, rng: np.random.Generator) -> list[np.ndarray]:
        sizes = self.sizes(dataset.num_train, rng)
        return np.split(rng.permutation(dataset.num_train), np.cumsum(sizes)[:-1])


def partition(dataset: Dataset, scheme, seed: int = 0) -> FederatedData:
    """Divide ``dataset``'s training split among clients according to ``scheme``."""
    if not hasattr(scheme, "assign"):
        raise TypeError(f"unknown partition scheme {scheme!r}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x9A27]))
    indices = scheme.assign(dataset, rng)
    return FederatedData.from_client_indices(dataset, indices, scheme=type(scheme).__name__)
