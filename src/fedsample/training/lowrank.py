"""Local SGD of many small clients without a model per client: the low-rank form of a dense network's updates.

For a linear layer z = W h + b, the gradient of a minibatch's weighted loss is sum_b delta_b h_b^T (delta_b the
gradient at the layer's output for row b, weights included): a matrix of rank at most B. Every step of the SGD
rule (:class:`fedsample.training.local.SGDStep`: weight decay, FedProx's proximal term, heavy-ball momentum)
combines the current weights, the global weights W0 and such gradients linearly, so after s steps a client's
weights are exactly

    W_s = alpha_s * W0 + sum_j U_j V_j^T,        (momentum buffer: beta_s * W0 + sum_j M_j V_j^T)

where j runs over the rows the client has trained on so far (at most s * B of them), V_j is the layer's input
for row j at the step that used it, and U_j, M_j are coefficient vectors of the layer's output width. The
scalars follow the rule with the gradient left out (d_alpha = wd * alpha + mu * (alpha - 1)), the coefficients
with it (d_U = (wd + mu) * U + delta at the new rows). A forward at step s needs, for each row of the client's
minibatch, alpha_s * W0 h + (h . V_j) U_j summed over j: one matmul of the whole cohort's rows with W0 (the
union's cost) plus, per client, a B x (s B) Gram matrix against its own earlier inputs.

So a cohort of C clients, each taking S steps of B rows, runs every step as one batched forward/backward over
the clients still stepping and holds, per linear layer of width (out, in), C * S * B * (in + out) numbers
(plus out per row for momentum) instead of C * in * out per copy of the weights; biases are kept per client
(C * out). This applies to models that are a chain (``nn.Sequential``, nested) of ``nn.Linear`` layers and
row-wise maps (activations, ``Flatten``, injected dropout; :func:`linear_chain`), and pays where
S * B * (in + out) is below in * out (:meth:`LinearChain.low_rank_pays`): small clients. A client's own update
(alpha - 1 times W0 less the factors' product) is formed only when read, and a weighted sum over the cohort is
one matmul of the stacked factors (:meth:`LowRankStack.weighted_sum`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fedsample.messages import Params
from fedsample.training.functional import losses_of_outputs
from fedsample.training.local import SGDStep
from fedsample.training.random_layers import InjectedDropout, Masks, injected
from fedsample.training.rules import Rule

__all__ = ["Linear", "LinearChain", "LowRankStack", "RowMap", "linear_chain", "linear_layers", "train_low_rank"]

ROWWISE = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.ELU, nn.SELU, nn.CELU, nn.GELU, nn.SiLU, nn.Mish, nn.Tanh, nn.Sigmoid,
    nn.Softplus, nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid, nn.Tanhshrink, nn.Softsign, nn.Identity, InjectedDropout,
)
"""Maps applied to each row on its own, without parameters (``PReLU`` is excluded below: it has one)."""


class Linear(NamedTuple):
    """A linear layer of a :class:`LinearChain`: its weight's key and its bias's (None: no bias)."""

    weight: str
    bias: str | None


class RowMap(NamedTuple):
    """A row-wise map of a :class:`LinearChain` (``ROWWISE``, or ``Flatten`` from dimension 1): no parameters."""

    module: nn.Module


@dataclass(frozen=True)
class LinearChain:
    """A model that is a chain of linear layers and row-wise maps: ``layers`` in order, each a :class:`Linear`
    (weight key, bias key or None) or a :class:`RowMap` (module); ``widths`` the (out, in) of each linear layer."""

    layers: tuple[Linear | RowMap, ...]
    widths: tuple[tuple[int, int], ...]

    def factor_size(self, rows: int) -> int:
        """Numbers one client's factors hold after ``rows`` trained rows: sum over layers of rows * (in + out)."""
        return rows * sum(i + o for o, i in self.widths)

    def dense_size(self) -> int:
        """Numbers of one copy of the linear layers' weights: sum of in * out."""
        return sum(i * o for o, i in self.widths)

    def low_rank_pays(self, rows: int) -> bool:
        """Whether a client that trains on ``rows`` rows (steps x padded batch) is cheaper as factors than as a
        copy of its weights: ``factor_size(rows) < dense_size()``."""
        return self.factor_size(rows) < self.dense_size()

    def client_bytes(self, rows: int, batch: int, momentum: bool, activation_bytes: int, element: int = 4) -> int:
        """Memory one client of a chunk needs: its factors (U, V; M with momentum), biases, and one minibatch's
        activations with the Gram matrices against its earlier rows."""
        factors = rows * sum(i + o * (1 + int(momentum)) for o, i in self.widths)
        biases = sum(o for o, _ in self.widths) * (2 + int(momentum))
        return element * (factors + biases + batch * rows * len(self.widths)) + batch * activation_bytes


def _leaves(module: nn.Module, prefix: str = "") -> Iterator[tuple[str, nn.Module]]:
    """The modules a (nested) ``nn.Sequential`` runs, in order, with their parameter-name prefixes."""
    if type(module) is nn.Sequential:
        for name, child in module.named_children():
            yield from _leaves(child, f"{prefix}{name}.")
    else:
        yield prefix[:-1], module


