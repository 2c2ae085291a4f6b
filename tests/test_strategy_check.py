"""Strategy.check: every compatibility rule between parts is enforced at construction, with one ValueError that
names the two parts that disagree; valid combinations still construct (and run: test_composition.py)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from fedsample import recipes
from fedsample.parts import ClientSamplerCapabilities, InclusionKind, SizeNeed, describe
from fedsample.privacy.noise import UpdateNoise
from fedsample.privacy.sizes import ExactSizes, RandomizedSizes
from fedsample.sampling.clients import AllClients, PoissonClients, SizeProportional, UniformClients
from fedsample.sampling.data import AllSamples, FedSamplingData, FullData
from fedsample.sampling.importance import ImportanceData
from fedsample.sampling.participant_data import ParticipantData
from fedsample.sampling.stratify import StratifiedClients
from fedsample.simulation import simulate
from fedsample.strategy import RULES, Strategy
from fedsample.training.aggregate import DrawnNormalizedSum, FedNova, StratifiedMean, Sum, WeightedMean
from fedsample.training.local import LocalSGD, OneGradient
from fedsample.training.schedule import Schedule
from fedsample.models import LogisticRegression
from helpers import blobs, federate


def refused(message: str, *names: str) -> None:
    """The construction error names every one of ``names`` (the parts that disagree)."""
    for name in names:
        assert name in message, f"{name!r} not named in: {message}"
    assert "\n" not in message


def error_of(**parts) -> str:
    with pytest.raises(ValueError) as caught:
        Strategy(**parts)
    return str(caught.value)


STRATA = StratifiedClients(H=2, m=3, dim=3)


# --- each part implements its kind ---------------------------------------------------------------------------


def test_a_part_of_the_wrong_kind_is_refused_naming_the_field_and_the_missing_method():
    refused(error_of(data=AllSamples()), "data=AllSamples()", "data sampler", "plan()")
    refused(error_of(local=FullData()), "local=FullData()", "local solver", "run()")
    refused(error_of(noise=ExactSizes()), "noise=ExactSizes()", "private_reply()")
    refused(error_of(sizes=UniformClients(3)), "sizes=UniformClients(m=3)", "query()")


# --- sizes: every part gets the sizes it declares it needs ---------------------------------------------------


def test_the_issue_example_size_weighted_stratified_mean_with_randomized_cohort_sizes():
    """Accepted before and failed mid-run (a RuntimeError naming no strategy, seed or round)."""
    message = error_of(clients=STRATA, aggregate=StratifiedMean("size"), sizes=RandomizedSizes(scope="cohort"))
    refused(message, "StratifiedMean(by='size')", "RandomizedSizes(scope='cohort')", "exact sizes of the cohort")
    Strategy(clients=STRATA, aggregate=StratifiedMean("size"), sizes=ExactSizes(scope="cohort"))  # valid: constructs
    Strategy(clients=STRATA, aggregate=StratifiedMean("size"), sizes=ExactSizes())


def test_a_sampler_that_needs_every_exact_size_refuses_randomized_or_cohort_sizes():
    refused(error_of(clients=SizeProportional(3), sizes=RandomizedSizes()), "SizeProportional(m=3)", "RandomizedSizes()",
            "exact sizes of every client")
    refused(error_of(clients=SizeProportional(3), sizes=ExactSizes(scope="cohort")), "SizeProportional(m=3)",
            "ExactSizes(scope='cohort')", "only the cohort")
    refused(error_of(clients=UniformClients(samples_per_round=50)), "UniformClients(samples_per_round=50)", "sizes=None")
    refused(error_of(clients=PoissonClients(samples_per_round=50), sizes=RandomizedSizes()),
            "PoissonClients(samples_per_round=50)", "RandomizedSizes()")
    Strategy(clients=UniformClients(samples_per_round=50), sizes=ExactSizes())


@pytest.mark.parametrize("part, field", [
    (FedSamplingData(40), "data"), (ParticipantData(40), "data"), (WeightedMean("size"), "aggregate"),
    (FedNova("size"), "aggregate"), (StratifiedMean("size"), "aggregate"),
])
def test_a_part_that_needs_size_reports_refuses_a_strategy_that_collects_none(part, field):
    refused(error_of(**{field: part}), describe(part), "sizes=None", "needs")
    if part.capabilities.needs_sizes is SizeNeed.COHORT:  # randomized reports of the cohort are enough
        Strategy(**{field: part}, sizes=RandomizedSizes(scope="cohort"))


def test_a_need_is_met_exactly_by_the_reporting_that_gives_it():
    reportings = {"none": None, "randomized": RandomizedSizes(scope="cohort"), "exact cohort": ExactSizes(scope="cohort"),
                  "exact all": ExactSizes()}
    met = {need: [name for name, r in reportings.items() if need.met_by(r)] for need in SizeNeed}
    assert met == {
        SizeNeed.NONE: ["none", "randomized", "exact cohort", "exact all"],
        SizeNeed.COHORT: ["randomized", "exact cohort", "exact all"],
        SizeNeed.COHORT_EXACT: ["exact cohort", "exact all"],
        SizeNeed.EXACT_ALL: ["exact all"],
    }


def test_a_part_declaring_an_old_spelling_is_told_to_declare_a_size_need():
    @dataclasses.dataclass(frozen=True)
    class OldStyle(WeightedMean):
        needs_sizes = "exact"  # the spelling before SizeNeed

    refused(error_of(aggregate=OldStyle()), "OldStyle()", "SizeNeed")


# --- parts that carry the same setting agree ----------------------------------------------------------------


def test_fedsampling_K_must_agree_between_data_sampler_solver_and_aggregator():
    """fedsampling(K=64, data=FedSamplingData(128)) drew at 128/N~ and divided by 64: off by 2x, silently."""
    message = error_of(clients=AllClients(), data=FedSamplingData(128), local=OneGradient(64), aggregate=Sum(),
                       sizes=RandomizedSizes())
    refused(message, "FedSamplingData(K=128)", "OneGradient(K=64)", "K (samples per round)", "128", "64")
    message = error_of(clients=AllClients(), data=ParticipantData(eta=100), local=OneGradient(64), aggregate=Sum(),
                       sizes=RandomizedSizes(scope="cohort"))
    refused(message, "ParticipantData(eta=100)", "OneGradient(K=64)")
    with pytest.raises(ValueError, match="give K once"):  # the recipe refuses before building the parts
        recipes.fedsampling(K=64, data=FedSamplingData(128))
    message = error_of(clients=AllClients(), data=FedSamplingData(10, count_drawn=True), local=OneGradient(10),
                       aggregate=DrawnNormalizedSum(20), sizes=ExactSizes(), secure_sum=True)
    refused(message, "DrawnNormalizedSum(K=20)", "FedSamplingData(K=10, count_drawn=True)")
    recipes.fedsampling(K=64, data=FedSamplingData(64))  # agreeing parts construct
    Strategy(data=FedSamplingData(128), local=OneGradient(None), aggregate=Sum(), sizes=RandomizedSizes())  # no K in the solver


def test_isfedavg_scaling_must_agree_between_data_sampler_and_aggregator():
    """Step scaling in the plans and aggregate scaling at the server would apply 1/(K p_k) twice (or never)."""
    with pytest.raises(ValueError) as caught:
        recipes.isfedavg(L=3, scaling="aggregate", data=ImportanceData(scaling="step"))
    refused(str(caught.value), "ImportanceData()", "ISFedAvgAggregate(scaling='aggregate')", "scaling")
    recipes.isfedavg(L=3, scaling="aggregate", data=ImportanceData(scaling="aggregate"))


# --- secure sum, drawn counts, strata, schedule ------------------------------------------------------------


def test_secure_sum_refuses_an_aggregator_that_is_not_linear():
    """FedNova's weights need each client's a_k: under a secure sum it failed in the first round."""
    message = str(pytest.raises(ValueError, dataclasses.replace, recipes.fednova(), secure_sum=True).value)
    refused(message, "secure_sum=True", "FedNova()")
    dataclasses.replace(recipes.fedavg(), secure_sum=True)  # a linear aggregator is fine


def test_fednova_refuses_a_local_rule_that_is_not_linear_naming_the_rule():
    """FedNova's a_k (Wang et al. 2020) is derived for SGD's rule only (momentum, proximal term, weight decay): a local
    Adam is refused at construction naming its rule, read from the aggregator's declaration (normalizes_steps), so a
    user's aggregator declaring it is held to the same rule; SGD with momentum and a proximal term is not refused."""
    from fedsample.parts import AggregatorCapabilities
    from fedsample.training.local import LocalOptimizer
    from fedsample.training.rules import scale_by_adam

    adam = LocalOptimizer(lr=1e-3, epochs=None, steps=5, transforms=(scale_by_adam(),))
    message = error_of(clients=UniformClients(3), local=adam, aggregate=FedNova("uniform"))
    assert message == (
        f"FedNova(by='uniform') divides each update by its effective step count a_k, which Wang et al. (2020) derive only for a local "
        f"rule linear in the gradients, but {describe(adam)} steps by {describe(adam.step_rule(0))}, which is not: use "
        "LocalSGD (momentum, prox_mu, weight_decay) or another aggregator")
    assert "steps by Chain(lr=0.001, steps=(scale_by_adam(beta1=0.9" in message

    @dataclasses.dataclass(frozen=True)
    class Normalized(WeightedMean):
        @property
        def capabilities(self) -> AggregatorCapabilities:
            return dataclasses.replace(super().capabilities, normalizes_steps=True)

    refused(error_of(clients=UniformClients(3), local=adam, aggregate=Normalized("uniform")), "Normalized()", "scale_by_adam")
    Strategy(clients=UniformClients(3), local=adam, aggregate=WeightedMean("uniform"))  # FedAvg's weights need no a_k
    Strategy(clients=UniformClients(3), local=LocalSGD(lr=0.1, momentum=0.9, prox_mu=0.01), aggregate=FedNova("uniform"))
    Strategy(clients=UniformClients(3), local=OneGradient(4), aggregate=FedNova("uniform"))  # one step of lr 1: linear
    assert recipes.recipe("iwds", base="fednova").aggregate == FedNova()


