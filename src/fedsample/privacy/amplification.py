"""Which releases a call makes, and which amplification each has earned: the conditions, checked by the library.

Every call a strategy makes through its federation (``report_size``, ``probe``, ``train``) becomes releases for
the :class:`~fedsample.privacy.ledger.Ledger` (:func:`releases`). A training release is accounted with
amplification only when its conditions hold; otherwise it falls back to no amplification and its ``reason``
says why (the round log's ``privacy_amplification``):

- **record-level data sampling** (``unit="record"``): the data plan keeps every record independently with one
  probability q (:class:`~fedsample.sampling.data.BernoulliSamples`: FedSampling's q_t = K/N~_t, the naive
  fixed ratio), i.e. Poisson sampling over the union of the data, composed round by round at each round's
  actual q_t; and the reply hides whether and how much the client drew (noised replies withhold their step
  count, loss and drawn count: :meth:`fedsample.privacy.noise.UpdateNoise.private_reply`). Fails for every record
  used (q = 1), fixed-size or data-dependent plans (ISFedAvg's gradient-norm probabilities), and replies that
  show the draw.
- **user-level data sampling** (``unit="user"``, k records per user at most): with per-example clipping
  (:class:`~fedsample.privacy.noise.PerExampleNoise`) the user moves the sum by j clipped gradients with
  probability Binomial(k, q)(j): ``MixtureOfGaussiansDpEvent``; with per-client update clipping
  (:class:`~fedsample.privacy.noise.UpdateNoise`) the user contributes a nonzero update with probability at
  most 1 - (1 - q)^k: ``PoissonSampledDpEvent`` at that rate (the mixture over the update's direction is
  dominated by the worst one, by joint convexity of the hockey-stick divergence).
- **client-level sampling**: only when the adversary does not see who took part (``threat="released"``: the
  server that picks the cohort knows it), and only for samplers that declare a data-independent design
  (``sampling_design(population)``, :mod:`fedsample.parts`; the class of a sampler is never looked at, so a
  user's own sampler is accounted for from its declaration): ``Poisson(q)`` (as
  :class:`~fedsample.sampling.clients.PoissonClients` with a fixed q; composed with the data rate) and
  ``FixedSize(m, N)`` (as :class:`~fedsample.sampling.clients.UniformClients` with a fixed m: sampling without
  replacement, replace-one relation, used where no data-level rate applies: dp-accounting has no nested
  sampling event). Fails for samplers that declare no such design (size-proportional, ``samples_per_round``,
  FedSTS/FedSTaS strata, ISFedAvg: their probabilities come from sizes or probes), ``WithReplacement``, and
  degenerate ones (every client chosen). A data plan declares its design the same way (``sampling_design()``:
  ``Census()`` for every record, ``Poisson(p)`` for Bernoulli sampling).

Sensitivities (noise multiplier z of the noise's standard deviation over the sensitivity):

- :class:`UpdateNoise` (clip C, multiplier sigma, each client's whole update): a user's data against none moves
  the clipped update by C: z = sigma; one record moves it by at most 2C (both clipped): z = sigma / 2. Each
  reply carries the full noise, so this holds for the server's view of every reply (a secure sum only adds
  noise; it is not counted).
- :class:`PerExampleNoise` (clip C per example, multiplier sigma on the cohort sum, shared among the m asked
  clients): one record moves G = (1/K) sum_s clip(g_s) by C/K and the sum carries noise of standard deviation
  sigma C / K * sqrt(a/m) when a of the m clients answered (a secure sum, or only the released model seen); a
  plain reply carries one share, sigma C / (K sqrt(m)). A user of at most k records moves it by k C / K.
- Under replace-one every sensitivity doubles.

The size reports are each client's randomized response (``RandomizedResponseDpEvent(1 - alpha, M - 1)``),
once per run when permanent; exact sizes, probes and noiseless updates are unprotected releases (probes also
raise :class:`PrivacyWarning`, once per kind). A sampler that chooses among trained clients (optimal client
sampling) sends every client's update norm (``train_held``: unprotected and warned about, or with noise the
noised update's release) and then the chosen updates (``send_held``: unprotected, or with noise the same release,
counted once).

Each summed statistic a data plan declares (:class:`~fedsample.messages.SummedStatistic`, one more coordinate of the
secure sum: FedSampling's drawn count S, the self-normalized update's divisor) is its own release where the updates
carry no noise (:func:`summed_releases`, named by the statistic's ``released`` and ``symbol``): exact, it is
unprotected; with Gaussian noise of standard deviation sigma_S (its ``noise``) added in shares by the clients (a of m
shares: sigma_S sqrt(a/m)) it is a Gaussian mechanism in which one record moves S by at most 1 (multiplier sigma_S
sqrt(a/m)), amplified by the data sampling like the update (Poisson at q for a record; for a user of at most k
records the mixture of Gaussians over its Binomial(k, q) drawn records). With :class:`PerExampleNoise` on the
update, S is a second coordinate of the same noised sum over the same sample: one record moves the update by C/K and
S by 1, so the pair is one Gaussian mechanism whose multiplier is 1/sqrt(1/z^2 + 1/z_S^2) (:func:`joint_multiplier`,
once per noised statistic).

FedSampling's summed sizes (``sum_sizes``, :class:`~fedsample.messages.SizeSumRequest`, once before the first draw:
the total N plus Gaussian noise of standard deviation sigma added in shares inside the secure sum) are one more
Gaussian release (:func:`size_sum_release`): one record moves N by 1 (multiplier sigma sqrt(a/m)), every record
counted, so no amplification; a user of at most k records moves it by k.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from typing import Protocol, Sequence, cast

import numpy as np

from fedsample.privacy.ledger import (
    ADD_REMOVE, REPLACE, Accounting, Call, Release, gaussian, mixture_of_gaussians, poisson_sampled, randomized_response,
    sampled_without_replacement,
)
from fedsample.messages import (
    HeldRequest, PerClient, ProbeRequest, SizeQuery, SizeSumRequest, SummedStatistic, TrainHeld, TrainPayload, payloads_for,
)
from fedsample.parts import (
    Aggregator, Census, ClientSampler, DataSampler, FixedSize, LocalSolver, Poisson, SplitNoise, UpdatePrivacy, WithReplacement,
    client_sampling_design, plan_sampling_design, privacy_capabilities, solver_capabilities, summed_of,
)
from fedsample.privacy.reports import noise_for
from fedsample.rounds import ReplyList, is_failed

__all__ = [
    "Accounted", "PrivacyWarning", "answered_count", "check_mechanism", "client_design", "hides_draw", "joint_multiplier",
    "noised_in_the_sum", "record_rate", "releases", "size_sum_release", "summed_noises", "summed_release", "summed_releases",
    "warn_unprotected",
]


class Accounted(Protocol):
    """What the accounting reads of a strategy (:class:`~fedsample.strategy.composition.Composition` has it): its
    client sampler, data sampler, local solver, aggregator, update noise and whether replies are summed securely."""

    @property
    def clients(self) -> ClientSampler: ...

    @property
    def data(self) -> DataSampler: ...

    @property
    def local(self) -> LocalSolver: ...

    @property
    def aggregate(self) -> Aggregator: ...

    @property
    def noise(self) -> UpdatePrivacy | None: ...

    @property
    def secure_sum(self) -> bool: ...


class PrivacyWarning(UserWarning):
    """A release leaves the clients without protection (recorded in the ledger as unprotected)."""


@dataclass(frozen=True)
class ClientDesign:
    """What the client sampler allows: ``kind`` ``"poisson"`` (rate), ``"without-replacement"`` (size m of
    population N), ``"all"`` (no client sampling) or ``"none"`` (a sampler whose amplification fails), with the reason."""

    kind: str
    reason: str
    rate: float = 1.0
    size: int = 0
    population: int = 0


# --- the conditions --------------------------------------------------------------------------------------


def record_rate(plans: Sequence[object]) -> tuple[float | None, str]:
    """The one probability with which every record is kept independently (Poisson sampling over the union of
    the data), or None and why not: read from each plan's declared design (:func:`fedsample.parts.plan_sampling_design`)."""
    designs = [plan_sampling_design(p) for p in plans]
    if all(isinstance(d, Census) for d in designs):
        return None, "every record is used (no data sampling)"
    other = next((p for p, d in zip(plans, designs) if not isinstance(d, Poisson)), None)
    if other is not None:
        return None, f"the data plan {type(other).__name__} is not Poisson sampling of records with one data-independent probability"
    rates = {d.q for d in designs if isinstance(d, Poisson)}
    if len(rates) > 1:
        return None, "clients keep records with different probabilities"
    (q,) = rates
    if q >= 1:
        return None, "degenerate data sampling: q = 1 keeps every record"
    return q, f"each record kept independently with probability q = {q:.4g} (Poisson sampling over the union of the data)"


