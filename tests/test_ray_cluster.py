"""A real two-node Ray cluster on loopback: ``ray start --head`` and a worker node (``ray start --address``),
each in its own session and temp dir; 2 rounds with one actor on each node give the single-process numbers; ``fedsample run --ray-address`` runs on it.
Both nodes are stopped (every process of their sessions) even when the test fails."""

import time

import numpy as np
import pytest
import torch

from ray_support import HEAD_IP, WORKER_IP, two_node_cluster  # sets Ray's environment before Ray is imported

ray = pytest.importorskip("ray", reason="the Ray tests need the extra: pip install 'fedsample[ray]'")

import fedsample as fs  # noqa: E402
from fedsample.cli import main  # noqa: E402
from fedsample.federation.ray import RayFederation, ray_session  # noqa: E402
from helpers import blobs, federate  # noqa: E402
from fedsample.simulation import Engine  # noqa: E402


def wait_for_nodes(count: int, timeout: float = 120.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        alive = [n for n in ray.nodes() if n["Alive"]]
        if len(alive) >= count or time.monotonic() > deadline:
            return alive
        time.sleep(0.5)


EXPERIMENT = """
name = "cluster"
rounds = 2
seeds = [0]

[dataset]
name = "digits"

[partition]
scheme = "iid"
num_clients = 20

[model]
name = "logreg"

[[strategies]]
recipe = "fedavg"
clients_per_round = 6
"""


def test_two_rounds_on_a_two_node_cluster(tmp_path, capsys):
    config = tmp_path / "cluster.toml"
    config.write_text(EXPERIMENT)
    fed = federate(blobs(n=200, d=6, classes=3), [int(s) for s in np.random.default_rng(2).integers(2, 12, size=20)])
    module = fs.models.MLP(hidden=8).build(fed.dataset.input_shape, fed.dataset.num_classes)
    strategy = lambda: fs.recipes.fedavg(clients_per_round=8, epochs=1, batch_size=4, lr=0.1)  # noqa: E731
    with two_node_cluster() as address, ray_session(address):
        nodes = wait_for_nodes(2)
        assert sorted(n["NodeManagerAddress"] for n in nodes) == [HEAD_IP, WORKER_IP]
        federation = RayFederation(fed, module, seed=3, workers=2)  # 1 CPU per node: one actor on each
        try:
            assert len(set(federation.nodes)) == 2
            on_cluster = fs.simulate(strategy(), federated_data=fed, model=module, rounds=2, seed=3, engine=Engine(federation=federation))
        finally:
            federation.close()
        code = main(["run", str(config), "--ray-address", address, "--workers", "2", "--out", str(tmp_path / "run"), "--quiet"])
        assert code == 0, capsys.readouterr().err
        assert ray.is_initialized()  # the CLI used the cluster this test connected to and left it running
    alone = fs.simulate(strategy(), federated_data=fed, model=module, rounds=2, seed=3)
    assert [h["cohort"] for h in on_cluster.history] == [h["cohort"] for h in alone.history] == [8, 8]
    assert on_cluster.history[-1]["train_loss"] == pytest.approx(alone.history[-1]["train_loss"], rel=1e-5)
    for k in alone.params:
        torch.testing.assert_close(on_cluster.params[k], alone.params[k], rtol=1e-5, atol=1e-6)
    assert not ray.is_initialized()