def linear_chain(module: nn.Module, sample: torch.Tensor, params: Params) -> LinearChain | None:
    """``module`` as a :class:`LinearChain` (None when it is not one): a plain ``nn.Sequential`` (nested ones
    allowed) of ``nn.Linear`` layers fed 2-D inputs and parameter-free row-wise maps (``ROWWISE``, and ``Flatten``
    from dimension 1), whose parameters are exactly ``params``' keys. ``sample``: one input row."""
    layers: list[Linear | RowMap] = []
    widths: list[tuple[int, int]] = []
    keys: set[str] = set()
    if not sample.is_floating_point():
        return None  # token ids: the first layer is an embedding, not a linear map of the input
    h = sample[:1]
    with torch.no_grad():
        for name, leaf in _leaves(module):
            if isinstance(leaf, nn.Linear) and type(leaf) is nn.Linear:
                if h.dim() != 2:
                    return None
                weight, bias = f"{name}.weight", (f"{name}.bias" if leaf.bias is not None else None)
                layers.append(Linear(weight, bias))
                widths.append((leaf.out_features, leaf.in_features))
                keys.update(k for k in (weight, bias) if k is not None)
            elif type(leaf) is nn.Flatten and leaf.start_dim == 1 and leaf.end_dim == -1:
                layers.append(RowMap(leaf))
            elif isinstance(leaf, ROWWISE) and not isinstance(leaf, nn.PReLU) and not any(True for _ in leaf.parameters()):
                layers.append(RowMap(leaf))
            else:
                return None
            h = leaf(h)
    if not widths or keys != set(params) or h.dim() != 2:
        return None
    return LinearChain(tuple(layers), tuple(widths))


class LowRankStack:
    """The factors of a chunk of C clients after their local steps (see the module docstring): per linear layer
    U (C, R, out), V (C, R, in) and the biases (C, out); ``alpha`` (C,) the coefficient of W0 in every client's
    weights. Row j of the stack is one client; its update is W0 - W (weights) and b0 - b (biases)."""

    def __init__(self, chain: LinearChain, anchor: Params, alpha: torch.Tensor, factors: list[tuple[torch.Tensor, torch.Tensor]],
                 biases: list[torch.Tensor | None]) -> None:
        self.chain, self.anchor, self.alpha, self.factors, self.biases = chain, anchor, alpha, factors, biases

    def __len__(self) -> int:
        return len(self.alpha)

    def update(self, j: int) -> Params:
        """Client j's update, formed from its factors: (1 - alpha_j) W0 - U_j^T V_j, and b0 - b_j."""
        out: Params = {}
        scale = float(1.0 - self.alpha[j])
        for (weight, bias), (U, V), b in zip(self._linear(), self.factors, self.biases):
            out[weight] = torch.addmm(self.anchor[weight], U[j].T, V[j], beta=scale, alpha=-1.0)
            if bias is not None and b is not None:  # a layer with a bias keeps its bias rows
                out[bias] = self.anchor[bias] - b[j]
        return out

    def weighted_sum(self, a: np.ndarray) -> Params:
        """sum_j a_j * update_j over the stack (``a`` one coefficient per row): one matmul of the stacked factors
        per layer, (sum_j a_j (1 - alpha_j)) W0 - (a * U)^T V."""
        coef = torch.as_tensor(a, dtype=self.alpha.dtype, device=self.alpha.device)
        w0 = float((coef * (1.0 - self.alpha)).sum())
        total = float(coef.sum())
        out: Params = {}
        for (weight, bias), (U, V), b in zip(self._linear(), self.factors, self.biases):
            c = coef.to(U.dtype)
            scaled = (U * c[:, None, None]).reshape(-1, U.shape[-1])
            out[weight] = torch.addmm(self.anchor[weight], scaled.T, V.reshape(-1, V.shape[-1]), beta=w0, alpha=-1.0)
            if bias is not None and b is not None:
                out[bias] = total * self.anchor[bias] - c @ b
        return out

    def _linear(self) -> list[Linear]:
        return linear_layers(self.chain)


def linear_layers(chain: LinearChain) -> list[Linear]:
    """The linear layers of ``chain``, in order."""
    return [layer for layer in chain.layers if isinstance(layer, Linear)]


