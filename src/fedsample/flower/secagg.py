"""Secure aggregation on a Flower deployment: a ``train`` call runs Flower's SecAgg+ (Bell et al. 2020, as
Flower implements it: ``SecAggPlusWorkflow`` on the server, ``secaggplus_mod`` on the clients), so the
ServerApp receives masked vectors and learns only their sum.

A strategy that declares ``secure_sum`` asks for one weighted sum of the cohort's updates (with the cohort's
summed loss, how many clients took a step and, when the plan declares one, its summed statistic (e.g. how many
samples they drew):
:class:`~fedsample.federation.secure_sum.SecureSum`, which stays the in-process reference for the numbers).
Here each client packs its reply into one vector (:func:`sealed_vector`): the update's arrays, then a tally
(loss, 1 if it took a step, the one summed statistic the call declares, whatever its name, in base-1024 digits or,
where the statistic declares noise, its value plus the client's noise share, 1 if its vector had to be clipped; the
entries keep the drawn count's names, the first such statistic), each tally entry scaled into SecAgg+'s
clipping range. The server sends the fedsample request with SecAgg+'s
collect-masked-vectors stage, so training happens inside the protocol; a client that fails before its masked
vector arrives is a dropout (left out of the sum and named), one that fails after it is recovered by SecAgg+
(its vector stays in the sum) as long as enough of its neighbours answer (the reconstruction threshold).

What SecAgg+ costs in numbers: every coordinate is clipped to ``[-clipping_range, clipping_range]`` and rounded
stochastically onto ``quantization_range`` levels, so each client's contribution is off by less than one
quantum ``2 * clipping_range / quantization_range`` per coordinate (3.8e-6 at Flower's defaults, 8.0 and
2**22), the sum of n clients by less than n quanta (:meth:`SecAggPlus.tolerance`); the integers of the tally
are recovered exactly by rounding. FedSampling's noise on the drawn count (``count_noise`` = sigma_S > 0): each
client seals its count plus its share N(0, sigma_S^2 / m) of the noise (m: the clients asked;
:func:`fedsample.federation.secure_sum.count_shares`, from the client's own stream of the (seed, round, client,
purpose) cell, exactly the share the in-process secure sum adds) in one entry of range ``count_range``
(:class:`SecAggPlus`; digits would release parts of S exactly): the noised sum of the n summed clients is off
from the in-process noised count by less than n count quanta ``2 * count_range / quantization_range`` (0.031
samples per client at 2**16 and 2**22; :meth:`SecAggPlus.count_tolerance`; against sigma_S = 5, negligible), and
the server never sees a share,
the shares' sum or S apart. The masked sum must not wrap modulo ``modulus_range``: at most
``modulus_range // quantization_range - 1`` clients (1,023 at the defaults) per sum. A client whose vector
left the range says so in the tally, and the round's record counts such clients (``clipped``).

The server can ask for one weighted sum whose weights are the same for every client that answered
(FedSampling's sum and its self-normalized variant, any uniform mean): SecAgg+ sums the vectors as they are.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from logging import WARNING
from typing import TYPE_CHECKING, Callable, Iterable

import flwr.compat.common.recorddict_compat as compat
import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Error, Message, RecordDict
from flwr.common.logger import log as flower_log
from flwr.common import Code, FitIns, FitRes, Parameters, Status, bytes_to_ndarray, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.server import LegacyContext
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.strategy import Strategy as FlowerStrategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey

from fedsample import checks
from fedsample.federation.secure_sum import count_shares, sealed_replies, sealed_statistic
from fedsample.client import ClientReply, ClientRequest
from fedsample.flower.codec import Request, encode_request, size_of
from fedsample.flower.federation import exchange, say_failures
from fedsample.messages import TrainPayload, TrainReport, procedure_of
from fedsample.rounds import Failed, FusedReplies, carries_update
from fedsample.runtime.records import Record
from fedsample.training.functional import Params

if TYPE_CHECKING:
    from flwr.common import EvaluateIns, EvaluateRes, Scalar
    from flwr.server.client_manager import ClientManager
    from flwr.server.client_proxy import ClientProxy

    from fedsample.flower.federation import FlowerFederation

__all__ = [
    "COUNT_RANGE", "DIGIT", "NotSent", "SEALED", "STAGES", "SealedSums", "SecAggPlus", "SummedCohort", "TALLY", "client_check", "clipping_range_of",
    "count_noise_of", "count_range_of", "count_share_of", "dropouts", "flag_clipped", "sealed_reply", "sealed_report", "sealed_samples", "sealed_train", "sealed_vector", "tally_bounds", "unpack_sum",
]

#: The request's ConfigRecord naming the clipping range the client scales its tally into, the noised count's range
#: and how many clients were asked (each adds 1/asked of the count's noise variance).
SEALED = "sealed"
#: Where SecAgg+'s client mod reads the vector to mask.
FITRES_PARAMETERS = "fitres.parameters"
#: The tally sealed beside the update: summed loss, clients that stepped, the drawn count's digits (exact) or the
#: noised drawn count (count plus noise share), clipped flags.
TALLY = ("loss", "stepped", "drawn_0", "drawn_1", "drawn_2", "noised_drawn", "clipped")
#: The drawn count in base-1024 digits: each digit's sum is exact after rounding (see the module doc).
DIGIT = 1024
#: The default largest |drawn count + noise share| one client seals (a client that draws every one of its samples
#: draws its whole size): 65,536, one count quantum 2 * 2**16 / 2**22 = 0.031 samples at Flower's quantization.
COUNT_RANGE = 2.0**16


def tally_bounds(count_range: float) -> np.ndarray:
    """The largest magnitude of each tally entry (``count_range``: the noised drawn count's); entry / bound *
    clipping_range lies in the clipping range."""
    return np.array([128.0, 1.0, DIGIT, DIGIT, DIGIT, float(count_range), 1.0])
#: SecAgg+'s stages by the names the round record gives them.
STAGES = {Stage.SETUP: "setup", Stage.SHARE_KEYS: "share-keys", Stage.COLLECT_MASKED_VECTORS: "collect-masked-vectors",
          Stage.UNMASK: "unmask"}


@dataclass(frozen=True)
@checks.constrained(
    num_shares=[checks.integers(3), checks.reals(0, 1, "(]")],
    reconstruction_threshold=[checks.integers(2), checks.reals(0, 1, "(]")],
    clipping_range=checks.POSITIVE,
    quantization_range=checks.integers(2),
    count_range=checks.POSITIVE,
    modulus_range=checks.Param(checks.Options(*(2**k for k in range(2, 33))), words="a power of 2 up to 2**32"),
)
class SecAggPlus:
    """Flower's SecAgg+ settings (``flwr.server.workflow.SecAggPlusWorkflow``'s, whose docstring defines them):
    ``num_shares`` (an integer >= 3, or a fraction of the cohort; 1.0: every client is every client's
    neighbour), ``reconstruction_threshold`` (an integer, or a fraction of the shares: how many neighbours must
    answer to remove a client's masks; a client with fewer live neighbours stops the round's sum),
    ``clipping_range``, ``quantization_range`` and ``modulus_range`` (Flower's defaults), and ``count_range``
    (fedsample's: the largest |drawn count + noise share| one client seals where the plan noises the count; a
    client past it is clipped there and counted among the clipped)."""

    num_shares: int | float = 1.0
    reconstruction_threshold: int | float = 0.5
    clipping_range: float = 8.0
    quantization_range: int = 2**22
    modulus_range: int = 2**32
    count_range: float = COUNT_RANGE

    def __post_init__(self) -> None:
        if self.quantization_range >= self.modulus_range:
            checks.fail("quantization_range", self.quantization_range, f"below modulus_range = {self.modulus_range}", "SecAggPlus")

    @property
    def quantum(self) -> float:
        """One quantization step, ``2 * clipping_range / quantization_range``: a client's contribution to a
        coordinate of the sum is off by less than this."""
        return 2 * self.clipping_range / self.quantization_range

    @property
    def max_clients(self) -> int:
        """The most clients one sum can hold without wrapping modulo ``modulus_range`` (each client adds an
        integer up to ``quantization_range`` to every coordinate, and its weight ``quantization_range``)."""
        return (self.modulus_range - 1) // self.quantization_range

    def tolerance(self, clients: int) -> float:
        """Bound on the error of one coordinate of a sum of ``clients`` updates: ``clients`` quanta."""
        return clients * self.quantum

    def count_tolerance(self, clients: int) -> float:
        """Bound on the error of the noised drawn count of a sum of ``clients``: ``clients`` count quanta,
        ``2 * count_range / quantization_range`` each."""
        return clients * 2 * self.count_range / self.quantization_range

    def train(self, federation: "FlowerFederation", ids: list[int], payloads: list[ClientRequest], round: int) -> FusedReplies:
        """``federation.run`` of a training request (or the count-only :class:`~fedsample.messages.SizeSumRequest`)
        under SecAgg+: :func:`sealed_train`."""
        return sealed_train(federation, self, ids, payloads, round)


# --- a client's vector -----------------------------------------------------------------------------------


def sealed_vector(
    report: int | TrainReport, params: Params, clipping_range: float, share: float | None = None, count_range: float = COUNT_RANGE
) -> list[np.ndarray]:
    """What one client gives SecAgg+ to mask: its update's arrays in the order of ``params`` (zeros when it
    took no step) and the tally (:data:`TALLY`: loss, 1 if it stepped, the summed value in base-1024 digits (its size
    for a count-only call, else the one summed statistic the call declares, FedSampling's drawn count; 0 where none
    is declared); with a noise ``share``, zero digits and that value plus the share in the noised entry; 0 for "not
    clipped"), each tally entry divided by its bound (:func:`tally_bounds`) and
    multiplied by ``clipping_range``."""
    stepped = None if isinstance(report, int) or not carries_update(report) else report  # a size report takes no step
    update = stepped.update if stepped is not None else {k: torch.zeros_like(v) for k, v in params.items()}
    drawn = int(sealed_samples(report) or 0)
    digits = [drawn % DIGIT, (drawn // DIGIT) % DIGIT, drawn // DIGIT**2] if share is None else [0, 0, 0]
    noised = 0.0 if share is None else drawn + float(share)
    tally = np.array([float(stepped.loss) if stepped is not None else 0.0, float(stepped is not None), *digits, noised, 0.0])
    tally = tally / tally_bounds(count_range) * clipping_range
    return [update[k].detach().cpu().numpy().astype(np.float64) for k in params] + [tally]


def sealed_report(report: ClientReply) -> int | TrainReport:
    """What a sealed call's procedure answers: a training report (``train``) or the client's size (``sum_sizes``, an
    integer: no update, no step, :func:`fedsample.flower.codec.size_of`); a ValueError for any other report."""
    return report if isinstance(report, TrainReport) else size_of(report)


def sealed_samples(report: int | TrainReport) -> int | None:
    """The count a client seals: its size where the report is one, else the value of the one summed statistic its
    training report carries (the one its plan declares, e.g. the samples it drew; None where the plan declares none).
    The tally has one count entry: a report that carries more is refused."""
    if isinstance(report, int):
        return report
    sums = report.sums  # those its plan declares
    if len(sums) > 1:
        raise ValueError(f"Flower's SecAgg+ tally seals one summed statistic; the report carries {len(sums)}: {sorted(sums)}")
    return next(iter(sums.values()), None)


def flag_clipped(vector: list[np.ndarray], clipping_range: float) -> list[np.ndarray]:
    """``vector`` with its tally's "clipped" entry set when any coordinate lies outside the clipping range
    (SecAgg+ clips it; the round's record then counts this client among the clipped)."""
    if any(np.any(np.abs(a) > clipping_range) for a in vector):
        vector = [*vector[:-1], vector[-1].copy()]
        vector[-1][-1] = clipping_range  # 1 / its bound 1 * clipping_range
    return vector


@dataclass(frozen=True)
class SummedCohort:
    """What the server learns from one SecAgg+ sum: the summed update, the tally's sums and who is in it."""

    update: Params
    loss: float
    stepped: int
    drawn: float  # an integer unless noised
    clipped: int
    summed: int  # how many clients' vectors are in the sum


def unpack_sum(
    total: list[np.ndarray], params: Params, clipping_range: float, summed: int, noised: bool = False,
    count_range: float = COUNT_RANGE,
) -> SummedCohort:
    """Split a summed vector (the protocol's output, in :func:`sealed_vector`'s layout) into the update's sum
    (as ``params``' tensors) and the tally's sums (the integers rounded; ``noised``: the drawn count is the
    noised entry's sum, as it is)."""
    update = {k: torch.as_tensor(a, dtype=v.dtype).reshape(v.shape) for (k, v), a in zip(params.items(), total)}
    tally = np.asarray(total[-1], dtype=np.float64) * tally_bounds(count_range) / clipping_range
    whole = np.rint(tally).astype(np.int64)
    drawn = float(tally[5]) if noised else int(whole[2] + DIGIT * whole[3] + DIGIT**2 * whole[4])
    return SummedCohort(update, float(tally[0]), int(whole[1]), drawn, int(whole[6]), summed)


# --- the clients' side -----------------------------------------------------------------------------------


def clipping_range_of(message: Message) -> float:
    """The clipping range the server's request names (its ``sealed`` record)."""
    value = message.content.config_records[SEALED]["clipping_range"]
    if not isinstance(value, (int, float)):
        raise ValueError(f"the clipping range must be a number, got {value!r}")
    return float(value)


def count_share_of(message: Message, request: Request) -> float | None:
    """This client's share of the noise on the summed count (:func:`~fedsample.federation.secure_sum.count_shares`
    of its own (seed, round, client) stream of the count's cell, :func:`~fedsample.federation.secure_sum.sealed_statistic`,
    over the asked clients the request names), drawn here on the client; None where the request asks for no count or
    no noise on it."""
    statistic = sealed_statistic(request.payload)
    if statistic is None or statistic.noise <= 0:
        return None
    asked = message.content.config_records[SEALED]["asked"]
    if not isinstance(asked, int) or asked < 1:
        raise ValueError(f"the number of asked clients must be a positive integer, got {asked!r}")
    return float(count_shares(float(statistic.noise), asked, request.seed, request.round, np.array([request.client]), statistic.purpose)[0])


def count_range_of(message: Message) -> float:
    """The noised drawn count's range the server's request names (its ``sealed`` record)."""
    value = message.content.config_records[SEALED]["count_range"]
    if not isinstance(value, (int, float)):
        raise ValueError(f"the count range must be a number, got {value!r}")
    return float(value)


def sealed_reply(message: Message, request: Request, report: ClientReply) -> Message:
    """The client's ``train`` (or ``sum_sizes``) answer inside SecAgg+: its vector (with its noise share on the count
    where the request asks) as the FitRes records the client mod masks (weight 1: SecAgg+ then sums the vectors as
    they are). A count-only request carries no parameters: the vector is the tally alone."""
    share = count_share_of(message, request)
    params = request.payload.params if isinstance(request.payload, TrainPayload) else {}  # a count-only request: none
    vector = sealed_vector(sealed_report(report), params, clipping_range_of(message), share, count_range_of(message))
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(vector), 1, {})
    return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=message)


