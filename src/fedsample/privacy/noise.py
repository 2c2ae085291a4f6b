"""DP noise on what a client sends back from training, accounted by :mod:`fedsample.privacy.ledger`.

- :class:`UpdateNoise`: client-level clipping and Gaussian noise on each client's whole update (the Gaussian
  mechanism, Dwork & Roth 2014, Thm 3.22; McMahan et al. 2018's per-client clipping); each reply carries the
  full noise.
- :class:`PerExampleNoise`: per-example clipping of FedSampling's one-gradient update G_c = (1/K) sum_s clip(g_s)
  and Gaussian noise calibrated for the *cohort's sum*, added in equal shares by the m asked clients (distributed
  noise: the secure sum carries all of it, one reply only 1/m of its variance), as DP-SGD does for a batch
  (Abadi et al. 2016), with FedSampling's data sampling as the batch's Poisson sampling.

A noised reply is a *private reply* (:meth:`UpdateNoise.private_reply`): the noised update, one step, and no
loss or drawn count, whether or not the client drew any record, so that the reply (or a secure sum of the step
counts) says nothing about the draw; every asked client's noise enters the sum. Aggregators that need each
client's step count (FedNova) are refused with noise, and so is the self-normalized FedSampling update
(``normalize="drawn"``) unless the drawn count goes, with Gaussian noise, into the secure sum beside a
:class:`PerExampleNoise` update (:func:`fedsample.privacy.amplification.check_mechanism`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar, Mapping, cast

import numpy as np

from fedsample import checks
from fedsample.parts import LocalSolver, SplitNoise, UpdatePrivacy, UpdatePrivacyCapabilities, privacy_capabilities, summed_noise, summed_of
from fedsample.messages import ClientContext, LocalResult, LocalSample, Params, TrainPayload, TrainReport
from fedsample.rng import ClientRandom

__all__ = ["PerExampleNoise", "UpdateNoise", "for_cohort"]


def _gaussian_like(update: Params, sigma: float, rng: "np.random.Generator | ClientRandom") -> Params:
    """N(0, sigma^2) in every coordinate, from the client's rng, tensor by tensor in the update's order."""
    import torch

    out: Params = {}
    for k, v in update.items():
        noise = rng.normal(0.0, 1.0, size=tuple(v.shape)) if sigma > 0 else np.zeros(tuple(v.shape))
        out[k] = v + torch.as_tensor(sigma * noise, dtype=v.dtype, device=v.device)
    return out


def _private(update: Params, sums: Mapping[str, int] | None = None) -> TrainReport:
    """The reply of a noised client: its noised update, one step, no loss, no rows trained (the realised budget of a
    noised client sampler is unknown) and no summed statistic (``sums``: the drawn count and the plan's other summed
    statistics, only where they go into a secure sum that noises them, :meth:`PerExampleNoise.private_reply`)."""
    return TrainReport(update=update, steps=1, loss=0.0, norm_steps=None, sums=sums)


@dataclass(frozen=True)
@checks.constrained(clip=checks.POSITIVE, noise_multiplier=checks.NON_NEGATIVE)
class UpdateNoise:
    """Client-level DP for the update (the Gaussian mechanism, Dwork & Roth 2014, Thm 3.22; McMahan et al.
    2018's per-client clipping): the client scales its update to L2 norm at most ``clip`` and adds
    N(0, (noise_multiplier * clip)^2) to every coordinate. Changing all of one client's data (or replacing it
    by nothing: a zero update) moves the clipped update by at most ``clip``, so each released update is a
    Gaussian mechanism with noise multiplier ``noise_multiplier``; :mod:`fedsample.privacy.ledger` composes the
    rounds. This budget is separate from the size report's epsilon."""

    clip: float
    noise_multiplier: float
    clipping: ClassVar[str] = "client"
    capabilities: ClassVar[UpdatePrivacyCapabilities] = UpdatePrivacyCapabilities(hides_draw=True)  # private replies

    def clipped(self, update: Params) -> Params:
        """The update scaled by min(1, clip / ||update||_2) (the norm over all tensors together)."""
        norm = math.sqrt(sum(float((v.double() ** 2).sum()) for v in update.values()))
        factor = min(1.0, self.clip / norm) if norm > 0 else 1.0
        return {k: v * factor for k, v in update.items()}

    def privatize(self, update: Params, rng: "np.random.Generator | ClientRandom") -> Params:
        """Clip, then add Gaussian noise of standard deviation noise_multiplier * clip (from the client's rng)."""
        return _gaussian_like(self.clipped(update), self.noise_multiplier * self.clip, rng)

    def private_reply(self, report: TrainReport, payload: TrainPayload, rng: "np.random.Generator | ClientRandom") -> TrainReport:
        """What the client sends: :meth:`privatize` of its update (a zero update when it drew nothing) as a
        private reply (one step, no loss, no drawn count)."""
        return _private(self.privatize(report.update, rng))


