"""Local solvers: what a chosen client computes on the samples its data plan drew.

Each solver returns a pseudo-gradient ``update`` (a descent direction) and the number of local steps
taken: for SGD the update is ``w_global - w_local``; for FedSampling's one-gradient mode it is
``G_c = (1/K) * sum_{s in S_c} g_s`` (Qi et al. 2023, §3.2). The server then applies ``w - eta * aggregate``.

Every solver here declares its arithmetic once (:class:`fedsample.parts.ScheduledSolver`): its batch schedule
(which drawn rows each local step uses, with which weight), its step rule (:class:`SGDStep`) and FedNova's
normalizer. The loop (:func:`run_schedule`, each solver's ``run``), the vectorized engine and the diagnostics'
linearised federation all read that declaration; none repeats it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Sequence, cast

import numpy as np
import torch

from fedsample import checks
from fedsample.messages import ClientContext, LocalResult, LocalSample
from fedsample.parts import BatchSchedule, DrawnCohort, LocalSolver, LocalSolverCapabilities
from fedsample.rng import ClientRandom, CohortStreams, counter_positions, stream_uniforms
from fedsample.training.dtypes import float_dtype
from fedsample.training.functional import Params, weighted_loss_fn
from fedsample.training.fused import FusedLinears
from fedsample.training.random_layers import generator_for, random_layers_of
from fedsample.training.rules import Rule, Transform, add_decayed_weights, add_proximal, chain, trace

__all__ = [
    "EpochSGD", "LocalOptimizer", "LocalResult", "LocalSGD", "LocalSolver", "OneGradient", "SGDStep", "Scheduled", "effective_steps",
    "LR_DECAY", "MOMENTUM", "SGD_SETTINGS", "epochs_or_steps", "sgd_terms_left_out", "run_schedule", "sgd_step", "sgd_step_",
]


@dataclass(frozen=True)
class SGDStep(Rule):
    """One local SGD step's rule (:func:`sgd_step_`): d = g + weight_decay*w + prox_mu*(w - w_global);
    b = momentum*b + d; w = w - lr*b, i.e. the chain ``add_decayed_weights``, ``add_proximal``, ``trace``
    (:mod:`fedsample.training.rules`; a zero term is left out). FedSampling's one gradient is this rule with lr = 1
    and nothing else: the update of its single step is the weighted gradient itself."""

    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    prox_mu: float = 0.0

    @functools.cached_property
    def transforms(self) -> tuple[Transform, ...]:  # computed once per rule
        chained: list[Transform] = []
        if self.weight_decay:
            chained.append(add_decayed_weights(self.weight_decay))
        if self.prox_mu:
            chained.append(add_proximal(self.prox_mu))
        if self.momentum:
            chained.append(trace(self.momentum))
        return tuple(chained)

    @property
    def linear(self) -> bool:
        return True

    @property
    def fusable(self) -> bool:
        """Whether a step is w <- (1 - lr*weight_decay) * w - lr * g, which a linear layer can take in one product
        (:mod:`fedsample.training.fused`): no momentum buffer, no proximal term."""
        return not self.momentum and not self.prox_mu

    @property
    def is_gradient(self) -> bool:
        """Whether a single step's update is the weighted gradient itself (lr 1, no weight decay)."""
        return self.lr == 1.0 and not self.weight_decay

    def first_step_(self, g: list[torch.Tensor], w0: list[torch.Tensor]) -> list[torch.Tensor]:
        """The update w0 - w1 of one step from the global model w0: lr * (g + weight_decay * w0) (momentum's first
        buffer is the step itself and the proximal term is 0 at w0), computed in place in the gradient ``g``
        (which it returns) without forming w1."""
        if self.weight_decay:
            torch._foreach_add_(g, w0, alpha=self.weight_decay)
        if self.lr != 1.0:
            torch._foreach_mul_(g, self.lr)
        return g

    def effective_steps(self, steps: int) -> float:
        """FedNova's ||a||_1 for ``steps`` steps of this rule (:func:`effective_steps`)."""
        return effective_steps(steps, self.momentum, self.lr * self.prox_mu)

    def effective_table(self, top: int) -> np.ndarray:
        """``effective_steps(k)`` for k = 0..top, from one pass of the recursion."""
        out = np.zeros(top + 1)
        e, b, lr_mu = 0.0, 0.0, self.lr * self.prox_mu
        for k in range(1, top + 1):
            b = self.momentum * b + 1.0 + lr_mu * e
            e = e - b
            out[k] = -e
        return out

    def step_weights(self, total: np.ndarray, step: np.ndarray) -> np.ndarray:
        """a_t: the weight of step ``step``'s gradient in the first-order update of a client that takes ``total``
        steps, w_global - w_local = lr * sum_t a_t * g_t + O(lr^2); the impulse response S(total - t) -
        S(total - t - 1) of the rule's linear dynamics, S = :meth:`effective_steps` (elementwise)."""
        total, step = np.asarray(total, dtype=np.int64), np.asarray(step, dtype=np.int64)
        S = self.effective_table(int(total.max()) if total.size else 0)
        remaining: np.ndarray = S[total - step] - S[total - step - 1]
        return remaining


