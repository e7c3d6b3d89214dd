"""Contribution bounding: sensitivities hold against a user with 10^4 events; sampling is uniform; batching,
sharding and order do not change the result in test mode."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from dpstream.connectors.schema import MICROS
from dpstream.pipelines.config.specs import ContributionBounds, WindowSpec
from dpstream.pipelines.transforms.aggregation import SumSeriesFn
from dpstream.pipelines.transforms.windowing import window_indices
from tests.pipelines.helpers import DAY, START, bounded_sums, events, random_events

PARTITIONS = tuple(f"p{i}" for i in range(40))


def _heavy_user(n=10_000, days=3, seed=7, values=False):
    rng = np.random.default_rng(seed)
    seconds = START + rng.uniform(0, days * DAY, n)
    partitions = np.asarray(PARTITIONS, dtype=object)[rng.integers(0, len(PARTITIONS), n)]
    return events(["heavy"] * n, seconds, partitions, rng.uniform(-50, 50, n) if values else None)


def _difference(with_user: dict, without: dict, index: int) -> np.ndarray:
    """The int64 difference of two windows' bounded sums (in units of the quantum), over the partitions of either."""
    a = with_user.get(index)
    b = without.get(index)
    joined = set(a.index if a is not None else ()) | set(b.index if b is not None else ())
    a = (a if a is not None else b.iloc[:0]).reindex(sorted(joined), fill_value=0)
    b = (b if b is not None else a.iloc[:0]).reindex(sorted(joined), fill_value=0)
    return (a - b).to_numpy()


@pytest.mark.parametrize("values", [False, True])
@pytest.mark.parametrize("period", [None, 0.5 * DAY])
def test_user_with_ten_thousand_events_moves_each_window_within_the_sensitivities(values, period):
    bounds = (ContributionBounds(max_partitions=3, max_contributions=2, min_value=-2.0, max_value=3.0) if values
              else ContributionBounds(max_partitions=3, max_contributions=2))
    window = WindowSpec(size=DAY, start=START, end=START + 3 * DAY, period=period)
    others = random_events(3000, 3, 200, PARTITIONS, seed=2, values=values)
    heavy = _heavy_user(values=values)
    without = bounded_sums([others], bounds, window, seed=11)
    with_user = bounded_sums([others, heavy], bounds, window, seed=11)
    for index in range(window.count):
        diff = _difference(with_user, without, index)
        assert diff.dtype == np.int64
        assert np.count_nonzero(diff) == bounds.max_partitions  # the heavy user is in every window, every partition
        linf_units = int(bounds.linf / bounds.quantum)  # exact: the quantised bounds are integer units
        assert np.max(np.abs(diff)) <= linf_units
        assert np.sum(np.abs(diff)) * bounds.quantum <= bounds.l1
        assert sum(int(d) ** 2 for d in diff) <= bounds.max_partitions * linf_units**2  # L2, in exact integers


@pytest.mark.parametrize("period", [None, 0.5 * DAY])
def test_units_move_by_one_in_the_partitions_whose_sum_the_user_moves(period):
    """With `units`, the heavy user adds exactly 1 user to each partition it changes, and sums move as without units."""
    bounds = ContributionBounds(max_partitions=3, max_contributions=2)
    window = WindowSpec(size=DAY, start=START, end=START + 3 * DAY, period=period)
    others = random_events(3000, 3, 200, PARTITIONS, seed=2)
    without = bounded_sums([others], bounds, window, seed=11, units=True)
    with_user = bounded_sums([others, _heavy_user()], bounds, window, seed=11, units=True)
    plain = bounded_sums([others, _heavy_user()], bounds, window, seed=11)
    for index in range(window.count):
        assert with_user[index]["sum"].equals(plain[index].rename("sum"))
        units = _difference({i: f["units"] for i, f in with_user.items()}, {i: f["units"] for i, f in without.items()}, index)
        sums = _difference({i: f["sum"] for i, f in with_user.items()}, {i: f["sum"] for i, f in without.items()}, index)
        assert np.array_equal(units != 0, sums != 0) and set(units[units != 0]) == {1.0}
        assert np.count_nonzero(units) == bounds.max_partitions
        assert np.all((sums[units != 0] >= 1) & (sums[units != 0] <= bounds.linf))


