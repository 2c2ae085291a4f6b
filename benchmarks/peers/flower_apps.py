"""Flower's side of the small-clients workload as an importable module (so Ray ships a reference to it, not
the data): a Message-API ``ClientApp`` whose worker loads the workload file once and keeps one model, and a
``ServerApp`` running Flower's own ``FedAvg`` strategy with no client evaluation, stamping the end of every
round. Settings come from the environment run by flower_side.py: PEERS_WORKLOAD_FILE, PEERS_WORKLOAD,
PEERS_ROUNDS."""

from __future__ import annotations

import os
import time
from functools import lru_cache

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from floor import local_sgd_
from workload import Workload, build_model, load_rows, workload_named

ROUND_ENDS: list[float] = []
client_app = ClientApp()
server_app = ServerApp()


def workload() -> Workload:
    return workload_named(os.environ["PEERS_WORKLOAD"])


@lru_cache(maxsize=1)
def worker_state() -> tuple[torch.Tensor, torch.Tensor, torch.nn.Module]:
    """This worker's copy of the rows and its one model, made on the first message it serves."""
    torch.set_num_threads(1)
    x, y, _ = load_rows(os.environ["PEERS_WORKLOAD_FILE"])
    return x, y, build_model(workload(), x)


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """Load the global arrays, run the workload's local SGD on this partition's rows, reply the arrays."""
    w = workload()
    x, y, module = worker_state()
    u = int(context.node_config["partition-id"])
    module.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    module.train()
    local_sgd_(module, x[u * w.per_user:(u + 1) * w.per_user], y[u * w.per_user:(u + 1) * w.per_user], w)
    content = RecordDict({"arrays": ArrayRecord(module.state_dict()), "metrics": MetricRecord({"num-examples": w.per_user})})
    return Message(content=content, reply_to=msg)


def stamp_round_end(server_round: int, arrays: ArrayRecord) -> None:
    """Flower calls this before round 1 and after every round (its server-side evaluation hook)."""
    ROUND_ENDS.append(time.perf_counter())


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    """FedAvg over every node each round, weights by the replied ``num-examples`` (all equal here)."""
    w = workload()
    torch.manual_seed(0)
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=w.cohort, min_available_nodes=w.users)
    x, _, _ = worker_state()
    strategy.start(grid=grid, initial_arrays=ArrayRecord(build_model(w, x).state_dict()), train_config=ConfigRecord({}),
                   num_rounds=int(os.environ["PEERS_ROUNDS"]) + 1, evaluate_fn=stamp_round_end)
