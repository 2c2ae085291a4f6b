"""Every random draw derives from (seed, round, client, purpose) through numpy's SeedSequence.

Results therefore do not depend on execution order, chunking or backend: client 17's draws in round 3
are the same whether it trains alone, in a vectorized cohort, on Ray or through Flower.

Server parts draw from numpy Generators (:func:`generator`). Client procedures receive a
:class:`ClientRandom`: a counter-based SplitMix64 stream per client for the hot paths (uniforms,
integers, permutations), so a vectorized engine computes the same draws for a million clients in one
numpy pass (:class:`CohortRandom`), plus a numpy Generator of the same cell, created on first use, for
everything else. On a GPU the cohort streams are computed with integer torch tensor operations (64-bit
wrapping arithmetic and masked shifts, see :func:`mix64_torch`) that give the numpy draws bit for bit.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from functools import cached_property, lru_cache

from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:  # torch is imported where a device is used, so numpy-only users do not pay for it
    import torch

__all__ = [
    "Blocks", "ClientRandom", "CohortRandom", "CohortStreams", "SERVER", "client_rng", "client_streams", "client_streams_torch",
    "generator", "mix64", "mix64_", "mix64_torch", "stream_uniforms", "stream_uniforms_torch", "torch_seed", "uniform_integers",
]

SERVER = -1  # the "client id" of the server's own draws
"""The "client id" of the server's own draws."""


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


# --- counter-based client randomness ----------------------------------------------------------------
#
# A client's draws in one (seed, round, purpose) cell are a SplitMix64 stream (Steele, Lea & Flood 2014):
# the cell key comes once from a SeedSequence, each client's stream seed is a mix of (key, client), and the
# i-th uniform of client c is mix(stream_c + (i + 1) * GAMMA). Every (client, i) can be computed directly, so
# a million clients' draws are one numpy pass and give the same numbers as each client drawing alone.

_MASK = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_TO_UNIT = 2.0**-53
_SMALL = 16


def _mix_int(z: int) -> int:
    """SplitMix64's finalizer on one Python int (bit-identical to :func:`mix64`)."""
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer, elementwise on uint64 arrays (wrapping arithmetic)."""
    mixed = mix64_(np.array(z, dtype=np.uint64))  # a new array, mixed in place
    return mixed if mixed.ndim else mixed[()]  # a scalar's as a numpy scalar


def mix64_(z: np.ndarray) -> np.ndarray:
    """:func:`mix64` of a uint64 array the caller owns, in place (returned): the same arithmetic with one scratch
    array for the shifts instead of a new array per operation (on a round's 60,000 draws about 15 us of 110)."""
    shifted = np.right_shift(z, np.uint64(30), out=np.empty_like(z))
    z ^= shifted
    z *= np.uint64(_M1)
    z ^= np.right_shift(z, np.uint64(27), out=shifted)
    z *= np.uint64(_M2)
    z ^= np.right_shift(z, np.uint64(31), out=shifted)
    return z


@lru_cache(maxsize=1024)
def cell_key(seed: int, round: int, purpose: str) -> int:
    """The 64-bit key of one (seed, round, purpose) cell, from a SeedSequence (computed once per cell)."""
    entropy = [int(seed), int(round) + 1, _purpose_code(purpose), 0x5EED]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)[0])


def client_stream(key: int, client: int) -> int:
    """The SplitMix64 state of one client in a cell: mix(key XOR mix((client + 2) * GAMMA))."""
    return _mix_int(key ^ _mix_int(((int(client) + 2) * _GAMMA) & _MASK))


def client_streams(key: int, clients: np.ndarray) -> np.ndarray:
    """:func:`client_stream` for an array of clients (uint64): mix(key XOR mix((client + 2) * GAMMA)), whose inner
    mix does not depend on the cell, so for many clients it is read from a table (one gather instead of a multiply
    and a mix: 30,000 clients, about 55 us of 110)."""
    clients = np.asarray(clients, dtype=np.int64)
    tabled = len(clients) > _PREMIX_MIN and clients.min() >= 0 and clients.max() < _TABLE_MAX
    z = _PREMIXED.prefix(int(clients.max()) + 1)[clients] if tabled else _premix(clients)  # a new array, worked on in place
    z ^= np.uint64(key)
    return mix64_(z)