class NotSent(ValueError):
    """A client's reply that the client itself keeps out of the secure sum (the server learns only that the
    client dropped out, and this reason)."""


def client_check(message: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """A client mod just inside ``secaggplus_mod``: the client checks its own vector before it is masked (the
    server cannot look inside the sum). A failed procedure or a non-finite vector is not sent: the mod raises,
    the node answers with an error and the server counts the client as dropped out, as SecAgg+'s dropout
    handling does; a vector outside the clipping range is flagged in its tally."""
    reply = call_next(message, context)
    if reply.has_error():
        raise NotSent(f"the client's procedure failed: {reply.error.reason}")
    fitres = compat.recorddict_to_fitres(reply.content, keep_input=True)
    vector = parameters_to_ndarrays(fitres.parameters)
    if not all(np.all(np.isfinite(a)) for a in vector):
        raise NotSent("non-finite values in the update: the client does not send it")
    fitres.parameters = ndarrays_to_parameters(flag_clipped(vector, clipping_range_of(message)))
    return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=message)


# --- the server's side -----------------------------------------------------------------------------------


class _Cohort(FlowerStrategy):
    """The legacy-strategy side SecAgg+'s workflow talks to: it names the cohort's nodes (``configure_fit``)
    and keeps the protocol's result (``aggregate_fit``: who is in the sum, and the sum's mean)."""

    def __init__(self, nodes: list[int], grid: Grid) -> None:
        self.nodes, self.grid = nodes, grid
        self.included: list[int] | None = None
        self.mean: list[np.ndarray] | None = None

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        return [(GridClientProxy(n, self.grid, 0), FitIns(Parameters([], ""), {})) for n in self.nodes]

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list[tuple[ClientProxy, FitRes] | BaseException]) -> tuple[None, dict[str, Scalar]]:
        self.included = [proxy.node_id for proxy, _ in results]
        self.mean = parameters_to_ndarrays(results[0][1].parameters) if results else None
        return None, {}

    def initialize_parameters(self, client_manager: ClientManager) -> None:
        return None

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager) -> list[tuple[ClientProxy, EvaluateIns]]:
        return []

    def aggregate_evaluate(self, server_round: int, results: list[tuple[ClientProxy, EvaluateRes]],
                           failures: list[tuple[ClientProxy, EvaluateRes] | BaseException]) -> tuple[None, dict[str, Scalar]]:
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters) -> None:
        return None


