"""A FedSampling round (K = 2048, log-normal sizes mean 2, sigma 4) ÷ one centralized step on the same samples.

The round is the whole round on the vectorized federation, as a run's rounds after the first: every client's
randomized size report, the estimate N~, Bernoulli draws with the steered p = K/N^ on every client (the library
protocol with size reports, ``epsilon=3, M=300``, from the second round on, ``FedSamplingData(steer=True)``;
the default without reports, the sizes summed in the secure sum, draws about K from the first round: about K rows, where round 0's K/N~
draws about 2 K here, N~ being floored at the 30,000 clients), the fused one-gradient step over the union of the
drawn samples (one weighted forward/backward), the Sum aggregation and the server step. The centralized step
is one forward/backward and SGD update on exactly the rows that round drew, gathered from the pooled data.
Goal: ratio <= 1.2, read as the median of 400 rounds and steps timed back to back, with its distribution-free
95% confidence interval (the best-of ratio is printed too), twice: with the second core idle (``mlp_``) and with it
busy (``mlp_busy_paired_median_ratio``: a process spinning on the last core, which the script starts before those pairs and stops
after them, ``_common.competing_process``). Each condition is timed a second time by the thread's CPU time
(``mlp_cpu_`` and ``mlp_busy_cpu_``: the round and the step run on this one thread), which a loaded machine's
descheduling does not lengthen, so that figure stays readable where other jobs share the cores.

Every timed round is the same round (round 1 after one round 0, :func:`steady_round`): it starts from the
same steered state, so it draws the same rows each time, and the centralized step trains on exactly those
rows. (Before 2026-11-29 the timed rounds shared one state dict: from the second call on they were steered to
~2,070 rows while the step trained on round 0's 4,089, which read as a ratio of 0.69; benchmarks/README.md.)

Which rows the round drew is recomputed from public interfaces, as the server could not: the round's cohort
and plan (``Strategy.select``, ``strategy.data.plan``: Bernoulli(K/N^)), then every client's draw in one pass
(``BernoulliSamples.draw_cohort`` with the clients' ``CohortRandom`` streams, the same numbers each client
draws alone) mapped to dataset rows through the partition (``FederatedData.order``/``offsets``).

Run: python benchmarks/fedsampling_round_vs_centralized.py [--smoke]
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

from _common import arguments, best_of, competing_process, dataset, emit, footer, header, paired_median, paired_ratios, peak_rss_mb

from fedsample import recipes
from fedsample.data import LogNormalSizes, partition
from fedsample.data.types import FederatedData
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.models import CNN, MLP, initial_parameters
from fedsample.federation.base import Federation
from fedsample.rng import CohortRandom
from fedsample.sampling.data import COUNT_NOISE, STEERED_TOTAL
from fedsample.strategy import RoundContext, Strategy
from fedsample.training.functional import weighted_gradient
from fedsample.federation.secure_sum import with_secure_sum

LR = 0.05


def frozen(state: dict) -> dict:
    """A copy of a FedSampling ``state`` whose steered memo (the running mean behind N^) a round may update
    without changing ``state``: each round started from it draws at the same p."""
    copy = dict(state)
    if STEERED_TOTAL in copy:
        copy[STEERED_TOTAL] = dict(copy[STEERED_TOTAL])
    return copy


def steady_round(strategy: Strategy, federation: Federation, params, seed: int = 0) -> tuple[Callable[[], object], dict]:
    """(a call running round 1 of ``strategy``, the state each call starts from): round 0 runs once first (K/N~
    and the first drawn count, which steers the next ratio), then every call runs round 1 from a :func:`frozen`
    copy of the state after it, so that every call draws the same rows (:func:`drawn_rows` with that state)."""
    state = strategy.init_state(params)
    strategy.round(with_secure_sum(federation, strategy.secure_sum), params, state, 0, seed)
    return lambda: strategy.round(with_secure_sum(federation, strategy.secure_sum), params, frozen(state), 1, seed), state


def drawn_rows(strategy: Strategy, federation, data: FederatedData, params, state: dict, round: int = 1,
               seed: int = 0) -> np.ndarray:
    """Dataset rows (indices into ``data.dataset``'s training arrays) that round ``round`` of the FedSampling
    ``strategy`` draws on ``federation`` (seeded ``seed``) from ``state`` (:func:`steady_round`'s): the cohort
    and Bernoulli plan of that round, and each client's draws from its own (seed, round, client, "train") stream."""
    ctx = RoundContext(federation, params, round, seed, frozen(state))
    cohort, _ = strategy.select(ctx)
    plan = strategy.data.plan(ctx, cohort)
    member, position = plan.draw_cohort(data.sizes()[cohort.ids], CohortRandom(seed, round, cohort.ids, "train"))
    return data.order[data.offsets[cohort.ids[member]] + position]


def round_and_step(fed: FederatedData, spec, K: int, repeats: int, pairs: int = 0) -> tuple[float, float, int, dict[str, np.ndarray]]:
    """(seconds of a FedSampling round, seconds of one centralized step on the rows it drew, rows drawn, and with
    ``pairs`` the ratios of ``pairs`` rounds and steps timed back to back, by condition: ``""`` with the second
    core idle, ``"_busy"`` with a competing process spinning on it, each also by the thread's CPU time
    (``"_cpu"``, ``"_busy_cpu"``); without ``pairs`` no conditions)."""
    ds = fed.dataset
    module = spec.build(ds.input_shape, ds.num_classes)
    params = initial_parameters(module, 0)
    sim = VectorizedSimulator(fed, module, seed=0)
    strategy = recipes.fedsampling(K=K, epsilon=3.0, M=300, server_lr=LR)
    one_round, state = steady_round(strategy, sim, params)
    round_s = best_of(one_round, repeats=repeats)
    rows = torch.from_numpy(drawn_rows(strategy, sim, fed, params, state))
    released = one_round()[1]["samples"]  # the timed round's drawn count S~ (noised, sigma_S = COUNT_NOISE)
    assert abs(released - len(rows)) <= 6 * COUNT_NOISE, f"the step's {len(rows)} rows are not the round's ({released:.0f})"
    x, y = torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train)
    w = torch.full((len(rows),), 1.0 / K)
    grad = weighted_gradient(module, ds.task)

    def centralized_step():  # gather the minibatch from the pooled data, forward/backward, SGD update
        g, _ = grad(params, x.index_select(0, rows), y.index_select(0, rows), w)
        return {k: params[k] - LR * g[k] for k in params}

    paired = {}
    if pairs:
        paired[""] = paired_ratios(one_round, centralized_step, pairs)
        paired["_cpu"] = paired_ratios(one_round, centralized_step, pairs, clock=time.thread_time)
        with competing_process():
            paired["_busy"] = paired_ratios(one_round, centralized_step, pairs)
            paired["_busy_cpu"] = paired_ratios(one_round, centralized_step, pairs, clock=time.thread_time)
    return round_s, best_of(centralized_step, repeats=repeats), len(rows), paired


def main(smoke: bool) -> None:
    header(smoke)
    ds = dataset(smoke)
    fed = partition(ds, LogNormalSizes(mean=2, sigma=4), seed=0)
    K = 128 if smoke else 2048
    emit("dataset", ds.name)
    emit("clients", fed.num_clients)
    emit("K", K)
    for label, spec in (("mlp", MLP(hidden=64)), ("cnn", CNN())):
        repeats, pairs = (5, 400) if label == "mlp" else (2, 0)  # 400 MLP pairs per condition and clock: ~8 s; a CNN pair takes ~12 s: best-of only
        round_s, central_s, drawn, paired = round_and_step(fed, spec, K, repeats, pairs)
        emit(f"{label}_samples_drawn", drawn)
        emit(f"{label}_fedsampling_round_s", round_s)
        emit(f"{label}_centralized_step_s", central_s)
        emit(f"{label}_fedsampling_round_vs_centralized", round_s / central_s)
        for condition, ratios in paired.items():  # the verdict's figures: the median and its 95% interval
            paired_median(label + condition, ratios)
    emit("peak_rss_mb", peak_rss_mb())
    footer()


if __name__ == "__main__":
    main(arguments(__doc__).parse_args().smoke)
