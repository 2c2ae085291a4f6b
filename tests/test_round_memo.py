"""What a FedSampling round computes once from its permanent inputs (issue 41): AllClients' census cohort and the
size estimate N~ from the permanent reports are reused while the very same read-only arrays come back, and
recomputed when an input changes (another array, a writeable one, other settings, another population)."""

import numpy as np
import pytest

from fedsample import recipes
from fedsample.federation.secure_sum import with_secure_sum
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.models import MLP, initial_parameters
from fedsample.privacy.reports import estimate_total
from fedsample.rounds import RoundContext
from fedsample.runtime.memo import LastOf, frozen, unchangeable
from fedsample.sampling.clients import AllClients, census, is_built_census
from fedsample.strategy import is_census, round as round_steps
from helpers import blobs, federate

SIZES = [3, 1, 7, 2, 5, 4, 9, 1, 6, 2, 3, 8]
EPSILON, M = 3.0, 10


def read_only(values) -> np.ndarray:
    array = np.array(values)
    array.flags.writeable = False
    return array


def test_last_of_gives_the_value_again_only_for_the_same_unchangeable_arrays_and_settings():
    calls = []
    memo: LastOf[float] = LastOf()
    compute = lambda a: lambda: calls.append(1) or float(a.sum())  # noqa: E731
    a = read_only([1, 2, 3])
    assert memo.get((a,), "s", compute(a)) == 6 and memo.get((a,), "s", compute(a)) == 6 and len(calls) == 1
    assert memo.get((a,), "other", compute(a)) == 6 and len(calls) == 2  # other settings: computed again
    b = read_only([1, 2, 3])  # equal content, another array: computed again (identity, not content)
    assert memo.get((b,), "s", compute(b)) == 6 and len(calls) == 3
    writeable = np.array([1, 2, 4])
    assert memo.get((writeable,), "s", compute(writeable)) == 7
    writeable[0] = 2  # changed in place: a writeable array is never kept, so the change is seen
    assert memo.get((writeable,), "s", compute(writeable)) == 8 and len(calls) == 5
    base = np.array([5, 5])
    view = base[:]
    view.flags.writeable = False  # read-only, but its writeable base can change it: not kept either
    assert not unchangeable(view) and memo.get((view,), "s", compute(view)) == 10
    base[0] = 0
    assert memo.get((view,), "s", compute(view)) == 5 and len(calls) == 7


def test_frozen_copies_what_can_change_and_keeps_what_cannot():
    kept = read_only([1, 2])
    assert frozen(kept) is kept
    source = np.array([1, 2])
    copy = frozen(source)
    source[0] = 9
    assert copy is not source and copy.tolist() == [1, 2] and unchangeable(copy)


def test_census_is_built_once_per_population_read_only_and_valid():
    a, b = census(12), census(12)
    assert a is b and is_built_census(a) and is_census(a)
    assert a.ids.tolist() == list(range(12)) and a.inclusion.tolist() == [1.0] * 12 and a.multiplicity.tolist() == [1] * 12
    assert a.ids.dtype == np.int64 and a.inclusion.dtype == np.float64 and a.multiplicity.dtype == np.int64
    with pytest.raises(ValueError):
        a.ids[0] = 5  # nothing can change the cohort a later round is given
    other = census(7)  # another population: built again, with its own arrays
    assert other is not a and len(other) == 7 and is_built_census(other) and not is_built_census(a)
    lookalike = type(other)(np.arange(7), np.ones(7), 7)  # equal content, not the built object: checked as any
    assert not is_built_census(lookalike) and is_census(lookalike)


def test_a_cohort_that_is_not_the_built_census_is_still_checked():
    class Broken(AllClients):
        def select(self, ctx):
            cohort = census(ctx.num_clients)
            return type(cohort)(cohort.ids[::-1].copy(), cohort.inclusion, cohort.population)  # not ascending

    fed = federate(blobs(), SIZES)
    sim = VectorizedSimulator(fed, MLP(hidden=4).build((6,), 3), seed=0)
    strategy = recipes.fedsampling(K=8, epsilon=EPSILON, M=M, clients=Broken())
    ctx = RoundContext(sim, None, 0, 0, strategy.init_state({}))
    with pytest.raises(ValueError, match="not unique and ascending"):
        round_steps.select(strategy, ctx)


def rounds_estimates(sim, strategy, rounds: int) -> list[float]:
    module_params = initial_parameters(sim.module, 0)
    state, federation = strategy.init_state(module_params), with_secure_sum(sim, strategy.secure_sum)
    return [strategy.round(federation, module_params, state, t, 0)[1]["size_estimate"] for t in range(rounds)]


def test_the_permanent_reports_are_screened_once_and_a_changed_input_recomputes(monkeypatch):
    screened = []
    original = round_steps.validate.screen_sizes
    monkeypatch.setattr(round_steps.validate, "screen_sizes", lambda *a: screened.append(1) or original(*a))
    fed = federate(blobs(), SIZES)
    module = MLP(hidden=4).build((6,), 3)
    strategy = recipes.fedsampling(K=8, epsilon=EPSILON, M=M)
    sim = VectorizedSimulator(fed, module, seed=0)
    estimates = rounds_estimates(sim, strategy, 4)
    # round 0's answers are the engine's fresh array; from round 1 on its kept read-only copy: screened once more
    assert len(screened) == 2
    answers = sim.run(census(len(SIZES)).ids, strategy.sizes.query, 0).values
    assert estimates == [estimate_total(answers, EPSILON, M)] * 4  # N~ of the permanent reports, every round
    other = VectorizedSimulator(fed, module, seed=1)  # another run: other reports, other arrays: computed again
    again = rounds_estimates(other, strategy, 2)
    assert len(screened) == 4
    answers = other.run(census(len(SIZES)).ids, strategy.sizes.query, 0).values
    assert again == [estimate_total(answers, EPSILON, M)] * 2
    assert rounds_estimates(sim, recipes.fedsampling(K=8, epsilon=EPSILON, M=M + 1), 1) != estimates[:1]  # other M


def test_clients_contacted_counts_everyone_asked_once_with_or_without_the_census():
    from fedsample.strategy.probes import CheckedProbes

    fed = federate(blobs(), SIZES)
    probes = CheckedProbes(VectorizedSimulator(fed, MLP(hidden=4).build((6,), 3), seed=0))
    query = recipes.fedsampling(K=8, epsilon=EPSILON, M=M).sizes.query
    assert probes.contacted(np.array([3, 1, 3])) == 2  # nothing asked yet: the cohort's distinct members
    probes.run(np.array([0, 1, 5]), query, 0)
    assert probes.contacted(np.array([1, 2, 7])) == 5  # {0, 1, 5} and {2, 7}
    probes.run(np.array([2, 9]), query, 0)
    assert probes.contacted(np.array([], dtype=np.int64)) == 5
    probes.run(census(len(SIZES)).ids, query, 0)  # everyone, as FedSampling asks
    assert probes.contacted(np.array([4])) == len(SIZES)
