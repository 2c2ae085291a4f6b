"""The federation as a strategy's parts see it during a round (:class:`CheckedProbes`: probe replies checked,
every client asked noted); :class:`~fedsample.rounds.RoundFailed`, raised when nothing usable arrived in a phase of
the round, is importable from here as before.
"""

from __future__ import annotations

import numpy as np

from fedsample import validate
from fedsample.federation.base import Federation
from fedsample.federation.faults import lost_to_faults
from fedsample.messages import ProbeRequest
from fedsample.rounds import ReplyList, replies_of
from fedsample.runtime.memo import frozen
from fedsample.sampling.clients import is_census_ids

__all__ = ["CheckedProbes"]


LOST_PROBE = "; the sampler needs every probed client's statistics, so a lost probe stops the round (docs/reliability.md)"


class CheckedProbes:
    """The federation as the strategy's parts see it: probe replies are checked. The samplers that probe need
    every probed client's statistics, so a lost or non-finite probe is an error naming the client (``simulate``
    adds strategy, seed and round; a lost one says why it was lost, a non-finite one that the model usually
    diverged, a client without samples says so); a sampler that asks with ``ProbeRequest(partial=True)`` gets the lost
    ones as :class:`~fedsample.rounds.Failed` replies (:func:`fedsample.sampling.adaptive.probe_partial`). It also notes every client
    the parts ask (:meth:`contacted`)."""

    def __init__(self, inner: Federation) -> None:
        self.inner = inner
        self._asked: list[np.ndarray] = []  # the ids of every call the parts make (read-only: as they were asked)

    @property
    def num_clients(self) -> int:
        return self.inner.num_clients

    def contacted(self, cohort: np.ndarray) -> int:
        """How many distinct clients the round asked anything: the parts' size queries and probes, and the cohort."""
        asked = [*self._asked, np.asarray(cohort, dtype=np.int64)]
        if any(is_census_ids(ids, self.num_clients) for ids in asked):  # everyone (FedSampling): no pass over them
            return self.num_clients
        flags = np.zeros(self.num_clients, dtype=bool)
        for ids in asked:
            flags[ids] = True
        return int(np.count_nonzero(flags))

    def run(self, client_ids: np.ndarray, request: object, round: int) -> ReplyList:
        self._asked.append(frozen(np.asarray(client_ids, dtype=np.int64)))
        replies = replies_of(self.inner.run(client_ids, request, round))
        if isinstance(request, ProbeRequest):
            partial = request.partial  # the sampler does without lost probes
            for k, reply in zip(np.asarray(client_ids).tolist(), replies):
                if partial and lost_to_faults(reply):
                    continue
                problem = validate.probe_problem(reply)
                if problem is not None:  # a lost probe and an empty client's say why; any other adds the likely cause
                    hint = (LOST_PROBE if lost_to_faults(reply) else  # dropped out or too late: not the model's doing
                            "" if problem.no_samples else  # an empty client (fedsample.client.probe)
                            "; a non-finite probe usually means the model diverged (lower the learning rate)")
                    raise ValueError(f"client {k}'s probe is unusable ({problem.reason}){hint}")
        return replies
