"""Every random draw derives from (seed, round, client, purpose) through numpy's SeedSequence.

Results therefore do not depend on execution order, chunking or backend: client 17's draws in round 3
are the same whether it trains alone, in a vectorized cohort, on Ray or through Flower.
"""

from __future__ import annotations

import zlib

import numpy as np

SERVER = -1  # the "client id" of the server's own draws


def _purpose_code(purpose: str) -> int:
    return zlib.crc32(purpose.encode())


def seed_sequence(seed: int, round: int, client: int = SERVER, purpose: str = "") -> np.random.SeedSequence:
    """The SeedSequence of one (seed, round, client, purpose) cell; negative ids are shifted to stay valid."""
    return np.random.SeedSequence([int(seed), int(round) + 1, int(client) + 2, _purpose_code(purpose)])


def generator(seed: int, round: int, client: int = SERVER, purpose: str = "") -> np.random.Generator:
    """A numpy Generator for one (seed, round, client, purpose) cell."""
    return np.random.default_rng(seed_sequence(seed, round, client, purpose))


def torch_seed(seed: int, purpose: str = "init") -> int:
    """A 63-bit integer seed for torch (model initialisation), derived from the run seed."""
    return int(seed_sequence(seed, -1, SERVER, purpose).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
