"""A client without samples under every sampler that probes: the error names the client and its empty data,
never blames the learning rate (issue 40, item 4). The samplers here need every probed client's statistics;
pow-d, FedCor and Oort finish a round with such a client (not checked here)."""

import pytest

from fedsample import recipes
from fedsample.models import LogisticRegression
from fedsample.simulation import Diverged, simulate
from helpers import blobs, federate
from fedsample.simulation import Engine

PROBING = {
    "fedsts": lambda: recipes.fedsts(H=2, m=2, dim=3, lr=0.1),
    "fedstas": lambda: recipes.fedstas(H=2, clients_per_round=2, samples_per_round=40, dim=3, lr=0.1),
    "isfedavg": lambda: recipes.isfedavg(clients_per_round=2),
    "delta": lambda: recipes.delta(clients_per_round=2),
    "divfl": lambda: recipes.divfl(clients_per_round=2),
}


@pytest.mark.parametrize("backend", ["loop", "vectorized"])
@pytest.mark.parametrize("name", sorted(PROBING))
def test_an_empty_client_is_named_not_blamed_on_training(name, backend):
    fed = federate(blobs(), [40, 40, 40, 0, 40])
    with pytest.raises(ValueError) as error:
        simulate(PROBING[name](), federated_data=fed, model=LogisticRegression(), rounds=1, seed=0, engine=Engine(backend=backend))
    message = str(error.value)
    assert not isinstance(error.value, Diverged) and "learning rate" not in message, message
    assert "client 3" in message and "no samples" in message, message