def effective_steps(steps: int, momentum: float = 0.0, lr_mu: float = 0.0) -> float:
    """FedNova's ||a_k||_1 for ``steps`` steps of :func:`sgd_step_` (Wang et al. 2020, Eq. 7 and §5).

    The local update of SGD-type solvers is w_global - w_local = lr * sum_t a_{k,t} * g_t (g_t the
    minibatch gradient at step t, weight decay counted as part of g_t, as in the authors' code), and
    FedNova normalizes it by ||a_k||_1 = sum_t a_{k,t}. Closed forms (the paper's cases):

    - plain SGD: a_k = [1, ..., 1], ||a_k||_1 = tau_k;
    - heavy-ball momentum rho (b <- rho*b + g, w <- w - lr*b): the gradient of step t (0-based) enters
      every later buffer, a_{k,t} = (1 - rho^(tau_k - t)) / (1 - rho), so
      ||a_k||_1 = (tau_k - rho*(1 - rho^tau_k)/(1 - rho)) / (1 - rho);
    - FedProx's proximal term with lr*mu: a_{k,t} = (1 - lr*mu)^(tau_k - 1 - t), so
      ||a_k||_1 = (1 - (1 - lr*mu)^tau_k) / (lr*mu).

    Momentum and the proximal term together have no closed form in the paper; because the dynamics of
    e = w - w_global are linear, sum_t a_{k,t} is the response to a constant unit gradient, computed here by
    that scalar recursion (e_0 = b_0 = 0; b <- rho*b + 1 + mu*e; e <- e - lr*b; ||a||_1 = -e_tau / lr).
    This equals the three closed forms above and is exact for :func:`sgd_step_`. (The sum equals the L1
    norm while every a_{k,t} >= 0, i.e. for lr*mu < 1, as in any sane setting.)
    """
    e, b = 0.0, 0.0
    for _ in range(int(steps)):
        b = momentum * b + 1.0 + lr_mu * e
        e = e - b  # lr factored out: e here is (w - w_global) / lr
    return -e


def sgd_step_(
    w: list[torch.Tensor], g: list[torch.Tensor], buf: list[torch.Tensor] | None, anchor: list[torch.Tensor],
    lr: float, momentum: float, weight_decay: float, prox_mu: float,
) -> None:
    """One SGD step in place (:class:`SGDStep`): d = g + weight_decay*w + prox_mu*(w - anchor); b = momentum*b + d;
    w = w - lr*b. Zero terms cost nothing; ``w`` and ``buf`` (None: no momentum) are updated in place (``anchor``
    broadcasts against stacked ``w``), ``g`` is left as it is."""
    SGDStep(lr, momentum if buf is not None else 0.0, weight_decay, prox_mu).apply_(w, g, buf or [], anchor)


