"""What the adaptive client samplers share (power-of-choice, Fed-CBS, FedCor, DivFL, Oort: the samplers whose choice
depends on what the clients report): their probes with the cost the round record states, their server-held state,
the random stream their replays read, and the contract's replay (:class:`Replayed`).

The inclusion contract itself is :mod:`fedsample.parts`' (:class:`~fedsample.parts.InclusionKind`,
:class:`~fedsample.parts.Learns`): these samplers declare ``inclusion_kind`` estimated or degenerate and what the
server learns; a cohort may state its own round's kind (``info["inclusion_kind"]``: FedCor's random warm-up rounds
are exact).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from fedsample.messages import ProbeReport, ProbeRequest
from fedsample.rng import SERVER, generator
from fedsample.rounds import Failed, RoundFailed, is_failed, probe_reports
from fedsample.sampling.design import Sample
from fedsample.runtime.records import Table, count_in, entries_in, opened_state

if TYPE_CHECKING:
    from fedsample.rounds import RoundContext

__all__ = ["LOST_PROBES_KEY", "NOT_DRAWN", "Replayed", "arrived_or_failed", "arrived_reports", "no_probes", "probe", "probe_partial", "probe_rate", "probes_arrived",
           "replay_rng", "sampler_state", "with_probe_rate"]

#: The key of the samplers' server-held state in the strategy state (saved in checkpoints).
STATE_KEY = "clients"

#: The purpose of the server's random stream from which replays draw (one cell per (seed, round)).
REPLAY_PURPOSE = "replay"


def replay_rng(seed: int, round: int) -> np.random.Generator:
    """The stream a replay of round ``round``'s selection reads: the server's (seed, round, "replay") cell, a function
    of the run's seed like every other draw (the round's ``ctx.rng("replay")``)."""
    return generator(seed, round, SERVER, REPLAY_PURPOSE)


def sampler_state(ctx: "RoundContext", kind: type[Table]) -> Table:
    """The sampler's server-held state, its table ``kind`` (a ``TypedDict`` of optional keys: empty at first) in the
    strategy state, kept across rounds and saved in checkpoints (:func:`~fedsample.runtime.records.opened_state`)."""
    return opened_state(ctx.state, STATE_KEY, kind)


def probe(ctx: "RoundContext", ids: np.ndarray, request: ProbeRequest) -> list[ProbeReport | Failed]:
    """Probe the clients ``ids`` through the federation and add the cost to the round record: ``sampler_probes`` (the
    probe replies: clients asked, one reply each) and ``sampler_probe_bytes`` (what the replies sent up,
    :attr:`~fedsample.messages.ProbeReport.nbytes`; a lost probe, asked with ``partial=True``, sent nothing)."""
    ids = np.asarray(ids, dtype=np.int64)
    replies = probe_reports(ctx.federation.run(ids, request, ctx.round))
    ctx.log["sampler_probes"] = count_in(ctx.log, "sampler_probes") + len(ids)
    ctx.log["sampler_probe_bytes"] = count_in(ctx.log, "sampler_probe_bytes") + sum(r.nbytes for r in replies if isinstance(r, ProbeReport))
    return replies


#: The round record's key for what a sampler did instead of a lost probe (:func:`probe_partial`).
LOST_PROBES_KEY = "sampler_lost_probes_instead"


def arrived_reports(replies: Sequence[ProbeReport | Failed]) -> list[ProbeReport]:
    """The probe reports that arrived, in order (those :func:`probes_arrived` marks: a lost probe is a ``Failed``)."""
    return [r for r in replies if isinstance(r, ProbeReport)]


def probes_arrived(ctx: "RoundContext", reports: Sequence[ProbeReport | Failed]) -> np.ndarray:
    """Which clients' probes arrived (a probe the failure model lost is a ``Failed`` reply); the round record names
    the lost ones (``failed``, with phase ``probe``) and counts them (``sampler_lost_probes``)."""
    arrived = np.array([not is_failed(r) for r in reports], dtype=bool)
    if not arrived.all():
        entries_in(ctx.log, "failed").extend(r.record() for r in reports if isinstance(r, Failed))
        ctx.log["sampler_lost_probes"] = count_in(ctx.log, "sampler_lost_probes") + int(np.count_nonzero(~arrived))
    return arrived


def probe_partial(
    ctx: "RoundContext", ids: np.ndarray, request: ProbeRequest, instead: str, needs_one: bool = True,
) -> tuple[list[ProbeReport | Failed], np.ndarray]:
    """:func:`probe` that does without the clients the failure model loses (``ProbeRequest(partial=True)``): the
    replies and which arrived (:func:`probes_arrived`). When some are lost the round record says what the sampler
    did instead (``sampler_lost_probes_instead``: ``instead``, which the strategy's warning repeats); every probe
    lost, where the sampler ``needs_one``, fails the round (:class:`~fedsample.rounds.RoundFailed`: the parameters
    stay unchanged and the record says why)."""
    replies = probe(ctx, ids, replace(request, partial=True))
    return replies, arrived_or_failed(ctx, replies, instead, needs_one)


def arrived_or_failed(ctx: "RoundContext", replies: Sequence[ProbeReport | Failed], instead: str, needs_one: bool = True) -> np.ndarray:
    """Which of the replies to a ``partial`` probe arrived (:func:`probes_arrived`), the round record saying what the
    sampler did instead of the lost ones; :class:`~fedsample.rounds.RoundFailed` when none arrived and it
    ``needs_one`` (:func:`probe_partial`)."""
    arrived = probes_arrived(ctx, replies)
    if needs_one and len(arrived) and not arrived.any():
        raise RoundFailed("every probe was lost")
    if not arrived.all():
        ctx.log[LOST_PROBES_KEY] = instead
    return arrived


#: What an exact sampler does without a lost probe (DELTA, ISFedAvg: :func:`probe_rate`).
NOT_DRAWN = "did not draw the clients whose probe was lost (the others' pi_k times the share whose probe arrived)"


def probe_rate(weights: np.ndarray, arrived: np.ndarray) -> float:
    """r = the share of the target's clients (w_k > 0) whose probe arrived. Probes lost at random leave a uniform
    subset P of them, of which the draw picks; an estimator sum_{k in S} w_k U_k / (pi_k r) with pi_k the draw's
    probability given P is unbiased for sum_k w_k U_k given |P| (E over P of sum_{k in P} w_k U_k is r sum_k w_k U_k):
    the response-rate adjustment (fedsample.missing), applied through the cohort's pi_k (:func:`with_probe_rate`)."""
    target = np.asarray(weights) > 0
    return float(np.count_nonzero(target & arrived)) / float(np.count_nonzero(target))


def with_probe_rate(sample: Sample, rate: float) -> Sample:
    """``sample`` with its inclusion probabilities times the probe rate r (:func:`probe_rate`; r = 1: unchanged)."""
    return sample if rate == 1.0 else Sample(sample.ids, sample.inclusion * rate, sample.multiplicity)


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
        inclusion: np.ndarray = self.replay(self.frozen_state(ctx), draws, seed=ctx.seed, round=ctx.round)  # type: ignore[attr-defined]
        return inclusion
