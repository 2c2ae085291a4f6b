"""Counter-based client streams: the same draws one client at a time and vectorized; uniform and independent."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedsample import privacy
from fedsample.messages import ClientContext
import fedsample.rng as frng
from fedsample.rng import ClientRandom, CohortRandom, _mix_int, client_rng, client_stream, client_streams, generator, mix64, mix64_, stream_uniforms
from fedsample.sampling.data import BernoulliSamples


def test_python_and_numpy_mixers_agree():
    z = np.random.default_rng(0).integers(0, 2**63, 200, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    np.testing.assert_array_equal(mix64(z), np.array([_mix_int(int(v)) for v in z], dtype=np.uint64))


def test_mixing_in_place_gives_the_same_words():
    """mix64_ mixes the caller's array itself (one scratch array for the shifts) into mix64's words; mix64 leaves its
    input alone, and a scalar stays a scalar."""
    z = np.random.default_rng(1).integers(0, 2**63, 300, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    kept = z.copy()
    expected = mix64(z)
    np.testing.assert_array_equal(z, kept)
    assert mix64_(z) is z
    np.testing.assert_array_equal(z, expected)
    assert isinstance(mix64(5), np.uint64) and int(mix64(5)) == _mix_int(5)


def test_a_shared_first_position_reads_each_clients_first_draw():
    streams = CohortRandom(3, 1, np.arange(50), "x").streams
    np.testing.assert_array_equal(stream_uniforms(streams, np.uint64(0)), stream_uniforms(streams, np.zeros(50, dtype=np.uint64)))
    np.testing.assert_array_equal(stream_uniforms(streams, np.uint64(0)), [ClientRandom(3, 1, k, "x").uniforms(1)[0] for k in range(50)])


def test_small_and_large_draws_read_the_same_stream():
    a, b = ClientRandom(1, 2, 3, "train"), ClientRandom(1, 2, 3, "train")
    small = np.concatenate([a.uniforms(5), a.uniforms(4)])  # plain-int path
    np.testing.assert_array_equal(small, b.uniforms(40)[:9])  # numpy path


@pytest.mark.parametrize("ids", [
    np.arange(3000),  # the whole population: read from the table
    np.random.default_rng(5).permutation(50_000)[:2500],  # scattered ids in any order: the table grows to 2^16
    np.array([3, 1, 4, 1, 5]),  # a few: computed
    np.concatenate([np.arange(2000), [-1]]),  # a negative id (the server's): computed
    np.concatenate([np.arange(2000), [1 << 40]]),  # an id past the table's 2^22: computed
])
def test_client_streams_from_the_premixed_table_equal_each_clients_stream(monkeypatch, ids):
    """The cell-independent half of the stream seed, read from the table, gives each client's own stream seed."""
    monkeypatch.setattr(frng, "_PREMIXED", frng._Table(lambda m: frng._premix(np.arange(m, dtype=np.int64))))  # afresh, then grown
    for key in (frng.cell_key(0, 0, "train"), frng.cell_key(7, 3, "sizes")):
        np.testing.assert_array_equal(client_streams(key, ids), np.array([client_stream(key, int(k)) for k in ids], dtype=np.uint64))
    table = frng._PREMIXED._values
    if len(ids) > frng._PREMIX_MIN and ids.min() >= 0 and ids.max() < frng._TABLE_MAX:
        assert len(table) == 1 << int(ids.max()).bit_length() and not table.flags.writeable


def test_multiples_of_gamma_from_the_table(monkeypatch):
    """j * GAMMA mod 2^64 read from one table grown to the next power of two; past the cap computed, not kept."""
    multiples = frng._Table(frng._multiples_of_gamma)
    monkeypatch.setattr(frng, "_TABLE_MAX", 1 << 10)
    exact = lambda n: np.array([(j * frng._GAMMA) & frng._MASK for j in range(n)], dtype=np.uint64)  # noqa: E731
    for n in (0, 1, 5, 300, 1024):
        np.testing.assert_array_equal(multiples.prefix(n), exact(n))
    assert len(multiples._values) == 1024
    np.testing.assert_array_equal(multiples.prefix(1500), exact(1500))  # past the cap
    assert len(multiples._values) == 1024