def hides_draw(noise: object) -> tuple[bool, str]:
    """Whether a reply hides whether and how much the client drew (its step count, loss and drawn count)."""
    if privacy_capabilities(noise).hides_draw:
        return True, ""
    return False, "per-client replies show the server whether the client drew any record (steps, loss)"


def client_design(clients: ClientSampler, threat: str, population: int) -> ClientDesign:
    """The client sampler's amplification under ``threat``, from the design it declares
    (:func:`fedsample.parts.client_sampling_design`): data-independent exact inclusion probabilities and an
    adversary that does not see the cohort."""
    name = type(clients).__name__
    design = client_sampling_design(clients, population)
    if isinstance(design, Census):
        return ClientDesign("all", "every client takes part (no client sampling)")
    if threat == "server":
        return ClientDesign("none", f"no client-level amplification: the server picks the cohort ({name}) and sees who answers")
    if isinstance(design, Poisson):
        if design.q >= 1:
            return ClientDesign("none", "degenerate client sampler: q = 1 chooses every client")
        return ClientDesign("poisson", f"clients chosen independently with probability {design.q:.4g}", rate=float(design.q))
    if isinstance(design, FixedSize):
        if design.m >= design.N:
            return ClientDesign("none", f"degenerate client sampler: m = {design.m} of {design.N} chooses every client")
        return ClientDesign("without-replacement", f"{design.m} of {design.N} clients uniformly without replacement",
                            size=int(design.m), population=int(design.N))
    if isinstance(design, WithReplacement):
        return ClientDesign("none", f"{name} draws {design.m} times with replacement (no amplification is accounted for it)")
    return ClientDesign("none", design.reason)


