"""The compatibility rules between a strategy's parts (:data:`RULES`, enforced by
:meth:`fedsample.strategy.Strategy.check` at construction): each returns None, or one line naming the two parts
that disagree and what to do.
"""

from __future__ import annotations

from typing import cast

from fedsample import parts
from fedsample.parts import InclusionKind, SizeNeed, SizeReporting
from fedsample.runtime.records import is_round_key
from fedsample.strategy.composition import Composition

__all__ = [
    "RULES", "inclusion_weights_need_known_probabilities", "parts_implement_their_kind", "sampler_replies_are_readable",
    "schedule_has_a_learning_rate", "secure_sum_needs_a_linear_aggregator", "shared_settings_agree", "sizes_meet_every_need",
    "steps_normalize_under_a_linear_rule", "strata_come_from_the_sampler", "summed_statistics_are_sealed",
    "summed_statistics_are_sent",
]


_KINDS = {
    "clients": "client sampler", "data": "data sampler", "local": "local solver", "aggregate": "aggregator",
    "server": "server optimizer", "sizes": "size reporting", "noise": "update privacy (clipping and noise)",
}


def parts_implement_their_kind(s: Composition) -> str | None:
    """Each part has the methods its field requires (:data:`fedsample.parts.REQUIRED`) and declares its capabilities
    in the record of its kind (:func:`fedsample.parts.capabilities_problem`: none, the old separate attributes, a
    record of another kind or one that cannot be built is refused naming the part)."""
    given = {"clients": s.clients, "data": s.data, "local": s.local, "aggregate": s.aggregate, "server": s.server,
             "sizes": s.sizes, "noise": s.noise}
    for name, kind in _KINDS.items():
        part = given[name]
        if part is None and name in ("sizes", "noise"):
            continue
        missing = [m for m in parts.missing_methods(part, name) if m != "capabilities"]  # capabilities: said below
        if missing:
            return f"{name}={parts.describe(part)} is not a {kind}: it has no {missing[0]}() method"
        problem = parts.capabilities_problem(part, name)
        if problem is not None:
            return f"{name}={problem}"
    return None


def sizes_meet_every_need(s: Composition) -> str | None:
    """The size reporting gives each part the sizes it declares it needs (``needs_sizes``, a :class:`SizeNeed`)."""
    for part, need in ((s.clients, s.clients.capabilities.needs_sizes), (s.data, s.data.capabilities.needs_sizes),
                       (s.aggregate, s.aggregate.capabilities.needs_sizes)):
        if not need.met_by(s.sizes):
            return f"{parts.describe(part)} needs {need.wording}, but {_what_sizes_give(s.sizes, need)}: {need.remedy}"
    return None


def _what_sizes_give(sizes: SizeReporting | None, need: SizeNeed) -> str:
    if sizes is None:
        return "the strategy collects none (sizes=None)"
    if not sizes.exact:
        return f"{parts.describe(sizes)} reports randomized sizes"
    return f"{parts.describe(sizes)} asks only the cohort, after selection"


def shared_settings_agree(s: Composition) -> str | None:
    """Parts that carry the same setting give it the same value (``shared_settings``: e.g. FedSampling's K in the
    data sampler, the solver and the aggregator; ISFedAvg's scaling in its data sampler and aggregator)."""
    first: dict[str, tuple[object, object]] = {}
    declared = ((s.clients, s.clients.capabilities), (s.data, s.data.capabilities), (s.local, parts.solver_capabilities(s.local)),
                (s.aggregate, s.aggregate.capabilities))
    for part, capabilities in declared:
        for name, value in capabilities.shared_settings.items():
            if name in first and first[name][1] != value:
                other = first[name][0]
                return (f"{parts.describe(other)} and {parts.describe(part)} disagree on {name} ({first[name][1]!r} vs "
                        f"{value!r}): parts that carry the same setting must agree")
            first.setdefault(name, (part, value))
    return None


def secure_sum_needs_a_linear_aggregator(s: Composition) -> str | None:
    """A secure sum reveals one weighted sum of the updates: the aggregator's weights must be known before them."""
    if s.secure_sum and s.aggregate.capabilities.linear is False:
        return (f"secure_sum=True reveals only a weighted sum of the updates, but {parts.describe(s.aggregate)} is not "
                "linear with weights known before the updates: use Sum, WeightedMean or StratifiedMean, or secure_sum=False")
    return None


def summed_statistics_are_sent(s: Composition) -> str | None:
    """An aggregator that reads a summed statistic of the cohort (``needs_summed``, by name: the self-normalized
    update's drawn count) gets it from a data sampler whose plans declare it (``summed``)."""
    missing = parts.unsent_statistics(s.aggregate, s.data)
    if missing:
        return (f"{parts.describe(s.aggregate)} needs the cohort's summed {missing[0]!r}, but {parts.describe(s.data)} does not "
                "ask the clients to send it (its capabilities' summed): choose a data sampler that declares it (FedSampling's "
                "drawn count: count_drawn=True)")
    return None