def _premix(clients: np.ndarray) -> np.ndarray:
    """mix((client + 2) * GAMMA) of int64 ``clients``: the cell-independent half of :func:`client_stream` (a new array)."""
    z = clients.astype(np.uint64)
    z += np.uint64(2)
    z *= np.uint64(_GAMMA)
    return mix64_(z)


def _multiples_of_gamma(n: int) -> np.ndarray:
    """j * GAMMA modulo 2^64 for j = 0, ..., n - 1 (a new array)."""
    z = np.arange(n, dtype=np.uint64)
    z *= np.uint64(_GAMMA)
    return z


_PREMIX_MIN = 1024  # fewer clients: computed, not read from the table
_TABLE_MAX = 1 << 22  # at most 2^22 entries in a table (32 MiB)


class _Table:
    """The read-only values ``build(m)[j]`` of a pure function of the index j, kept and grown to the next power of two
    as longer prefixes are asked (at most 2^22 entries): the same numbers as computing them, built once."""

    def __init__(self, build: Callable[[int], np.ndarray]) -> None:
        self._build = build
        self._values = build(0)

    def prefix(self, n: int) -> np.ndarray:
        """The first ``n`` values: read-only from the table, or computed and not kept past 2^22."""
        if n > _TABLE_MAX:
            return self._build(n)
        values = self._values  # read once: another thread may replace it (with a longer table of the same numbers)
        if n > len(values):
            values = self._build(1 << max(n - 1, 1).bit_length())
            values.flags.writeable = False
            self._values = values
        return values[:n]


_PREMIXED = _Table(lambda m: _premix(np.arange(m, dtype=np.int64)))  # client -> mix((client + 2) * GAMMA)
_MULTIPLES = _Table(_multiples_of_gamma)  # j -> j * GAMMA, the offsets a cohort's draws add (CohortRandom._first_words)