def check_mechanism(strategy: Accounted, accounting: Accounting) -> None:
    """The combinations the accounting cannot describe, refused with one line naming the part."""
    noise = strategy.noise
    if noise is None:
        return
    aggregate = strategy.aggregate
    name = type(aggregate).__name__
    declares = aggregate.capabilities
    if declares.needs_step_counts:
        raise ValueError(f"noise: {name} needs each client's step count, which a noised reply withholds")
    declared = {statistic.name: statistic for statistic in strategy.data.capabilities.summed}
    for needed in declares.needs_summed:
        if not noised_in_the_sum(strategy, needed):
            wording = declared[needed].released if needed in declared else repr(needed)
            raise ValueError(f"noise: {name} needs the summed {wording}, which a noised reply withholds unless it goes, noised, "
                             "into the secure sum: PerExampleNoise with Gaussian noise on that sum (its noise > 0) and secure_sum=True")
    if noise.clipping == "example":
        if not solver_capabilities(strategy.local).per_example:
            raise ValueError("PerExampleNoise needs FedSampling's one-gradient solver OneGradient(K): G_c = (1/K) sum_s clip(g_s)")
        if not declares.equal_weights:  # DrawnNormalizedSum: the equal-weight sum, then divided by the noised count (post-processing)
            raise ValueError(f"PerExampleNoise calibrates its noise shares for an equal-weight sum; {aggregate!r} weights clients differently")
        if accounting.unit == "user" and accounting.k is None:
            raise ValueError("user-level accounting of PerExampleNoise needs k (at most k records per user): Accounting(unit='user', k=...)")


def noised_in_the_sum(strategy: Accounted, name: str) -> bool:
    """Whether a noised reply may carry the summed statistic ``name``: per-example noise on the update, Gaussian noise
    on that statistic's sum as the data sampler declares it (its ``noise`` > 0: FedSampling's ``count_noise``), and a
    secure sum (the statistic never leaves it alone)."""
    noise = strategy.noise
    return (noise is not None and noise.clipping == "example" and bool(strategy.secure_sum)
            and any(s.name == name and s.noise > 0 for s in strategy.data.capabilities.summed))


