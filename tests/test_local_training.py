"""One local-training object: every recipe with local SGD takes ``local: LocalTraining``; the flat keywords it
replaced are folded into it by one mechanism, and a setting given both ways is refused in one line."""

import inspect
import tomllib

import pytest

from fedsample import checks, recipes
from fedsample.experiments.config import parse_config
from fedsample.training.local import LocalOptimizer, LocalSGD
from fedsample.training.local_training import FLAT, LocalTraining
from fedsample.training.rules import add_proximal, scale_by_adam

#: The recipes that take ``local`` (every recipe with local SGD except centralized and isfedavg, whose minibatches
#: are the pooled K / steps and the plan's per-agent E_k, B_k).
TAKING = sorted(name for name, fn in recipes.RECIPES.items() if "local" in inspect.signature(fn).parameters)

#: Non-default values of every setting, flat and as the object's fields.
FLAT_VALUES = {"lr": 0.2, "steps": 4, "batch_size": 8, "local_momentum": 0.5, "weight_decay": 0.01, "lr_decay": 0.99}
OBJECT = LocalTraining(lr=0.2, steps=4, batch_size=8, momentum=0.5, weight_decay=0.01, lr_decay=0.99)
SOLVER = LocalSGD(lr=0.2, epochs=None, steps=4, batch_size=8, momentum=0.5, weight_decay=0.01, lr_decay=0.99)


def test_every_recipe_with_local_sgd_takes_local_and_none_repeats_the_settings():
    assert TAKING == sorted([
        "clustered_sampling", "delta", "divfl", "fedadagrad", "fedadam", "fedavg", "fedavgm", "fedcbs", "fedcor",
        "fednova", "fedprox", "fedsts", "fedstas", "fedyogi", "oort", "optimal_sampling", "power_of_choice",
        "weighted_fedavg",
    ])
    for name in TAKING:
        repeated = set(FLAT) & set(inspect.signature(recipes.RECIPES[name]).parameters)
        assert not repeated, (name, repeated)


@pytest.mark.parametrize("name", TAKING)
def test_flat_keywords_object_and_mapping_build_the_same_solver(name):
    extra = {"H": 2} if name in ("fedsts", "fedstas") else {}
    flat = recipes.recipe(name, **extra, **FLAT_VALUES).local
    whole = recipes.recipe(name, **extra, local=OBJECT).local
    mapping = recipes.recipe(name, **extra, local={FLAT[k]: v for k, v in FLAT_VALUES.items()}).local
    assert flat == whole == mapping
    assert whole == LocalSGD(**{**vars(SOLVER), "prox_mu": 0.01 if name == "fedprox" else 0.0})  # fedprox's own mu


@pytest.mark.parametrize("name", TAKING)
def test_a_setting_given_flat_and_in_local_is_refused_in_one_line(name):
    extra = {"H": 2} if name in ("fedsts", "fedstas") else {}
    with pytest.raises(checks.ParameterError) as error:
        recipes.recipe(name, **extra, lr=0.1, local={"lr": 0.2})
    assert str(error.value) == f"{name}: lr must be given once: in local= or flat, not both (local= has lr = 0.2), got 0.1"
    with pytest.raises(checks.ParameterError, match=f"^{name}: local_momentum must be given once"):
        recipes.recipe(name, **extra, local_momentum=0.5, local=OBJECT)  # an object gives every setting