def stream_uniforms(streams: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Uniforms on [0, 1) with 53 random bits: draw ``positions`` of the given client ``streams`` (broadcast)."""
    z = np.asarray(streams, dtype=np.uint64) + (np.asarray(positions, dtype=np.uint64) + np.uint64(1)) * np.uint64(_GAMMA)
    return as_uniforms(mix64_(np.asarray(z)))  # z: a new array (or scalar) of ours


def as_uniforms(words: np.ndarray) -> np.ndarray:
    """The uniforms of mixed 64-bit ``words``: their top 53 bits times 2^-53."""
    u: np.ndarray = (words >> np.uint64(11)).astype(np.float64)  # a float64 scalar for a scalar word
    u *= _TO_UNIT  # in place on the new array: the same product, one array fewer
    return u


def words_below(threshold: float) -> int:
    """The bound b with ``word < b`` exactly when the word's uniform (:func:`as_uniforms`) is below ``threshold``:
    a uniform k * 2^-53 (k its top 53 bits) is below t when k < ceil(t * 2^53) (t * 2^53 is exact), i.e. when
    the word is below ceil(t * 2^53) * 2^11; 0 for t <= 0 (or NaN: no uniform is below it) and 2^64 (every
    word; not a uint64) for t above the largest uniform, 1 - 2^-53."""
    t = float(threshold)
    if not t > 0:
        return 0
    return min(math.ceil(t * 2.0**53), 1 << 53) << 11


# --- the same streams as integer torch tensors (bit-identical on CPU and GPU) ----------------------------
#
# torch has no wrapping uint64 arithmetic on every device, but int64 addition, multiplication and XOR wrap
# in two's complement, which is the same bit pattern as uint64 arithmetic modulo 2^64; only the right shift
# differs (arithmetic on int64), so it is masked to a logical shift.


def _signed(value: int) -> int:
    """A 64-bit unsigned constant as the int64 with the same bits."""
    value &= _MASK
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(z: "torch.Tensor", bits: int) -> "torch.Tensor":
    """Logical right shift of int64 tensors holding uint64 bit patterns."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def mix64_torch(z: "torch.Tensor") -> "torch.Tensor":
    """:func:`mix64` on int64 tensors (uint64 bit patterns), bit for bit."""
    z = (z ^ _shift_right(z, 30)) * _signed(_M1)
    z = (z ^ _shift_right(z, 27)) * _signed(_M2)
    return z ^ _shift_right(z, 31)


def client_streams_torch(key: int, clients: "torch.Tensor") -> "torch.Tensor":
    """:func:`client_streams` on an int64 tensor of clients (result: int64 bit patterns, same device)."""
    import torch

    return mix64_torch(mix64_torch((clients.to(torch.int64) + 2) * _signed(_GAMMA)) ^ _signed(key))


def stream_uniforms_torch(streams: "torch.Tensor", positions: "torch.Tensor") -> "torch.Tensor":
    """:func:`stream_uniforms` on int64 tensors (broadcast): float64 uniforms equal to numpy's bit for bit."""
    import torch

    z = mix64_torch(streams + (positions.to(torch.int64) + 1) * _signed(_GAMMA))
    return _shift_right(z, 11).to(torch.float64) * _TO_UNIT


def uniform_integers(u: np.ndarray, low: int, high: int) -> np.ndarray:
    """Integers on {low, ..., high-1} from uniforms: low + floor(u * (high - low)) (bias below 2^-53 * (high-low))."""
    integers: np.ndarray = low + np.floor(np.asarray(u) * (high - low)).astype(np.int64)  # an int64 scalar for a scalar u
    return integers


class ClientRandom:
    """A client's randomness in one (seed, round, client, purpose) cell, passed to client procedures as ``rng``.

    ``random``, ``integers`` and ``permutation`` read the client's counter-based stream in order (so a
    vectorized engine can compute the same draws for many clients at once, see :class:`CohortRandom`); any
    other numpy ``Generator`` method (``choice``, ``normal``, ...) goes to a numpy Generator for the same cell,
    created on first use.
    """

    __slots__ = ("seed", "round", "client", "purpose", "stream", "position", "_generator")

    def __init__(self, seed: int, round: int, client: int, purpose: str) -> None:
        self.seed, self.round, self.client, self.purpose = int(seed), int(round), int(client), purpose
        self.stream = client_stream(cell_key(self.seed, self.round, purpose), self.client)
        self.position = 0
        self._generator: np.random.Generator | None = None

    def uniforms(self, n: int) -> np.ndarray:
        """The next ``n`` uniforms of the stream."""
        start, self.position = self.position, self.position + n
        if n <= _SMALL:  # plain integer arithmetic beats numpy's per-call overhead for a few draws
            s = self.stream
            return np.array([(_mix_int((s + (i + 1) * _GAMMA) & _MASK) >> 11) * _TO_UNIT for i in range(start, start + n)])
        return stream_uniforms(np.uint64(self.stream), np.arange(start, start + n, dtype=np.uint64))

    def random(self, size: int | tuple[int, ...] | None = None) -> np.ndarray | float:
        shape = () if size is None else ((size,) if isinstance(size, (int, np.integer)) else tuple(size))
        u = self.uniforms(math.prod(shape)).reshape(shape)
        return float(u) if size is None else u

    def integers(self, low: int, high: int | None = None, size: int | tuple[int, ...] | None = None) -> np.ndarray | int:
        """Integers on {low, ..., high-1} (numpy's convention: one bound means {0, ..., low-1})."""
        low, high = (0, low) if high is None else (low, high)
        if high <= low:
            raise ValueError(f"integers: high ({high}) must exceed low ({low})")
        drawn = uniform_integers(np.asarray(self.random(size)), int(low), int(high))
        return int(drawn) if size is None else drawn

    def permutation(self, x: int | np.ndarray) -> np.ndarray:
        """A uniformly random permutation (argsort of fresh uniforms; ties have probability ~2^-53)."""
        if isinstance(x, (int, np.integer)):
            return np.argsort(self.uniforms(int(x)), kind="stable")
        x = np.asarray(x)
        return x[np.argsort(self.uniforms(len(x)), kind="stable")]

    @property
    def generator(self) -> np.random.Generator:
        """The numpy Generator of this cell (built from its SeedSequence on first use)."""
        if self._generator is None:
            self._generator = generator(self.seed, self.round, self.client, self.purpose)
        return self._generator

    def normal(self, loc: float = 0.0, scale: float = 1.0, size: int | tuple[int, ...] | None = None) -> np.ndarray | float:
        """Gaussian draws from the cell's numpy Generator (:attr:`generator`), as ``Generator.normal``."""
        drawn: np.ndarray | float = self.generator.normal(loc, scale, size)
        return drawn

    def choice(self, a: int, size: int | tuple[int, ...] | None = None, replace: bool = True, p: np.ndarray | None = None) -> np.ndarray:
        """``size`` of the ints 0..a-1 (with ``p``: drawn with those probabilities) from the cell's numpy Generator
        (:attr:`generator`), as ``Generator.choice``."""
        drawn: np.ndarray = self.generator.choice(a, size, replace, p)
        return drawn

    def __getattr__(self, name: str) -> object:  # any other method or attribute of the cell's numpy Generator
        return getattr(self.generator, name)


class Blocks:
    """The flat layout of a cohort's ragged blocks of draws (client c's ``counts[c]`` draws, concatenated in client
    order), for counts that stay the same from round to round (a population's sizes): computed once, read every
    round. Flat position j belongs to client ``owner[j]`` and is its draw ``within[j]``, which mixes
    stream_c + (within[j] + 1) * GAMMA; ``offsets[j]`` is that second term, so a round's draws over all the blocks
    are one repeat of the clients' streams, one add and one mix (:meth:`CohortRandom.ragged_below`), and the kept
    positions' (owner, within) two gathers of the kept positions only."""

    def __init__(self, counts: np.ndarray) -> None:
        self.counts = np.array(counts, dtype=np.int64)  # our own copy, read-only
        self.counts.flags.writeable = False
        self._on_device: "tuple[torch.device | str, torch.Tensor] | None" = None  # (device, the counts there): Blocks.on's copy

    def __len__(self) -> int:
        return len(self.counts)

    def same_counts(self, counts: np.ndarray) -> bool:
        """Whether ``counts`` are these blocks' counts."""
        return len(counts) == len(self.counts) and bool(np.array_equal(counts, self.counts))

    @cached_property
    def owner(self) -> np.ndarray:
        """The client (block) of each flat position."""
        return _read_only(np.repeat(np.arange(len(self.counts), dtype=np.int64), self.counts))

    @cached_property
    def within(self) -> np.ndarray:
        """Each flat position's index within its block (its client's draw number)."""
        first = np.cumsum(self.counts) - self.counts
        return _read_only(np.arange(len(self.owner), dtype=np.int64) - first[self.owner])

    @cached_property
    def offsets(self) -> np.ndarray:
        """(within + 1) * GAMMA modulo 2^64: what each flat position's draw adds to its client's stream."""
        z = (self.within + 1).astype(np.uint64)
        z *= np.uint64(_GAMMA)
        return _read_only(z)

    def on(self, device: "torch.device | str") -> "torch.Tensor":
        """The counts as an int64 tensor on ``device``, copied there once (kept for the next call on that device)."""
        import torch

        if self._on_device is None or self._on_device[0] != device:
            self._on_device = (device, torch.tensor(self.counts, device=device))  # a copy: the counts are read-only
        return self._on_device[1]


def _read_only(values: np.ndarray) -> np.ndarray:
    """``values`` made read-only (returned): a kept layout is shared by every round that reads it."""
    values.flags.writeable = False
    return values


class CohortRandom:
    """The counter-based streams of many clients in one (seed, round, purpose) cell: the vectorized
    counterpart of :class:`ClientRandom` (draw i of client c here equals the i-th uniform client c reads).

    With a torch ``device`` the draws are computed there with :func:`stream_uniforms_torch` (the same
    bits) and returned as numpy arrays, so callers do not depend on where they were computed."""

    def __init__(self, seed: int, round: int, clients: np.ndarray, purpose: str, device: "torch.device | str | None" = None) -> None:
        self.clients = np.asarray(clients, dtype=np.int64)
        key = cell_key(int(seed), int(round), purpose)
        self.device = device
        self.streams: np.ndarray | torch.Tensor  # uint64 numpy streams, or an int64 tensor on the device
        if device is None:
            self.streams = client_streams(key, self.clients)
        else:
            import torch

            self.device = torch.device(device)
            self.streams = client_streams_torch(key, torch.as_tensor(self.clients, device=self.device))

    def __len__(self) -> int:
        return len(self.clients)

    def columns(self, k: int, start: int = 0) -> np.ndarray:
        """``(clients, k)`` array: draws ``start, ..., start+k-1`` of each client."""
        if not isinstance(self.streams, np.ndarray):  # on the device
            import torch

            positions = torch.arange(start, start + k, dtype=torch.int64, device=self.device)
            return stream_uniforms_torch(self.streams[:, None], positions[None, :]).cpu().numpy()
        return stream_uniforms(self.streams[:, None], np.arange(start, start + k, dtype=np.uint64)[None, :])

    def ragged(self, counts: np.ndarray, start: np.ndarray | int = 0) -> np.ndarray:
        """Draws ``start_c, ..., start_c + counts_c - 1`` of each client c, concatenated in client order."""
        counts = np.asarray(counts, dtype=np.int64)
        starts = np.broadcast_to(np.asarray(start, dtype=np.int64), counts.shape)
        from_first = isinstance(start, (int, np.integer)) and start == 0  # every client from its first draw (the common case)
        if self.device is not None:
            return self._ragged_torch(counts, None if from_first else starts)
        if from_first:
            return as_uniforms(self._first_words(counts))
        total = int(counts.sum())
        first = np.cumsum(counts) - counts
        within = np.arange(total, dtype=np.int64) - np.repeat(first, counts)
        positions = (within + np.repeat(starts, counts)).astype(np.uint64)
        return stream_uniforms(np.repeat(self.streams, counts), positions)

    def _first_words(self, counts: np.ndarray) -> np.ndarray:
        """The mixed words of draws 0, ..., counts_c - 1 of each client c, concatenated in client order. Draw i
        of client c mixes stream_c + (i + 1) * GAMMA; at flat position j = first_c + i that is
        (stream_c + (1 - first_c) * GAMMA) + j * GAMMA modulo 2^64: one repeat of a per-client base plus the
        multiples of GAMMA (read from a table), no per-draw offsets."""
        first = np.cumsum(counts)  # then in place on arrays of ours (wrapping arithmetic: the same words)
        first -= counts
        base = first.view(np.uint64)  # first_c >= 0: the same bits as uint64; (1 - first_c) * GAMMA + stream_c
        np.subtract(np.uint64(1), base, out=base)
        base *= np.uint64(_GAMMA)
        base += self.streams
        z = np.repeat(base, counts)
        z += _MULTIPLES.prefix(len(z))
        return mix64_(z)

    def ragged_below(self, counts: "np.ndarray | Blocks", threshold: float) -> np.ndarray:
        """Flat positions (into :meth:`ragged`'s concatenation, from draw 0) of the draws below ``threshold``:
        ``np.flatnonzero(self.ragged(counts) < threshold)``, compared as words (:func:`words_below`: no
        conversion to floats); on a device only those positions come back. ``counts`` given as :class:`Blocks`
        (kept from round to round) saves the per-client arithmetic: the same words, from the blocks' offsets."""
        blocks = counts if isinstance(counts, Blocks) else None
        counts = np.asarray(blocks.counts if blocks is not None else counts, dtype=np.int64)
        if self.device is None:
            bound = words_below(threshold)
            if bound >> 64:  # every draw is below it
                return np.arange(int(counts.sum()), dtype=np.int64)
            words = self._first_words(counts) if blocks is None else self._block_words(blocks)
            return np.flatnonzero(words < np.uint64(bound))
        return self.ragged_below_on_device(counts, threshold).cpu().numpy()

    def _block_words(self, blocks: Blocks) -> np.ndarray:
        """:meth:`_first_words` of ``blocks``' counts: each client's stream repeated over its block plus the
        blocks' precomputed offsets, mixed. The repeat is a gather at the blocks' kept owners (the same words; on
        30,000 clients' 60,000 draws about 50 us against 60 us for ``np.repeat`` by the counts)."""
        z = np.take(self.streams, blocks.owner)
        z += blocks.offsets
        return mix64_(z)

    def ragged_below_on_device(self, counts: "np.ndarray | torch.Tensor", threshold: float) -> "torch.Tensor":
        """:meth:`ragged_below`'s positions as an int64 tensor left on the cohort's device (one built with a
        ``device``): the same positions, since the streams' bits are the same on every device. ``counts`` on the
        host or already on the device (then not copied again); the host waits only for how many draws there are
        where the counts are on the device, and for how many are kept (``nonzero``)."""
        if self.device is None:
            raise ValueError("ragged_below_on_device needs a CohortRandom built with a device")
        return self._ragged_device(counts).lt(threshold).nonzero().flatten()

    def _ragged_torch(self, counts: np.ndarray, starts: np.ndarray | None) -> np.ndarray:
        """:meth:`ragged` computed on the device (the same positions, the same bits)."""
        return self._ragged_device(counts, starts).cpu().numpy()

    def _ragged_device(self, counts: "np.ndarray | torch.Tensor", starts: np.ndarray | None = None) -> "torch.Tensor":
        """The draws of :meth:`ragged` as a tensor on the device (``starts`` None: every client from draw 0). With
        the counts on the host the total is known there, so no step waits for the device to learn the output's
        length; counts already on the device are used as they are (one wait for their total)."""
        import torch

        total = int(counts.sum())
        n = torch.as_tensor(counts, device=self.device)
        first = torch.cumsum(n, 0) - n
        owner = torch.repeat_interleave(torch.arange(len(n), device=self.device), n, output_size=total)
        within = torch.arange(total, dtype=torch.int64, device=self.device) - first[owner]
        if starts is not None:
            within += torch.as_tensor(np.array(starts), device=self.device)[owner]
        return stream_uniforms_torch(self.streams[owner], within)


class CohortStreams(Sequence[ClientRandom]):
    """The ``rng`` of each client of a cohort in one (seed, round, purpose) cell, each positioned after the
    ``positions[c]`` draws its client has already read: ``streams[c]`` is client c's :class:`ClientRandom`, built on
    first use, and :meth:`cohort` the same streams for one vectorized pass (:class:`CohortRandom`, reading from
    ``positions``)."""

    def __init__(self, seed: int, round: int, clients: np.ndarray, purpose: str, positions: np.ndarray | None = None) -> None:
        self.seed, self.round, self.purpose = int(seed), int(round), purpose
        self.clients = np.asarray(clients, dtype=np.int64)
        self.positions = np.zeros(len(self.clients), dtype=np.int64) if positions is None else np.asarray(positions, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.clients)

    def __getitem__(self, c: int) -> ClientRandom:  # type: ignore[override]  # one client's stream; no slices
        rng = ClientRandom(self.seed, self.round, int(self.clients[c]), self.purpose)
        rng.position = int(self.positions[c])
        return rng

    def states(self) -> np.ndarray:
        """Each client's SplitMix64 state (uint64), as its :class:`ClientRandom` has it."""
        return client_streams(cell_key(self.seed, self.round, self.purpose), self.clients)

    def cohort(self, device: "torch.device | str | None" = None) -> CohortRandom:
        """The same streams as one :class:`CohortRandom` (draw i there is draw i of the stream: start at ``positions``)."""
        return CohortRandom(self.seed, self.round, self.clients, self.purpose, device)


def counter_positions(streams: Sequence[object]) -> tuple[np.ndarray, np.ndarray] | None:
    """(uint64 state, next position) of each stream of ``streams`` (a :class:`CohortStreams` or a sequence of
    :class:`ClientRandom`), so that the next draws of every client are one :func:`stream_uniforms` pass; None
    when a stream is not counter-based (a plain numpy Generator)."""
    if isinstance(streams, CohortStreams):
        return streams.states(), streams.positions
    clients = [r for r in streams if type(r) is ClientRandom]
    if len(clients) != len(streams):
        return None
    states = np.fromiter((r.stream for r in clients), dtype=np.uint64, count=len(clients))
    return states, np.fromiter((r.position for r in clients), dtype=np.int64, count=len(clients))


def client_rng(seed: int, round: int, client: int, purpose: str = "") -> ClientRandom:
    """The ``rng`` a client procedure receives in one (seed, round, client, purpose) cell."""
    return ClientRandom(seed, round, client, purpose)