def summed_noises(plans: Sequence[object]) -> list[tuple[SummedStatistic, float]]:
    """Each summed statistic the call's plans declare (:func:`fedsample.parts.summed_of`: FedSampling's drawn count,
    summed in the secure sum), once by name, with sigma, the largest standard deviation of the Gaussian noise a plan
    declares on its sum (0: the exact sum)."""
    found: dict[str, tuple[SummedStatistic, float]] = {}
    for plan in plans:
        for statistic in summed_of(plan):
            first, sigma = found.get(statistic.name, (statistic, 0.0))
            found[statistic.name] = (first, max(sigma, float(statistic.noise)))
    return list(found.values())


def joint_multiplier(z_update: float, z_count: float) -> float:
    """The noise multiplier of two Gaussian coordinates released together on the same sample, each with its own
    multiplier (noise over its one-record sensitivity): the pair's privacy loss is a Gaussian mechanism's with
    1/z^2 = 1/z_update^2 + 1/z_count^2 (whiten each coordinate; the sensitivities add in squares)."""
    return 1.0 / math.sqrt(1.0 / z_update**2 + 1.0 / z_count**2)


# --- the releases of one call ---------------------------------------------------------------------------------


def releases(
    ids: np.ndarray, request: object, round: int, ordinal: int, strategy: Accounted, accounting: Accounting,
    population: int, replies: Sequence[object] | None = None,
) -> list[Release]:
    """The releases of one federation call (``ordinal``: its position in the round), by the request's type.
    ``replies``: None before the call (every asked client assumed to answer, for the budget check), the replies
    after it."""
    sent = payloads_for(request, len(ids))
    procedure = sent.procedure.name
    call = (int(round), procedure, int(ordinal))
    first = sent.at(0)
    if isinstance(first, SizeQuery):
        return [size_report_release(first, round, call)]
    if isinstance(first, ProbeRequest):
        return [probe_release(first, round, call)]
    if isinstance(first, SizeSumRequest):  # the count-only sum_sizes call
        answered = len(ids) if replies is None else answered_count(replies)
        return [size_sum_release(first, len(ids), answered, accounting, round, call)]
    if isinstance(first, TrainPayload):
        plans = [p.plan for p in sent if isinstance(p, TrainPayload)] if isinstance(sent, PerClient) else [first.plan]  # one type: all
        asked = len(ids)
        answered = asked if replies is None else answered_count(replies)
        release = train_release(first.noise, plans, asked, answered, strategy, accounting, population, round, call)
        if first.statistics:  # the reply statistics a sampler reads ride along, in the clear
            release = replace(release, what=release.what + "".join(f", {s.released}" for s in first.statistics))
        if isinstance(first, TrainHeld):
            return [held_release(release, round)]
        if first.noise is None:  # each summed statistic alone; with noise, a coordinate of the update's release
            return [release, *summed_releases(plans, asked, answered, strategy, accounting, round, call)]
        return [release]
    if isinstance(first, HeldRequest):
        return [sent_held_release(strategy.noise, bool(strategy.secure_sum), round, call)]
    return [Release(round, f"{procedure} replies", None, None, None, reason="a procedure the ledger does not know", call=call)]


def answered_count(replies: Sequence[object]) -> int:
    """How many replies are not :class:`~fedsample.rounds.Failed`: from a reply list's ``failed`` map (no pass over
    a cohort of 10^5 sealed replies), else reply by reply."""
    if isinstance(replies, ReplyList):
        return len(replies) - len(replies.failed)
    return sum(1 for r in replies if not is_failed(r))


def size_report_release(query: SizeQuery, round: int, call: Call) -> Release:
    """Exact sizes (unprotected) or each client's randomized response, once per run when permanent."""
    if query.mode == "exact":
        return Release(round, "exact sizes", None, None, None, reason="exact sizes carry no noise", call=call)
    epsilon, M = query.randomization
    noise = noise_for(epsilon, M)
    once = f"size reports (epsilon={epsilon:g}, M={M}, permanent)" if query.permanent else ""
    if noise == 0.0:  # e^-epsilon underflows: every client reports its true size
        return Release(round, "size reports", None, None, None, once=once, call=call,
                       reason=f"randomized response with epsilon={epsilon:g} adds no noise (the true size is always reported)")
    event = randomized_response(noise, M - 1)
    return Release(round, "size reports", event, event, None, reason="randomized response (Qi et al. 2023, Eq. 1)", once=once, call=call)