def train_low_rank(
    chain: LinearChain, task: str, anchor: Params, x: torch.Tensor, y: torch.Tensor, rows: torch.Tensor,
    weights: torch.Tensor, steps: np.ndarray, rule: Rule, masks_of_step: Callable[[int, int], Masks] | None = None,
) -> tuple[LowRankStack, torch.Tensor]:
    """Run the local steps of a chunk of C clients in low-rank form. ``rows`` (C, S, B): the training rows of
    each client's minibatch at each step (padded), ``weights`` (C, S, B) their weights in the step's loss (0 for
    padding), ``steps`` (C,) each client's number of steps, in decreasing order (step s runs the first n_s
    clients: those that still step), ``rule`` the step rule, local SGD's (:class:`~fedsample.training.local.SGDStep`:
    lr, momentum, weight_decay, prox_mu; another rule is a TypeError),
    ``masks_of_step(s, n)`` the dropout masks of step s for the first n clients (``(n, B, *shape)`` each; None: no
    dropout). Returns the factors and the (C, S) weighted loss of every client's every step."""
    if not isinstance(rule, SGDStep):
        raise TypeError(f"the low-rank form transforms local SGD's step (SGDStep), not a {type(rule).__name__}")
    C, S, B = rows.shape
    linear = linear_layers(chain)
    R = S * B
    device, dtype = x.device, weights.dtype
    lr, m, wd, mu = float(rule.lr), float(rule.momentum), float(rule.weight_decay), float(rule.prox_mu)
    decay = wd + mu
    W0 = [anchor[w].detach() for w, _ in linear]
    b0 = [anchor[b].detach() if b is not None else None for _, b in linear]
    U = [torch.zeros((C, R, o), dtype=dtype, device=device) for o, _ in chain.widths]
    V = [torch.zeros((C, R, i), dtype=dtype, device=device) for _, i in chain.widths]
    M = [torch.zeros_like(u) for u in U] if m else None
    bias = [b.unsqueeze(0).repeat(C, 1) if b is not None else None for b in b0]
    bias_m = [torch.zeros_like(b) if b is not None else None for b in bias] if m else None
    alpha = torch.ones(C, dtype=torch.float64, device=device)
    beta = torch.zeros(C, dtype=torch.float64, device=device)
    losses = torch.zeros((C, S), dtype=torch.float64, device=device)
    for s in range(S):
        n = int(np.count_nonzero(steps > s))
        P = s * B  # the rows each stepping client has trained on so far (padded)
        batch = rows[:n, s].reshape(-1)
        masks = None
        if masks_of_step is not None:  # (n, B, *shape) per layer: one row of masks per minibatch row
            masks = {k: v.reshape(n * B, *v.shape[2:]).to(device) for k, v in masks_of_step(s, n).items()}
        deltas, inputs, terms = _forward_backward(
            chain, task, W0, U, V, bias, alpha[:n].to(dtype), x.index_select(0, batch), y.index_select(0, batch),
            weights[:n, s].reshape(-1), n, B, P, masks,
        )
        losses[:n, s] = terms.view(n, B).sum(1).double()
        d_alpha = wd * alpha[:n] + mu * (alpha[:n] - 1.0)  # the W0 coefficient of d = g + wd w + mu (w - w0)
        if m:
            beta[:n] = m * beta[:n] + d_alpha
            d_alpha = beta[:n]
        alpha[:n] -= lr * d_alpha
        for layer, (delta, h) in enumerate(zip(deltas, inputs)):
            V[layer][:n, P : P + B] = h
            u = U[layer][:n, : P + B]
            if m:
                assert M is not None  # momentum buffers exist when m > 0
                mm = M[layer][:n, : P + B]
                mm.mul_(m)
                if decay:
                    mm.add_(u, alpha=decay)
                mm[:, P : P + B] += delta
                u.add_(mm, alpha=-lr)
            else:
                if decay:
                    u.mul_(1.0 - lr * decay)
                u[:, P : P + B].add_(delta, alpha=-lr)
            b_layer, b0_layer = bias[layer], b0[layer]
            if b_layer is not None and b0_layer is not None:
                buf = None if bias_m is None else bias_m[layer]
                rule.apply_([b_layer[:n]], [delta.sum(1)], [] if buf is None else [buf[:n]], [b0_layer])
    stack = LowRankStack(chain, {k: v.detach() for k, v in anchor.items()}, alpha, list(zip(U, V)), bias)
    return stack, losses


def _forward_backward(
    chain: LinearChain, task: str, W0: list[torch.Tensor], U: list[torch.Tensor], V: list[torch.Tensor],
    bias: list[torch.Tensor | None], alpha: torch.Tensor, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, n: int, B: int,
    P: int, masks: Masks | None,
) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """One step's forward over the n stepping clients' minibatches (n * B rows) at their low-rank weights, and the
    backward to every linear layer's output: each layer's delta (n, B, out) and input (n, B, in), and the rows'
    weighted losses."""
    probes, inputs = [], []
    layer = 0
    with torch.enable_grad(), injected(masks):
        h = x
        for link in chain.layers:
            if isinstance(link, RowMap):
                h = link.module(h)
                continue
            width_in = h.shape[-1]
            rows_in = h.reshape(n, B, width_in)
            z = F.linear(h, W0[layer]).view(n, B, -1) * alpha[:, None, None]
            b_layer = bias[layer]
            if b_layer is not None:
                z = z + b_layer[:n, None, :]
            if P:
                z = z + torch.bmm(torch.bmm(rows_in, V[layer][:n, :P].transpose(1, 2)), U[layer][:n, :P])
            probe = torch.zeros_like(z, requires_grad=True)
            probes.append(probe)
            inputs.append(rows_in.detach())
            h = (z + probe).reshape(n * B, -1)
            layer += 1
        terms = w * losses_of_outputs(h, y, task)
        deltas = torch.autograd.grad(terms.sum(), probes)
    return list(deltas), inputs, terms.detach()