def sgd_step(
    w: Params, g: Params, buf: Params | None, anchor: Params, lr: float, momentum: float, weight_decay: float, prox_mu: float
) -> tuple[Params, Params | None]:
    """:func:`sgd_step_` on copies: returns the new parameters and momentum buffer, leaves the inputs alone."""
    new_w = {k: v.detach().clone() for k, v in w.items()}
    new_buf = {k: v.clone() for k, v in buf.items()} if buf is not None else None
    with torch.no_grad():
        sgd_step_(list(new_w.values()), [g[k] for k in w], None if new_buf is None else list(new_buf.values()),
                  [anchor[k] for k in w], lr, momentum, weight_decay, prox_mu)
    return new_w, new_buf


# --- the one loop every scheduled solver runs on a client ------------------------------------------------------


def run_schedule(
    solver: "Scheduled", ctx: ClientContext, sample: LocalSample, params: Params, round: int, rng: ClientRandom,
    rule: Rule | None = None,
) -> LocalResult:
    """One client's local training from its solver's declared arithmetic: the schedule's minibatches in order,
    each step the weighted loss sum_b weight_b * l_b, its gradient and the step ``rule`` (default: the solver's)
    applied to one working copy of the parameters in place. A client whose schedule has one step returns
    :meth:`SGDStep.first_step_` (the update straight from the gradient at the global model, as the vectorized
    engine's union does). Minibatches are gathered from the client's data by position (no copy of the drawn
    sample), dropout masks come from the client's stream (:mod:`fedsample.training.random_layers`)."""
    layers = random_layers_of(ctx.module)
    generator = generator_for(rng) if layers is not None else None  # before the schedule reads the stream
    rule = solver.step_rule(round) if rule is None else rule
    schedule = solver.schedule(DrawnCohort.of([sample]), [rng], round)
    loss_fn = weighted_loss_fn(ctx.module, ctx.task)
    device, dtype = ctx.x.device, float_dtype(ctx.x)
    rows = torch.as_tensor(np.asarray(sample.indices, dtype=np.int64)[schedule.row], device=device)
    weights = torch.as_tensor(schedule.weight, dtype=dtype, device=device)
    bounds = schedule.batch_starts().tolist()
    steps = len(bounds) - 1
    anchor = list(params.values())
    single = steps == 1 and rule.linear
    w = [v.detach().requires_grad_(True) if single else v.detach().clone().requires_grad_(True) for v in anchor]
    state = [] if single else rule.init(anchor)
    working = dict(zip(params, w))
    fused = FusedLinears(ctx.module, working, rule.lr, cast(SGDStep, rule).weight_decay) if rule.fusable and not single else None  # fusable: local SGD's rule
    trained = list(params)  # the names autograd differentiates and the rule steps (the fused layers leave after step 1)
    losses: list[torch.Tensor] = []
    update: Params | None = None
    try:
        for start, end in zip(bounds[:-1], bounds[1:]):
            batch = rows[start:end]
            masks = layers.draw(generator, end - start, dtype, device) if layers is not None else None
            with torch.enable_grad():
                loss = loss_fn(working, ctx.x[batch], ctx.y[batch], weights[start:end], masks)
                grads = list(torch.autograd.grad(loss, [working[k] for k in trained]))
            if single:
                update = dict(zip(params, rule.first_step_(grads, anchor)))
            else:
                with torch.no_grad():
                    rule.apply_([working[k] for k in trained], grads, state, [params[k] for k in trained], len(losses) + 1)
                    if fused is not None and len(losses) == 0:  # after the first step: fuse the inner layers found
                        trained = _leave_autograd(working, fused.found())
                    elif fused is not None:
                        fused.step_()
            losses.append(loss.detach())  # no host sync per step (one at the end)
    finally:
        if fused is not None:
            fused.close()
    if update is None:
        update = {k: torch.sub(a, v.detach(), out=v.detach()) for k, a, v in zip(params, anchor, w)}  # a - v in one pass, in the working copy
    mean_loss = float(torch.stack(losses).double().mean()) if losses else float("nan")
    if schedule.loss_scale is not None:
        mean_loss *= float(schedule.loss_scale[0])
    norm = solver.norm_steps(np.array([steps]), round)
    return LocalResult(update=update, steps=steps, loss=mean_loss, norm_steps=None if norm is None else float(norm[0]), rows_trained=len(rows))