def size_sum_release(request: SizeSumRequest, asked: int, answered: int, accounting: Accounting, round: int, call: Call) -> Release:
    """The clients' sizes summed inside the secure sum (``sum_sizes``): the total N plus the noise shares of the a of m
    asked clients that answered, N(0, sigma^2 a / m). One record moves N by at most 1, so at record level a Gaussian
    mechanism of multiplier z = sigma sqrt(a/m), with no amplification (every record is counted); a user of at most k
    records moves N by at most k (multiplier z / k); a user without k is unbounded (its whole size moves N).
    Exact (sigma = 0): unprotected. Asked once per run: the ``once`` key keeps a repeated call from counting twice."""
    what, once = "total size N (the clients' sizes, summed)", "total size N (summed once per run)"
    sigma = float(request.count_noise)
    if sigma <= 0:
        return Release(round, what, None, None, None, reason="the exact summed sizes carry no noise", once=once, call=call)
    z = sigma * math.sqrt(min(answered, asked) / max(asked, 1))
    noise = f"Gaussian noise sigma = {sigma:g} on N, the shares of {min(answered, asked)} of {asked} asked clients: multiplier {z:.4g}"
    user, k = accounting.unit == "user", accounting.k
    if user and k is None:
        return Release(round, what, None, None, None, once=once, call=call,
                       reason=f"{noise}; a user's records move N by as many as it holds: user-level accounting needs k")
    event = gaussian(z / k) if user and k is not None else gaussian(z)
    moves = f"a user of at most k={k} records moves it by k" if user else "one record moves it by 1"
    return Release(round, what, event, event, ADD_REMOVE, "no-amplification",
                   f"{noise}, {moves}; not amplified: every record is counted", once=once, call=call)


def probe_release(request: ProbeRequest, round: int, call: Call) -> Release:
    """A probe's statistics, sent in the clear: an unprotected release (:func:`warn_unprotected` warns)."""
    if request.statistics == "labels":
        return Release(round, "probe: label histogram", None, None, None, reason="probe statistics carry no noise", call=call)
    fields = ["loss"] if request.statistics == "loss" else ["loss", "gradient norm"]
    if request.minibatch is not None:
        fields[0] = f"loss on a minibatch of {request.minibatch}"
    if request.gradient:
        fields.append("full gradient")
    if request.compression is not None:
        fields.append(f"compressed gradient ({request.compression}, d'={request.dim})")
    if request.per_sample:
        fields.append("gradient-noise variance")
        if request.data_weights is not None:
            fields.append("weighted second moment (ISFedAvg Eq. 23)")
    what = "probe: " + ", ".join(fields)
    return Release(round, what, None, None, None, reason="probe statistics carry no noise", call=call)


def held_once(round: int) -> str:
    """The key that makes a round's held updates one release: the norms every client sends (``train_held``) and the
    updates the chosen ones send afterwards (``send_held``) are the same noised updates."""
    return f"round {round}: each client's noised update, held"


def held_release(trained: Release, round: int) -> Release:
    """``train_held``: every client trains and sends its update's norm. Without noise the norms are an unprotected
    release (:func:`warn_unprotected` warns); with noise the norm is a function of the noised update, so the release
    is the noised update's, counted once for the round (the chosen clients' updates sent afterwards are the same
    release: :func:`sent_held_release`)."""
    if not trained.protected:
        return replace(trained, what="update norms (every client that trained, before the server chooses)",
                       reason="update norms carry no noise")
    return replace(trained, what="every client's noised update (its norm now; the update itself if chosen)", once=held_once(round))


def sent_held_release(noise: UpdatePrivacy | None, secure: bool, round: int, call: Call) -> Release:
    """``send_held``: the chosen clients' kept updates, or their secure sum (no noise: unprotected; noised: the
    round's :func:`held_release`, not counted again)."""
    if noise is None:
        what = ("update sum of the clients chosen by their norms, summed loss and step count" if secure
                else "per-client updates chosen by their norms, losses and step counts")
        return Release(round, what, None, None, None, reason="no noise on the update", call=call)
    return Release(round, "the chosen clients' noised updates (the round's held release)", None, None, None,
                   reason="post-processing of the held release", once=held_once(round), call=call)