def test_client_and_cohort_streams_identical():
    ids = np.array([0, 7, 123456, 999_999])
    cohort = CohortRandom(11, 4, ids, "train")
    cols = cohort.columns(6, start=2)
    counts = np.array([3, 0, 5, 1])
    ragged = cohort.ragged(counts, start=np.array([1, 0, 2, 4]))
    pieces = np.split(ragged, np.cumsum(counts)[:-1])
    for i, k in enumerate(ids):
        own = ClientRandom(11, 4, int(k), "train")
        stream = own.uniforms(10)
        np.testing.assert_array_equal(cols[i], stream[2:8])
        np.testing.assert_array_equal(pieces[i], stream[[1, 0, 2, 4][i] : [1, 0, 2, 4][i] + counts[i]])


def test_ragged_from_the_first_draw_and_its_word_comparison_match_the_streams():
    """ragged(counts) (start 0: per-client bases plus one arange) is each client's own stream, and ragged_below
    (words compared against words_below, no floats) keeps exactly the uniforms below the threshold, at the edges
    too: a threshold equal to a drawn uniform (not below itself), the next float above it, 0, NaN, the largest
    uniform 1 - 2^-53, and 1 or more."""
    ids = np.array([0, 7, 123456, 999_999, 5, 6])
    counts = np.array([3, 0, 5, 1, 40, 2])
    cohort = CohortRandom(11, 4, ids, "train")
    flat = cohort.ragged(counts)
    pieces = np.split(flat, np.cumsum(counts)[:-1])
    for i, k in enumerate(ids):
        np.testing.assert_array_equal(pieces[i], ClientRandom(11, 4, int(k), "train").uniforms(int(counts[i])))
    u = float(flat[17])
    thresholds = [u, np.nextafter(u, 1.0), np.nextafter(u, 0.0), 0.0, -1.0, float("nan"), 5e-324, 0.4, 1 - 2**-53, 1 - 2**-54, 1.0, 2.0]
    for t in thresholds:
        np.testing.assert_array_equal(cohort.ragged_below(counts, t), np.flatnonzero(flat < t), err_msg=f"threshold {t!r}")
    assert 17 not in cohort.ragged_below(counts, u) and 17 in cohort.ragged_below(counts, np.nextafter(u, 1.0))


def test_cells_are_deterministic_and_distinct():
    draw = lambda *cell: ClientRandom(*cell).uniforms(4)
    np.testing.assert_array_equal(draw(0, 1, 2, "a"), draw(0, 1, 2, "a"))
    base = draw(0, 1, 2, "a")
    for other in [(1, 1, 2, "a"), (0, 2, 2, "a"), (0, 1, 3, "a"), (0, 1, 2, "b"), (0, 1, -1, "a")]:
        assert not np.array_equal(base, draw(*other))


def test_uniforms_distribution_within_and_across_clients():
    """10^5 uniforms: mean and variance within 4 standard errors of 1/2 and 1/12; KS test not rejected at 10^-3;
    lag-1 correlation (within a stream) and neighbour-client correlation within 4 standard errors of 0."""
    n = 100_000
    within = ClientRandom(3, 0, 5, "x").uniforms(n)
    across = CohortRandom(3, 0, np.arange(n), "x").columns(2)
    for u in (within, across[:, 0], across[:, 1]):
        assert abs(u.mean() - 0.5) < 4 * np.sqrt(1 / 12 / n)
        assert abs(u.var() - 1 / 12) < 4 * np.sqrt(1 / 180 / n)  # Var(U^2-ish): Var((U-1/2)^2) = 1/180
        assert stats.kstest(u, "uniform").pvalue > 1e-3
        assert u.min() >= 0 and u.max() < 1
    se = 1 / np.sqrt(n)
    assert abs(np.corrcoef(within[:-1], within[1:])[0, 1]) < 4 * se
    assert abs(np.corrcoef(across[:-1, 0], across[1:, 0])[0, 1]) < 4 * se
    assert abs(np.corrcoef(across[:, 0], across[:, 1])[0, 1]) < 4 * se