def summed_statistics_are_sealed(s: Composition) -> str | None:
    """A summed statistic reaches the server only summed over the cohort (each client's drawn count reveals its
    size): a data sampler whose plans declare one (``summed``) needs a secure sum; and it reaches the round record
    under its own name, so none may be named like one of the record's own figures
    (:func:`fedsample.runtime.records.is_round_key`), which it would overwrite or be overwritten by."""
    summed = s.data.capabilities.summed
    clash = next((statistic.name for statistic in summed if is_round_key(statistic.name)), None)
    if clash is not None:
        return (f"data={parts.describe(s.data)} declares a summed statistic named {clash!r}, which is a key of the "
                "round record's own (fedsample.runtime.records.ROUND_KEYS): give the statistic another name")
    if summed and not s.secure_sum:
        return (f"{parts.describe(s.data)} has every client send its {summed[0].released}, which reveals what it holds "
                "unless the server sees only their sum: pass secure_sum=True")
    return None


def strata_come_from_the_sampler(s: Composition) -> str | None:
    """An aggregator that weighs by strata gets a client sampler whose cohorts carry them."""
    if s.aggregate.capabilities.needs_strata and not s.clients.capabilities.stratified:
        return (f"{parts.describe(s.aggregate)} weighs by strata (N_h / m_h), but the cohorts of "
                f"{parts.describe(s.clients)} carry none: use StratifiedClients(...) or another aggregation")
    return None


def inclusion_weights_need_known_probabilities(s: Composition) -> str | None:
    """A part that divides by inclusion probabilities or expected draws (``weighs_by_inclusion``: an aggregator's
    Horvitz-Thompson weights, ISFedAvg's agent factor in the data plans) needs a sampler whose cohorts carry them
    (:class:`~fedsample.parts.InclusionKind`): exact, or estimated with the weights its method assumes
    (``assumed_weights``, biased as the round record says); never a deterministic one, where pi = 1 would be
    divided by and no unbiased estimator exists."""
    kind = parts.inclusion_kind(s.clients)
    if kind is InclusionKind.EXACT:
        return None
    divides = ((s.data, s.data.capabilities.weighs_by_inclusion, "use another data sampler"),
               (s.aggregate, s.aggregate.capabilities.weighs_by_inclusion, "weigh by size or uniformly instead"))
    for part, weighs, instead in divides:
        if not weighs:
            continue
        if kind is InclusionKind.DEGENERATE:
            return (f"{parts.describe(part)} divides by the inclusion probabilities, but {parts.describe(s.clients)} selects "
                    f"deterministically (degenerate, pi in {{0, 1}}): no unbiased estimator exists; {instead}")
        if not s.clients.capabilities.assumed_weights:
            return (f"{parts.describe(part)} divides by the inclusion probabilities, but those of {parts.describe(s.clients)} "
                    f"have no closed form (estimated, biased by design): {instead}")
    return None


def sampler_replies_are_readable(s: Composition) -> str | None:
    """A sampler that learns from each client's training reply (``reads_replies``: the fields it reads) needs replies
    the server can read: not sealed by a secure sum; and, where it reads more than the update (the loss, Oort's
    statistical utility), not noised (noised replies withhold them)."""
    fields = parts.replies_read(s.clients)
    if not fields:
        return None
    if s.secure_sum:
        return (f"{parts.describe(s.clients)} reads each client's training {fields[0]} (its server-held state), which "
                "secure_sum=True hides from the server (only the sum is revealed): pass secure_sum=False")
    withheld = [f for f in fields if f != "update"]
    if s.noise is not None and withheld:
        return (f"{parts.describe(s.clients)} reads each client's training {withheld[0]}, which {parts.describe(s.noise)} "
                "withholds from its noised replies: drop the noise or choose another sampler")
    return None


def steps_normalize_under_a_linear_rule(s: Composition) -> str | None:
    """An aggregator that divides each update by its effective step count a_k (``normalizes_steps``: FedNova) needs a
    local rule for which Wang et al. (2020, Eq. 7 and §5) give a_k: one linear in the gradients (SGD with momentum, a
    proximal term, weight decay). A solver whose declared step rule is not (a chain with Adam's moments, say) is
    refused: its a_k = tau_k would be a guess the paper does not make. A solver without a declared step rule reports
    its own a_k (``LocalResult.norm_steps``)."""
    if not s.aggregate.capabilities.normalizes_steps or not parts.conforms(s.local, parts.ScheduledSolver):
        return None
    rule = cast(parts.ScheduledSolver, s.local).step_rule(0)
    if rule.linear:
        return None
    return (f"{parts.describe(s.aggregate)} divides each update by its effective step count a_k, which Wang et al. (2020) "
            f"derive only for a local rule linear in the gradients, but {parts.describe(s.local)} steps by "
            f"{parts.describe(rule)}, which is not: use LocalSGD (momentum, prox_mu, weight_decay) or another aggregator")


def schedule_has_a_learning_rate(s: Composition) -> str | None:
    """A learning-rate schedule scales the server optimizer's ``lr``."""
    if s.schedule is not None and not hasattr(s.server, "lr"):
        return f"{parts.describe(s.schedule)} scales the server's learning rate, but {parts.describe(s.server)} has no lr"
    return None


RULES = (
    parts_implement_their_kind, sizes_meet_every_need, shared_settings_agree, secure_sum_needs_a_linear_aggregator,
    summed_statistics_are_sent, summed_statistics_are_sealed, strata_come_from_the_sampler, inclusion_weights_need_known_probabilities,
    sampler_replies_are_readable, steps_normalize_under_a_linear_rule, schedule_has_a_learning_rate,
)
"""What :meth:`fedsample.strategy.Strategy.check` enforces, in order."""