@dataclass(frozen=True)
class PerExampleNoise:
    """Record-level DP for FedSampling's one-gradient update (Qi et al. 2023, §3.2, with DP-SGD's per-example
    clipping, Abadi et al. 2016): a client sends G_c = (1/K) sum_{s in S_c} clip_C(g_s), each sample's gradient
    scaled to L2 norm at most ``clip`` = C, plus its share of Gaussian noise, N(0, (noise_multiplier * C / K)^2 /
    shares) per coordinate. The strategy sets ``shares`` to the cohort size m (:func:`for_cohort`), so the sum
    of the m replies carries N(0, (noise_multiplier * C / K)^2): adding or removing one record moves that sum
    by at most C / K, a Gaussian mechanism with multiplier ``noise_multiplier`` on a Poisson sample of the records
    (FedSampling keeps each with probability K/N~). The guarantee needs the sum only, i.e. a secure sum
    (``secure_sum=True``) or an adversary who sees only the released model; a plain reply carries one share
    (:mod:`fedsample.privacy.amplification` accounts each case). Needs :class:`~fedsample.training.local.OneGradient`
    with K and a model without dropout."""

    clip: float
    noise_multiplier: float
    shares: int = 1
    clipping: ClassVar[str] = "example"
    capabilities: ClassVar[UpdatePrivacyCapabilities] = UpdatePrivacyCapabilities(hides_draw=True, splits_among_cohort=True, runs_solver=True)

    def __post_init__(self) -> None:
        checks.positive("clip", self.clip)
        checks.non_negative("noise_multiplier", self.noise_multiplier)
        checks.count("shares (clients adding noise to the sum)", self.shares)

    def for_cohort(self, size: int) -> "PerExampleNoise":
        """This noise split among a cohort of ``size`` clients."""
        return replace(self, shares=max(int(size), 1))

    def share_std(self, K: int) -> float:
        """One client's noise standard deviation: noise_multiplier * C / (K * sqrt(shares))."""
        return self.noise_multiplier * self.clip / (K * math.sqrt(self.shares))

    @staticmethod
    def sample_count(solver: LocalSolver) -> int:
        """K of FedSampling's one-gradient solver (:class:`~fedsample.training.local.OneGradient`), the only solver
        per-example clipping runs (a ValueError for any other)."""
        from fedsample.training.local import OneGradient

        if not (isinstance(solver, OneGradient) and solver.K):
            raise ValueError("PerExampleNoise needs FedSampling's one-gradient solver OneGradient(K)")
        return solver.K

    def run_solver(self, solver: LocalSolver, ctx: ClientContext, sample: LocalSample, params: Params, round: int,
                   rng: np.random.Generator) -> LocalResult:
        """G_c = (1/K) sum_s scale_s * clip_C(g_s) over the drawn sample (per-sample gradients at the global model,
        :func:`fedsample.training.functional.per_sample_gradients`), in the place of ``solver.run``."""
        import torch

        from fedsample.training.functional import per_sample_gradients
        from fedsample.training.random_layers import random_layers_of

        K = self.sample_count(solver)
        if random_layers_of(ctx.module) is not None:
            raise ValueError("PerExampleNoise: per-example clipping of a model with dropout is not implemented")
        rows = torch.as_tensor(sample.indices, device=ctx.x.device)
        grads = per_sample_gradients(ctx.module, ctx.task, params, ctx.x[rows], ctx.y[rows])  # (n, parameters)
        norms = torch.linalg.vector_norm(grads, dim=1)
        weights = torch.clamp(self.clip / torch.clamp(norms, min=torch.finfo(grads.dtype).tiny), max=1.0) / K
        if sample.scale is not None:
            weights = weights * torch.as_tensor(sample.scale, dtype=grads.dtype, device=grads.device)
        flat = weights @ grads
        update, start = {}, 0
        for k, v in params.items():
            update[k] = flat[start:start + v.numel()].reshape(v.shape).to(v.dtype)
            start += v.numel()
        return LocalResult(update=update, steps=1, loss=0.0)

    def private_reply(self, report: TrainReport, payload: TrainPayload, rng: "np.random.Generator | ClientRandom") -> TrainReport:
        """The client's clipped G_c (zero when it drew nothing) plus its noise share, as a private reply; its drawn
        count goes with it only where the plan puts Gaussian noise on the count's secure sum (``count_noise``; the
        ledger accounts the update and the count as one mechanism), else it is withheld."""
        keep = summed_noise(payload.plan) > 0
        sums = {s.name: report.sums.get(s.name, 0) for s in summed_of(payload.plan)} if keep else None
        return _private(_gaussian_like(report.update, self.share_std(self.sample_count(payload.solver)), rng), sums)


def for_cohort(noise: UpdatePrivacy | None, size: int) -> UpdatePrivacy | None:
    """The noise a cohort of ``size`` clients is sent: split among them where it declares so
    (``splits_among_cohort``: :meth:`PerExampleNoise.for_cohort`), any other as it is."""
    if noise is not None and privacy_capabilities(noise).splits_among_cohort:
        return cast(SplitNoise, noise).for_cohort(size)
    return noise