def warn_unprotected(recorded: Sequence[Release]) -> None:
    """A :class:`PrivacyWarning` for each newly recorded probe or update-norm release (sampler reports without noise)."""
    for r in recorded:
        if not r.protected and r.what.startswith("probe: "):
            warnings.warn(f"privacy: every probed client sends its {r.what[len('probe: '):]} without noise "
                          "(recorded in the ledger as an unprotected release)", PrivacyWarning, stacklevel=3)
        elif not r.protected and r.what.startswith("update norms"):
            warnings.warn("privacy: every client that trained sends its update's norm without noise (recorded in the "
                          "ledger as an unprotected release)", PrivacyWarning, stacklevel=3)


def train_release(
    noise: UpdatePrivacy | None, plans: Sequence[object], asked: int, answered: int, strategy: Accounted, accounting: Accounting,
    population: int,
    round: int, call: Call,
) -> Release:
    """The training replies (or their secure sum) of one round, with the amplification the conditions allow."""
    secure = bool(strategy.secure_sum)
    if noise is None:
        what = "update sum, summed loss and step count" if secure else "per-client updates, losses and step counts"
        return Release(round, what, None, None, None, reason="no noise on the update", call=call)
    what = "update sum" if secure else "per-client updates"
    example = noise.clipping == "example"
    sigma = float(noise.noise_multiplier)
    if example:  # the sum's noise: a of the m shares, or one share per visible reply
        m = max(int(cast(SplitNoise, noise).shares), 1) if privacy_capabilities(noise).splits_among_cohort else 1
        z = sigma * math.sqrt(min(answered, m) / m) if (secure or accounting.threat == "released") else sigma / math.sqrt(m)
        noised = [(statistic, s_sigma) for statistic, s_sigma in summed_noises(plans) if s_sigma > 0]
        if noised and z > 0:  # each noised summed statistic (the drawn count S) is one more coordinate of the same sum
            for _, s_sigma in noised:
                z = joint_multiplier(z, s_sigma * math.sqrt(min(answered, asked) / asked))
            what = " and ".join([what, *(statistic.released for statistic, _ in noised)])
    else:
        z = sigma
    if z <= 0:
        return Release(round, what, None, None, None, reason="noise multiplier 0", call=call)
    user, k = accounting.unit == "user", accounting.k
    group = 1  # how many clipped contributions one unit can make
    if user and example:
        if k is None:
            raise ValueError("user-level accounting of PerExampleNoise needs k (at most k records per user)")
        group = k
    per_unit = z / group if example else (z if user else z / 2)  # z over the add/remove sensitivity of one unit
    unamplified = gaussian(per_unit)
    q, why_q = record_rate(plans)
    hidden, why_visible = hides_draw(noise)
    design = client_design(strategy.clients, accounting.threat, population)
    notes = []
    data_ok = hidden and q is not None and (not user or k is not None)
    if not data_ok:
        notes.append(why_visible if not hidden else why_q if q is None else "user-level data amplification needs k (records per user)")
    client_rate = design.rate if design.kind == "poisson" else 1.0
    if design.kind == "none":
        notes.append(design.reason)
    if data_ok and user and example:  # the user's drawn count is Binomial(k, q): a mixture of Gaussians
        assert q is not None and k is not None  # data_ok
        counts = np.arange(k + 1)
        probs = client_rate * binomial_pmf(k, q)
        probs[0] += 1.0 - client_rate
        event = mixture_of_gaussians(z, counts.tolist(), probs.tolist())
        reason = f"amplified: a user's drawn records are Binomial(k={k}, q={q:.4g})" + _client_note(design) + _also(notes)
        return Release(round, what, event, unamplified, ADD_REMOVE, "binomial-count", reason, call=call)
    if data_ok:
        assert q is not None  # data_ok
        rate = (1.0 - (1.0 - q) ** k) if user and k is not None else q
        how = (f"a user of at most k={k} records takes part with probability 1-(1-q)^k = {rate:.4g}, q = {q:.4g}"
               if user else why_q)
        event = poisson_sampled(rate * client_rate, gaussian(per_unit))
        reason = "amplified: " + how + _client_note(design) + _also(notes)
        return Release(round, what, event, unamplified, ADD_REMOVE, "poisson", reason, call=call)
    if design.kind == "poisson":
        event = poisson_sampled(design.rate, gaussian(per_unit))
        return Release(round, what, event, unamplified, ADD_REMOVE, "poisson", "amplified: " + design.reason + _also(notes), call=call)
    if design.kind == "without-replacement":
        replace_z = per_unit / 2  # replacing a unit moves the output twice as far
        event = sampled_without_replacement(design.population, design.size, gaussian(replace_z))
        return Release(round, what, event, gaussian(replace_z), REPLACE, "without-replacement",
                       "amplified: " + design.reason + " (replace-one)" + _also(notes), call=call)
    return Release(round, what, unamplified, unamplified, ADD_REMOVE, "no-amplification", "not amplified: " + "; ".join(notes), call=call)


