"""A FedSampling round (K = 2048, log-normal sizes mean 2, sigma 4) ÷ one centralized step on the same samples.

The round is the whole round on the vectorized federation: every client's randomized size report, the
estimate N~, Bernoulli draws with p = K/N~ on every client, the fused one-gradient step over the union of the
drawn samples (one weighted forward/backward), the Sum aggregation and the server step. The centralized step
is one forward/backward and SGD update on exactly the rows that round drew. Goal: ratio <= 1.2.

Run: python benchmarks/fedsampling_round_vs_centralized.py
"""

from __future__ import annotations

import numpy as np
import torch

from _common import best_of, dataset, emit, peak_rss_mb

from fedsample import recipes
from fedsample.data import LogNormalSizes, partition
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.models import CNN, MLP, initial_parameters
from fedsample.training.functional import weighted_gradient


def main() -> None:
    ds = dataset()
    fed = partition(ds, LogNormalSizes(mean=2, sigma=4), seed=0)
    emit("dataset", ds.name)
    emit("clients", fed.num_clients)
    strategy = recipes.fedsampling(K=2048, epsilon=3.0, M=300, lr=0.05)
    for label, spec in (("mlp", MLP(hidden=64)), ("cnn", CNN())):
        module = spec.build(ds.input_shape, ds.num_classes)
        params = initial_parameters(module, 0)
        sim = VectorizedSimulator(fed, module, seed=0)
        state = strategy.init_state(params)
        repeats = 5 if label == "mlp" else 2
        round_s = best_of(lambda: strategy.round(sim, params, state, 0, 0), repeats=repeats)
        reports = sim.run("train", np.arange(fed.num_clients), _plan_payload(strategy, sim, params), 0)
        rows = torch.from_numpy(reports._union().rows)
        w = torch.full((len(rows),), 1.0 / 2048)
        grad = weighted_gradient(module, ds.task)

        def centralized_step():  # gather the minibatch from the pooled data, forward/backward, SGD update
            g, _ = grad(params, sim.x.index_select(0, rows), sim.y.index_select(0, rows), w)
            return {k: params[k] - 0.05 * g[k] for k in params}

        central_s = best_of(centralized_step, repeats=repeats)
        emit(f"{label}_samples_drawn", len(rows))
        emit(f"{label}_fedsampling_round_s", round_s)
        emit(f"{label}_centralized_step_s", central_s)
        emit(f"{label}_fedsampling_round_vs_centralized", round_s / central_s)
    emit("peak_rss_mb", peak_rss_mb())


def _plan_payload(strategy, sim, params):
    """The round-0 train payload (to read back which rows the round draws)."""
    from fedsample.messages import TrainPayload
    from fedsample.strategy import RoundContext

    ctx = RoundContext(sim, params, 0, 0, {})
    cohort = strategy.select(ctx)
    return TrainPayload(params=params, plan=strategy.data.plan(ctx, cohort), solver=strategy.local, round=0)


if __name__ == "__main__":
    main()
