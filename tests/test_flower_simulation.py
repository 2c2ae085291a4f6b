"""Flower's simulation runtime (10 SuperNodes) gives the numbers of ``fs.simulate`` with the same seed:
the same clients asked to train, size estimates, losses, and final parameters within float tolerance."""

import json

import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")

from flwr.simulation import run_simulation  # noqa: E402

from fedsample.flower import client_app, server_app  # noqa: E402
from fedsample.flower.config import AppConfig  # noqa: E402
from flower_reference import flower_output, max_difference, same_rounds, simulate_like  # noqa: E402

RECIPES = {
    "fedsampling": ({"K": 64, "epsilon": 8.0, "M": 400, "server_lr": 0.5}, ("ratio", "size_estimate", "train_loss")),
    "fedsampling/drawn": ({"K": 64, "epsilon": 8.0, "M": 400, "server_lr": 0.5, "normalize": "drawn"}, ("ratio", "size_estimate", "train_loss")),
    "fedsts": ({"H": 3, "m": 4, "dim": 4, "lr": 0.1, "steps": 2, "batch_size": 16}, ("train_loss", "updates")),
    "isfedavg": ({"L": 3, "lr": 0.05, "epochs": 2, "batch_size": 4, "update": "cheap"}, ("train_loss", "updates")),
    "clustered_sampling": ({"m": 3, "algorithm": "similarity", "lr": 0.1, "epochs": 1, "batch_size": 16}, ("train_loss", "updates", "clusters")),
    "optimal_sampling": ({"m": 3, "lr": 0.1, "epochs": 1, "batch_size": 16}, ("train_loss", "updates", "local_trainings", "sending_probability_sum")),
    "delta": ({"m": 3, "draw": "reference", "lr": 0.1, "epochs": 1, "batch_size": 16}, ("train_loss", "updates", "sampler_probes", "design_weight_total")),
}
BACKEND = {"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2, "include_dashboard": False}}


@pytest.mark.parametrize("name", list(RECIPES))
def test_flower_simulation_runtime_equals_simulate(name, tmp_path):
    args, keys = RECIPES[name]
    settings = {"dataset": "digits", "partition-args": json.dumps({"sigma": 1.0}), "model": "logreg",
                "recipe": name.split("/")[0], "recipe-args": json.dumps(args), "num-clients": 10, "num-server-rounds": 2,
                "seed": 3, "round-timeout": 600.0, "out": str(tmp_path)}
    run_simulation(server_app(settings), client_app(settings), num_supernodes=10, backend_config=BACKEND)
    flower, params = flower_output(tmp_path)
    reference, trained = simulate_like(AppConfig.from_run_config(settings))
    assert all(r["failed"] == [] for r in flower)
    same_rounds(flower, reference.history, trained, keys + ("accuracy", "loss"))
    assert max_difference(params, reference.params) < 1e-5
