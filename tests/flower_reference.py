"""The in-process run a Flower run must equal: the same settings through ``fs.simulate`` (loop backend)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from fedsample.messages import payloads_for
import fedsample as fs
from fedsample.federation.simulator import Simulator
from fedsample.flower.config import AppConfig
from fedsample.flower.node import scheme_for
from fedsample.simulation import Engine


class AskedFederation:
    """Wraps a federation and keeps, per round, the clients asked to train."""

    def __init__(self, inner):
        self.inner = inner
        self.trained: dict[int, list[int]] = {}

    @property
    def num_clients(self):
        return self.inner.num_clients

    def run(self, client_ids, payload, round):
        procedure = payloads_for(payload, len(client_ids)).procedure.name  # the name the request's type declares
        if procedure in ("train", "train_held"):
            self.trained[round] = [int(k) for k in client_ids]
        return self.inner.run(client_ids, payload, round)

    def rows_measured(self):
        """The in-process engine's count of the rows its clients trained (fedsample.runtime.measured)."""
        return self.inner.rows_measured()


def simulate_like(config: AppConfig):
    """``fs.simulate`` on the Flower run's data, model, recipe and seed: (result, clients asked to train)."""
    dataset = fs.data.load_dataset(config.dataset, **config.dataset_args)
    fed = fs.data.partition(dataset, scheme_for(config, dataset.num_train), seed=config.data_seed)
    assert fed.num_clients == config.num_clients
    module = fs.models.model_from_name(config.model, **config.model_args).build(dataset.input_shape, dataset.num_classes)
    federation = AskedFederation(Simulator(fed, module, config.seed))
    strategy = fs.recipes.recipe(config.recipe, **config.recipe_args)
    result = fs.simulate(
        strategy, fed, module, rounds=config.num_server_rounds, seed=config.seed, eval_every=config.eval_every, engine=Engine(federation=federation),
    )
    return result, federation.trained


def flower_output(out: Path) -> tuple[list[dict], dict]:
    history = json.loads((out / "history.json").read_text())["history"]
    return history, torch.load(out / "params.pt")


def max_difference(a: dict, b: dict) -> float:
    return max(float(torch.max(torch.abs(a[k] - b[k]))) for k in a)


def same_rounds(flower: list[dict], reference: list[dict], trained: dict[int, list[int]], keys: tuple[str, ...],
                rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Round by round: the same clients asked to train, and the same logged figures (float tolerance)."""
    assert len(flower) == len(reference)
    for t, (a, b) in enumerate(zip(flower, reference)):
        assert a["train_clients"] == trained[t], f"round {t + 1}: cohorts differ"
        for key in keys:
            np.testing.assert_allclose(a[key], b[key], rtol=rtol, atol=atol, err_msg=f"round {t + 1}: {key}")


def steered_rtol(flower: list[dict], counts: float) -> float:
    """The relative tolerance of a steered FedSampling ratio K / mean(S~_t / p_t): each S~_t that SecAgg+ carries is
    within ``counts`` (:meth:`~fedsample.flower.secagg.SecAggPlus.count_tolerance`) of the in-process one."""
    return counts / min(r["samples"] - counts for r in flower)
