"""Random layers driven by each client's own stream, so every engine draws the very same dropout masks.

A dropout layer's mask is a random draw; left to torch's global generator it depends on the order in which
clients run (and ``torch.func.vmap`` refuses it outright). The engines therefore train a copy of the model in
which every ``nn.Dropout`` / ``nn.Dropout1d/2d/3d`` is an :class:`InjectedDropout` that multiplies by a mask
passed in with the minibatch. Client c's masks come from a ``torch.Generator`` seeded from its counter-based
stream (seed, round, c, "dropout") (:func:`client_generator`) and are drawn in a fixed order: for each forward
the client runs (each local step), for each dropout layer in ``named_modules`` order, a tensor of shape
``(rows, *mask_shape)`` (:meth:`RandomLayers.draw`). The loop draws them step by step; the vectorized engine
draws the same tensors client by client, pads and stacks them and feeds them through ``vmap`` with the
minibatches. The numbers therefore depend on neither the backend nor chunking.

Without masks (evaluation, probes at the global model) an :class:`InjectedDropout` is the identity, as
``nn.Dropout`` is in eval mode. Other random operations (``F.dropout`` called in a ``forward``,
``torch.randn``, ...) read torch's global generator, which the loop reseeds per client and procedure
(:func:`seeded_torch`); the vectorized engine detects them (:meth:`RandomLayers.has_unmanaged_random_ops`) and
runs such models through that loop.

BatchNorm couples the samples of a batch: with running statistics (``track_running_stats=True``) it would
keep server-side buffers that every client overwrites, so :func:`prepare` refuses it with the layer's name and
the remedy (``nn.GroupNorm``/``nn.LayerNorm``, or ``track_running_stats=False``); without running statistics
it normalises with the batch's own statistics, which the loop computes on each client's real minibatch and
the vectorized engine cannot (padding, union batches), so such models train through the loop
(:attr:`RandomLayers.couples_samples`).
"""

from __future__ import annotations

import copy
import math
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import nn

from fedsample.rng import ClientRandom
from fedsample.training import layout

__all__ = [
    "InjectedDropout", "Masks", "RandomLayers", "attach", "client_generator", "generator_for", "injected", "kept_units",
    "mask_bytes_per_sample", "padded", "prepare", "random_layers_of", "seeded_torch",
]

Masks = dict[str, torch.Tensor]
"""Dropout masks of one forward pass, by layer name."""

_DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)


class _ActiveMasks(threading.local):
    """The masks of the forward being run on this thread (None: dropout off): one per thread, so clients trained
    side by side on threads (:class:`fedsample.federation.simulator.Simulator`'s ``client_threads``) each see
    their own."""

    masks: Masks | None = None


_ACTIVE = _ActiveMasks()
_STREAM_PURPOSE = "dropout"


class InjectedDropout(nn.Module):
    """Dropout whose mask (already scaled by 1/(1-p)) is given with the batch; the identity without one."""

    def __init__(self, key: str, p: float, per_channel: bool) -> None:
        super().__init__()
        self.key, self.p, self.per_channel = key, p, per_channel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        masks = _ACTIVE.masks
        if masks is None or self.key not in masks:
            return x
        return x * masks[self.key]

    def extra_repr(self) -> str:
        return f"p={self.p}, per_channel={self.per_channel}"