def test_the_self_normalized_sum_needs_a_data_sampler_that_sends_drawn_counts():
    """Failed mid-run before: 'normalize=drawn needs each client's drawn count'."""
    message = error_of(clients=AllClients(), data=FedSamplingData(10), local=OneGradient(10), aggregate=DrawnNormalizedSum(10),
                       sizes=RandomizedSizes(), secure_sum=True)
    refused(message, "DrawnNormalizedSum(K=10)", "FedSamplingData(K=10)", "count_drawn=True")


def test_drawn_counts_reach_the_server_only_inside_a_secure_sum():
    message = error_of(clients=AllClients(), data=FedSamplingData(10, count_drawn=True), local=OneGradient(10),
                       aggregate=DrawnNormalizedSum(10), sizes=RandomizedSizes())
    refused(message, "FedSamplingData(K=10, count_drawn=True)", "secure_sum=True")
    recipes.fedsampling(K=10, normalize="drawn")  # the recipe's own composition


def test_the_paper_stratified_mean_needs_a_sampler_whose_cohorts_carry_strata():
    """Failed mid-run before: 'needs a stratified cohort'."""
    refused(error_of(clients=UniformClients(3), aggregate=StratifiedMean("paper")), "StratifiedMean(by='paper')",
            "UniformClients(m=3)")
    Strategy(clients=STRATA, aggregate=StratifiedMean("paper"))


