"""What the adaptive client samplers share (power-of-choice, Fed-CBS, FedCor, DivFL, Oort: the samplers whose choice
depends on what the clients report): their probes with the cost the round record states, their server-held state,
the random stream their replays read, and the contract's replay (:class:`Replayed`).

The inclusion contract itself is :mod:`fedsample.parts`' (:class:`~fedsample.parts.InclusionKind`,
:class:`~fedsample.parts.Learns`): these samplers declare ``inclusion_kind`` estimated or degenerate and what the
server learns; a cohort may state its own round's kind (``info["inclusion_kind"]``: FedCor's random warm-up rounds
are exact).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fedsample.messages import ProbeRequest
from fedsample.rng import SERVER, generator

if TYPE_CHECKING:
    from fedsample.rounds import ReplyList, RoundContext

__all__ = ["Replayed", "no_probes", "probe", "replay_rng", "sampler_state"]

#: The key of the samplers' server-held state in the strategy state (saved in checkpoints).
STATE_KEY = "clients"

#: The purpose of the server's random stream from which replays draw (one cell per (seed, round)).
REPLAY_PURPOSE = "replay"


def replay_rng(seed: int, round: int) -> np.random.Generator:
    """The stream a replay of round ``round``'s selection reads: the server's (seed, round, "replay") cell, a function
    of the run's seed like every other draw (the round's ``ctx.rng("replay")``)."""
    return generator(seed, round, SERVER, REPLAY_PURPOSE)


def sampler_state(ctx: "RoundContext") -> dict:
    """The sampler's server-held state: a dict in the strategy state, kept across rounds and saved in checkpoints."""
    return ctx.state.setdefault(STATE_KEY, {})


def probe(ctx: "RoundContext", ids: np.ndarray, request: ProbeRequest) -> "ReplyList":
    """Probe the clients ``ids`` through the federation and add the cost to the round record: ``sampler_probes`` (the
    probe replies: clients asked, one reply each) and ``sampler_probe_bytes`` (what the replies sent up,
    :attr:`~fedsample.messages.ProbeReport.nbytes`; a lost probe, asked with ``partial=True``, sent nothing)."""
    ids = np.asarray(ids, dtype=np.int64)
    replies = ctx.federation.run("probe", ids, request, ctx.round)
    ctx.log["sampler_probes"] = ctx.log.get("sampler_probes", 0) + len(ids)
    ctx.log["sampler_probe_bytes"] = ctx.log.get("sampler_probe_bytes", 0) + sum(int(getattr(r, "nbytes", 0)) for r in replies)
    return replies


def no_probes(ctx: "RoundContext") -> None:
    """Record a round in which the sampler probed nobody (the record states 0, not nothing)."""
    ctx.log.setdefault("sampler_probes", 0)
    ctx.log.setdefault("sampler_probe_bytes", 0)


class Replayed:
    """The contract's ``estimate_inclusion(ctx, draws)`` (:attr:`fedsample.parts.InclusionKind.ESTIMATED`) for a
    sampler that freezes one round's inputs (``frozen_state(ctx)``) and replays its selection from them
    (``replay(state, draws, seed=, round=)``, with :func:`replay_rng`)."""

    def estimate_inclusion(self, ctx: "RoundContext", draws: int = 1000) -> np.ndarray:
        """Every client's inclusion frequency over ``draws`` replays of round ``ctx.round``'s selection from the state
        the run has reached (``ctx.state``; standard error sqrt(pi (1 - pi) / draws))."""
        return self.replay(self.frozen_state(ctx), draws, seed=ctx.seed, round=ctx.round)  # type: ignore[attr-defined]