@dataclass
class RandomLayers:
    """The training copy of a model (``module``) and its injected dropout layers: ``(key, p, mask shape per
    sample)`` in ``named_modules`` order, the order in which :meth:`draw` draws their masks."""

    module: nn.Module
    layers: list[tuple[str, float, tuple[int, ...]]] = field(default_factory=list)
    couples_samples: str | None = None  # the name of a layer whose output mixes the samples of a batch
    _unmanaged: bool | None = None

    def draw(
        self, generator: torch.Generator | None, rows: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
    ) -> Masks:
        """One forward's masks for ``rows`` samples, each layer's ``(rows, *shape)`` Bernoulli(1-p)/(1-p)
        (:func:`kept_units`), drawn on the host from the client's generator (the same bits on every device), then
        moved to ``device``."""
        dtype = dtype if dtype.is_floating_point else torch.get_default_dtype()  # token-id inputs: float masks
        masks = {key: kept_units(generator, (rows, *shape), p, dtype) for key, p, shape in self.layers}
        return masks if device is None else {k: m.to(device) for k, m in masks.items()}

    def draw_many(self, generators: Sequence[torch.Generator | None], rows: list[int], dtype: torch.dtype = torch.float32) -> Masks:
        """The masks of one forward of each client (client i: ``rows[i]`` samples from ``generators[i]``),
        concatenated along the sample axis in client order: a union batch's masks."""
        if not self.layers:
            return {}
        parts = [self.draw(g, n, dtype) for g, n in zip(generators, rows)]
        return {key: torch.cat([p[key] for p in parts]) for key, _, _ in self.layers}

    def unbatchable(self, x: torch.Tensor) -> str | None:
        """Why training this model cannot be batched over clients (None: it can): a layer mixing the samples
        of a batch (BatchNorm without running statistics), or random operations outside the injected dropout
        layers. ``x``: one input row."""
        if self.couples_samples is not None:
            return f"layer {self.couples_samples!r} normalises over the batch"
        if self.has_unmanaged_random_ops(x):
            return "the model draws random numbers outside nn.Dropout layers (or does not run under vmap)"
        return None

    def has_unmanaged_random_ops(self, x: torch.Tensor) -> bool:
        """Whether a forward draws from torch's generator outside the injected dropout layers (``vmap`` in
        its default randomness="error" mode refuses such an operation; a forward that ``vmap`` cannot run at
        all counts as one, so that it is seeded and trained client by client); checked once on one sample."""
        if self._unmanaged is None:
            from torch.func import vmap

            masks = {key: torch.ones((1, 1, *shape)) for key, _, shape in self.layers}

            def forward(xi: torch.Tensor, m: Masks) -> torch.Tensor:
                with injected(m):
                    out: torch.Tensor = self.module(xi)
                    return out

            try:
                with torch.no_grad():
                    vmap(forward)(x[:1].unsqueeze(0), masks)
                self._unmanaged = False
            except Exception:  # noqa: BLE001 - a random op, or a forward vmap cannot run: treat it as random
                self._unmanaged = True
        return self._unmanaged


def kept_units(generator: torch.Generator | None, shape: tuple[int, ...], p: float, dtype: torch.dtype) -> torch.Tensor:
    """A dropout mask of ``shape``: unit i is kept (value 1/(1-p)) where the i-th uniform u_i of ``generator`` is
    below 1-p, so with probability 1-p, else dropped (0); E[mask] = 1 (the inverted dropout of Srivastava et al.
    2014). The uniforms are float32 whatever ``dtype``.

    Not ``Tensor.bernoulli_(1-p)``: torch's CPU kernel for a scalar p draws from MKL's own generator on Intel
    processors and from the generator's Mersenne twister on the others, so a run with dropout would give other
    numbers on another make of processor; ``torch.rand`` reads the generator the same way on every processor
    (and is faster on the others: figures in ``benchmarks/README.md``). The comparison is written into the uniforms'
    own tensor (no boolean mask, no conversion where ``dtype`` is theirs): the same bits as ``(u < 1-p).to(dtype)``."""
    keep = torch.rand(shape, generator=generator).lt_(1.0 - p)  # in place: 1.0 where u < 1-p, else 0.0
    keep = keep if keep.dtype == dtype else keep.to(dtype)
    return keep.mul_(1.0 / (1.0 - p)) if 0.0 < p < 1.0 else keep


def prepare(module: nn.Module, sample: torch.Tensor, channels_last: bool | None = None) -> RandomLayers:
    """The model the engines train: ``module`` itself where nothing changes (no dropout layer, and no channels-last
    training: no convolution on 4-D CPU inputs, or one that :func:`fedsample.training.layout.channels_last_suits`
    refuses), else a copy whose dropout layers are :class:`InjectedDropout` and which, where that probe agrees,
    takes its inputs in channels-last layout with its max-pools keeping their gradients' layout and running before
    a ReLU that precedes them (:mod:`fedsample.training.layout`); ``sample`` (one input row) gives each dropout layer's per-sample mask shape
    and the inputs' kind. ``channels_last``: None (the rule), or False to keep the layout
    (True trains channels-last where the model is :func:`fedsample.training.layout.convolutional`, unprobed).
    Raises for BatchNorm with running statistics (see the module docstring)."""
    coupled = _refuse_running_statistics(module)
    dropouts = [(name, m) for name, m in module.named_modules() if isinstance(m, _DROPOUTS)]
    convolutional = channels_last is not False and layout.convolutional(module, sample)
    if not dropouts and not convolutional:
        return RandomLayers(module, couples_samples=coupled)
    shapes = _input_shapes(module, [m for _, m in dropouts], sample[:1]) if dropouts else []
    trained = copy.deepcopy(module)
    layers = []
    for (name, m), shape in zip(dropouts, shapes):
        per_channel = not isinstance(m, nn.Dropout)
        mask_shape = (shape[0],) + (1,) * (len(shape) - 1) if per_channel else shape
        _replace(trained, name, InjectedDropout(name, float(m.p), per_channel))
        layers.append((name, float(m.p), mask_shape))
    if convolutional and (channels_last or layout.channels_last_suits(trained, sample)):  # dropout off here (no masks)
        layout.pool_before_relu(trained)
        for name, pool in layout.max_pools(trained):
            _replace(trained, name, layout.LayoutKeepingMaxPool2d.like(pool))
        layout.channels_last_inputs(trained)
    elif not dropouts:  # nothing to change: the model itself, no copy
        return RandomLayers(module, couples_samples=coupled)
    return RandomLayers(trained, layers, couples_samples=coupled)


