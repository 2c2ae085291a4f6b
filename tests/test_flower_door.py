"""The door test on the Flower federation: with randomized size reports nothing the server holds (strategy,
its state, round contexts, history, every reply the federation returned, the federation's own logs) contains
the clients' true sizes; the same scan finds them when the strategy asks for exact sizes, so it can fail.
Both strategies run in one Flower simulation (10 SuperNodes)."""

import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")

from flwr.serverapp import ServerApp  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

import fedsample as fs  # noqa: E402
from fedsample.flower import FlowerFederation, client_app, discover_nodes  # noqa: E402
from fedsample.flower.config import AppConfig  # noqa: E402
from fedsample.flower.node import scheme_for  # noqa: E402
from fedsample.federation.secure_sum import with_secure_sum  # noqa: E402
from test_door import RecordingFederation, SpyAggregator, holds_true_sizes  # noqa: E402

SETTINGS = {"dataset": "digits", "partition-args": json.dumps({"sigma": 1.0}), "model": "logreg", "num-clients": 10}
BACKEND = {"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2, "include_dashboard": False}}


def true_sizes() -> np.ndarray:
    config = AppConfig.from_run_config(SETTINGS)
    dataset = fs.data.load_dataset(config.dataset)
    fed = fs.data.partition(dataset, scheme_for(config, dataset.num_train), seed=config.data_seed)
    return np.diff(fed.offsets)


def server_side_of(grid, strategy, rounds: int = 2) -> list:
    """Run ``strategy`` over a FlowerFederation; return every server-side object of the run."""
    nodes = discover_nodes(grid, 10, wait=600, timeout=600)
    federation = FlowerFederation(grid, nodes, 10, seed=0, timeout=600)
    recording = RecordingFederation(federation)
    seen = []
    strategy = dataclasses.replace(strategy, aggregate=SpyAggregator(strategy.aggregate, seen))
    module = fs.models.model_from_name("logreg").build((64,), 10)
    params = fs.models.initial_parameters(module, 0)
    state, history = strategy.init_state(params), []
    for t in range(rounds):
        params, log = strategy.round(with_secure_sum(recording, strategy.secure_sum, seed=0), params, state, t, seed=0)
        history.append(log)
    federation_logs = [federation.nodes, dict(federation.failures), dict(federation.asked), dict(federation.left_out)]
    return [strategy, state, history, recording.returned, recording.queries, seen, federation_logs]


def test_flower_server_never_holds_true_sizes_under_randomized_reports():
    randomized = fs.recipes.fedsampling(K=64, epsilon=3.0, M=300, server_lr=0.5)
    exact = dataclasses.replace(randomized, sizes=fs.privacy.ExactSizes())
    runs = {}
    app = ServerApp()

    @app.main()
    def main(grid, context):
        runs["randomized"] = server_side_of(grid, randomized)
        runs["exact"] = server_side_of(grid, exact)

    run_simulation(app, client_app(SETTINGS), num_supernodes=10, backend_config=BACKEND)
    sizes = true_sizes()
    assert len(sizes) == 10 and set(runs) == {"randomized", "exact"}
    assert all(f == [] for f in runs["randomized"][-1][1].values())  # every client answered
    assert not holds_true_sizes(runs["randomized"], sizes)
    assert holds_true_sizes(runs["exact"], sizes)