class _Workflow(SecAggPlusWorkflow):
    """Flower's SecAgg+ workflow whose collect-masked-vectors stage carries fedsample's ``train`` request for
    each node (``requests``) instead of a legacy FitIns (the extension point Flower's own example uses)."""

    def __init__(self, settings: SecAggPlus, timeout: float, requests: dict[int, RecordDict]) -> None:
        super().__init__(
            num_shares=settings.num_shares, reconstruction_threshold=settings.reconstruction_threshold, max_weight=1.0,
            clipping_range=settings.clipping_range, quantization_range=settings.quantization_range,
            modulus_range=settings.modulus_range, timeout=timeout,
        )
        self.requests = requests
        self.threshold = 0

    def setup_stage(self, grid: Grid, context: LegacyContext, state: WorkflowState) -> bool:
        ok = super().setup_stage(grid, context, state)
        state.nid_to_fitins.update(self.requests)
        self.threshold = state.threshold
        return ok

    def share_keys_stage(self, grid: Grid, context: LegacyContext, state: WorkflowState) -> bool:
        """Flower's stage, then the protocol restricted to the clients that shared their keys. A client that
        dropped out before (at setup or here) holds no share of anyone and gave none, and nobody masks with it;
        Flower 1.41's workflow would still count it as a dead neighbour in the unmask stage, ask the others for
        its shares and stop (nobody has them). Without it every later stage is SecAgg+ as written."""
        super().share_keys_stage(grid, context, state)
        shared = set(state.active_node_ids)
        state.sampled_node_ids = shared
        state.nid_to_neighbours = {n: neighbours & shared for n, neighbours in state.nid_to_neighbours.items() if n in shared}
        return self._check_threshold(state)


