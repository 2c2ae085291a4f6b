"""Flower's simulation runtime (10 SuperNodes) gives the numbers of ``fs.simulate`` with the same seed:
the same clients asked to train, size estimates, losses, and final parameters within float tolerance; for
FedSampling (a secure-sum strategy: its train replies go through SecAgg+) within SecAgg+'s quantization,
rounds x server_lr x (10 clients x one quantum 2c/T) per coordinate, and its training loss within the tally's
(10 quanta x 16 / the clients that stepped). The library default's noised drawn count S~ (the clients' noise
shares sealed into the sum) within 10 count quanta (2 x 2**16 / 2**22 each) of the in-process one; each round's
step, the drawn sum over S~, then also within its size times that error over S~."""

import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")

from flwr.simulation import run_simulation  # noqa: E402

import fedsample as fs  # noqa: E402
from fedsample.flower import client_app, server_app  # noqa: E402
from fedsample.federation.secure_sum import count_shares  # noqa: E402
from fedsample.sampling.data import COUNT_NOISE_PURPOSE  # noqa: E402
from fedsample.flower.config import AppConfig  # noqa: E402
from fedsample.flower.server import secure_aggregation  # noqa: E402
from flower_reference import flower_output, max_difference, same_rounds, simulate_like, steered_rtol  # noqa: E402

RECIPES = {
    "fedsampling": ({"K": 64, "epsilon": 8.0, "M": 400, "server_lr": 0.5}, ("ratio", "size_estimate", "train_loss")),
    "fedsampling/K": ({"K": 64, "epsilon": 8.0, "M": 400, "server_lr": 0.5, "normalize": "K"}, ("ratio", "size_estimate", "train_loss")),
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
    config = AppConfig.from_run_config(settings)
    reference, trained = simulate_like(config)
    assert all(r["failed"] == [] for r in flower)
    secure = name.startswith("fedsampling")
    if not secure:
        same_rounds(flower, reference.history, trained, keys + ("accuracy", "loss"))
        assert max_difference(params, reference.params) < 1e-5
        return
    assert all(r["secure_aggregation"]["summed"] == 10 and r["secure_aggregation"]["protocol"] == "SecAgg+" for r in flower)
    secure_sum = secure_aggregation(config)  # the run's SecAgg+ settings (the example's clipping range)
    quanta = secure_sum.tolerance(10)
    same_rounds(flower, reference.history, trained, ("size_estimate", "updates"))
    # the default steers its ratio by the released S~ (K / mean S~_t / p_t), which SecAgg+ carries to within `counts`
    counts = secure_sum.count_tolerance(10)
    steer = steered_rtol(flower, counts) if "normalize" not in args else 0.0
    same_rounds(flower, reference.history, trained, ("ratio",), rtol=1e-5 + steer)
    same_rounds(flower, reference.history, trained, ("train_loss",), atol=quanta * 16)
    # the test loss follows the parameters, which differ by SecAgg+'s quantization (bounded below): 1.2e-4 measured
    # at the 1024 clipping range, where one quantum is 4.9e-4
    same_rounds(flower, reference.history, trained, ("loss",), rtol=1e-3)
    bound = 2 * args["server_lr"] * quanta + 1e-6
    if "normalize" in args:  # sealed counts: the in-process run measures the rows drawn, a deployment cannot
        assert all(r["realised_measured"] is None for r in flower)
        assert all(r["realised_measured"] > 0 for r in reference.history)
    if "normalize" not in args:  # the library default: S~ noised by the clients' sealed shares
        same_rounds(flower, reference.history, trained, ("samples",), rtol=0.0, atol=counts)
        exact = simulate_like(AppConfig.from_run_config({**settings, "num-server-rounds": 1,
                                                         "recipe-args": json.dumps({**args, "count_noise": 0.0})}))[0]
        shares = count_shares(5.0, 10, config.seed, 0, np.arange(10), COUNT_NOISE_PURPOSE)  # round 1: every client's share, drawn here
        assert flower[0]["samples"] == pytest.approx(exact.history[0]["samples"] + shares.sum(), abs=counts)
        bound += sum(step * counts / (r["samples"] - counts) for step, r in zip(round_steps(config), flower))
    assert max_difference(params, reference.params) <= bound
    # SecAgg+'s stochastic quantization moves every parameter by at most `bound`: a test prediction can change only
    # where the reference's top-two logit margin is within reach of that (not "one test sample at most")
    for t, (a, b, share) in enumerate(zip(flower, reference.history, flippable_shares(config, bound))):
        assert abs(a["accuracy"] - b["accuracy"]) <= share + 1e-9, f"round {t + 1}: accuracy {a['accuracy']} vs {b['accuracy']}"


def round_params(config):
    """The in-process run's parameters before round 1 and after each round."""
    dataset = fs.data.load_dataset(config.dataset, **config.dataset_args)
    module = fs.models.model_from_name(config.model, **config.model_args).build(dataset.input_shape, dataset.num_classes)
    params = [fs.models.initial_parameters(module, config.seed)]
    return params + [simulate_like(dataclasses.replace(config, num_server_rounds=t))[0].params for t in range(1, config.num_server_rounds + 1)]


def round_steps(config):
    """Each round's largest parameter change in the in-process run (round 1 from the initial parameters)."""
    params = round_params(config)
    return [max_difference(b, a) for a, b in zip(params, params[1:])]


def flippable_shares(config, bound):
    """Per round, the share of test samples whose prediction (logistic regression, the in-process parameters after
    that round) a change of at most ``bound`` in every parameter could flip: each logit x.w_c + b_c moves by at most
    bound * (||x||_1 + 1), so only a top-two logit margin of at most twice that can close."""
    dataset = fs.data.load_dataset(config.dataset, **config.dataset_args)
    x = np.asarray(dataset.x_test, dtype=np.float64).reshape(len(dataset.y_test), -1)
    reach = 2 * bound * (np.abs(x).sum(axis=1) + 1)
    shares = []
    for params in round_params(config)[1:]:
        (weight,), (bias,) = ([v.double().numpy() for v in params.values() if v.dim() == d] for d in (2, 1))
        top2 = np.sort(x @ weight.T + bias, axis=1)[:, -2:]
        shares.append(float(np.mean(top2[:, 1] - top2[:, 0] <= reach)))
    return shares
