"""Every recipe composes with every client sampler and data sampler; the FedAvg family shares one
construction; FedProx with mu = 0 is FedAvg; server state survives checkpoints."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from fedsample import recipes
from fedsample.models import LogisticRegression
from fedsample.sampling import clients as client_samplers
from fedsample.sampling import data as data_samplers
from fedsample.sampling.clients import AllClients, PoissonClients, SizeProportional, UniformClients
from fedsample.sampling.data import FedSamplingData, FixedRatio, FullData, UniformSubset
from fedsample.sampling.participant_data import ParticipantData
from fedsample.sampling.importance import ImportanceAgents, ImportanceData
from fedsample.sampling.iwds import IWDSData
from fedsample.sampling.stratify import StratifiedClients
from fedsample.sampling.clustered import ClusteredClients
from fedsample.sampling.delta import DeltaClients
from fedsample.sampling.divfl import DivFLClients
from fedsample.sampling.optimal import OptimalClients
from fedsample.sampling.fedcbs import FedCBSClients
from fedsample.sampling.fedcor import FedCorClients
from fedsample.sampling.oort import OortClients
from fedsample.sampling.power_of_choice import PowerOfChoiceClients
from fedsample.simulation import simulate
from fedsample.training.aggregate import FedNova, WeightedMean
from fedsample.training.server import FedAdagrad, FedAdam, FedYogi, ServerSGD

from helpers import blobs, federate
from fedsample.callbacks import Checkpoint

FAMILY = ["fedavg", "weighted_fedavg", "fedprox", "fednova", "fedavgm", "fedadam", "fedyogi", "fedadagrad"]
CLIENT_SAMPLERS = {
    "all": AllClients(), "uniform": UniformClients(2), "size_proportional": SizeProportional(3), "poisson": PoissonClients(0.6),
    "stratified": StratifiedClients(H=2, m=3, dim=3), "importance": ImportanceAgents(L=3),
    "power_of_choice": PowerOfChoiceClients(m=2, d=4), "fedcbs": FedCBSClients(m=2), "fedcor": FedCorClients(m=2, warmup=2, rank=2),
    "divfl": DivFLClients(m=2), "oort": OortClients(m=2),
    "clustered": ClusteredClients(m=2), "optimal": OptimalClients(m=2), "delta": DeltaClients(m=2),
}
ADAPTIVE = ("power_of_choice", "fedcbs", "fedcor", "divfl", "oort")  # their inclusion probabilities are not exact
SIZED = ("size_proportional", "clustered", "optimal", "delta")  # they need every client's exact size before selecting
DATA_SAMPLERS = {
    "full": FullData(), "fixed_ratio": FixedRatio(0.5), "fedsampling": FedSamplingData(40), "subset": UniformSubset(6),
    "participants": ParticipantData(40), "iwds": IWDSData(), "importance": ImportanceData(epochs=2, batch_size=4),
}
SMALL = {name: dict(clients_per_round=2, batch_size=8) for name in FAMILY} | {
    "fedsampling": dict(K=40, M=60), "fedsampling_naive": {},
    "fedsts": dict(H=2, m=3, dim=3, steps=1, batch_size=8), "iwds": dict(clients_per_round=2, batch_size=8),
    "isfedavg": dict(L=3, batch_size=4), "fedstas": dict(H=2, m=3, dim=3, eta=40, M=60, steps=1, batch_size=8),
    "clustered_sampling": dict(m=2, batch_size=8), "optimal_sampling": dict(m=2, batch_size=8), "delta": dict(m=2, batch_size=8),
    "power_of_choice": dict(m=2, d=4, batch_size=8), "fedcbs": dict(m=2, batch_size=8),
    "fedcor": dict(m=2, warmup=2, rank=2, batch_size=8), "divfl": dict(m=2, batch_size=8), "oort": dict(m=2, batch_size=8),
}
# Recipes that are a client sampler's published method build their own sampler (no clients= override).
OWN_CLIENTS = {"clustered_sampling": "clustered", "optimal_sampling": "optimal", "delta": "delta", "power_of_choice": "power_of_choice",
               "fedcbs": "fedcbs", "fedcor": "fedcor", "divfl": "divfl", "oort": "oort"}
# Combinations refused by design, with the error's wording: FedSampling asks for epsilon-LDP size reports
# and size-proportional sampling needs exact ones; the naive fixed-ratio method asks for no sizes at all,
# which size-proportional client sampling and FedSampling's data sampler both need.
INCOMPATIBLE = {
    **{(name, client, None): "needs exact sizes" for name in ("fedsampling", "fedsampling_naive", "isfedavg", "fedstas")
       for client in SIZED},
    ("fedsampling_naive", None, "fedsampling"): "needs size reports",
    ("fedsampling_naive", None, "participants"): "needs size reports",
    ("isfedavg", None, "fedsampling"): "needs size reports",
    ("isfedavg", None, "participants"): "needs size reports",
    ("fedsts", None, "fedsampling"): "needs size reports",
    ("fedsts", None, "participants"): "needs size reports",
    **{(name, client, None): "needs exact sizes" for name in ("fedsampling", "fedsampling_naive", "isfedavg")
       for client in ("power_of_choice", "fedcor")},
    # the stratified means divide by pi, which the adaptive samplers do not have (FedSTS's own data samplers that
    # need size reports are refused first where the sampler asks for no sizes)
    **{("fedstas", client, None): "divides by the inclusion probabilities" for client in ADAPTIVE},
    **{("fedsts", client, None): "divides by the inclusion probabilities|needs size reports" for client in ADAPTIVE},
    ("fedsampling", "oort", None): "secure_sum=True hides|divides by the inclusion probabilities",  # Oort reads the utility
    # ISFedAvg's data plans scale each agent's steps by L / (K pi_k)
    **{(None, client, "importance"): "divides by the inclusion probabilities" for client in ADAPTIVE},
}


def refusal(name: str, client_name: str, data_name: str) -> str | None:
    if name == "fedsts" and client_name in SIZED:
        return None  # FedSTS collects exact sizes of all when its sampler needs them: every data sampler gets them
    for key in ((name, client_name, None), (name, None, data_name), (None, client_name, data_name)):
        if key in INCOMPATIBLE:
            return INCOMPATIBLE[key]
    return None


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=200), [20, 35, 50, 25, 40, 30])


def test_every_sampler_is_in_the_cross_product():
    """A new sampler anywhere in fedsample.sampling must be added to the lists above."""
    import importlib
    import pkgutil

    import fedsample.sampling as package

    modules = [importlib.import_module(f"{package.__name__}.{m.name}") for m in pkgutil.iter_modules(package.__path__)]

    def defined(method: str) -> set[str]:
        return {n for module in modules for n, c in inspect.getmembers(module, inspect.isclass)
                if hasattr(c, method) and c.__module__ == module.__name__}

    found_clients, found_data = defined("select"), defined("plan")
    assert found_clients == {type(s).__name__ for s in CLIENT_SAMPLERS.values()}
    assert found_data == {type(s).__name__ for s in DATA_SAMPLERS.values()}
    assert set(SMALL) | {"centralized"} >= set(recipes.RECIPES)


# Recipes whose data level is the method itself take no data= override: they run with their own sampler.
OWN_DATA = {"iwds": "iwds"}
CASES = [
    (name, client_name, data_name)
    for name in SMALL for client_name in CLIENT_SAMPLERS for data_name in DATA_SAMPLERS
    if OWN_DATA.get(name, data_name) == data_name and OWN_CLIENTS.get(name, client_name) == client_name
]


@pytest.mark.parametrize("name, client_name, data_name", CASES)
def test_recipe_runs_with_every_client_and_data_sampler(fed, name, client_name, data_name):
    parts = {} if name in OWN_CLIENTS else dict(clients=CLIENT_SAMPLERS[client_name])
    if name not in OWN_DATA:
        parts["data"] = DATA_SAMPLERS[data_name]
    reason = refusal(name, client_name, data_name)
    if reason is not None:
        with pytest.raises(ValueError, match=reason):
            recipes.RECIPES[name](**SMALL[name], **parts)
        return
    strategy = recipes.RECIPES[name](**SMALL[name], **parts)
    assert strategy.clients is CLIENT_SAMPLERS[client_name] or (name in OWN_CLIENTS and type(strategy.clients) is type(CLIENT_SAMPLERS[client_name]))
    assert strategy.data is DATA_SAMPLERS[data_name] or (name in OWN_DATA and strategy.data == DATA_SAMPLERS[data_name])
    result = simulate(strategy, fed, LogisticRegression(), rounds=2, seed=1, eval_every=2)
    assert all(torch.isfinite(v).all() for v in result.params.values())
    assert sum(h["updates"] for h in result.history) > 0
    assert np.isfinite(result.final["loss"])


@pytest.mark.parametrize("name", [n for n in FAMILY if n != "weighted_fedavg"])
@pytest.mark.parametrize("client_sampling", ["uniform", "weighted"])
def test_client_sampling_variants(fed, name, client_sampling):
    """``client_sampling="weighted"``: size-proportional draws, multiplicity weights, sizes from everyone,
    and the strategy is named weighted_<name>; ``"uniform"``: m of N uniformly, cohort-size weights."""
    st = recipes.recipe(name, clients_per_round=3, client_sampling=client_sampling, batch_size=8)
    weighted = client_sampling == "weighted"
    assert st.name == ("weighted_" if weighted else "") + name
    assert isinstance(st.clients, SizeProportional if weighted else UniformClients)
    assert st.aggregate.by == ("uniform" if weighted else "size")
    assert st.sizes.scope == ("all" if weighted else "cohort")
    assert isinstance(st.aggregate, FedNova if name == "fednova" else WeightedMean)
    result = simulate(st, fed, LogisticRegression(), rounds=1, seed=0)
    assert result.history[0]["updates"] >= 1


def test_recipes_pick_their_parts():
    assert recipes.fedavgm(server_momentum=0.8).server == ServerSGD(1.0, 0.8)
    assert recipes.fedadam(server_lr=0.1, beta1=0.8, beta2=0.9, tau=1e-2).server == FedAdam(0.1, 0.8, 0.9, 1e-2)
    assert recipes.fedyogi().server == FedYogi()
    assert recipes.fedadagrad(tau=1e-4).server == FedAdagrad(tau=1e-4)
    assert recipes.fedprox(mu=0.1).local.prox_mu == 0.1
    nova = recipes.fednova(local_momentum=0.9, lr_decay=0.992)
    assert (nova.local.momentum, nova.local.lr_decay, nova.aggregate) == (0.9, 0.992, FedNova("size"))


def test_weighted_fedavg_is_fedavg_with_weighted_client_sampling(fed):
    a = recipes.weighted_fedavg(clients_per_round=3)
    b = recipes.fedavg(clients_per_round=3, client_sampling="weighted")
    assert a == b and a.name == "weighted_fedavg"


def test_fedprox_with_mu_zero_is_fedavg(fed):
    common = dict(clients_per_round=3, lr=0.1, batch_size=8, epochs=2)
    a = simulate(recipes.fedprox(mu=0.0, **common), fed, LogisticRegression(), rounds=2, seed=5)
    b = simulate(recipes.fedavg(**common), fed, LogisticRegression(), rounds=2, seed=5)
    for k in a.params:
        assert torch.equal(a.params[k], b.params[k])
    c = simulate(recipes.fedprox(mu=1.0, **common), fed, LogisticRegression(), rounds=2, seed=5)
    assert not all(torch.equal(a.params[k], c.params[k]) for k in a.params)  # and mu > 0 does change the run


@pytest.mark.parametrize("name", ["fedadam", "fedyogi", "fedadagrad", "fedavgm"])
def test_resume_from_checkpoint_keeps_server_state(fed, name, tmp_path):
    st = recipes.recipe(name, clients_per_round=3, batch_size=8)
    whole = simulate(st, fed, LogisticRegression(), rounds=3, seed=2)
    ckpt = tmp_path / "state.pt"
    simulate(st, fed, LogisticRegression(), rounds=2, seed=2, callbacks=[Checkpoint(ckpt)])
    resumed = simulate(st, fed, LogisticRegression(), rounds=3, seed=2, callbacks=[Checkpoint(ckpt, resume=True)])
    for k in whole.params:
        assert torch.equal(whole.params[k], resumed.params[k])


@pytest.mark.parametrize(
    "name, params, message",
    [
        ("fedprox", {"mu": -0.1}, "mu"),
        ("fedavgm", {"momentum": 1.0}, "momentum"),
        ("fedadam", {"beta1": 1.0}, "beta1"),
        ("fedyogi", {"beta2": -0.5}, "beta2"),
        ("fedadagrad", {"server_lr": 0.0}, "learning rate"),
        ("fednova", {"lr": -0.05}, "lr"),
        ("fednova", {"local_momentum": 1.2}, "momentum"),
        ("fedadam", {"client_sampling": "size"}, "client_sampling"),
        ("fedadam", {"beta3": 0.5}, "no parameter 'beta3'"),
    ],
)
def test_bad_recipe_parameters(name, params, message):
    with pytest.raises(ValueError, match=message):
        recipes.recipe(name, **params)