class _StageGrid(Grid):
    """The grid as SecAgg+'s workflow sees it: ``send_and_receive`` is :func:`exchange` (the timeout counts
    replies, not pulls), each node's outcome per stage is kept (for the failures' reasons), and a masked vector
    of the wrong shape is turned into that node's error reply (it would stop the server's sum); the rest of
    Flower's ``Grid`` is the wrapped grid's."""

    def __init__(self, grid: Grid, shapes: list[tuple[int, ...]]) -> None:
        self.grid, self.shapes = grid, shapes
        self.outcome: dict[str, dict[int, str | None]] = {}  # stage -> node -> None (answered) or why not

    def set_run(self, run: Run) -> None:
        self.grid.set_run(run)

    @property
    def run(self) -> Run:
        return self.grid.run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str, ttl: float | None = None) -> Message:
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        sent = list(messages)
        if not sent:
            return []
        stage = STAGES.get(str(sent[0].content.config_records[RECORD_KEY_CONFIGS][Key.STAGE]), "?")
        answers = exchange(self.grid, sent, float("inf") if timeout is None else timeout)
        replies, seen = [], self.outcome.setdefault(stage, {})
        for m in sent:
            reply = answers.get(id(m))
            node = m.metadata.dst_node_id
            if reply is None:
                seen[node] = f"no reply within {timeout:g} s"
                continue
            if not reply.has_error() and stage == "collect-masked-vectors" and not self._well_shaped(reply):
                reply = Message(Error(400, "masked vector of the wrong shape"), reply_to=m)
            seen[node] = f"error reply: {reply.error.reason}" if reply.has_error() else None
            replies.append(reply)
        return replies

    def _well_shaped(self, reply: Message) -> bool:
        try:
            masked = reply.content.config_records[RECORD_KEY_CONFIGS][Key.MASKED_PARAMETERS]
            if not isinstance(masked, list):
                return False
            arrays = [bytes_to_ndarray(b) for b in masked if isinstance(b, bytes)]
            return len(arrays) == len(masked) and [tuple(a.shape) for a in arrays] == self.shapes
        except (KeyError, TypeError, ValueError):
            return False


