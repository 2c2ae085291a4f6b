"""simulate(): learning happens, same seed gives the same numbers, kill-and-resume gives the numbers of an
uninterrupted run; FedSampling's round matches its update equation."""

import numpy as np
import pytest
import torch

import fedsample as fs
from fedsample.simulation import SimulationState
from fedsample.training.functional import weighted_loss_fn
from helpers import blobs, federate
from fedsample.callbacks import Checkpoint, Progress

SIZES = [1, 1, 2, 3, 5, 8, 13, 21, 34, 2, 1, 4, 6, 9, 30]


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=200), SIZES)


STRATEGIES = {
    "fedavg": lambda: fs.recipes.fedavg(clients_per_round=4, lr=0.1, batch_size=8),
    "weighted_fedavg": lambda: fs.recipes.weighted_fedavg(clients_per_round=4, lr=0.1, batch_size=8),
    "fedsampling": lambda: fs.recipes.fedsampling(K=40, epsilon=3.0, M=20, server_lr=0.2),
    "fedsampling_naive": lambda: fs.recipes.fedsampling_naive(ratio=0.2, server_lr=0.2),
    "centralized": lambda: fs.recipes.centralized(K=40, lr=0.2),
}


@pytest.mark.parametrize("name", STRATEGIES)
def test_every_recipe_learns(fed, name):
    res = fs.simulate(STRATEGIES[name](), federated_data=fed, model=fs.models.LogisticRegression(), rounds=25, seed=0, eval_every=5)
    first = fs.simulate(STRATEGIES[name](), federated_data=fed, model=fs.models.LogisticRegression(), rounds=1, seed=0).final
    assert res.final["loss"] < first["loss"]
    assert res.final["accuracy"] > 0.6
    assert [h["round"] for h in res.history] == list(range(1, 26))
    assert sum("accuracy" in h for h in res.history) == 5


@pytest.mark.parametrize("name", ["fedavg", "fedsampling"])
def test_same_seed_same_numbers_other_seed_differs(fed, name):
    run = lambda seed: fs.simulate(STRATEGIES[name](), federated_data=fed, model=fs.models.MLP(hidden=8), rounds=6, seed=seed)
    a, b, c = run(1), run(1), run(2)
    assert a.history == b.history
    for k in a.params:
        assert torch.equal(a.params[k], b.params[k])
    assert a.history != c.history


CLIENT_STATEFUL = {  # strategies whose clients keep state across rounds (ClientContext.state)
    "isfedavg_cheap": lambda: fs.recipes.isfedavg(L=4, batch_size=3, epochs=2, update="cheap", lr=0.1),
}
RESUMABLE = {**STRATEGIES, **CLIENT_STATEFUL}


@pytest.mark.parametrize("name", ["fedavg", "fedsampling", "centralized", "isfedavg_cheap"])
def test_kill_and_resume_gives_identical_numbers(fed, name, tmp_path):
    model = fs.models.MLP(hidden=8)
    full = fs.simulate(RESUMABLE[name](), federated_data=fed, model=model, rounds=9, seed=4, eval_every=3)
    path = tmp_path / "state.pt"

    class Killed(Exception):
        pass

    def kill_at_round_5(t):
        if t == 5:
            raise Killed

    with pytest.raises(Killed):
        fs.simulate(
            RESUMABLE[name](), federated_data=fed, model=model, rounds=9, seed=4, eval_every=3, callbacks=[Checkpoint(path, every=2), Progress(kill_at_round_5)],
        )
    assert SimulationState.load(path).round == 4  # the last checkpoint before the kill
    resumed = fs.simulate(
        RESUMABLE[name](), federated_data=fed, model=model, rounds=9, seed=4, eval_every=3, callbacks=[Checkpoint(path, every=2, resume=True)],
    )
    assert resumed.history == full.history
    for k in full.params:
        assert torch.equal(resumed.params[k], full.params[k])


