"""The Flower side of small_clients_vs_flower (run with the separate Flower venv's python, not imported by
the library). 1,000 clients × 2 samples, the same MLP, data, learning rate and seed; one local SGD step each,
FedAvg, Flower's simulation engine (Ray backend). Prints `name: value` lines (wall-clock times)."""

from __future__ import annotations

import sys
import time

START = time.time()

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
torch.set_num_threads(1)

from flwr.client import ClientApp, NumPyClient  # noqa: E402
from flwr.common import Context, ndarrays_to_parameters  # noqa: E402
from flwr.server import ServerApp, ServerAppComponents, ServerConfig  # noqa: E402
from flwr.server.strategy import FedAvg  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

CLIENTS, PER_CLIENT, HIDDEN, LR = 1000, 2, 64, 0.05
MARKS = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/flower_marks.json")


def data():
    from fedsample.data import load_dataset

    try:
        return load_dataset("fashion-mnist")
    except Exception:  # noqa: BLE001
        return load_dataset("digits")


def model(ds):
    from fedsample.models import MLP, initial_parameters

    module = MLP(hidden=HIDDEN).build(ds.input_shape, ds.num_classes)
    return module, initial_parameters(module, 0)


class Small(NumPyClient):
    def __init__(self, k: int) -> None:
        torch.set_num_threads(1)
        self.k = k

    def fit(self, parameters, config):
        ds = DATA
        module, names = MODULE, NAMES
        rows = slice(self.k * PER_CLIENT, (self.k + 1) * PER_CLIENT)
        x, y = torch.as_tensor(ds.x_train[rows]), torch.as_tensor(ds.y_train[rows])
        with torch.no_grad():
            for p, v in zip(module.parameters(), parameters):
                p.copy_(torch.as_tensor(v))
        module.zero_grad()
        torch.nn.functional.cross_entropy(module(x), y).backward()
        with torch.no_grad():
            for p in module.parameters():
                p -= LR * p.grad
        return [p.detach().numpy().copy() for p in module.parameters()], PER_CLIENT, {}


DATA = data()
MODULE, PARAMS = model(DATA)
NAMES = list(PARAMS)


def client_fn(context: Context):
    return Small(int(context.node_config["partition-id"])).to_client()


class TimedFedAvg(FedAvg):
    def configure_fit(self, server_round, parameters, client_manager):
        MARKS_DATA.setdefault("round_start", time.time())
        return super().configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(self, server_round, results, failures):
        out = super().aggregate_fit(server_round, results, failures)
        MARKS_DATA["round_end"] = time.time()
        MARKS_DATA["results"], MARKS_DATA["failures"] = len(results), len(failures)
        return out


MARKS_DATA: dict = {}


def server_fn(context: Context):
    strategy = TimedFedAvg(
        fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=CLIENTS, min_available_clients=CLIENTS,
        initial_parameters=ndarrays_to_parameters([v.numpy() for v in PARAMS.values()]),
    )
    return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=1))


if __name__ == "__main__":
    run_simulation(
        server_app=ServerApp(server_fn=server_fn), client_app=ClientApp(client_fn=client_fn), num_supernodes=CLIENTS,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
    )
    end = time.time()
    print(f"flower_time_to_round_1_s: {MARKS_DATA['round_start'] - START:.4g}")
    print(f"flower_round_s: {MARKS_DATA['round_end'] - MARKS_DATA['round_start']:.4g}")
    print(f"flower_results: {MARKS_DATA['results']}")
    print(f"flower_failures: {MARKS_DATA['failures']}")
    print(f"flower_total_s: {end - START:.4g}")