def test_each_recipe_keeps_its_papers_default_and_steps_replaces_epochs_as_before():
    assert recipes.fedavg().local == LocalSGD(lr=0.05, epochs=1, steps=None, batch_size=32)
    assert recipes.fedsts().local == LocalSGD(lr=0.01, epochs=None, steps=3, batch_size=128)
    assert recipes.fedavg(epochs=2, steps=5).local.steps == 5  # the flat keywords' rule: steps wins
    assert recipes.fedsts(epochs=2).local == LocalSGD(lr=0.01, epochs=2, steps=None, batch_size=128)
    assert recipes.fedavg(batch_size="all").local.batch_size is None
    assert LocalTraining(steps=3).epochs is None and LocalTraining().epochs == 1
    assert recipes.fedprox(mu=0.1, local=OBJECT).local == LocalSGD(**{**vars(SOLVER), "prox_mu": 0.1})


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: LocalTraining(epochs=2, steps=3), "LocalTraining: steps must be None when epochs is given"),
        (lambda: LocalTraining(lr=0.0), "LocalTraining: lr must be > 0, got 0.0"),
        (lambda: LocalTraining(momentum=1.0), "LocalTraining: momentum must be in [0, 1), got 1.0"),
        (lambda: recipes.fedavg(local={"lrr": 0.1}), "fedavg: local must be a mapping of LocalTraining's fields"),
        (lambda: recipes.fedavg(local=0.1), "fedavg: local must be a LocalTraining or a mapping of its fields, got 0.1"),
        (lambda: recipes.fedavg(local={"epochs": 2, "steps": 3}), "LocalTraining: steps must be None when epochs is given"),
        (lambda: recipes.fedavg(batch_size=3.5), "fedavg: batch_size must be an integer >= 1, or 'all'"),
    ],
    ids=["epochs and steps", "lr 0", "momentum 1", "unknown field", "not an object", "mapping with both", "flat checked"],
)
def test_wrong_settings_are_one_line(make, words):
    with pytest.raises(checks.ParameterError) as error:
        make()
    assert str(error.value).startswith(words) and "\n" not in str(error.value), str(error.value)


def test_iwds_folds_its_local_options_into_the_bases_local_where_they_agree():
    flat = recipes.recipe("iwds", base="fednova", lr=0.1, steps=50)
    given = recipes.recipe("iwds", base="fednova", local={"lr": 0.1, "steps": 50})
    assert flat.local == given.local and given.local.momentum == 0.9 and given.local.lr_decay == 0.992
    agreeing = recipes.recipe("iwds", local=LocalTraining(lr_decay=0.992))
    assert agreeing.local == recipes.recipe("iwds").local
    with pytest.raises(checks.ParameterError, match=r"^iwds: lr_decay must be 1.0 \(the lr_decay of local=\) or None"):
        recipes.recipe("iwds", local=LocalTraining())
    assert recipes.recipe("iwds", lr_decay=None, local=LocalTraining()).local.lr_decay == 1.0


HEAD = 'name = "t"\nrounds = 1\nseeds = [0]\n[dataset]\nname = "digits"\n[partition]\nscheme = "iid"\nnum_clients = 5\n[model]\nname = "logreg"\n'


def test_an_experiment_file_writes_the_flat_keys_or_a_local_table_alike():
    flat = HEAD + '[[strategies]]\nrecipe = "fedavg"\nlr = 0.2\nsteps = 4\nlocal_momentum = 0.5\n'
    table = HEAD + '[[strategies]]\nrecipe = "fedavg"\n[strategies.local]\nlr = 0.2\nsteps = 4\nmomentum = 0.5\n'
    built = [recipes.recipe(s.recipe, **s.params) for text in (flat, table) for s in parse_config(tomllib.loads(text)).strategies]
    assert built[0].local == built[1].local == LocalSGD(lr=0.2, epochs=None, steps=4, momentum=0.5)


def test_a_recipe_takes_a_chain_in_its_local_training():
    """``local=LocalTraining(transforms=...)``: the recipe's solver steps by that chain (a local Adam), FedProx's mu
    as its first transformation; SGD's own terms beside a chain are refused in one line."""
    adam = (scale_by_adam(),)
    local = recipes.fedavg(local=LocalTraining(lr=1e-3, steps=5, transforms=adam)).local
    assert local == LocalOptimizer(lr=1e-3, epochs=None, steps=5, transforms=adam)
    assert local.step_rule(0).slots == 2
    assert recipes.fedprox(mu=0.1, lr=1e-3, local={"transforms": adam}).local.transforms == (add_proximal(0.1), *adam)
    with pytest.raises(checks.ParameterError, match=r"^LocalTraining: momentum must be 0 beside transforms"):
        LocalTraining(momentum=0.9, transforms=adam)
    with pytest.raises(checks.ParameterError, match=r"^LocalTraining: transforms must be a tuple of transformations"):
        recipes.fedavg(local={"transforms": list(adam)})