def test_checkpoint_keeps_client_held_state_apart_from_the_strategy_state(fed, tmp_path):
    """ISFedAvg's Eq. 53 data weights are saved as the clients' own states, not in the strategy's state."""
    path = tmp_path / "state.pt"
    fs.simulate(CLIENT_STATEFUL["isfedavg_cheap"](), federated_data=fed, model=fs.models.MLP(hidden=8), rounds=3, seed=4, callbacks=[Checkpoint(path)])
    saved = SimulationState.load(path)
    assert "data_weights" not in saved.state["isfedavg"]
    assert 0 < len(saved.client_states) <= 12  # at most L = 4 participants a round
    for k, held in saved.client_states.items():
        assert len(held["isfedavg"]["data_weights"]) == SIZES[k]


def test_resume_refuses_another_runs_checkpoint(fed, tmp_path):
    path = tmp_path / "state.pt"
    fs.simulate(STRATEGIES["fedavg"](), federated_data=fed, model=fs.models.LogisticRegression(), rounds=2, seed=0, callbacks=[Checkpoint(path)])
    with pytest.raises(ValueError, match="another run"):
        fs.simulate(
            STRATEGIES["fedavg"](), federated_data=fed, model=fs.models.LogisticRegression(), rounds=2, seed=1, callbacks=[Checkpoint(path, resume=True)],
        )


def test_fedsampling_round_matches_its_equation(fed):
    """With K = N and exact sizes the keep probability K/N is 1: every sample is used and
    Theta_1 = Theta_0 - eta * (1/K) * sum over all samples of g_s (Algorithm 1, line 18)."""
    K, eta = int(fed.sizes().sum()), 0.3
    strategy = fs.recipes.fedsampling(K=K, sizes="exact", server_lr=eta, protocol="paper")  # Algorithm 1: division by K
    model = fs.models.LogisticRegression()
    module = model.build(fed.dataset.input_shape, fed.dataset.num_classes)
    theta0 = fs.models.initial_parameters(module, 0)
    res = fs.simulate(strategy, federated_data=fed, model=model, rounds=1, seed=0)
    rows = torch.as_tensor(fed.order)
    x, y = torch.as_tensor(fed.dataset.x_train)[rows], torch.as_tensor(fed.dataset.y_train)[rows]
    leaves = {k: v.clone().requires_grad_(True) for k, v in theta0.items()}
    loss = weighted_loss_fn(module, "classification")(leaves, x, y, torch.full((len(y),), 1.0 / K))
    grads = torch.autograd.grad(loss, list(leaves.values()))
    for (k, v), g in zip(theta0.items(), grads):
        torch.testing.assert_close(res.params[k], v - eta * g, rtol=1e-5, atol=1e-6)
    assert res.history[0]["ratio"] == 1.0


def test_pooled_strategy_sees_one_client(fed):
    res = fs.simulate(STRATEGIES["centralized"](), federated_data=fed, model=fs.models.LogisticRegression(), rounds=2, seed=0)
    assert res.history[0]["cohort"] == 1


@pytest.mark.parametrize(
    "bad",
    [
        lambda: fs.recipes.fedsampling(K=0),
        lambda: fs.recipes.fedsampling(epsilon=0.0),
        lambda: fs.recipes.fedsampling(epsilon=-1.0),
        lambda: fs.recipes.fedsampling(M=1),
        lambda: fs.recipes.fedsampling_naive(ratio=0.0),
        lambda: fs.recipes.fedsampling_naive(ratio=1.5),
        lambda: fs.recipes.fedavg(lr=-0.1),
        lambda: fs.recipes.recipe("fedmagic"),
        lambda: fs.recipes.recipe("fedavg", learning_rate=0.1),
    ],
)
def test_bad_recipe_input(bad):
    with pytest.raises(ValueError):
        bad()


def test_size_proportional_sampler_requires_exact_sizes():
    from fedsample.sampling.clients import SizeProportional
    from fedsample.privacy.sizes import RandomizedSizes

    with pytest.raises(ValueError, match="exact sizes"):
        fs.Strategy(clients=SizeProportional(3), sizes=RandomizedSizes())