def _leave_autograd(working: dict[str, torch.Tensor], names: list[str]) -> list[str]:
    """The names of the working tensors autograd keeps differentiating once ``names`` (stepped in place by
    :class:`~fedsample.training.fused.FusedLinears`) leave it."""
    for k in names:
        if k in working:
            working[k].requires_grad_(False)
    return [k for k in working if k not in names]


class Scheduled:
    """The :class:`~fedsample.parts.ScheduledSolver` side every solver here shares: ``run`` is
    :func:`run_schedule` of the solver's own declaration, and ``batched`` says whether the vectorized engine may
    run that declaration for a whole cohort: true while ``run`` is this one (a subclass that overrides ``run`` adds
    something the declaration does not say, and is trained client by client)."""

    def schedule(self, drawn: DrawnCohort, streams: Sequence[ClientRandom], round: int) -> BatchSchedule:
        raise NotImplementedError

    def step_rule(self, round: int) -> Rule:
        raise NotImplementedError

    def single_step(self, sizes: np.ndarray) -> bool:
        raise NotImplementedError

    def norm_steps(self, steps: np.ndarray, round: int) -> np.ndarray | None:
        """FedNova's a_k = ||a_k||_1 of each member's step count under the step rule (:meth:`SGDStep.effective_steps`)."""
        rule = self.step_rule(round)
        steps = np.asarray(steps, dtype=np.int64)
        table = rule.effective_table(int(steps.max()) if steps.size else 0)
        return None if table is None else table[steps]

    @property
    def batched(self) -> bool:
        return type(self).run is Scheduled.run

    def run(self, ctx: ClientContext, sample: LocalSample, params: Params, round: int, rng: ClientRandom) -> LocalResult:
        return run_schedule(self, ctx, sample, params, round, rng)


def minibatch_schedule(
    solver: "LocalSGD", drawn: DrawnCohort, streams: Sequence[ClientRandom],
) -> BatchSchedule:
    """Every member's :meth:`LocalSGD.batches` of its drawn sample (client by client, each from its own stream),
    each row weighted 1/B times the plan's scale (the minibatch mean of Eq. 8's scaled gradients)."""
    active = np.flatnonzero(drawn.counts)
    batches: list[np.ndarray] = []
    per_client = np.zeros(len(active), dtype=np.int64)
    for j, c in enumerate(active.tolist()):
        mine = solver.batches(drawn.sample(c), streams[c])
        batches.extend(mine)
        per_client[j] = len(mine)
    sizes = np.fromiter(map(len, batches), dtype=np.int64, count=len(batches))
    if len(active) == 1:  # one client (the loop): its steps are 0, 1, ...
        client, batch_step = np.full(int(sizes.sum()), active[0]), np.arange(len(batches))
    else:
        batch_step = np.arange(len(batches)) - np.repeat(np.cumsum(per_client) - per_client, per_client)
        client = np.repeat(np.repeat(active, per_client), sizes)
    row = np.concatenate(batches + [np.zeros(0, dtype=np.int64)]).astype(np.int64, copy=False) + drawn.starts[client]
    weight = np.repeat(1.0 / sizes, sizes)  # every minibatch holds at least one row
    if drawn.scale is not None:
        weight = weight * drawn.scale[row]
    return BatchSchedule(client, np.repeat(batch_step, sizes), row, weight, len(drawn))