def test_a_learning_rate_schedule_needs_a_server_optimizer_with_a_learning_rate():
    @dataclasses.dataclass(frozen=True)
    class FixedStep:
        def init_state(self, params):
            return {}

        def step(self, params, delta, state):
            return {k: params[k] - delta[k] for k in params}, state

    refused(error_of(server=FixedStep(), schedule=Schedule("step", 2, 0.5)), "FixedStep()", "Schedule(kind='step'")
    Strategy(server=FixedStep())  # without a schedule it has nothing to scale


def test_weights_by_inverse_inclusion_need_a_sampler_with_exact_probabilities():
    from fedsample.sampling.divfl import DivFLClients
    from fedsample.sampling.oort import OortClients

    for aggregate in (WeightedMean("inverse_inclusion"), FedNova("inverse_inclusion"), StratifiedMean("unbiased")):
        refused(error_of(clients=OortClients(m=3), aggregate=aggregate), "OortClients(m=3)", "estimated", "biased by design")
        refused(error_of(clients=DivFLClients(m=3), aggregate=aggregate), "DivFLClients(m=3)", "degenerate", "no unbiased estimator")
    Strategy(clients=OortClients(m=3), aggregate=WeightedMean("uniform"))
    Strategy(clients=DivFLClients(m=3), aggregate=WeightedMean("size"), sizes=ExactSizes(scope="cohort"))


