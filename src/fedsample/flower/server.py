"""The server's side: a ServerApp whose main runs any fedsample strategy over a ``FlowerFederation``.

The loop is ``fedsample.simulate``'s (strategy rounds, evaluation on the test split every ``eval-every``
rounds; the federation sealed by a secure sum where the strategy declares one) with the deployment's
additions: each round's record names the clients that failed, with the phase and reason, and which clients
were asked to train; a round whose replies are sealed (no realised budget told to the server) records
``realised_measured: null``: a real deployment cannot measure it (:func:`fedsample.budget.measured_figure`). Failed replies are the strategy's to handle (left out, corrected for the response rate;
a lost probe keeps the global model and says so: docs/reliability.md). A strategy that declares ``secure_sum``
trains through Flower's SecAgg+ (:mod:`fedsample.flower.secagg`): the ServerApp holds no client's update, and
the round's record says what the protocol did (``secure_aggregation``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from logging import INFO

import torch
from flwr.app import Context
from flwr.common.logger import log as flower_log
from flwr.serverapp import Grid, ServerApp

from fedsample.budget import measured_figure
from fedsample.data import load_dataset
from fedsample.evaluation import evaluate
from fedsample.flower.config import AppConfig, RunConfig
from fedsample.flower.federation import FlowerFederation, discover_nodes
from fedsample.flower.secagg import SecAggPlus
from fedsample.models import initial_parameters, model_from_name
from fedsample.recipes import recipe
from fedsample.runtime.records import Record
from fedsample.training.functional import Params

__all__ = ["FlowerRun", "run_server", "server_app"]


@dataclasses.dataclass
class FlowerRun:
    """What a Flower run leaves: one history record per round, the final parameters and the node of each client."""
    history: list[Record]
    params: Params
    nodes: dict[int, int]


def run_server(grid: Grid, config: AppConfig, run_id: int = 0) -> FlowerRun:
    """Connect to the nodes, run ``num-server-rounds`` rounds of the configured recipe, write ``out`` (its
    ``{run_id}`` is ``run_id``)."""
    out = config.out_folder(run_id)
    dataset = load_dataset(config.dataset, **config.dataset_args)  # the server uses its test split only
    module = model_from_name(config.model, **config.model_args).build(dataset.input_shape, dataset.num_classes)
    strategy = recipe(config.recipe, **config.recipe_args)
    secure = secure_aggregation(config) if strategy.secure_sum else None
    nodes = discover_nodes(grid, config.num_clients, wait=config.connect_timeout, timeout=config.round_timeout)
    federation = FlowerFederation(grid, nodes, config.num_clients, config.seed, timeout=config.round_timeout, secure=secure)
    params = initial_parameters(module, config.seed)
    state, history = strategy.init_state(params), []
    x_test, y_test = torch.as_tensor(dataset.x_test), torch.as_tensor(dataset.y_test)
    for t in range(config.num_server_rounds):
        params, log = strategy.round(federation, params, state, t, config.seed)
        record = {"round": t + 1, **log, **round_outcome(federation, t), **measured_figure(log, None)}  # sealed rows: not measurable here
        if (t + 1) % config.eval_every == 0 or t + 1 == config.num_server_rounds:
            record.update(evaluate(module, params, x_test, y_test, dataset.task, dataset.num_classes))
        history.append(record)
    run = FlowerRun(history, params, nodes)
    if out is not None:
        write_run(run, out)
        flower_log(INFO, "fedsample: history.json and params.pt written to %s", out)
    return run


def secure_aggregation(config: AppConfig) -> SecAggPlus:
    """The run config's SecAgg+ settings (:class:`~fedsample.flower.secagg.SecAggPlus`)."""
    return SecAggPlus(
        num_shares=config.secagg_num_shares, reconstruction_threshold=config.secagg_reconstruction_threshold,
        clipping_range=config.secagg_clipping_range, quantization_range=config.secagg_quantization_range,
        count_range=config.secagg_count_range,
    )


def round_outcome(federation: FlowerFederation, round: int) -> Record:
    """Who was asked to train in ``round`` (``train``, or ``train_held`` where every client trains before the server
    chooses whose update it receives) and which clients failed (phase, reason)."""
    failed = [dataclasses.asdict(f) for f in federation.failures.get(round, [])]
    outcome: Record = {"train_clients": federation.trained.get(round, []), "failed": failed}
    if round in federation.secure_rounds:
        outcome["secure_aggregation"] = federation.secure_rounds[round]
    return outcome


def write_run(run: FlowerRun, out: Path) -> None:
    """``history.json`` (the round records and the client -> node map) and ``params.pt``."""
    out.mkdir(parents=True, exist_ok=True)
    document = {"history": run.history, "nodes": {str(k): v for k, v in sorted(run.nodes.items())}}
    (out / "history.json").write_text(json.dumps(document, indent=1, default=float))
    torch.save(run.params, out / "params.pt")


def server_app(settings: RunConfig | None = None) -> ServerApp:
    """A Flower ``ServerApp`` running the recipe its run config names (``settings`` override the run config)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_server(grid, AppConfig.from_run_config({**context.run_config, **dict(settings or {})}), context.run_id)

    return app