class SealedSums:
    """The sealed cohorts of one federation, each revealed once (their :class:`~fedsample.federation.secure_sum.SealedCohort` asks here)."""

    def __init__(self) -> None:
        self.pending: dict[int, tuple[SummedCohort | None, np.ndarray, str | None]] = {}  # (sum, positions, the sealed
        # statistic's name: None where none)
        self.calls = 0

    def seal(self, cohort: SummedCohort | None, positions: np.ndarray, counted: str | None) -> int:
        self.pending.clear()  # a cohort not summed by the next train call is never revealed
        self.calls += 1
        self.pending[self.calls] = (cohort, positions, counted)
        return self.calls

    def secure_sum(self, token: int, positions: np.ndarray, weights: np.ndarray) -> tuple[Params | None, float, int, dict[str, float]]:
        """(w * sum of the updates, summed loss, how many stepped, the sealed statistic's sum by its name, noised where
        the plan asks: the summed drawn count or sizes; none where not sealed): the weights
        must be one common weight over exactly the clients in the SecAgg+ sum."""
        cohort, summed, counted = self.pending.pop(token, (None, None, None))
        if summed is None:
            raise RuntimeError("secure sum: this cohort's sum was already revealed (one sum per round)")
        positions, weights = np.asarray(positions, dtype=np.int64), np.asarray(weights, dtype=np.float64)
        if cohort is None or len(positions) == 0:
            return None, 0.0, 0, {}
        if sorted(positions.tolist()) != sorted(summed.tolist()):
            raise ValueError("SecAgg+ sums every client whose masked vector arrived; the aggregator asked for the sum over "
                             f"positions {sorted(positions.tolist())}, not {sorted(summed.tolist())}")
        if not np.allclose(weights, weights[0], rtol=1e-12, atol=0.0):
            raise ValueError("SecAgg+ on Flower sums the clients' updates as they are, so the aggregator's weights must be the "
                             "same for every client (FedSampling's sum, a uniform mean); these differ: "
                             f"{np.unique(weights).tolist()[:4]}")
        total = {k: v * float(weights[0]) for k, v in cohort.update.items()}
        return total, cohort.loss, cohort.stepped, {} if counted is None else {counted: cohort.drawn}