def summed_releases(
    plans: Sequence[object], asked: int, answered: int, strategy: Accounted, accounting: Accounting, round: int, call: Call,
) -> list[Release]:
    """One :func:`summed_release` for each summed statistic the call's plans declare (:func:`summed_noises`)."""
    return [summed_release(statistic, sigma, plans, asked, answered, strategy, accounting, round, call)
            for statistic, sigma in summed_noises(plans)]


def summed_release(
    statistic: SummedStatistic, sigma: float, plans: Sequence[object], asked: int, answered: int, strategy: Accounted,
    accounting: Accounting, round: int, call: Call,
) -> Release:
    """The cohort's sum S of one summed statistic in one round (FedSampling's drawn count, the self-normalized
    update's divisor) where the updates carry no noise, named by the statistic (``"{released} {symbol}"``, its own
    key): unprotected when exact; with noise sigma_S, a Gaussian mechanism of multiplier sigma_S sqrt(a/m) per record
    (one record moves S by at most 1), amplified by the data sampling where every client is asked and each record is
    kept with one probability q (Poisson at q; a user of at most k records: the mixture over its Binomial(k, q) drawn
    records, moving S by j with noise sigma_S sqrt(a/m)); a user without k is unbounded."""
    S = statistic.symbol
    what, key = f"{statistic.released} {S}", (*call, statistic.released)
    if sigma <= 0:
        return Release(round, what, None, None, None, reason="the exact summed count carries no noise", call=key)
    z = sigma * math.sqrt(min(answered, asked) / max(asked, 1))
    noise = f"Gaussian noise sigma_{S} = {sigma:g} on {S}, the shares of {min(answered, asked)} of {asked} asked clients: multiplier {z:.4g}"
    user, k = accounting.unit == "user", accounting.k
    if user and k is None:
        return Release(round, what, None, None, None, call=key,
                       reason=f"a user's drawn records move {S} by as many as it holds (E[{S}] by the keep probability "
                              f"times its size, against sigma_{S} samples of noise): user-level accounting needs k")
    unamplified = gaussian(z / k) if user and k is not None else gaussian(z)
    q, why_q = record_rate(plans)
    everyone = isinstance(client_sampling_design(strategy.clients, asked), Census)
    if q is None or not everyone:
        why = why_q if q is None else f"the cohort is chosen by {type(strategy.clients).__name__}, not every client asked"
        return Release(round, what, unamplified, unamplified, ADD_REMOVE, "no-amplification",
                       f"{noise}, not amplified: {why}", call=key)
    if user and k is not None:
        counts = np.arange(k + 1)
        event = mixture_of_gaussians(z, counts.astype(np.float64).tolist(), binomial_pmf(k, q).tolist())
        reason = f"{noise}; a user's drawn records are Binomial(k={k}, q={q:.4g})"
        return Release(round, what, event, unamplified, ADD_REMOVE, "binomial-count", reason, call=key)
    reason = f"{noise}, one record moves it by 1; " + why_q
    return Release(round, what, poisson_sampled(q, gaussian(z)), unamplified, ADD_REMOVE, "poisson", reason, call=key)


def _client_note(design: ClientDesign) -> str:
    return f"; {design.reason}" if design.kind == "poisson" else ""


def _also(notes: list[str]) -> str:
    return f" (not used: {'; '.join(notes)})" if notes else ""


def binomial_pmf(k: int, q: float) -> np.ndarray:
    """P(count = c) for c = 0..k of a Binomial(k, q) count (a user's drawn records). scipy.stats is imported here, not
    with the module: it costs about 45 MB of memory that a run without data-sampling amplification does not pay."""
    from scipy.stats import binom

    return np.asarray(binom.pmf(np.arange(k + 1), k, q), dtype=np.float64)
