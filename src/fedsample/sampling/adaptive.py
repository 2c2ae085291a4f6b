"""What the adaptive client samplers share (power-of-choice, Fed-CBS, FedCor, DivFL, Oort: the samplers whose choice
depends on what the clients report): how their inclusion probabilities are known, their probes with the cost the
round record states, their server-held state, and the random stream their replays read.

**The inclusion contract** (a stand-in until the shared declaration in :mod:`fedsample.parts` lands). Every client
sampler declares ``inclusion_kind``:

- ``"exact"``: the cohort carries every chosen client's true inclusion probability pi_k (the default of a sampler that
  declares nothing: uniform, size-proportional, Poisson, FedSTS, ISFedAvg);
- ``"estimated"``: no closed form; the cohort's ``inclusion`` is NaN and the sampler's ``estimate_inclusion(state,
  draws=R)`` replays its selection from a frozen state (the inputs of one round's choice) with the run's random
  streams (:func:`replay_rng`). Weights 1/pi do not exist, and the plain or size-weighted mean the paper uses is
  biased by design;
- ``"degenerate"``: the selection is a deterministic function of what the server knows (pi in {0, 1}); no unbiased
  estimator exists, and nothing divides by pi = 1.

A cohort may say otherwise for its own round (``info["inclusion_kind"]``: FedCor's random warm-up rounds are exact).
Each sampler also declares ``server_learns``: what the server must learn to run it (the words of
``SERVER_LEARNS`` in the sampling modules: sizes, losses, gradients, label histograms, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fedsample.messages import ProbeRequest
from fedsample.rng import SERVER, generator

if TYPE_CHECKING:
    from fedsample.rounds import Cohort, ReplyList, RoundContext

__all__ = [
    "INCLUSION_KINDS", "STATEMENTS", "cohort_kind", "inclusion_kind", "no_probes", "probe", "reads_replies", "replay_rng",
    "sampler_state", "server_learns", "statement",
]

INCLUSION_KINDS = ("exact", "estimated", "degenerate")

#: What the round record and ``diagnose`` say of a kind that has no honest weights 1/pi.
STATEMENTS = {
    "estimated": "biased by design: the inclusion probabilities have no closed form (estimate_inclusion replays the "
                 "selection) and the aggregation does not reweight by them",
    "degenerate": "no unbiased estimator exists: the selection is deterministic given what the server knows "
                  "(inclusion probability 0 or 1)",
}

#: The key of the samplers' server-held state in the strategy state (saved in checkpoints).
STATE_KEY = "clients"

#: The purpose of the server's random stream from which replays draw (one cell per (seed, round)).
REPLAY_PURPOSE = "inclusion replay"


def inclusion_kind(sampler: Any) -> str:
    """The sampler's declared kind of inclusion probabilities (``"exact"`` where it declares none)."""
    return str(getattr(sampler, "inclusion_kind", "exact"))


def cohort_kind(sampler: Any, cohort: "Cohort") -> str:
    """The kind of this round's probabilities: the cohort's own (``info["inclusion_kind"]``) or the sampler's."""
    return str(cohort.info.get("inclusion_kind", inclusion_kind(sampler)))


def server_learns(sampler: Any) -> tuple[str, ...]:
    """What the server learns to run the sampler (empty where it declares nothing)."""
    return tuple(getattr(sampler, "server_learns", ()))


def reads_replies(sampler: Any) -> tuple[str, ...]:
    """The fields of each client's training reply the sampler reads (``loss``, ``utility``, ...): a secure sum, which
    hides them, and noised replies, which withhold them, cannot serve it."""
    return tuple(getattr(sampler, "reads_replies", ()))


def statement(kind: str) -> str:
    """What the round record and ``diagnose`` state for a kind of inclusion probabilities ('' for exact ones)."""
    return STATEMENTS.get(kind, "")


def replay_rng(seed: int, round: int) -> np.random.Generator:
    """The stream a replay of round ``round``'s selection reads: the server's (seed, round, "inclusion replay") cell,
    a function of the run's seed like every other draw."""
    return generator(seed, round, SERVER, REPLAY_PURPOSE)


def sampler_state(ctx: "RoundContext") -> dict:
    """The sampler's server-held state: a dict in the strategy state, kept across rounds and saved in checkpoints."""
    return ctx.state.setdefault(STATE_KEY, {})


def probe(ctx: "RoundContext", ids: np.ndarray, request: ProbeRequest) -> "ReplyList":
    """Probe the clients ``ids`` through the federation and add the cost to the round record: ``sampler_probes`` (the
    probe replies: clients asked, one reply each) and ``sampler_probe_bytes`` (what the replies sent up,
    :attr:`~fedsample.messages.ProbeReport.nbytes`)."""
    ids = np.asarray(ids, dtype=np.int64)
    replies = ctx.federation.run("probe", ids, request, ctx.round)
    ctx.log["sampler_probes"] = ctx.log.get("sampler_probes", 0) + len(ids)
    ctx.log["sampler_probe_bytes"] = ctx.log.get("sampler_probe_bytes", 0) + sum(int(r.nbytes) for r in replies)
    return replies


def no_probes(ctx: "RoundContext") -> None:
    """Record a round in which the sampler probed nobody (the record states 0, not nothing)."""
    ctx.log.setdefault("sampler_probes", 0)
    ctx.log.setdefault("sampler_probe_bytes", 0)
