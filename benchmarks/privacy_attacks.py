"""Attack figures for docs/privacy.md: what a server learns from a FedSampling run, before and after.

On the quickstart partition (digits, 360 clients, log-normal sizes, seed 0), FedSampling with K = 64,
epsilon = 3, M = 20:

1. most-frequent-report attack on the size reports (per-round re-draw = the old behaviour; permanent = now);
2. the reply-presence bit: epsilon between sizes the report cannot tell apart (both >= M - 1) when a client
   that drew nothing stays silent (old), and the measured arrival rate per client now;
3. the update norm against the number of drawn samples (Spearman), as the server sees each update in plain
   mode, with clipping + Gaussian noise, and in secure-sum mode (no per-client update at all).

Run: ``PYTHONPATH=src python benchmarks/privacy_attacks.py [--smoke]`` (about half a minute on one core; ``--smoke``:
2 rounds instead of 10, seconds).
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from _common import arguments, emit, footer, header

import fedsample as fs
from fedsample import privacy
from fedsample.privacy import attacks
from fedsample.sampling.data import sampling_ratio
from fedsample.experiments.presets import load_preset
from fedsample.experiments.runner import prepare
from fedsample.federation.secure_sum import SecureSum
from fedsample.rng import CohortRandom
from fedsample.simulation import make_federation

EPSILON, M, K, ROUNDS, SEED = 3.0, 20, 64, 10, 0
SMOKE_ROUNDS = 2


def repeated_reports(sizes: np.ndarray, rounds: int) -> None:
    for label, permanent in (("per-round (before)", False), ("permanent (after)", True)):
        for seen in (1, rounds):
            hit = attacks.most_frequent_report_attack(sizes, EPSILON, M, seen, permanent, SEED)
            emit(f"most-frequent-report attack, {label}, {seen} round(s)", hit)
    emit("one report's guess, alpha + (1-alpha)/(M-1)", attacks.one_report_guess(EPSILON, M))


def presence(sizes: np.ndarray, p: float, fed, params, rounds: int) -> None:
    indistinct = sorted(set(sizes[sizes >= M - 1].tolist()))
    eps = [attacks.presence_epsilon(a, b, p) for a, b in itertools.combinations(indistinct, 2)]
    emit("keep probability K/N~ (round 0)", p)
    emit(f"presence bit (before): epsilon between sizes >= {M - 1}, min", min(eps))
    emit(f"presence bit (before): epsilon between sizes >= {M - 1}, max", max(eps))
    ids = np.arange(len(sizes))
    arrived = np.zeros(len(sizes))
    for t in range(rounds):
        payload = fs.messages.TrainPayload(params, fs.sampling.data.BernoulliSamples(p), fs.training.local.OneGradient(K), t)
        arrived += [isinstance(r, fs.messages.TrainReport) for r in fed.run(ids, payload, t)]
    emit("presence (after): min over clients of the arrival rate", float(arrived.min() / rounds))
    emit("presence (after): max over clients of the arrival rate", float(arrived.max() / rounds))


def update_norms(sizes: np.ndarray, p: float, fed, params, rounds: int, noise=None) -> tuple[float, float]:
    """Spearman of (number of drawn samples, norm of the update the server receives) over clients x rounds:
    over every reply, and over the replies of clients that drew at least one sample."""
    ids = np.arange(len(sizes))
    counts, norms = [], []
    for t in range(rounds):
        payload = fs.messages.TrainPayload(params, fs.sampling.data.BernoulliSamples(p), fs.training.local.OneGradient(K), t, noise)
        replies = fed.run(ids, payload, t)
        member, _ = fs.sampling.data.BernoulliSamples(p).draw_cohort(sizes, CohortRandom(SEED, t, ids, "train"))  # client side
        counts.extend(np.bincount(member, minlength=len(sizes)).tolist())
        norms.extend(float(torch.sqrt(sum((v.double() ** 2).sum() for v in r.update.values()))) for r in replies)
    counts, norms = np.array(counts), np.array(norms)
    drew = counts > 0
    return attacks.spearman(counts, norms), attacks.spearman(counts[drew], norms[drew])


def secure_sum_view(fed, params, p: float) -> None:
    sealed = SecureSum(fed).run(np.arange(fed.num_clients), fs.messages.TrainPayload(
        params, fs.sampling.data.BernoulliSamples(p), fs.training.local.OneGradient(K), 0), 0)
    try:
        sealed[0].update
        visible = "yes"
    except AttributeError:
        visible = "no (one sum per round)"
    emit("secure sum: per-client update visible to the server", visible)


def main(smoke: bool) -> None:
    header(smoke)
    rounds = SMOKE_ROUNDS if smoke else ROUNDS
    data = prepare(load_preset("quickstart")).federation(SEED)
    sizes = data.sizes()
    module = fs.models.MLP(hidden=64).build(data.dataset.input_shape, data.dataset.num_classes)
    params = fs.models.initial_parameters(module, SEED)
    reports = attacks.size_reports_over_rounds(sizes, EPSILON, M, 1, True, SEED)[0]
    p = sampling_ratio(K, privacy.estimate_total(reports, EPSILON, M))
    fed = make_federation("vectorized", data, module, SEED)
    repeated_reports(sizes, rounds)
    presence(sizes, p, fed, params, rounds)
    every, drew = update_norms(sizes, p, fed, params, rounds)
    emit("Spearman(drawn count, update norm), plain replies: all / drew >= 1", f"{every:.3f} / {drew:.3f}")
    typical = float(np.median([float(torch.sqrt(sum((v ** 2).sum() for v in r.update.values())))
                               for r in fed.run(np.arange(len(sizes)), fs.messages.TrainPayload(
                                   params, fs.sampling.data.BernoulliSamples(p), fs.training.local.OneGradient(K), 0), 0) if r.steps]))
    for z in (0.5, 1.0):
        noise = privacy.UpdateNoise(clip=typical, noise_multiplier=z)
        every, drew = update_norms(sizes, p, fed, params, rounds, noise)
        emit(f"Spearman(drawn count, update norm), clip {typical:.3g} + noise z={z}: all / drew >= 1", f"{every:.3f} / {drew:.3f}")
        emit(f"  update epsilon per client over {rounds} rounds (delta 1e-5, RDP)", fs.privacy.accounting.gaussian_update_epsilon(z, rounds))
    secure_sum_view(fed, params, p)
    footer()


if __name__ == "__main__":
    main(arguments(__doc__).parse_args().smoke)