def test_units_are_the_distinct_users_when_no_partition_is_dropped():
    bounds = ContributionBounds(max_partitions=len(PARTITIONS), max_contributions=2)
    window = WindowSpec(size=DAY, start=START, end=START + 3 * DAY)
    others = random_events(3000, 3, 200, PARTITIONS, seed=2)
    frame = others.to_pandas()
    frame["window"] = (frame["timestamp"] // MICROS - START) // DAY
    expected = frame.groupby(["window", "partition"])["user"].nunique()
    sums = bounded_sums([others], bounds, window, seed=11, units=True)
    for index in range(window.count):
        assert sums[index]["units"].equals(expected.loc[index].rename("units").rename_axis(None).astype("int64"))


def test_production_mode_bounds_the_heavy_user_alone():
    bounds = ContributionBounds(max_partitions=2, max_contributions=5, min_value=0.0, max_value=1.0)
    window = WindowSpec(size=DAY, start=START, end=START + 3 * DAY)
    sums = bounded_sums([_heavy_user(values=True)], bounds, window, seed=None)
    assert sorted(sums) == [0, 1, 2]
    for series in sums.values():
        assert len(series) == 2 and series.max() * bounds.quantum <= bounds.linf and series.min() >= 0


def test_partition_choice_is_uniform_not_first_or_largest():
    """L0 = 1 over partitions with 1, 5, 20 and 200 records (the larger ones first in time): each is kept
    with probability 1/4. 2000 users, chi-square; false-alarm rate 1e-4 (fixed seed, so deterministic)."""
    users = 2000
    counts = {"d": 200, "c": 20, "b": 5, "a": 1}
    names = np.array([f"u{i}" for i in range(users)], dtype=object)
    user_column = np.concatenate([np.repeat(names, c) for c in counts.values()])
    partitions = np.concatenate([np.full(users * c, p, dtype=object) for p, c in counts.items()])
    seconds = START + np.linspace(1, 59, user_column.size)
    bounds = ContributionBounds(max_partitions=1, max_contributions=1)
    sums = bounded_sums([events(user_column, seconds, partitions)], bounds,
                        WindowSpec(size=60, start=START, end=START + 60), seed=5)
    observed = sums[0].reindex(list(counts), fill_value=0).to_numpy()
    assert observed.sum() == users
    assert stats.chisquare(observed).pvalue > 1e-4, observed


def test_record_choice_is_uniform():
    """max_contributions = 1 among 10 records with values 0..9, in time order: each value is kept with
    probability 1/10. 3000 users (one partition each), chi-square; false-alarm rate 1e-4."""
    users = 3000
    user_column = np.repeat(np.array([f"u{i}" for i in range(users)], dtype=object), 10)
    values = np.tile(np.arange(10.0), users)
    seconds = START + 1 + np.tile(np.arange(10.0), users)
    partitions = np.repeat(np.array([f"p{i}" for i in range(users)], dtype=object), 10)
    bounds = ContributionBounds(max_partitions=1, max_contributions=1, min_value=0.0, max_value=9.0)
    sums = bounded_sums([events(user_column, seconds, partitions, values)], bounds,
                        WindowSpec(size=60, start=START, end=START + 60), seed=9)
    observed = np.bincount((sums[0].to_numpy() * bounds.quantum).astype(int), minlength=10)
    assert observed.sum() == users
    assert stats.chisquare(observed).pvalue > 1e-4, observed


@pytest.mark.parametrize("values", [False, True])
def test_batching_sharding_and_order_do_not_change_bounded_sums(values):
    bounds = ContributionBounds(max_partitions=2, max_contributions=3, min_value=-1.0 if values else 1.0, max_value=4.0 if values else 1.0)
    window = WindowSpec(size=DAY, start=START, end=START + 4 * DAY, period=DAY / 2)
    batch = random_events(5000, 4, 150, PARTITIONS[:8], seed=3, values=values)
    reference = bounded_sums([batch], bounds, window, seed=4)
    rng = np.random.default_rng(0)
    permuted = batch.take(pa.array(rng.permutation(batch.num_rows)))
    pieces = [permuted.slice(i, 700) for i in range(0, batch.num_rows, 700)]
    for shards in (1, 3):
        other = bounded_sums(pieces[::-1], bounds, window, seed=4, shards=shards)
        assert sorted(other) == sorted(reference)
        for index in reference:  # exact sums: bit-identical
            assert other[index].equals(reference[index]) and other[index].dtype == np.int64


def test_public_partition_list_filters_before_bounding():
    batch = events(["u"] * 3, [START + 1, START + 2, START + 3], ["listed", "other", "other2"])
    sums = bounded_sums([batch], ContributionBounds(max_partitions=1), WindowSpec(size=DAY, start=START, end=START + DAY),
                       partitions=("listed", "absent"), seed=1)
    assert list(sums[0].index) == ["listed"]


@pytest.mark.parametrize("period", [3600, None, 3 * 3600])
def test_window_indices_cover_exactly_the_windows_holding_each_record(period):
    """Sliding windows (one record in up to three) and fixed ones (at most one; the same given as a period)."""
    window = WindowSpec(size=3 * 3600, start=START, end=START + DAY, period=period)
    rng = np.random.default_rng(3)
    seconds = START - 5 * 3600 + rng.uniform(0, DAY + 10 * 3600, 2000)
    rows, indices = window_indices((seconds * MICROS).astype(np.int64), window)
    expected = {(r, i) for r, t in enumerate(seconds) for i in range(window.count)
                if window.bounds(i)[0] <= t < window.bounds(i)[1]}
    assert set(zip(rows.tolist(), indices.tolist())) == expected


def test_sum_combine_fn_is_independent_of_sharding():
    import pandas as pd

    parts = [pd.Series([i, 2 * i], index=[f"k{i % 3}", f"k{(i + 1) % 3}"]) for i in range(7)]
    combine = SumSeriesFn()
    shards = [combine.create_accumulator() for _ in range(3)]
    for i, series in enumerate(parts):
        shards[i % 3] = combine.add_input(shards[i % 3], series)
    merged = combine.extract_output(combine.merge_accumulators(shards))
    direct = pd.concat(parts).groupby(level=0).sum()
    pd.testing.assert_series_equal(merged, direct)


@pytest.mark.parametrize("merged", [False, True])
def test_users_are_grouped_by_exact_id_because_a_merged_pair_breaks_l0(merged):
    """Why bounding never groups users by a hash of their id: two users merged into one unit (as a hash collision
    would merge them) are bounded together, and removing one of them then changes the unit's kept cells from
    those chosen over both to those chosen over the other: more than max_partitions cells. With exact ids
    (merged=False) adding the user changes at most max_partitions cells by at most Linf; the merged variant is
    the negative control and must break that."""
    bounds = ContributionBounds(max_partitions=2, max_contributions=1)
    window = WindowSpec(size=DAY, start=START, end=START + 2 * DAY)
    others = random_events(2000, 2, 100, PARTITIONS, seed=3)
    heavy = _heavy_user(n=400, days=2)
    mate = events(["heavy" if merged else "mate"] * 4, START + np.array([0, 1, 2, 3]) * DAY / 2, list(PARTITIONS[:2]) * 2)
    without = bounded_sums([others, mate], bounds, window, seed=2)
    with_user = bounded_sums([others, mate, heavy], bounds, window, seed=2)
    moved = [np.count_nonzero(_difference(with_user, without, index)) for index in range(window.count)]
    if merged:
        assert max(moved) > bounds.max_partitions, "the merged pair should break the L0 bound"
        return
    for index in range(window.count):
        diff = _difference(with_user, without, index)
        assert np.count_nonzero(diff) <= bounds.max_partitions and np.max(np.abs(diff), initial=0) <= 1


def test_a_piece_pickles_to_the_same_piece_in_fewer_bytes():
    """Pieces cross the shuffle pickled as numpy arrays, user ids as bytes and one-byte lengths: the round trip gives
    the same arrays for slices, ids of 0 and 300 bytes, and multi-byte UTF-8; an empty piece too."""
    import pickle

    from dpstream.pipelines.transforms.bounding import _own_partitions, _Piece

    names = pa.array([f"p{i:03d}" for i in range(100)])
    rng = np.random.default_rng(1)
    users = pa.array([f"user{i:06d}" for i in rng.integers(0, 10**6, 2000)] + ["", "x" * 300, "é€😀"])
    piece = _Piece(users, _own_partitions(rng.integers(0, 100, len(users)), names), np.ones(len(users), np.uint8))
    for part in (piece, _Piece(users.slice(7, 40), piece.partition.slice(7, 40), piece.n[7:47]), _Piece.empty()):
        back = pickle.loads(pickle.dumps(part))
        assert back.user.equals(part.user) and back.partition.equals(part.partition)
        assert (back.n is None and part.n is None) or (back.n == part.n).all()
    ids = pa.array(users.slice(0, 2000).to_pylist())  # a compact array: a pickled Arrow slice carries its parent
    short = _Piece(ids, _own_partitions(rng.integers(0, 100, len(ids)), names), np.ones(len(ids), np.uint8))
    arrow_bytes = len(pickle.dumps((short.user, short.partition, short.n)))
    assert len(pickle.dumps(short)) < 0.85 * arrow_bytes