def test_a_sampler_that_reads_training_replies_refuses_a_secure_sum_and_noise():
    from fedsample.sampling.oort import OortClients
    from fedsample.sampling.power_of_choice import PowerOfChoiceClients

    rpow = PowerOfChoiceClients(m=2, d=4, variant="rpow-d")
    refused(error_of(clients=rpow, sizes=ExactSizes(), secure_sum=True), "PowerOfChoiceClients(m=2, d=4, variant='rpow-d')",
            "loss", "secure_sum=True")
    refused(error_of(clients=OortClients(m=3), noise=UpdateNoise(1.0, 1.0)), "OortClients(m=3)", "utility", "UpdateNoise")
    Strategy(clients=PowerOfChoiceClients(m=2, d=4), sizes=ExactSizes(), secure_sum=True)  # pow-d reads probes, not replies


@dataclasses.dataclass(frozen=True)
class _Chosen:
    """A sampler declared estimated or degenerate (the inclusion contract), choosing the first m clients."""

    kind: str = "degenerate"
    assumed: bool = False
    reads: tuple = ()
    m: int = 2

    @property
    def capabilities(self):
        return ClientSamplerCapabilities(inclusion_kind=InclusionKind(self.kind), server_learns=(), assumed_weights=self.assumed,
                                         reads_replies=self.reads)

    def select(self, ctx):
        from fedsample.rounds import Cohort

        return Cohort(np.arange(self.m), np.full(self.m, np.nan), ctx.num_clients)

    def expected_cohort(self, num_clients, sizes=None):
        return float(self.m)


def test_weights_that_divide_by_inclusion_probabilities_need_a_sampler_that_knows_them():
    for by in ("inverse_inclusion", "size_inverse_inclusion"):
        sizes = ExactSizes() if by.startswith("size") else None
        refused(error_of(clients=_Chosen(), aggregate=WeightedMean(by), sizes=sizes), "_Chosen(", f"WeightedMean(by='{by}')", "deterministic")
        refused(error_of(clients=_Chosen("estimated"), aggregate=WeightedMean(by), sizes=sizes), "_Chosen(", "estimated")
        Strategy(clients=_Chosen("estimated", assumed=True), aggregate=WeightedMean(by), sizes=sizes)  # its assumed weights
    refused(error_of(clients=_Chosen(), aggregate=StratifiedMean("unbiased")), "StratifiedMean()", "deterministic")
    refused(error_of(clients=_Chosen(), aggregate=FedNova("inverse_inclusion")), "FedNova(by='inverse_inclusion')")
    Strategy(clients=_Chosen(), aggregate=WeightedMean("uniform"))  # no division by pi: runs, the round record says biased
    Strategy(clients=UniformClients(3), aggregate=WeightedMean("inverse_inclusion"))


def test_a_sampler_that_reads_each_update_refuses_a_secure_sum_but_not_noise():
    refused(error_of(clients=_Chosen(reads=("update",)), aggregate=Sum(), secure_sum=True), "_Chosen(", "update", "secure_sum=True")
    Strategy(clients=_Chosen(reads=("update",)), aggregate=Sum())
    Strategy(clients=_Chosen(reads=("update",)), noise=UpdateNoise(1.0, 1.0))  # noised updates are still updates


# --- what is checked, and what still constructs --------------------------------------------------------------


def test_every_rule_has_a_docstring_and_a_test_here():
    source = open(__file__).read()
    for rule in RULES:
        assert rule.__doc__
    assert len(RULES) == 11 and len(re.findall(r"^def test_", source, re.M)) >= len(RULES)


@pytest.mark.parametrize("name", sorted(recipes.RECIPES))
def test_every_recipe_constructs_with_its_defaults(name):
    assert isinstance(recipes.recipe(name), Strategy)


def test_the_check_reads_what_parts_have_without_running_their_properties():
    """RandomizedSizes(M="rmse").query raises until the population is known: checking that it exists must not call it."""
    assert recipes.fedsampling(M="rmse").sizes.M == "rmse"


def test_noise_and_secure_sum_compose_with_a_linear_aggregator_and_run():
    fed = federate(blobs(n=120), [20, 30, 25, 45])
    strategy = dataclasses.replace(recipes.fedsampling(K=30, M=20, server_lr=0.1, normalize="K"),
                                   noise=UpdateNoise(clip=1.0, noise_multiplier=0.5))
    result = simulate(strategy, fed, LogisticRegression(), rounds=1, seed=0)
    assert result.backend == "loop" and "noised" in result.backend_reason
    assert result.history[0]["updates"] > 0 and "train_loss" not in result.history[0]  # noised replies carry no loss


def test_a_valid_composition_is_not_refused_by_any_rule():
    strategy = Strategy(clients=UniformClients(3), data=FullData(), local=LocalSGD(), aggregate=Sum())
    assert all(rule(strategy) is None for rule in RULES)
