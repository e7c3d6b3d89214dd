"""`[privacy] max_windows` (C): each privacy unit keeps its records in at most C windows, chosen uniformly at
random, and every release kind but svt composes over min(C, W) windows. Exact oracles for the choice, a
chi-square test of its uniformity, the sensitivity of the whole capped release vector between neighbours, and a
DP audit in which a user reaches every window, with the uncapped bounding as the broken variant."""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import tempfile

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that
from scipy import stats

from dpstream.pipelines.config import jobfile
from dpstream.pipelines.config.specs import (
    ContributionBounds,
    HistogramSpec,
    PeakSpec,
    SpecError,
    SvtSpec,
    TopKSpec,
    WindowSpec,
)
from dpstream.pipelines.mechanisms.noise import SecureRandom
from dpstream.pipelines.planning import plan_job
from dpstream.pipelines.planning.windows import WindowCap
from dpstream.pipelines.transforms.aggregation import PerWindowSums
from dpstream.pipelines.transforms.bounding import BoundContributions, _CapInWindowOrder, capped_windows
from tests.falsification.harness import audit
from tests.pipelines.helpers import DAY, START, bounded_cells, bounded_sums, events, random_events

W = 8
WINDOW = WindowSpec(size=DAY, start=START, end=START + W * DAY)


def _bounds(max_windows=None, **kwargs) -> ContributionBounds:
    return ContributionBounds(max_windows=max_windows, **kwargs)


def test_plans_compose_over_min_c_w_windows():
    """Histograms and top-k compose C windows: the same noise as a job of C windows; peak at most C periods;
    svt is unchanged; C >= W changes nothing and needs no cap."""
    releases = (HistogramSpec("h", partitions=("A", "B")), TopKSpec("t", k=1, partitions=("A", "B")),
                PeakSpec("p", period=2 * DAY, maximum=100.0))
    capped = plan_job(releases, _bounds(2), WINDOW, 1.0, 1e-6)
    assert capped["h"].runs == capped["t"].runs == 2 and capped["p"].runs == 2
    alone = (HistogramSpec("h", partitions=("A", "B")),)
    assert plan_job(alone, _bounds(2), WINDOW, 1.0, 1e-6)["h"].noise == pytest.approx(
        plan_job(alone, _bounds(), WindowSpec(size=DAY, start=START, end=START + 2 * DAY), 1.0, 1e-6)["h"].noise,
        rel=1e-9)
    assert capped.window_cap == WindowCap(2, None, (0,) * W)
    full = plan_job(releases, _bounds(W), WINDOW, 1.0, 1e-6)
    assert full.window_cap is None and full["h"].runs == W
    assert full["h"].noise == pytest.approx(plan_job(releases, _bounds(), WINDOW, 1.0, 1e-6)["h"].noise, rel=1e-12)
    svt = SvtSpec("s", metric="count", maximum=1000.0, threshold=0.5, sigma_threshold=0.05)
    assert plan_job((svt,), _bounds(2), WINDOW, 1.0, 1e-6)["s"] == plan_job((svt,), _bounds(), WINDOW, 1.0, 1e-6)["s"]


def test_a_total_cell_cap_calibrates_the_whole_release():
    """max_partitions_total T = 4 with L0 = 2 over 8 windows: the whole release moves by L2 <= sqrt(4) Linf, the
    same as 2 windows of 2 cells, so the Gaussian noise equals the plan with max_windows = 2; Laplace composes
    T = 4 cell events of Linf. Top-k composes min(C, T) = 4 windows; T >= windows x L0 changes nothing."""
    gaussian, laplace = (HistogramSpec("h", partitions=("A", "B")),), (HistogramSpec("h", partitions=("A", "B"),
                                                                                     noise="laplace"),)
    cells = _bounds(max_partitions=2, max_partitions_total=4)
    assert plan_job(gaussian, cells, WINDOW, 1.0, 1e-6)["h"].noise == pytest.approx(
        plan_job(gaussian, _bounds(2, max_partitions=2), WINDOW, 1.0, 1e-6)["h"].noise, rel=1e-9)
    planned = plan_job(laplace, cells, WINDOW, 1.0, 1e-6)
    assert planned["h"].event.sensitivity == 1 and planned["h"].sensitivity == 2 and planned["h"].cells == 4
    assert planned.window_cap == WindowCap(None, 4, (0,) * W)
    assert "at most 4 (window, partition) cells" in planned["h"].describe()
    assert "the whole release at once" in plan_job(gaussian, cells, WINDOW, 1.0, 1e-6)["h"].describe()
    assert plan_job((TopKSpec("t", k=1, partitions=("A", "B")),), cells, WINDOW, 1.0, 1e-6)["t"].runs == 4
    assert plan_job(gaussian, _bounds(max_partitions=2, max_partitions_total=16), WINDOW, 1.0, 1e-6).window_cap is None