def _refuse_running_statistics(module: nn.Module) -> str | None:
    """Raise for a BatchNorm layer with running statistics; return the name of one without (or None)."""
    coupled = None
    for name, m in module.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            if m.track_running_stats:
                raise ValueError(
                    f"layer {name!r} ({type(m).__name__}) keeps running statistics, which would be shared by every "
                    "client and the server; use nn.GroupNorm or nn.LayerNorm, or pass track_running_stats=False"
                )
            coupled = coupled or name
    return coupled


def _input_shapes(module: nn.Module, layers: list[nn.Module], x: torch.Tensor) -> list[tuple[int, ...]]:
    """The per-sample input shape of each of ``layers`` in one forward of ``x`` (one sample)."""
    seen: dict[int, tuple[int, ...]] = {}

    def record(m: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        seen.setdefault(id(m), tuple(inputs[0].shape[1:]))

    handles = [m.register_forward_pre_hook(record) for m in layers]
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            module(x)
    finally:
        for h in handles:
            h.remove()
    missing = [type(m).__name__ for m in layers if id(m) not in seen]
    if missing:
        raise ValueError(f"dropout layers never called in a forward pass ({', '.join(missing)}): remove them from the model")
    return [seen[id(m)] for m in layers]


def _replace(root: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(root.get_submodule(parent_name) if parent_name else root, child, new)


@contextmanager
def injected(masks: Masks | None) -> Iterator[None]:
    """Run forwards with ``masks`` in the injected dropout layers (None or ``{}``: dropout off)."""
    previous, _ACTIVE.masks = _ACTIVE.masks, masks
    try:
        yield
    finally:
        _ACTIVE.masks = previous


_ATTACHED: weakref.WeakKeyDictionary[nn.Module, RandomLayers] = weakref.WeakKeyDictionary()
"""Each training module with injected dropout layers and its :class:`RandomLayers` (:func:`attach`)."""


def random_layers_of(module: nn.Module) -> RandomLayers | None:
    """The :class:`RandomLayers` a training module was attached with (None for a model without dropout)."""
    return _ATTACHED.get(module)


def attach(layers: RandomLayers) -> nn.Module:
    """The training module, registered so that solvers find its dropout layers from ``ctx.module``. A copy of it is
    registered by attaching a copy of ``layers`` (``attach(copy.deepcopy(layers))``, whose module is the copy)."""
    if layers.layers:
        _ATTACHED[layers.module] = layers
    return layers.module


def client_generator(seed: int, round: int, client: int) -> torch.Generator:
    """Client ``client``'s generator of dropout masks in ``round``: seeded from its (seed, round, client,
    "dropout") counter-based stream."""
    g = torch.Generator()
    g.manual_seed(ClientRandom(seed, round, client, _STREAM_PURPOSE).stream & (2**63 - 1))
    return g


def generator_for(rng: "np.random.Generator | ClientRandom") -> torch.Generator:
    """The mask generator of the client whose procedure received ``rng`` (a :class:`ClientRandom`); a plain
    numpy Generator seeds one from its own next draw."""
    if isinstance(rng, ClientRandom):
        return client_generator(rng.seed, rng.round, rng.client)
    g = torch.Generator()
    g.manual_seed(int(rng.integers(0, 2**62)))
    return g


@contextmanager
def seeded_torch(seed: int, round: int, client: int, purpose: str) -> Iterator[None]:
    """Torch's global generator seeded from the client's (seed, round, client, purpose + "/torch") stream for
    the duration (restored after): random operations outside the injected layers become a function of the
    client and the round, whatever ran before."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(ClientRandom(seed, round, client, purpose + "/torch").stream & (2**63 - 1))
        yield


def padded(masks: list[Masks], rows: list[int], width: int, layers: RandomLayers) -> Masks:
    """Per-client masks (client i's of ``rows[i]`` samples, or ``{}`` for a client not stepping) zero-padded to
    ``width`` rows and stacked: ``(clients, width, *shape)`` per layer (padding rows carry weight 0)."""
    out: Masks = {}
    for key, _, shape in layers.layers:
        stacked = torch.zeros((len(masks), width, *shape))
        for i, m in enumerate(masks):
            if key in m:
                stacked[i, : rows[i]] = m[key]
        out[key] = stacked
    return out


def mask_bytes_per_sample(layers: RandomLayers | None) -> int:
    """Bytes of one sample's masks (float32)."""
    return 0 if layers is None else 4 * sum(math.prod(shape) for _, _, shape in layers.layers)