def shuffled_passes(states: np.ndarray, positions: np.ndarray, sizes: np.ndarray, passes: np.ndarray) -> np.ndarray:
    """For each client c, ``passes[c]`` permutations of range(``sizes[c]``) one after the other, each the stable
    argsort of the next ``sizes[c]`` uniforms of its counter-based stream (state ``states[c]``, from draw
    ``positions[c]``): what ``passes[c]`` calls of :meth:`fedsample.rng.ClientRandom.permutation` return, for the
    whole cohort in one numpy pass (one sort keyed by (client, pass), then uniform). Concatenated in client order."""
    sizes, passes = np.asarray(sizes, dtype=np.int64), np.asarray(passes, dtype=np.int64)
    draws = sizes * passes
    within = np.arange(int(draws.sum()), dtype=np.int64) - np.repeat(np.cumsum(draws) - draws, draws)
    u = stream_uniforms(np.repeat(states, draws), (within + np.repeat(positions, draws)).astype(np.uint64))
    widths = np.repeat(sizes, passes)  # one segment per (client, pass)
    segment = np.repeat(np.arange(len(widths)), widths)
    ranks: np.ndarray = segment_sort(segment, u) - (np.cumsum(widths) - widths)[segment]
    return ranks


SEGMENT_BITS = 11  #: segments one packed sort key holds: 64 bits less a uniform's 53