def test_with_a_unit_period_the_cap_holds_per_period():
    """Hourly windows over 3 days, unit user x day, C = 3: 3 of a day's 24 windows compose, and the cap's unit
    of each window is its day."""
    hourly = WindowSpec(size=3600, start=START, end=START + 3 * DAY)
    plan = plan_job((HistogramSpec("h", partitions=("A",)),), _bounds(3), hourly, 1.0, 1e-6, unit_period=DAY)
    assert plan["h"].runs == 3
    assert plan.window_cap == WindowCap(3, None, tuple(i // 24 for i in range(72)))


def test_capped_windows_keeps_the_smallest_keys_per_user_and_period():
    """Exact oracle: for every (user, period), the min(C, n) pairs with the smallest keys, and nothing else."""
    rng = np.random.default_rng(1)
    periods = tuple(i // 4 for i in range(12))  # 3 periods of 4 windows
    users = np.repeat(np.arange(50), 12)
    windows = np.tile(np.arange(12), 50)
    present = rng.random(users.size) < 0.6
    users, windows = users[present], windows[present]
    keys = rng.integers(0, 2**63, users.size).astype(np.uint64)
    keep = capped_windows(users, windows, 2, periods, keys)
    assert capped_windows(users, windows, None, periods, keys).all()
    for (user, period), rows in itertools.groupby(sorted(range(users.size), key=lambda r: (users[r], windows[r] // 4)),
                                                  key=lambda r: (users[r], windows[r] // 4)):
        rows = list(rows)
        expected = set(sorted(rows, key=lambda r: keys[r])[:2])
        assert {r for r in rows if keep[r]} == expected, (user, period)


def test_the_kept_windows_are_uniform():
    """A user in 5 windows, C = 2, uniform 64-bit keys: the 10 pairs of windows are equally likely (chi-square,
    20,000 draws, fixed seed; false-alarm rate 1e-3 over seeds). The production entropy's own uniformity is
    tests/test_noise.py's check."""
    rng = SecureRandom(20)
    counts: dict[tuple[int, ...], int] = {}
    users, windows = np.zeros(5, dtype=np.int64), np.arange(5)
    for _ in range(20_000):
        kept = tuple(np.flatnonzero(capped_windows(users, windows, 2, (0,) * 5, rng.words(5))))
        counts[kept] = counts.get(kept, 0) + 1
    assert len(counts) == 10 and all(len(pair) == 2 for pair in counts)
    assert stats.chisquare(list(counts.values())).pvalue > 1e-3


def _heavy_and_others(with_heavy: bool, records_per_window: int = 3):
    """150 ordinary users over W days and partitions A, B, C; with_heavy adds a user with records in every window
    and every partition (the one who tries to reach C + 1 windows)."""
    base = random_events(2000, W, 150, ["A", "B", "C"], seed=9)
    if not with_heavy:
        return [base]
    seconds = [START + d * DAY + 3600 * (1 + r) for d in range(W) for r in range(records_per_window) for _ in "ABC"]
    partitions = [p for _ in range(W) for _ in range(records_per_window) for p in "ABC"]
    return [base, events(["heavy"] * len(seconds), seconds, partitions)]


def _vector(sums: dict) -> np.ndarray:
    """Window x partition matrix of bounded sums (0 where absent)."""
    return np.array([[float(sums.get(i, {}).get(p, 0)) for p in "ABC"] for i in range(W)])


@pytest.mark.parametrize("shards", [1, 3])
def test_one_user_moves_at_most_c_windows_and_the_whole_vector_within_its_sensitivity(shards):
    """Neighbours differing in a user present in all W windows: with the cap (C = 2, L0 = 2, Linf = 2) the
    bounded sums differ in at most 2 windows, by L1 <= C L0 Linf = 8 and L2 <= sqrt(C L0) Linf = 4. Without
    the cap (the negative control) all 8 windows move: planning for C windows would then be wrong."""
    bounds = _bounds(2, max_partitions=2, max_contributions=2)
    cap = plan_job((HistogramSpec("h", partitions=("A", "B", "C")),), bounds, WINDOW, 1.0, 1e-6).window_cap
    for seed in range(5):
        with_user, without = (_vector(bounded_sums(_heavy_and_others(h), bounds, WINDOW, seed=seed, shards=shards,
                                                   cap=cap)) for h in (True, False))
        difference = with_user - without
        assert np.count_nonzero(np.abs(difference).sum(axis=1)) == 2
        assert np.abs(difference).sum() <= 8 and np.sqrt((difference ** 2).sum()) <= 4
    uncapped = _vector(bounded_sums(_heavy_and_others(True), bounds, WINDOW, seed=0)) - \
        _vector(bounded_sums(_heavy_and_others(False), bounds, WINDOW, seed=0))
    assert np.count_nonzero(np.abs(uncapped).sum(axis=1)) == W


@pytest.mark.parametrize("shards", [1, 3])
def test_a_total_cell_cap_bounds_the_cells_one_user_moves(shards):
    """T = 3 cells (L0 = 2 per window, Linf = 2): the heavy user's presence changes at most 3 (window,
    partition) cells, by at most Linf each; without T (the negative control) it changes 16."""
    bounds = _bounds(max_partitions=2, max_contributions=2, max_partitions_total=3)
    cap = plan_job((HistogramSpec("h", partitions=("A", "B", "C")),), bounds, WINDOW, 1.0, 1e-6).window_cap
    for seed in range(5):
        with_user, without = (_vector(bounded_sums(_heavy_and_others(h), bounds, WINDOW, seed=seed, shards=shards,
                                                   cap=cap)) for h in (True, False))
        difference = np.abs(with_user - without)
        assert np.count_nonzero(difference) == 3 and difference.max() <= 2
    uncapped = bounds.__class__(max_partitions=2, max_contributions=2)
    moved = _vector(bounded_sums(_heavy_and_others(True), uncapped, WINDOW)) - \
        _vector(bounded_sums(_heavy_and_others(False), uncapped, WINDOW))
    assert np.count_nonzero(moved) == 16


@pytest.mark.parametrize("shards", [1, 3])
def test_a_total_contributions_cap_bounds_the_mass_one_user_moves(shards):
    """K = 5 records (L0 = 2 per window, Linf = 2): the heavy user's presence moves the whole vector by L1 <= 5
    and L2 <= sqrt(2 * 2^2 + 1^2) = 3, the plan's mass_l2; without K (the negative control) by L1 32."""
    bounds = _bounds(max_partitions=2, max_contributions=2, max_contributions_total=5)
    assert bounds.mass_l2 == pytest.approx(3.0) and bounds.mass_l2 >= 3.0
    cap = plan_job((HistogramSpec("h", partitions=("A", "B", "C")),), bounds, WINDOW, 1.0, 1e-6).window_cap
    assert cap == WindowCap(None, None, (0,) * W, 5)
    for seed in range(5):
        with_user, without = (_vector(bounded_sums(_heavy_and_others(h), bounds, WINDOW, seed=seed, shards=shards,
                                                   cap=cap)) for h in (True, False))
        difference = np.abs(with_user - without)
        assert 0 < difference.sum() <= 5 and difference.max() <= 2 and np.sqrt((difference ** 2).sum()) <= 3
    uncapped = _bounds(max_partitions=2, max_contributions=2)
    moved = _vector(bounded_sums(_heavy_and_others(True), uncapped, WINDOW)) - \
        _vector(bounded_sums(_heavy_and_others(False), uncapped, WINDOW))
    assert np.abs(moved).sum() == 32


def test_a_total_contributions_cap_calibrates_gaussian_histograms_to_the_mass_bound():
    """sqrt(floor(K/m) m^2 + (K mod m)^2) |value|max: K = 7, m = 2, values in [0, 3]: sqrt(3*4 + 1) * 3; below
    sqrt(T) Linf (T = 8: sqrt(8) * 6) and per-window composition (sqrt(8 * 2) * 6), so it is the one planned.
    Laplace keeps its per-cell composition. Validation: K below max_contributions is refused."""
    bounds = _bounds(max_partitions=2, max_contributions=2, max_partitions_total=8, max_contributions_total=7,
                     min_value=0.0, max_value=3.0)
    assert bounds.mass_l2 == pytest.approx(math.sqrt(13) * 3)
    planned = plan_job((HistogramSpec("h", partitions=("A", "B", "C")),), bounds, WINDOW, 1.0, 1e-6)
    assert planned["h"].event.sensitivity == bounds.mass_l2 and planned["h"].runs == 8
    assert "whole release at once" in planned["h"].describe()
    assert "max_contributions_total = 7" in planned.window_cap_text()
    alone = dataclasses.replace(bounds, max_contributions_total=None)
    assert plan_job((HistogramSpec("h", partitions=("A", "B", "C")),), alone, WINDOW, 1.0, 1e-6)["h"].event.sensitivity \
        == pytest.approx(math.sqrt(8) * 6)
    laplace = plan_job((HistogramSpec("h", partitions=("A", "B", "C"), noise="laplace"),), bounds, WINDOW, 1.0, 1e-6)
    assert laplace["h"].cells == 8
    with pytest.raises(SpecError, match="max_contributions_total must be at least max_contributions"):
        _bounds(max_contributions=3, max_contributions_total=2)


def _store_sums(directory: str):
    """An assert_that matcher that writes the (window, shard) partial sums, added up per window, to sums.json."""
    def store(actual):
        totals: dict[str, dict[str, int]] = {}
        for index, sums in actual:
            for partition, value in sums.items():
                window = totals.setdefault(str(index), {})
                window[str(partition)] = window.get(str(partition), 0) + int(value)
        with open(os.path.join(directory, "sums.json"), "w") as handle:
            json.dump(totals, handle)
    return store


def _nonzero(sums: dict) -> dict:
    return {str(i): {str(k): int(v) for k, v in s.items() if v} for i, s in sums.items() if any(s.values)}


def test_the_beam_transform_equals_the_dofns():
    bounds = _bounds(3, max_partitions=2, max_contributions=2, max_partitions_total=5)
    cap = plan_job((HistogramSpec("h", partitions=("A", "B", "C")),), bounds, WINDOW, 1.0, 1e-6).window_cap
    assert cap == WindowCap(3, 5, (0,) * W)
    batches = _heavy_and_others(True)
    directory = tempfile.mkdtemp(prefix="dpstream-cap-")
    with TestPipeline() as pipeline:
        sums = pipeline | beam.Create(batches) | BoundContributions(bounds, WINDOW, seed=4, shards=2, cap=cap)
        assert_that(sums, _store_sums(directory))
    got = json.load(open(os.path.join(directory, "sums.json")))
    assert got == _nonzero(bounded_sums(batches, bounds, WINDOW, seed=4, shards=2, cap=cap))


def first_windows_oracle(batches, bounds: ContributionBounds, cap: WindowCap, seed: int) -> dict:
    """The streaming rule, written plainly: windows in index order; a unit (user, unit period) keeps every kept
    cell of a window while it has kept fewer than C windows, and nothing after (max_windows only)."""
    per_window = bounded_cells(batches, bounds, WINDOW, seed=seed)
    windows_kept: dict[tuple[str, int], int] = {}
    sums: dict[int, dict[str, int]] = {}
    for index in sorted(per_window):
        units = {(user, cap.unit_of_window[index]) for user, _, _ in per_window[index]}
        open_units = {unit for unit in units if windows_kept.get(unit, 0) < cap.max_windows}
        for user, partition, value in per_window[index]:
            if (user, cap.unit_of_window[index]) in open_units:
                window = sums.setdefault(index, {})
                window[partition] = window.get(partition, 0) + int(value)
        for unit in open_units:
            windows_kept[unit] = windows_kept.get(unit, 0) + 1
    return {str(i): {p: v for p, v in s.items() if v} for i, s in sums.items() if any(s.values())}


def _stream(batches_by_step, watermarks):
    """A TestStream that adds each group of batches, then advances the watermark to its time (seconds)."""
    stream = TestStream()
    for batches, seconds in zip(batches_by_step, watermarks):
        stream = stream.add_elements(batches).advance_watermark_to(seconds)
    return stream.advance_watermark_to_infinity()


def _split_by_day(batch, days):
    seconds = batch.column(1).to_numpy() / 1e6
    mask = np.isin(((seconds - START) // DAY).astype(int), list(days))
    return batch.filter(pa.array(mask))


@pytest.mark.parametrize("order, shards, period", [("later windows first", 1, None), ("later windows first", 2, None),
                                                   ("in order, watermark per window", 2, None),
                                                   ("in order, watermark per window", 1, 4 * DAY)])
def test_a_stream_keeps_each_units_first_c_windows_in_window_order(order, shards, period):
    """Streaming max_windows: each unit keeps its first C = 2 windows by index (per unit period of 4 days: in
    each period), whatever order the records arrive in (the rule of `first_windows_oracle`); every window is
    released once, none is dropped as late."""
    bounds = _bounds(2, max_partitions=2, max_contributions=2)
    cap = plan_job((HistogramSpec("h", partitions=("A", "B", "C")),), bounds, WINDOW, 1.0, 1e-6,
                   unit_period=period).window_cap
    assert cap.unit_of_window == tuple(i // 4 if period else 0 for i in range(W))
    batches = _heavy_and_others(True)
    if order == "later windows first":
        steps = [[_split_by_day(b, range(4, W)) for b in batches], [_split_by_day(b, range(4)) for b in batches]]
        watermarks = [START + 1, START + 2]
    else:
        steps = [[_split_by_day(b, [day]) for b in batches] for day in range(W)]
        watermarks = [START + (day + 1) * DAY for day in range(W)]
    directory = tempfile.mkdtemp(prefix="dpstream-stream-cap-")
    with TestPipeline(options=PipelineOptions(streaming=True)) as pipeline:
        sums = (pipeline | _stream(steps, watermarks)
                | BoundContributions(bounds, WINDOW, seed=4, shards=shards, cap=cap)
                | PerWindowSums(WINDOW))
        assert_that(sums, _store_sums(directory))
    got = json.load(open(os.path.join(directory, "sums.json")))
    assert got == first_windows_oracle(batches, bounds, cap, seed=4)


class _Bag:
    def __init__(self):
        self.items = []

    def read(self):
        return list(self.items)

    def add(self, item):
        self.items.append(item)

    def clear(self):
        self.items = []


class _Value:
    def __init__(self):
        self.value = None

    def read(self):
        return self.value

    def write(self, value):
        self.value = value


def _cells_by_window(batches, bounds):
    cells = bounded_cells(batches, bounds, WINDOW, seed=4)
    return {index: (index, *(np.array([c[i] for c in cells.get(index, [])], dtype=object if i < 2 else np.int64)
                             for i in range(3))) for index in range(W)}


@pytest.mark.parametrize("caps", [dict(max_windows=2), dict(max_partitions_total=3),
                                  dict(max_contributions_total=5)], ids=["C=2", "T=3", "K=5"])
def test_windows_arriving_out_of_order_are_taken_in_index_order(caps):
    """The DoFn with in-memory state: windows fed in a shuffled order give exactly the outputs of index order,
    each once, and none before every earlier window arrived. Negative control: taking each window as it arrives
    (no waiting) keeps other windows for the heavy user."""
    bounds = _bounds(max_partitions=2, max_contributions=2, **caps)
    cap = plan_job((HistogramSpec("h", partitions=("A", "B", "C")),), bounds, WINDOW, 1.0, 1e-6).window_cap
    cells = _cells_by_window(_heavy_and_others(True), bounds)

    def run(order):
        fn = _CapInWindowOrder(WINDOW, cap, bounds, seed=4)
        fn.setup()
        pending, following, kept, released = _Bag(), _Value(), _Value(), {}
        for index in order:
            for out in fn.process((0, cells[index]), pending, following, kept):
                window, sums = out.value
                assert window not in released and all(i in released for i in range(window))
                released[window] = {k: int(v) for k, v in sums.items()}
        assert sorted(released) == list(range(W)) and not pending.read()
        return released

    in_order = run(range(W))
    for seed in range(3):
        assert run(np.random.default_rng(seed).permutation(W)) == in_order
    eager = _CapInWindowOrder(WINDOW, cap, bounds, seed=4)
    eager.setup()
    counts: dict = {}
    as_they_come = {}
    for index in (7, 6, 5, 4, 3, 2, 1, 0):
        window, sums = eager._take(cells[index], counts).value
        as_they_come[window] = {k: int(v) for k, v in sums.items()}
    assert as_they_come != in_order


@pytest.mark.parametrize("caps", [dict(max_windows=2), dict(max_partitions_total=3),
                                  dict(max_contributions_total=5)], ids=["C=2", "T=3", "K=5"])
def test_in_a_stream_one_user_moves_at_most_c_windows_or_t_cells(caps):
    """Neighbours differing in a user present in every window and partition: streamed, the bounded sums differ
    in at most C = 2 windows (L0 = 2, Linf = 2: by L1 <= 8), or in at most T = 3 cells by at most Linf each.
    The negative control is the uncapped difference of the batch tests (8 windows, 16 cells)."""
    bounds = _bounds(max_partitions=2, max_contributions=2, **caps)
    cap = plan_job((HistogramSpec("h", partitions=("A", "B", "C")),), bounds, WINDOW, 1.0, 1e-6).window_cap
    vectors = []
    for heavy in (True, False):
        directory = tempfile.mkdtemp(prefix="dpstream-stream-cap-")
        with TestPipeline(options=PipelineOptions(streaming=True)) as pipeline:
            sums = (pipeline | _stream([_heavy_and_others(heavy)], [START + 1])
                    | BoundContributions(bounds, WINDOW, seed=7, shards=2, cap=cap) | PerWindowSums(WINDOW))
            assert_that(sums, _store_sums(directory))
        vectors.append(_vector({int(i): s for i, s in json.load(open(os.path.join(directory, "sums.json"))).items()}))
    difference = np.abs(vectors[0] - vectors[1])
    if "max_windows" in caps:
        assert np.count_nonzero(difference.sum(axis=1)) == 2 and difference.sum() <= 8
    elif "max_partitions_total" in caps:
        assert np.count_nonzero(difference) == 3 and difference.max() <= 2
    else:  # K = 5 records: L1 <= 5, each cell <= 2, so L2 <= sqrt(2^2 + 2^2 + 1^2) = 3
        assert 0 < difference.sum() <= 5 and difference.max() <= 2 and np.sqrt((difference ** 2).sum()) <= 3


def test_max_windows_is_a_positive_integer():
    for bad in (0, True, 1.5):
        with pytest.raises(SpecError, match="max_windows must be a positive integer"):
            ContributionBounds(max_windows=bad)
        with pytest.raises(SpecError, match="max_partitions_total must be a positive integer"):
            ContributionBounds(max_partitions_total=bad)


@pytest.mark.parametrize("bounds", [_bounds(2), _bounds(max_partitions_total=2)], ids=["max_windows", "total_cells"])
def test_audit_a_user_in_every_window_stays_within_the_planned_epsilon(bounds):
    """A Laplace histogram of one partition over W = 8 windows, planned for C = 2 (epsilon 1): the target user
    has a record in every window. Outputs: the noisy counts of all 8 windows from the capped bounded sums; the
    statistic sums each window's clip(y - count(x), 0, 1), the likelihood ratio's shape. The audit's lower
    bound (confidence 0.999) stays below 1; with the cap skipped (noise still planned for 2 windows) it is far
    above 1. The same with max_partitions_total = 2 (one partition per window: 2 cells)."""
    plan = plan_job((HistogramSpec("h", partitions=("A",), noise="laplace"),), bounds, WINDOW, 1.0, 1e-6)
    scale = plan["h"].noise
    base = [random_events(400, W, 60, ["A"], seed=3)]
    target = events(["target"] * W, [START + d * DAY + 600 for d in range(W)], ["A"] * W)

    def counts(batches, cap):
        return np.array([float(s.get(i, {}).get("A", 0)) for s in [bounded_sums(batches, bounds, WINDOW, seed=1,
                                                                                  cap=cap)] for i in range(W)])

    rng = np.random.default_rng(12)
    for cap, broken in ((plan.window_cap, False), (None, True)):
        x, x_prime = counts(base, cap), counts(base + [target], cap)
        assert np.count_nonzero(x_prime - x) == (W if broken else 2) and np.abs(x_prime - x).max() == 1

        def sample(with_target: bool, n: int, x=x, x_prime=x_prime) -> np.ndarray:
            noisy = (x_prime if with_target else x) + rng.laplace(0.0, scale, size=(n, W))
            return np.clip(noisy - x, 0.0, 1.0).sum(axis=1)

        result = audit(sample, False, True, n_search=100_000, n_estimate=200_000, delta=1e-6)
        print("uncapped" if broken else "capped", result)
        assert (result.epsilon_lower > 1.0) == broken, str(result)


def test_validate_and_a_run_state_the_cap(tmp_path, capsys):
    """Every user is in all 3 windows; with max_windows = 1 each user's records are kept in one window, so the
    bounded counts of the three windows add up to the number of users; validate and the report say so."""
    from dpstream.pipelines.cli import main as cli
    from dpstream.pipelines.run import runner
    from tests.pipelines.test_runner import JOB, _events

    (tmp_path / "events.csv").write_text(_events(60))
    job = tmp_path / "job.toml"
    histogram_only = JOB[:JOB.index("[[release]]\nkind = \"topk\"")] + JOB[JOB.index("[output]"):]
    job.write_text(histogram_only.replace("[privacy]\n", "[privacy]\nmax_windows = 1\n").replace("epsilon = 4.0",
                                                                                                   "epsilon = 50"))
    assert cli.main(["validate", str(job)]) == 0
    out = capsys.readouterr().out
    assert ("max_windows = 1: each privacy unit's records are kept in at most 1 of the 3 windows it can touch (chosen "
            "uniformly at random) in the range, so histograms, top-k and peaks compose 1 windows instead of 3") in out
    assert "(1 windows composed per privacy unit)" in out
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    from dpstream.accounting.ledger import Ledger

    with Ledger(url, create=True) as ledger:
        ledger.init_scope("test", 50.0, 1e-5, "approx:release_delta=1e-6")
    outcome = runner.run(jobfile.load(str(job)), str(tmp_path / "out"), url, log=lambda _: None)
    rows = [json.loads(line) for line in open(outcome.files["daily"])]
    # each of 60 users counted in exactly one window (180 without the cap), up to 4 sd of the 9 cells' noise
    assert abs(sum(row["value"] for row in rows) - 60) <= 4 * 3 * rows[0]["noise_stddev"] < 10
    assert outcome.report["privacy"]["bounds"]["max_windows"] == 1
    assert "Across windows, max_windows = 1" in (tmp_path / "out" / "report.md").read_text()


def test_a_total_cell_cap_keeps_each_units_heaviest_cells():
    """Exact oracle: per user, the T cells with the largest |bounded sum|, ties broken by the random keys."""
    from dpstream.pipelines.transforms.bounding import heaviest_first

    rng = np.random.default_rng(4)
    users = rng.integers(0, 30, 400)
    windows = rng.integers(0, 6, 400)
    sums = rng.integers(-3, 4, 400)
    keys = rng.integers(0, 2**63, 400).astype(np.uint64)
    keep = capped_windows(users, windows, 3, (0,) * 6, heaviest_first(sums, keys))
    for user in range(30):
        rows = np.flatnonzero(users == user)
        expected = set(sorted(rows, key=lambda r: (-abs(sums[r]), keys[r]))[:3])
        assert set(rows[keep[rows]]) == expected


def test_within_mass_is_exact_beyond_int64_running_sums():
    """Three cells of 2**62 units against a budget of 2**62 + 5: only the first fits (int64 running sums would
    wrap and keep all three). Found by an adversarial review."""
    from dpstream.pipelines.transforms.bounding import within_mass

    mass = np.array([2 ** 62, 2 ** 62, 2 ** 62], dtype=np.int64)
    keep = within_mass(np.zeros(3, dtype=np.int64), np.arange(3), mass, 2 ** 62 + 5)
    assert keep.tolist() == [True, False, False]