def sealed_train(
    federation: "FlowerFederation", settings: SecAggPlus, ids: list[int], payloads: list[ClientRequest], round: int,
) -> FusedReplies:
    """One ``train`` call through SecAgg+: every reachable client gets its fedsample request inside the
    protocol; the answer is sealed (one sum, :func:`~fedsample.federation.secure_sum.sealed_replies`), and every client left out of the sum is
    :class:`Failed` with the stage at which it dropped out (or why it was not asked), in the round's failures and
    record (``federation.secure_rounds``). FedSampling's noise on the drawn count (``count_noise``) is added on
    the clients, in shares sealed into the sum (:func:`count_share_of`). A count-only
    request (:class:`~fedsample.messages.SizeSumRequest`), each client's vector its tally alone (no parameters), the
    summed count its size plus its noise share."""
    statistic = sealed_statistic(payloads[0]) if payloads else None  # the tally's count entries: the one the call declares
    reachable = federation._reachable(ids, round)
    procedure = procedure_of(payloads[0]).name if payloads else ""  # the phase a failed client's record names
    failed = {i: Failed(k, procedure, str(reachable[k])) for i, k in enumerate(ids) if reachable[k] is not None}
    asked = {federation.nodes[k]: i for i, k in enumerate(ids) if reachable[k] is None}
    params = payloads[0].params if payloads and isinstance(payloads[0], TrainPayload) else {}
    record: Record = {"protocol": "SecAgg+", **dataclasses.asdict(settings)}
    cohort = None
    missed: dict[int, str] = {}  # node -> the first stage it missed, and why
    summed_nodes: list[int] = []
    if len(asked) > settings.max_clients:
        why = f"SecAgg+ sums at most {settings.max_clients} clients at quantization_range {settings.quantization_range}"
    elif len(asked) < 2:
        why = "SecAgg+ needs at least two clients that can answer"
    else:
        cohort, why, missed, summed_nodes = _run_protocol(federation, settings, ids, payloads, asked, params, round, record)
    included = set(summed_nodes)
    for node, i in asked.items():
        if node not in included:
            failed[i] = Failed(ids[i], procedure, missed.get(node) or why)
    record["dropped"] = {ids[i]: failed[i].reason for node, i in asked.items() if node not in included}
    record["recovered"] = {ids[asked[n]]: reason for n, reason in missed.items() if n in included}  # after their vector
    federation.secure_rounds[round] = record
    federation.failures[round].extend(failed[i] for i in sorted(failed))
    report_on_console(round, record, [failed[i] for i in sorted(failed)])
    positions = np.array([i for i in range(len(ids)) if i not in failed], dtype=np.int64)
    counted = None if statistic is None else statistic.name
    if federation.sealed_sums is None:
        federation.sealed_sums = SealedSums()
    token = federation.sealed_sums.seal(cohort, positions, counted)
    return sealed_replies(federation.sealed_sums, token, len(ids), dict(sorted(failed.items())))