def segment_sort(segment: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The stable order by (``segment``, ``u``), i.e. ``np.lexsort((u, segment))``, for uniforms with 53 random bits
    (:func:`fedsample.rng.as_uniforms`: u * 2^53 is an integer): one stable sort of the packed integer key
    segment * 2^53 + u * 2^53, a one-to-one map of the pairs while there are at most 2^11 segments (5 times faster
    than lexsort's float key), lexsort beyond."""
    if len(segment) == 0 or int(segment.max()) >= 1 << SEGMENT_BITS:
        return np.lexsort((u, segment))
    key = (segment.astype(np.uint64) << np.uint64(53)) | (u * 2.0**53).astype(np.uint64)
    return np.argsort(key, kind="stable")


#: A heavy-ball momentum: in [0, 1).
MOMENTUM = checks.reals(0, 1, "[)")
#: A learning-rate decay per round: in (0, 1].
LR_DECAY = checks.reals(0, 1, "(]")

#: The local SGD settings' constraints (:class:`LocalSGD`, and the recipes'
#: :class:`~fedsample.training.local_training.LocalTraining`, whose minibatch also admits "all").
SGD_SETTINGS: dict[str, checks.Spec] = {
    "lr": checks.POSITIVE, "epochs": [checks.COUNT, None], "steps": [checks.COUNT, None], "batch_size": [checks.COUNT, None],
    "momentum": MOMENTUM, "weight_decay": checks.NON_NEGATIVE, "lr_decay": LR_DECAY,
}


def epochs_or_steps(epochs: int | None, steps: int | None, owner: str) -> None:
    """Refuse local SGD settings that give neither or both of ``epochs`` and ``steps`` (one line)."""
    if epochs is None and steps is None:
        checks.fail("epochs", None, "an integer >= 1 when steps is None (give exactly one of epochs or steps)", owner)
    if epochs is not None and steps is not None:
        checks.fail("steps", steps, "None when epochs is given (give exactly one of epochs or steps)", owner)


@dataclass(frozen=True)
@checks.constrained(**SGD_SETTINGS, prox_mu=checks.NON_NEGATIVE)
class LocalSGD(Scheduled):
    """Minibatch SGD for ``epochs`` passes or ``steps`` steps over the drawn sample (McMahan et al. 2017).

    ``batch_size=None`` takes the whole drawn sample as one batch. With ``momentum`` the heavy-ball buffer
    b <- momentum * b + g is used; ``weight_decay`` adds lambda * w to g; ``prox_mu`` adds FedProx's
    proximal gradient mu * (w - w_global) (Li et al. 2020). The learning rate in round t is
    ``lr * lr_decay ** t``.
    """

    lr: float = 0.05
    epochs: int | None = 1
    steps: int | None = None
    batch_size: int | None = 32
    momentum: float = 0.0
    weight_decay: float = 0.0
    prox_mu: float = 0.0
    lr_decay: float = 1.0

    def __post_init__(self) -> None:
        epochs_or_steps(self.epochs, self.steps, type(self).__name__)

    @property
    def capabilities(self) -> LocalSolverCapabilities:
        """Its minibatch (None: the whole drawn sample), where given its local steps per round, and the rows a round
        trains on (:meth:`rows_trained`)."""
        return LocalSolverCapabilities(minibatch=self.batch_size, steps=self.steps, counts_rows=True)

    def learning_rate(self, round: int) -> float:
        return self.lr * self.lr_decay**round

    def step_rule(self, round: int) -> SGDStep:
        return SGDStep(self.learning_rate(round), self.momentum, self.weight_decay, self.prox_mu)

    def batches(self, sample: LocalSample, rng: ClientRandom) -> list[np.ndarray]:
        """Positions (into the drawn sample) of each minibatch: shuffled passes without replacement, or,
        when the plan gives a sampling distribution, batches drawn with replacement from it."""
        n = len(sample.indices)
        b = n if self.batch_size is None else min(self.batch_size, n)
        epochs = self.epochs or 0  # None only when steps is given
        if sample.probs is not None:
            count = self.steps if self.steps is not None else epochs * math.ceil(n / b)
            return list(rng.choice(n, size=(count, b), replace=True, p=sample.probs))
        if self.steps is not None:
            passes = math.ceil(self.steps * b / n)
            order = np.concatenate([rng.permutation(n) for _ in range(passes)])
            return [order[i * b : (i + 1) * b] for i in range(self.steps)]
        order = np.concatenate([rng.permutation(n) for _ in range(epochs)])
        per_epoch = math.ceil(n / b)
        return [order[e * n : (e + 1) * n][i * b : (i + 1) * b] for e in range(epochs) for i in range(per_epoch)]

    def schedule(self, drawn: DrawnCohort, streams: Sequence[ClientRandom], round: int) -> BatchSchedule:
        """:meth:`batches` of every member: computed for the whole cohort in numpy (:meth:`cohort_schedule`) where
        the streams are counter-based and the batches shuffled passes, else member by member
        (:func:`minibatch_schedule`: batches drawn with replacement from a plan's ``probs``, a subclass's own
        ``batches``). Both give the same schedule."""
        vectorized = self.cohort_schedule(drawn, streams)
        return vectorized if vectorized is not None else minibatch_schedule(self, drawn, streams)

    def cohort_schedule(self, drawn: DrawnCohort, streams: Sequence[ClientRandom]) -> BatchSchedule | None:
        """:meth:`batches` of every member in one numpy pass, entry for entry those of :func:`minibatch_schedule`
        (each member's shuffled passes from its own counter-based stream, :func:`shuffled_passes`); None where
        that does not apply (streams that are not counter-based, a plan's ``probs``, a subclass's ``batches``)."""
        if type(self).batches is not LocalSGD.batches:
            return None
        if drawn.samples is not None and any(s.probs is not None for s in drawn.samples):
            return None
        active = np.flatnonzero(drawn.counts)
        chosen = [] if isinstance(streams, CohortStreams) else [streams[c] for c in active.tolist()]
        counters = counter_positions(streams if isinstance(streams, CohortStreams) else chosen)
        if counters is None:
            return None
        if isinstance(streams, CohortStreams):
            counters = (counters[0][active], counters[1][active])
        n = drawn.counts[active]
        b = n if self.batch_size is None else np.minimum(self.batch_size, n)
        passes = -(-(self.steps * b) // n) if self.steps is not None else np.full(len(n), self.epochs, dtype=np.int64)
        values = shuffled_passes(counters[0], counters[1], n, passes)
        used = self.steps * b if self.steps is not None else self.epochs * n  # entries kept: a prefix of the passes
        owner = np.repeat(np.arange(len(n)), used)
        k = np.arange(int(used.sum()), dtype=np.int64) - np.repeat(np.cumsum(used) - used, used)
        value = values[np.repeat(np.cumsum(passes * n) - passes * n, used) + k]
        if self.steps is not None:
            step, width = k // b[owner], b[owner]
        else:
            per_epoch = -(-n // b)
            within = (k % n[owner]) // b[owner]
            step = (k // n[owner]) * per_epoch[owner] + within
            last = (n - (per_epoch - 1) * b)[owner]
            width = np.where(within == per_epoch[owner] - 1, last, b[owner])
        for r, reads in zip(chosen, (passes * n).tolist()):
            r.position += reads  # each client's stream left where its own batches() leaves it
        client = active[owner]
        row = value + drawn.starts[client]
        weight = 1.0 / width
        if drawn.scale is not None:
            weight = weight * drawn.scale[row]
        return BatchSchedule(client, step, row, weight, len(drawn))

    def rows_trained(self, sizes: np.ndarray) -> np.ndarray:
        """The rows (with repeats) a client of each size trains on in a round when its plan keeps all its data:
        ``steps`` batches, or ``epochs`` passes (what the engine choice estimates a round's work from)."""
        n = np.asarray(sizes, dtype=np.float64)
        b = n if self.batch_size is None else np.minimum(self.batch_size, n)
        if self.steps is not None:
            return self.steps * b
        assert self.epochs is not None  # __post_init__: epochs is set when steps is not
        return self.epochs * n

    def single_step(self, sizes: np.ndarray) -> bool:
        """Whether every client takes exactly one step (whatever its drawn sample, which is at most its data)."""
        if self.steps is not None:
            return self.steps == 1
        largest = int(np.max(sizes)) if len(sizes) else 0
        return self.epochs == 1 and (self.batch_size is None or self.batch_size >= largest)


def sgd_terms_left_out(owner: str, **terms: float) -> None:
    """Refuse SGD's own terms (momentum, weight decay, the proximal term) beside a chain of transformations, which
    states them as its own (``trace``, ``add_decayed_weights``, ``add_proximal``): one line."""
    for name, value in terms.items():
        if value:
            checks.fail(name, value, "0 beside transforms: give it as a transformation of the chain (trace, "
                        "add_decayed_weights, add_proximal)", owner)


@dataclass(frozen=True)
class LocalOptimizer(LocalSGD):
    """Local training whose step is a chain of transformations (:func:`fedsample.training.rules.chain`) instead of
    SGD's: the minibatches of :class:`LocalSGD` (``epochs`` or ``steps``, ``batch_size``, ``lr * lr_decay ** t``)
    with w <- w - lr * d, d the gradient through ``transforms`` in order. A local Adam (Kingma & Ba 2015) is
    ``LocalOptimizer(lr=1e-3, steps=5, transforms=(scale_by_adam(),))``; weight decay and the proximal term are
    transformations here (``add_decayed_weights``, ``add_proximal``), so ``momentum``, ``weight_decay`` and
    ``prox_mu`` stay 0. Both engines step it client by client or stacked (its state is each transformation's,
    per client). FedNova refuses it (its a_k is derived for a rule linear in the gradients only:
    :func:`fedsample.strategy.rules.steps_normalize_under_a_linear_rule`)."""

    transforms: tuple[Transform, ...] = ()

    def __post_init__(self) -> None:
        sgd_terms_left_out(type(self).__name__, momentum=self.momentum, weight_decay=self.weight_decay, prox_mu=self.prox_mu)
        super().__post_init__()

    def step_rule(self, round: int) -> Rule:  # type: ignore[override]  # any chain, not only SGD's
        return chain(*self.transforms, lr=self.learning_rate(round))


@dataclass(frozen=True)
@checks.constrained(rho=checks.Param(checks.NON_NEGATIVE, label="rho (the l2 term of the local risk)"))
class EpochSGD(LocalSGD):
    """ISFedAvg's local solver (Rizk, Vlaski & Sayed 2022): local SGD over the minibatches an
    :class:`~fedsample.sampling.importance.ImportanceBatches` plan drew: one step per epoch block, in
    order, each step w <- w - lr * (1/B) * sum_b scale_b * grad Q(w; x_b) (Eq. 8 with the plan's scales).
    ``epochs``, ``steps`` and ``batch_size`` of :class:`LocalSGD` are not used with such a plan (it fixes them
    per agent); under any other data plan (a ``data=`` override) this is plain :class:`LocalSGD`.

    ``rho`` is the l2 term of the paper's risk, Q_k(w; x) = loss(w; x) + rho ||w||^2 (Eqs. 2 and 55), so every
    local step's estimate of grad P_k carries 2 rho w with the same factor 1/(K p_k E_k) as the data term
    (``LocalSample.step_scale``): the fixed point is that of (1/K) sum_k P_k. A plain weight decay lambda w per
    step instead would count the regularizer E_k times per round (the data term is divided by E_k, the
    decay is not). Eq. 8 multiplies each sampled point's copy of 2 rho w by 1/(N_k p_b^(k)) too, whose
    minibatch mean has expectation 1; we add that expectation, exactly: same mean, no sampling noise on
    the regularizer (identical to Eq. 8 for full batches).

    Its step rule depends on each client's ``step_scale``, so it is not ``batched``: both engines train it client
    by client (its schedule still serves the diagnostics' first-order update)."""

    rho: float = 0.0

    def batches(self, sample: LocalSample, rng: ClientRandom) -> list[np.ndarray]:
        if sample.block is None:
            return super().batches(sample, rng)
        return [np.arange(start, start + sample.block) for start in range(0, len(sample), sample.block)]

    def single_step(self, sizes: np.ndarray) -> bool:
        """Not known from the sizes: its steps follow the plan's epoch blocks."""
        return False

    def run(self, ctx: ClientContext, sample: LocalSample, params: Params, round: int, rng: ClientRandom) -> LocalResult:
        """:func:`run_schedule` with the regularizer's gradient 2 rho * step_scale * w added to every step."""
        rule = self.step_rule(round)
        rule = dataclasses.replace(rule, weight_decay=rule.weight_decay + 2.0 * self.rho * sample.step_scale)
        return run_schedule(self, ctx, sample, params, round, rng, rule)


@dataclass(frozen=True)
@checks.constrained(K=[checks.COUNT, None])
class OneGradient(Scheduled):
    """One gradient at the global model over the drawn sample, normalized by ``K`` (FedSampling,
    §3.2: G_c = (1/K) * sum_{s in S_c} g_s) or, with ``K=None``, by the local sample size
    (the naive method of §3.3: G_c = (1/|S_c|) * sum g_s). Per-sample ``scale`` from the plan multiplies g_s.
    Declared as one step of :class:`SGDStep` (lr 1) over the whole drawn sample with row weights scale/K; the
    reported loss is the plain mean over the drawn samples (times their scale)."""

    K: int | None = None

    @property
    def capabilities(self) -> LocalSolverCapabilities:
        """With K: G_c = (1/K) sum_s g_s, a sum of per-example gradients (what per-example clipping clips), and K,
        which the data sampler draws (FedSampling's K / N~) and a self-normalizing aggregator uses; one step over
        the whole drawn sample."""
        return LocalSolverCapabilities(per_example=self.K is not None and self.K > 0, steps=1,
                                       shared_settings={} if self.K is None else {"K (samples per round)": self.K})

    def step_rule(self, round: int) -> SGDStep:
        return SGDStep(lr=1.0)

    def schedule(self, drawn: DrawnCohort, streams: Sequence[ClientRandom], round: int) -> BatchSchedule:
        """Every member's whole drawn sample as its one step, row weights scale / K (or / |S_c|)."""
        counts = drawn.counts.astype(np.float64)
        norm = np.full(len(drawn), float(self.K)) if self.K is not None else counts
        weight = 1.0 / norm[drawn.member] if drawn.scale is None else drawn.scale / norm[drawn.member]
        rows = np.arange(len(drawn.member), dtype=np.int64)
        loss_scale = norm / np.maximum(counts, 1.0)
        return BatchSchedule(drawn.member, np.zeros(len(rows), dtype=np.int64), rows, weight, len(drawn), loss_scale)

    def norm_steps(self, steps: np.ndarray, round: int) -> None:
        """None: a_k = tau_k = 1."""
        return None

    def single_step(self, sizes: np.ndarray) -> bool:
        return True

