"""Run fingerprints through Flower's simulation runtime (10 SuperNodes, 2 rounds): a representative recipe of each
kind gives, through Flower messages, the numbers of the in-process loop engine (``fs.simulate`` with the same seed,
:func:`flower_reference.simulate_like`) to the bit. The digest is that of ``test_fingerprint_recipes``: the final
parameters, and every value of the round records (floats written exactly), which hold the same keys once the
Flower server's own (who was asked to train, the SecAgg+ outcome) are set aside.

FedSampling is a secure-sum strategy: its train replies go through SecAgg+, whose stochastic quantization moves the
weighted sum by up to one quantum 2c/T per client and coordinate (``SecAggPlus.tolerance``), so its parameters and
losses legitimately differ (their tolerance is tested in ``test_flower_simulation``). What SecAgg+ does not carry is
fingerprinted to the bit: the cohorts asked to train, the size estimates and the ratio (``normalize="K"``: not
steered by the sealed count), and the parameters are within ``rounds x server_lr x (10 x one quantum)``."""

import json

import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")

from flwr.simulation import run_simulation  # noqa: E402

from fedsample.flower import client_app, server_app  # noqa: E402
from fedsample.flower.config import AppConfig  # noqa: E402
from fedsample.flower.server import secure_aggregation  # noqa: E402
from fedsample.runtime.fingerprint import digest  # noqa: E402
from flower_reference import flower_output, max_difference, simulate_like  # noqa: E402
from test_fingerprint_recipes import exact  # noqa: E402

ROUNDS = 2
LOCAL = {"lr": 0.1, "epochs": 1, "batch_size": 16}
#: FedAvg, FedSTS, ISFedAvg (client-held state), IWDS (a data sampler), DELTA and pow-d (samplers whose probes are
#: replies).
RECIPES = {
    "fedavg": {"clients_per_round": 3, **LOCAL},
    "fedsts": {"H": 3, "m": 4, "dim": 4, "lr": 0.1, "steps": 2, "batch_size": 16},
    "isfedavg": {"L": 3, "lr": 0.05, "epochs": 2, "batch_size": 4, "update": "cheap"},
    "iwds": {"clients_per_round": 3, **LOCAL},
    "delta": {"clients_per_round": 3, "draw": "reference", **LOCAL},
    "power_of_choice": {"clients_per_round": 3, "candidates": 6, **LOCAL},
}
SECURE = {"K": 64, "epsilon": 8.0, "M": 400, "server_lr": 0.5, "normalize": "K"}
BACKEND = {"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2, "include_dashboard": False}}
#: What only the Flower server records: who was asked to train, the SecAgg+ outcome.
FLOWER_KEYS = {"train_clients", "secure_aggregation"}


def flower_and_reference(recipe: str, args: dict, out) -> tuple[list[dict], dict, object, dict]:
    """The Flower simulation's records and parameters, and the in-process run of the same settings (with the
    clients it asked to train, by round)."""
    settings = {"dataset": "digits", "partition-args": json.dumps({"sigma": 1.0}), "model": "logreg", "recipe": recipe,
                "recipe-args": json.dumps(args), "num-clients": 10, "num-server-rounds": ROUNDS, "seed": 3,
                "round-timeout": 600.0, "out": str(out)}
    run_simulation(server_app(settings), client_app(settings), num_supernodes=10, backend_config=BACKEND)
    flower, params = flower_output(out)
    assert all(r["failed"] == [] for r in flower)
    reference, trained = simulate_like(AppConfig.from_run_config(settings))
    assert [r["train_clients"] for r in flower] == [trained[t] for t in range(ROUNDS)]
    return flower, params, reference, settings


def records_digest(records: list[dict], keys: list[set[str]], params: dict | None = None) -> str:
    """The digest of each round's values under ``keys`` (every float written exactly), and of ``params``."""
    tensors = [] if params is None else [params[k].detach().cpu().numpy() for k in sorted(params)]
    return digest(json.dumps(exact([{k: r[k] for k in ks} for r, ks in zip(records, keys)]), sort_keys=True), *tensors)


@pytest.mark.parametrize("name", list(RECIPES))
def test_flower_simulation_gives_the_in_process_digest(name, tmp_path, one_torch_thread):
    flower, params, reference, _ = flower_and_reference(name, RECIPES[name], tmp_path)
    keys = [set(r) for r in reference.history]
    assert [set(r) - FLOWER_KEYS for r in flower] == keys and all({"train_loss", "loss", "accuracy"} <= k for k in keys)
    assert records_digest(flower, keys, params) == records_digest(reference.history, keys, reference.params)


def test_secure_summed_fedsampling_gives_the_in_process_digest_of_what_secagg_does_not_carry(tmp_path, one_torch_thread):
    flower, params, reference, settings = flower_and_reference("fedsampling", SECURE, tmp_path)
    assert all(r["secure_aggregation"]["protocol"] == "SecAgg+" for r in flower)
    keys = [{"size_estimate", "ratio"}] * ROUNDS
    assert records_digest(flower, keys) == records_digest(reference.history, keys)
    quanta = secure_aggregation(AppConfig.from_run_config(settings)).tolerance(10)
    assert 0 < max_difference(params, reference.params) <= ROUNDS * SECURE["server_lr"] * quanta + 1e-6