def _run_protocol(
    federation: "FlowerFederation", settings: SecAggPlus, ids: list[int], payloads: list[ClientRequest], asked: dict[int, int],
    params: Params, round: int, record: Record,
) -> tuple[SummedCohort | None, str, dict[int, str], list[int]]:
    """Run Flower's SecAgg+ workflow over the ``asked`` nodes; (the summed cohort or None, why none, the first stage
    each node missed and why, the nodes summed)."""
    requests = {}
    for node, i in asked.items():
        request = encode_request(ids[i], federation.seed, round, payloads[i])
        request.config_records[SEALED] = ConfigRecord({"clipping_range": float(settings.clipping_range),
                                                       "count_range": float(settings.count_range), "asked": len(ids)})
        requests[node] = request
    shapes = [(1,)] + [tuple(v.shape) for v in params.values()] + [(len(TALLY),)]
    grid = _StageGrid(federation.grid, shapes)
    strategy = _Cohort(list(asked), grid)
    context = LegacyContext(Context(0, 0, {}, RecordDict(), {}), strategy=strategy)
    context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: round + 1})
    context.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
    workflow = _Workflow(settings, federation.timeout, requests)
    try:
        workflow(grid, context)
    except Exception as error:  # a malformed reply the workflow trips over: the round has no sum, the run goes on
        return None, f"secure aggregation failed: {type(error).__name__}: {error}", dropouts(grid.outcome), []
    record["threshold"] = workflow.threshold
    missed = dropouts(grid.outcome)
    if strategy.included is None or strategy.mean is None:
        stage = list(grid.outcome)[-1] if grid.outcome else "setup"
        return None, (f"secure aggregation stopped after the {stage} stage: too few clients answered for SecAgg+ to "
                      f"remove the masks (reconstruction threshold {workflow.threshold})"), missed, []
    summed = len(strategy.included)
    total = [a * summed for a in strategy.mean]  # the workflow divides the sum by the summed weight, 1 per client
    noised = count_noise_of(payloads) > 0
    cohort = unpack_sum(total, params, settings.clipping_range, summed, noised, settings.count_range)
    record.update(summed=summed, clipped=cohort.clipped, tolerance=settings.tolerance(summed))
    if noised:
        record["count_tolerance"] = settings.count_tolerance(summed)
    return cohort, "", missed, strategy.included


def report_on_console(round: int, record: Record, failed: list[Failed]) -> None:
    """Say in the ServerApp's log what the round's record (history.json) holds and a user must know: the clients
    whose vector SecAgg+ clipped (the sum, hence the update, is then biased) and each client left out, and why."""
    if record.get("clipped"):
        flower_log(WARNING, "fedsample: round %d: SecAgg+ clipped the vectors of %d of %d summed clients to +-%g: "
                   "the update is biased; raise secagg-clipping-range", round + 1, record["clipped"], record["summed"],
                   record["clipping_range"])
    say_failures(round, failed)


def count_noise_of(payloads: list[ClientRequest]) -> float:
    """sigma of the noise on the summed count, the plan's drawn count's or the summed sizes' (0: no count asked, or
    the exact count)."""
    statistic = sealed_statistic(payloads[0]) if payloads else None
    return 0.0 if statistic is None else float(statistic.noise)


def dropouts(outcome: dict[str, dict[int, str | None]]) -> dict[int, str]:
    """Each node that did not answer a stage: the first stage it missed, and why."""
    dropped: dict[int, str] = {}
    for stage, nodes in outcome.items():
        for node, why in nodes.items():
            if why is not None and node not in dropped:
                dropped[node] = f"dropped out of SecAgg+ at the {stage} stage: {why}"
    return dropped