def test_integers_and_permutations_are_uniform():
    rng = ClientRandom(0, 0, 0, "y")
    counts = np.bincount(rng.integers(1, 8, size=70_000) - 1, minlength=7)
    assert stats.chisquare(counts).pvalue > 1e-3
    perms = np.array([ClientRandom(0, 0, k, "p").permutation(3) for k in range(6000)])
    assert all(sorted(p) == [0, 1, 2] for p in perms[:50])
    codes = perms[:, 0] * 9 + perms[:, 1] * 3 + perms[:, 2]
    assert stats.chisquare(np.unique(codes, return_counts=True)[1]).pvalue > 1e-3
    assert len(np.unique(codes)) == 6


def test_other_methods_go_to_the_cells_numpy_generator():
    rng = client_rng(4, 2, 9, "train")
    expected = generator(4, 2, 9, "train").choice(10, size=3, replace=False)
    np.testing.assert_array_equal(rng.choice(10, size=3, replace=False), expected)
    assert np.isfinite(rng.normal())


def test_randomized_response_one_client_equals_cohort_and_accepts_a_generator():
    sizes = np.array([1, 5, 40, 250, 3])
    ids = np.array([10, 11, 12, 13, 500])
    cohort = privacy.randomized_response(sizes, 1.0, 50, CohortRandom(2, 3, ids, "report_size"))
    alone = [int(privacy.randomized_response(n, 1.0, 50, ClientRandom(2, 3, int(k), "report_size"))) for n, k in zip(sizes, ids)]
    np.testing.assert_array_equal(cohort, alone)
    from_generator = privacy.randomized_response(sizes, 1.0, 50, np.random.default_rng(0))
    assert from_generator.shape == sizes.shape and np.all((from_generator >= 1) & (from_generator <= 49))


def test_randomized_response_keeps_truth_with_probability_alpha():
    """Over 10^5 clients of size 7 (M=20, eps=2): P(report = 7) = alpha + (1-alpha)/19 within 4 standard errors."""
    n, M, eps = 100_000, 20, 2.0
    reports = privacy.randomized_response(np.full(n, 7), eps, M, CohortRandom(0, 0, np.arange(n), "report_size"))
    alpha = privacy.alpha_for(eps, M)
    p = alpha + (1 - alpha) / (M - 1)
    assert abs(np.mean(reports == 7) - p) < 4 * np.sqrt(p * (1 - p) / n)
    assert reports.min() == 1 and reports.max() == M - 1


def test_bernoulli_cohort_draw_equals_each_client_drawing_alone():
    import torch

    sizes = np.array([0, 1, 4, 9, 2])
    ids = np.array([3, 8, 20, 21, 70])
    plan = BernoulliSamples(0.4)
    member, position = plan.draw_cohort(sizes, CohortRandom(1, 5, ids, "train"))
    for c, (k, n) in enumerate(zip(ids, sizes)):
        ctx = ClientContext(int(k), torch.zeros(n, 1), torch.zeros(n, dtype=torch.long), None, "classification", 2)
        alone = plan.draw(ctx, ClientRandom(1, 5, int(k), "train")).indices
        np.testing.assert_array_equal(position[member == c], alone)


@pytest.mark.parametrize("p", [0.0, 1e-4, 0.034, 0.4, 1.0])
def test_draws_over_kept_blocks_equal_the_plain_pass(p):
    """The cohort draw over a kept layout (:class:`fedsample.rng.Blocks`, computed once for sizes that do not
    change) keeps the same (member, position) as the pass from the sizes, bit for bit, in every round (30,000
    log-normal clients, empty ones among them, ratios from none kept to all); the layout itself is every
    sample's (member, position) (AllSamples' draw), and it reads the sizes it was built from, not the caller's array."""
    from fedsample.rng import Blocks
    from fedsample.sampling.data import AllSamples

    sizes = np.floor(np.random.default_rng(4).lognormal(0.0, 2.0, 30_000)).astype(np.int64)
    ids = np.arange(2, 2 + 2 * len(sizes), 2, dtype=np.int64)
    blocks = Blocks(sizes)
    plan = BernoulliSamples(p)
    for round in (0, 1, 2):
        plain = plan.draw_cohort(sizes, CohortRandom(9, round, ids, "train"))
        kept = plan.draw_blocks(blocks, CohortRandom(9, round, ids, "train"))
        np.testing.assert_array_equal(kept[0], plain[0])
        np.testing.assert_array_equal(kept[1], plain[1])
    assert (len(plain[0]) == 0) == (p == 0.0) and (len(plain[0]) == sizes.sum()) == (p == 1.0)
    every = AllSamples().draw_cohort(sizes)
    np.testing.assert_array_equal(every[0], np.repeat(np.arange(len(sizes)), sizes))
    np.testing.assert_array_equal(every[1], np.concatenate([np.arange(n) for n in sizes]))
    sizes[0] += 1  # the caller's array changes; the blocks do not
    assert not blocks.same_counts(sizes) and blocks.same_counts(sizes - np.eye(1, len(sizes), dtype=np.int64)[0])


@pytest.mark.parametrize("p", [0.0, 1e-4, 0.034, 0.4, 1.0])
def test_bernoulli_cohort_draw_on_a_device_equals_the_numpy_pass(p):
    """The device-resident draw (tensors on the cohort's device; here torch's CPU device) keeps the same
    (member, position) as the numpy pass, bit for bit: 30,000 clients of log-normal sizes with empty ones among
    them, for ratios from none kept to every sample kept; and a cohort with no samples at all."""
    import torch

    sizes = np.floor(np.random.default_rng(3).lognormal(0.0, 2.0, 30_000)).astype(np.int64)  # about 1 in 3 empty
    ids = np.arange(5, 5 + 3 * len(sizes), 3, dtype=np.int64)
    plan = BernoulliSamples(p)
    host = plan.draw_cohort(sizes, CohortRandom(7, 2, ids, "train"))
    member, position = plan.draw_cohort_on_device(sizes, CohortRandom(7, 2, ids, "train", device="cpu"))
    assert member.dtype == position.dtype == torch.int64 and member.device.type == "cpu"
    np.testing.assert_array_equal(member.numpy(), host[0])
    np.testing.assert_array_equal(position.numpy(), host[1])
    held = plan.draw_cohort_on_device(torch.as_tensor(sizes), CohortRandom(7, 2, ids, "train", device="cpu"))  # sizes kept as a tensor
    assert all(torch.equal(a, b) for a, b in zip(held, (member, position)))
    assert (len(host[0]) == 0) == (p == 0.0) and (len(host[0]) == sizes.sum()) == (p == 1.0)
    empty = plan.draw_cohort_on_device(np.zeros(4, dtype=np.int64), CohortRandom(7, 2, ids[:4], "train", device="cpu"))
    assert [len(a) for a in empty] == [0, 0]


def test_device_positions_need_a_device():
    with pytest.raises(ValueError, match="built with a device"):
        CohortRandom(0, 0, np.arange(3), "train").ragged_below_on_device(np.ones(3, dtype=np.int64), 0.5)


def test_a_client_streams_gaussians_are_its_cells_generators():
    """ClientRandom.normal draws from the numpy Generator of the same (seed, round, client, purpose) cell, as every
    other Generator method it forwards, and leaves the counter-based stream where it was."""
    rng = ClientRandom(3, 1, 7, "noise")
    drawn = rng.normal(0.0, 2.0, size=(2, 3))
    assert np.array_equal(drawn, generator(3, 1, 7, "noise").normal(0.0, 2.0, (2, 3)))
    assert rng.position == 0  # the counter-based stream is not read
