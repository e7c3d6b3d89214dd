"""Bounded sums are exact: adversarial values (huge and tiny, both signs, half-unit ties) give the same int64 sums in
every order, batching and sharding, neighbours differ by at most the quantised Linf / L1 / L2 exactly, and the
old float64 sums of the same kind of data do not (negative control). Casacuberta–Shoemate–Vadhan–Wagaman 2022."""
from __future__ import annotations

import json
import math
import os
import tempfile
from fractions import Fraction

import apache_beam as beam
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that

from dpstream.pipelines.config.specs import ContributionBounds, WindowSpec
from dpstream.pipelines.mechanisms.fixedpoint import group_sums, to_units
from dpstream.pipelines.mechanisms.noise import granularity, grid_sensitivity, to_grid
from dpstream.pipelines.transforms.aggregation import PerWindowSums
from dpstream.pipelines.transforms.bounding import BoundContributions
from tests.pipelines.helpers import DAY, START, bounded_sums, events

WINDOW = WindowSpec(size=DAY, start=START, end=START + 2 * DAY)
OTHERS = ("p1", "p2", "p3")
INTEGER = ContributionBounds(max_partitions=2, max_contributions=3, min_value=-1000.0, max_value=1000.0)
DECIMAL = ContributionBounds(max_partitions=2, max_contributions=3, min_value=-1000.3, max_value=999.7)
SEED = 31


def adversarial_values(bounds: ContributionBounds, n: int, rng: np.random.Generator) -> np.ndarray:
    """Values at, next to and beyond both bounds; tiny values of both signs (exact half quanta, which rint rounds
    to even, fractions of a quantum, and 0.75 ulp of a sum near 2**30, which float sums round up); the full range."""
    q, low, high = bounds.quantum, bounds.min_value, bounds.max_value
    huge = np.array([high, low, np.nextafter(high, 0), np.nextafter(low, 0), high - 0.5, low + 0.5, 5 * high, 5 * low])
    tiny = np.array([q / 2, -q / 2, 1.5 * q, -1.5 * q, 2.5 * q, q, -q, 0.49 * q, 0.75 * 2.0**-23, -0.75 * 2.0**-23])
    kind = rng.random(n)
    return np.where(kind < 0.45, rng.choice(huge, n), np.where(kind < 0.9, rng.choice(tiny, n), rng.uniform(low, high, n)))


def _records(bounds: ContributionBounds, users: int, rng: np.random.Generator) -> pa.RecordBatch:
    """Per user and day: the hot partition and maybe one other, 1 to 3 records each (within the bounds, so nothing
    is sampled away); plus 'heavy', who on day 0 has 10 records in each of 4 partitions, all at the bound of
    largest magnitude (bounding keeps 3 records in 2 of them: one user's largest possible change)."""
    days = np.repeat(np.arange(2), users)
    names = np.tile(np.array([f"u{i}" for i in range(users)], dtype=object), 2)
    second = rng.random(days.size) < 0.5
    owner = np.concatenate([np.arange(days.size), np.flatnonzero(second)])
    partition = np.concatenate([np.full(days.size, "hot", dtype=object), rng.choice(np.array(OTHERS, dtype=object), second.sum())])
    count = rng.integers(1, 4, owner.size)
    owner, partition = np.repeat(owner, count), np.repeat(partition, count)
    seconds = START + days[owner] * DAY + rng.uniform(0, DAY, owner.size)
    values = adversarial_values(bounds, owner.size, rng)
    k_min, k_max = bounds.value_units
    extreme = bounds.min_value if abs(k_min) > abs(k_max) else bounds.max_value
    heavy_partitions = np.repeat(np.array(("hot",) + OTHERS, dtype=object), 10)
    return pa.concat_tables([
        pa.Table.from_batches([events(names[owner], seconds, partition, values)]),
        pa.Table.from_batches([events(["heavy"] * 40, START + np.linspace(1, DAY - 1, 40), heavy_partitions, [extreme] * 40)]),
    ]).combine_chunks().to_batches()[0]


def _oracle(batch: pa.RecordBatch, bounds: ContributionBounds) -> dict[int, dict[str, int]]:
    """Exact per-window, per-partition sums in units of the quantum, by Python rationals (records within bounds only)."""
    low, high, q = Fraction(bounds.min_value), Fraction(bounds.max_value), Fraction(bounds.quantum)
    sums: dict[int, dict[str, int]] = {i: {} for i in range(WINDOW.count)}
    for timestamp, partition, value in zip(batch.column(1).to_pylist(), batch.column(2).to_pylist(), batch.column(3).to_pylist()):
        window = int((timestamp // 1_000_000 - START) // DAY)
        units = round(min(max(Fraction(value), low), high) / q)  # round half to even, as rint
        sums[window][partition] = sums[window].get(partition, 0) + units
    return sums


def _presentation(batch: pa.RecordBatch, seed: int, batch_rows: int, creates: int) -> list[list[pa.RecordBatch]]:
    """The records in a shuffled order (reversed for seed 0), cut into record batches, spread over `creates` inputs."""
    order = np.arange(batch.num_rows)[::-1] if seed == 0 else np.random.default_rng(seed).permutation(batch.num_rows)
    shuffled = batch.take(pa.array(order))
    pieces = [shuffled.slice(i, batch_rows) for i in range(0, batch.num_rows, batch_rows)]
    return [pieces[i::creates] for i in range(creates)]


def _beam_sums(inputs: list[list[pa.RecordBatch]], bounds: ContributionBounds, shards: int) -> dict[int, pd.Series]:
    """BoundContributions + PerWindowSums on the DirectRunner: window index -> per-partition sums (int64)."""
    path = os.path.join(tempfile.mkdtemp(prefix="dpstream-exact-"), "sums.json")

    def store(actual):
        with open(path, "w") as handle:
            json.dump(actual, handle)

    with TestPipeline() as pipeline:
        created = [pipeline | f"Input {i}" >> beam.Create(part) for i, part in enumerate(inputs)]
        sums = (created | "Flatten inputs" >> beam.Flatten()
                | BoundContributions(bounds, WINDOW, seed=SEED, shards=shards) | PerWindowSums(WINDOW))
        rows = sums | beam.Map(lambda element: [element[0], str(element[1].dtype),
                                                [[str(p), int(v)] for p, v in element[1].items()]])
        assert_that(rows, store)
    with open(path) as handle:
        rows = json.load(handle)
    assert all(dtype == "int64" for _, dtype, _ in rows)
    return {index: pd.Series(dict(items), dtype="int64") for index, _, items in rows}


def _aligned(a: pd.Series, b: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    labels = sorted(set(a.index) | set(b.index))
    return a.reindex(labels, fill_value=0).to_numpy(), b.reindex(labels, fill_value=0).to_numpy()


def _check_neighbours(with_user: pd.Series, without: pd.Series, bounds: ContributionBounds) -> None:
    """One user's change of a window's sums: at most L0 partitions, each within Linf, within L1 and L2, in exact
    integers of the quantum; here attained with equality (the heavy user's kept records all sit at the bound)."""
    a, b = _aligned(with_user, without)
    change = [int(d) for d in a - b]
    q = Fraction(bounds.quantum)
    linf = Fraction(bounds.linf) / q
    assert linf.denominator == 1
    moved = [d for d in change if d]
    assert len(moved) == bounds.max_partitions and all(abs(d) == linf for d in moved)
    assert sum(abs(d) for d in moved) == Fraction(bounds.l1) / q
    assert sum(d * d for d in moved) == bounds.max_partitions * linf**2  # L2 squared: sqrt(L0) Linf, exactly
    assert abs(sum(change)) * q == Fraction(bounds.l1)  # the window total moves by L1: peak and svt sum queries


@pytest.mark.parametrize("bounds", [INTEGER, DECIMAL], ids=["integer-bounds", "decimal-bounds"])
def test_direct_runner_sums_are_exact_in_every_order_batching_and_sharding(bounds):
    data = _records(bounds, users=400, rng=np.random.default_rng(5))
    heavy = np.asarray(data.column(0).to_pylist(), dtype=object) == "heavy"
    neighbour = data.filter(pa.array(~heavy))
    presentations = [(1, 499, 2, 1), (2, 173, 4, 3), (0, 5000, 1, 7)]  # (order, rows per batch, inputs, user shards)
    runs = [_beam_sums(_presentation(data, seed, rows, creates), bounds, shards)
            for seed, rows, creates, shards in presentations]
    without = _beam_sums(_presentation(neighbour, 3, 701, 2), bounds, shards=2)
    expected = _oracle(neighbour, bounds)
    assert sorted(without) == sorted(runs[0]) == list(range(WINDOW.count))
    for index in range(WINDOW.count):
        assert without[index].to_dict() == expected[index]  # exact: Python rationals agree to the unit
        for run in runs[1:]:
            assert run[index].equals(runs[0][index])  # bit-identical, whatever the order, batches and shards
    _check_neighbours(runs[0][0], without[0], bounds)
    assert runs[0][1].equals(without[1])  # the heavy user is only in window 0
    if bounds is DECIMAL:  # the user's change exceeds the declared bound: Linf must come from the quantised one
        assert bounds.linf > bounds.max_contributions * max(abs(bounds.min_value), abs(bounds.max_value))


def _kernel_sums(units: np.ndarray, labels: np.ndarray, order: np.ndarray, chunks: int) -> pd.Series:
    """The numpy kernel of bounding and aggregation: int64 group sums per chunk (shard), then across chunks."""
    parts = [group_sums(pd.Series(units[piece], index=labels[piece])) for piece in np.array_split(order, chunks)]
    return group_sums(pd.concat(parts))


@pytest.mark.parametrize("bounds", [INTEGER, DECIMAL], ids=["integer-bounds", "decimal-bounds"])
def test_two_million_values_sum_exactly_in_any_order_and_neighbours_move_by_linf(bounds):
    rng = np.random.default_rng(11)
    n = 2_000_000
    values = adversarial_values(bounds, n, rng)
    labels = np.where(rng.random(n) < 0.9, "hot", rng.choice(np.array(OTHERS), n)).astype(object)
    k_min, k_max = bounds.value_units
    extreme = bounds.min_value if abs(k_min) > abs(k_max) else bounds.max_value
    user = np.full(bounds.max_partitions * bounds.max_contributions, extreme)  # one user's kept records
    user_labels = np.repeat(np.array(["hot", "p1"], dtype=object), bounds.max_contributions)
    units = to_units(np.clip(np.concatenate([values, user]), bounds.min_value, bounds.max_value), bounds.quantum)
    labels = np.concatenate([labels, user_labels])
    exact = {p: sum(units[labels == p].tolist()) for p in ("hot",) + OTHERS}  # Python ints
    reference = _kernel_sums(units, labels, np.arange(units.size), 1)
    assert reference.to_dict() == exact
    for seed, chunks in ((1, 7), (2, 64), (3, 256)):
        order = np.random.default_rng(seed).permutation(units.size)
        assert _kernel_sums(units, labels, order, chunks).equals(reference)
    without = _kernel_sums(units[:n], labels[:n], np.arange(n)[::-1], 13)
    _check_neighbours(reference, without, bounds)


def _float_sum(values: np.ndarray) -> float:
    """The old path: np.bincount with float weights, which adds the values one after another in input order."""
    return float(np.bincount(np.zeros(values.size, dtype=np.int64), weights=values)[0])


def test_negative_control_float_sums_depend_on_order_and_exceed_linf_plus_the_grid_allowance():
    """The float64 sums the pipeline used before, on adversarial data of the kind above (bounds [-1000, 1000],
    Linf = 1000): 2**20 values 999.5 (near the maximum, exact in binary) and 2**16 tiny values t = 0.75 ulp of a
    sum near 2**30 (ulp 2**-23). A user adds one record at the maximum, 1000.
    Neighbour x: the user's record, the large values, then the tiny ones. The running sum is then above 2**29,
    so each tiny value rounds the sum up by a whole ulp: 2**16 * 0.25 * 2**-23 = 2**-9 too much.
    Neighbour x': the tiny values first (summed exactly), then the large values (exact: 39 bits suffice).
    fl(x) - fl(x') = 1000 + 2**-9 > Linf; with sigma = 1 the noise grid step is 2**-20, so the difference on the
    grid is 2**11 steps above Linf, where grid_sensitivity allows one. The exact path sums both to the unit."""
    bounds = ContributionBounds(max_partitions=1, max_contributions=1, min_value=-1000.0, max_value=1000.0)
    large, tiny, record = np.full(2**20, 999.5), np.full(2**16, 0.75 * 2.0**-23), np.array([1000.0])
    x, x_prime = np.concatenate([record, large, tiny]), np.concatenate([tiny, large])
    float_change = _float_sum(x) - _float_sum(x_prime)
    assert float_change == 1000.0 + 2.0**-9 > bounds.linf
    same_multiset = np.concatenate([tiny, large, record])  # x in another order
    assert _float_sum(same_multiset) != _float_sum(x)  # order-dependent
    step = granularity(1.0)
    allowance = grid_sensitivity(bounds.linf, step, exact=False, changed=1, norm=1)
    on_grid = (to_grid([_float_sum(x)], step)[0] - to_grid([_float_sum(x_prime)], step)[0])[0] * step
    assert on_grid - allowance > 2**10 * step
    q = bounds.quantum
    exact_x, exact_x_prime = (int(to_units(v, q).sum()) for v in (x, x_prime))
    assert exact_x == int(to_units(same_multiset, q).sum())
    assert (exact_x - exact_x_prime) * q == bounds.linf  # exactly the record's 1000
    grid_units, exact = to_grid(np.array([exact_x, exact_x_prime]), step, q)  # q = 2**-20 = step: no rounding
    assert exact and (grid_units[0] - grid_units[1]) * step == bounds.linf


@pytest.mark.parametrize("sigma", [0.5, 3000.0])  # grid step 2**-21 <= q = 2**-20 (exact), 2**-8 > q (rounded)
def test_neighbouring_exact_sums_stay_within_grid_sensitivity_on_the_noise_grid(sigma):
    """The bounded sums of neighbours (the heavy user in or out) on the noise grid: L1 and L2 changes within
    grid_sensitivity of L1 and L2, and no rounding at all (nor allowance needed) when the quantum >= the step."""
    bounds = DECIMAL
    data = _records(bounds, users=400, rng=np.random.default_rng(8))
    heavy = np.asarray(data.column(0).to_pylist(), dtype=object) == "heavy"
    a, b = _aligned(bounded_sums([data], bounds, WINDOW, seed=SEED)[0],
                    bounded_sums([data.filter(pa.array(~heavy))], bounds, WINDOW, seed=SEED)[0])
    step, q = granularity(sigma), bounds.quantum
    (grid_a, exact), (grid_b, _) = to_grid(a, step, q), to_grid(b, step, q)
    assert exact == (step <= q)
    change = [Fraction(int(d)) * Fraction(step) for d in grid_a - grid_b]
    assert sum(1 for d in change if d) == bounds.max_partitions
    for norm, sensitivity in ((1, bounds.l1), (2, bounds.l2)):
        bound = Fraction(grid_sensitivity(sensitivity, step, exact, bounds.max_partitions, norm))
        distance = sum(abs(d) for d in change) if norm == 1 else Fraction(math.sqrt(sum(d * d for d in change)))
        assert distance <= bound
    if exact:  # no rounding: the grid change is the exact change
        assert change == [Fraction(int(d)) * Fraction(q) for d in a - b]


@pytest.mark.parametrize("seed", range(5))
def test_sums_by_code_equal_group_sums_exactly(seed):
    """Bounding sums kept cells per partition code (`sums_by_code`); the oracle is `group_sums` over the labels
    and Python's unbounded ints, on values near the int64 limit."""
    from dpstream.pipelines.mechanisms.fixedpoint import SUM_LIMIT, sums_by_code

    rng = np.random.default_rng(seed)
    names = np.array([f"p{i}" for i in range(7)], dtype=object)
    codes = rng.integers(0, 7, 500)
    units = rng.integers(-(2**52), 2**52, 500, dtype=np.int64)
    present, totals, counts = sums_by_code(codes, units)
    expected = group_sums(pd.Series(units, index=names[codes]))
    assert list(names[present]) == list(expected.index) and totals.tolist() == expected.tolist()
    assert totals.tolist() == [sum(int(u) for u, c in zip(units, codes) if c == p) for p in present]
    assert counts.tolist() == [int((codes == p).sum()) for p in present]
    huge = np.full(4, 2**61, dtype=np.int64)  # one partition at 2**63 units: exact in Python ints, never wrapped
    beyond = sums_by_code(np.zeros(4, dtype=np.int64), huge)[1]
    assert beyond.dtype == object and beyond.tolist() == [2**63]
    assert sums_by_code(np.arange(4), huge)[1].tolist() == [2**61] * 4 and 4 * 2.0**61 > SUM_LIMIT
    spread = 10**12  # codes far apart take the sorting path instead of the bincount: the same answers
    sparse, sparse_totals, sparse_counts = sums_by_code(codes * spread, units)
    assert (sparse.tolist(), sparse_totals.tolist(), sparse_counts.tolist()) == (
        [p * spread for p in present], totals.tolist(), counts.tolist())
    assert sums_by_code(np.zeros(4, dtype=np.int64) + spread, huge)[1].tolist() == [2**63]


@pytest.mark.parametrize("seed", range(3))
def test_label_sums_and_the_shard_merge_equal_group_sums(seed):
    """Window sums (`label_sums`) and the merge of a window's shards (`SumSeriesFn`, which takes the same path for
    Series) against `group_sums` on the concatenated parts: same labels, same order, same int64 values, same index
    dtype; with counts, the number of items per label. A shard sum past int64 is exact (Python ints), never wrapped."""
    from dpstream.pipelines.mechanisms.fixedpoint import label_sums
    from dpstream.pipelines.transforms.aggregation import SumSeriesFn

    rng = np.random.default_rng(seed)
    names = np.array([f"p{i}" for i in rng.permutation(9)], dtype=object)
    parts = []
    for _ in range(3):
        labels = rng.choice(names, 6, replace=False)
        parts.append(pd.Series(rng.integers(-(2**52), 2**52, 6, dtype=np.int64), index=pd.Index(labels)).sort_index())
    expected = group_sums(pd.concat(parts))
    combine = SumSeriesFn()
    merged = combine.extract_output(combine.merge_accumulators([combine.add_input([], part) for part in parts]))
    pd.testing.assert_series_equal(merged, expected)
    labels = np.concatenate([part.index.to_numpy(dtype=object) for part in parts])
    with_counts = label_sums(labels, np.concatenate([part.to_numpy() for part in parts]), counts=True)
    assert with_counts["sum"].tolist() == expected.tolist() and list(with_counts.index) == list(expected.index)
    assert with_counts["units"].tolist() == [int((labels == name).sum()) for name in expected.index]
    huge = [pd.Series([2**61, 2**60], index=pd.Index(["a", "b"])) for _ in range(5)]  # a: 5 * 2**61 > 2**63
    for merged in (group_sums(pd.concat(huge)), combine.extract_output(huge)):
        assert merged.to_dict() == {"a": 5 * 2**61, "b": 5 * 2**60} and merged.dtype == object


# -- sums beyond int64 (issue 32): exact, never an error ----------------------------------------------------------


def _items_near_the_int64_limit(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(labels, int64 units) of kept cells: 'up' and 'down' add up to about +-2**67 and +-2**66 (far past int64),
    'edge' to exactly 2**63 - 1 (the largest int64, its |terms| past the fast path's limit), 'cancel' to a small
    number from terms of about +-2**62, 'small' stays small; shuffled. Every cell is at most 2**62 units, as a
    user's cell is (max_contributions 2**30 units at most)."""
    near = lambda n: (2**62 - rng.integers(0, 2**20, n)).astype(np.int64)  # noqa: E731
    labels = ["up"] * 40 + ["down"] * 20 + ["edge"] * 2 + ["cancel"] * 30 + ["small"] * 500
    units = np.concatenate([near(40), -near(20), np.array([2**62, 2**62 - 1]), near(15), -near(15),
                            rng.integers(-(2**30), 2**30, 500)]).astype(np.int64)
    order = rng.permutation(units.size)
    return np.array(labels, dtype=object)[order], units[order]


def _python_sums(labels: np.ndarray, units: np.ndarray) -> dict[str, int]:
    sums: dict[str, int] = {}
    for label, unit in zip(labels.tolist(), units.tolist()):  # Python ints: the oracle
        sums[label] = sums.get(label, 0) + unit
    return dict(sorted(sums.items()))


@pytest.mark.parametrize("seed", range(4))
def test_sums_near_and_beyond_int64_equal_python_ints_on_every_aggregation_path(seed):
    """The window's cells summed per partition (`code_sums`, as `_BoundWindow` does, with and without counts),
    `sums_by_code` on sparse codes, the merge of a window's user shards (`SumSeriesFn`, merged in two rounds as
    combiner lifting does), `group_sums` of Series, DataFrames and (partition, bucket) labels, and `total`: every
    sum is the Python-int sum, past int64 or not; a result is int64 exactly when all its sums fit."""
    from dpstream.pipelines.mechanisms.fixedpoint import code_sums, label_sums, sums_by_code, total
    from dpstream.pipelines.transforms.aggregation import SumSeriesFn, empty_sums_and_units

    rng = np.random.default_rng(seed)
    labels, units = _items_near_the_int64_limit(rng)
    expected = _python_sums(labels, units)
    assert expected["edge"] == 2**63 - 1 and expected["up"] > 2**66 and expected["down"] < -(2**65)
    assert abs(expected["cancel"]) < 2**40

    def check(result, dtype=object):
        assert list(result.index) == list(expected) and result.to_dict() == expected and result.dtype == dtype
        assert all(type(value) is int for value in result.to_numpy()) or dtype == np.int64

    codes, names = pd.factorize(labels)
    check(code_sums(codes, names, units))
    with_counts = code_sums(codes, names, units, counts=True)
    check(with_counts["sum"])
    assert with_counts["units"].to_dict() == {name: int((labels == name).sum()) for name in expected}
    present, sums, _ = sums_by_code(codes.astype(np.int64) * 10**12, units)  # the sorting path
    assert dict(zip(names[present // 10**12], sums.tolist())) == expected
    check(group_sums(pd.Series(units, index=labels)))
    buckets = pd.MultiIndex.from_arrays([labels, np.zeros(labels.size, dtype=np.int64)])
    assert {label: value for (label, _), value in group_sums(pd.Series(units, index=buckets)).items()} == expected

    shards = [slice(i, None, 7) for i in range(7)]  # a window's user shards, then their merge
    parts = [label_sums(labels[shard], units[shard]) for shard in shards]
    combine = SumSeriesFn()
    halves = [combine.merge_accumulators([combine.add_input([], part) for part in parts[:3]]),
              combine.merge_accumulators([combine.add_input([], part) for part in parts[3:]])]
    check(combine.extract_output(combine.merge_accumulators(halves)))
    check(group_sums(pd.concat(parts)))
    frames = [label_sums(labels[shard], units[shard], counts=True) for shard in shards]
    merged = SumSeriesFn(empty_sums_and_units).extract_output(frames)  # the DataFrame (sum, units) path
    check(merged["sum"])
    assert merged["units"].dtype == np.int64 and merged["units"].sum() == labels.size
    assert total(combine.extract_output(parts)) == sum(expected.values()) == sum(units.tolist())

    inside = np.isin(labels, ["edge", "cancel", "small"])  # the same numbers inside int64: int64, as always
    fitting = {name: expected[name] for name in ("cancel", "edge", "small")}
    for result in (code_sums(*pd.factorize(labels[inside]), units[inside]), group_sums(pd.Series(units[inside],
                                                                                              index=labels[inside]))):
        assert result.dtype == np.int64 and result.to_dict() == fitting


def test_the_noise_grid_takes_sums_beyond_int64_exactly_and_int64_numbers_alike():
    """`to_grid` of Python ints gives the int64 path's grid units for the same numbers (so which path summed a
    partition never changes a release), and for numbers past int64 the exact round-half-up quotient, clipped."""
    from dpstream.pipelines.mechanisms.noise import MAX_GRID_UNITS

    rng = np.random.default_rng(3)
    inside = np.concatenate([rng.integers(-(2**63), 2**63 - 1, 200, dtype=np.int64), rng.integers(-2000, 2000, 200),
                             np.array([-(2**63), 2**63 - 1, 0, 1, -1], dtype=np.int64)]).astype(np.int64)
    beyond = np.array([2**63, -(2**63) - 1, 3 * 2**70 + 12345, -(5 * 2**80) - 1, 2**200], dtype=object)
    limit = int(MAX_GRID_UNITS)
    for shift in (-7, -1, 0, 1, 5, 20, 40, 62, 63, 64, 90):
        quantum, step = 2.0**-30, 2.0 ** (shift - 30)
        expected, exact = to_grid(inside, step, quantum)
        got, got_exact = to_grid(inside.astype(object), step, quantum)
        assert np.array_equal(got, expected) and got_exact == exact == (shift <= 0)
        oracle = [k << -shift if shift <= 0 else (k + (1 << (shift - 1))) >> shift for k in beyond.tolist()]
        grid, _ = to_grid(beyond, step, quantum)
        assert grid.tolist() == [float(min(max(k, -limit), limit)) for k in oracle]


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian", "gaussian_threshold", "truncated_gaussian", "count_mle",
                                       "distinct_threshold"])
def test_mechanisms_release_the_same_values_from_python_ints_and_take_sums_beyond_int64(mechanism):
    """Every mechanism that adds noise to bounded sums, with the same seed: the same numbers as int64 or as Python
    ints give bit-identical releases; sums past int64 give a release (grid units clipped as always) instead of an
    error."""
    from dpstream.pipelines import mechanisms
    from dpstream.pipelines.mechanisms.noise import SecureRandom

    quantum = 2.0**-20
    sums = np.array([2**62 + 2**61, 5 * 2**40, 3, 2**40, 7 * 2**44], dtype=np.int64)
    users = np.array([9, 4, 1, 3, 2], dtype=np.int64)

    def release(values, counts):
        rng = SecureRandom(17)
        if mechanism in ("laplace", "gaussian"):
            return getattr(mechanisms, mechanism)(values, 2.0**25, rng, sensitivity=1000.0, quantum=quantum).value
        if mechanism == "count_mle":
            return mechanisms.count_mle(values, 2.0**25, rng, sensitivity=1000.0, quantum=quantum).value
        if mechanism == "distinct_threshold":
            kept, noisy = mechanisms.distinct_threshold(counts, values, 1.0, 2.0**25, rng, unit_value=2.0**20,
                                                        linf=2.0**30, delta=1e-6, quantum=quantum).value
            return np.concatenate([kept.astype(float), noisy])
        kept, noisy = getattr(mechanisms, mechanism)(values, 2.0**25, 1000.0, rng, delta=1e-6,
                                                     quantum=quantum).value
        return np.concatenate([kept.astype(float), noisy])

    if mechanism == "distinct_threshold":  # a counting job: every record worth unit_value (2**40 units)
        sums = users * np.array([4, 5, 1, 1, 7], dtype=np.int64) * 2**40  # records >= users
    as_ints = release(sums, users)
    assert np.array_equal(release(sums.astype(object), users), as_ints)
    assert np.array_equal(release(sums.astype(object), users.astype(object)), as_ints)
    beyond = sums.astype(object) * 2**30  # past int64
    assert beyond[0] > 2**63
    assert np.isfinite(release(beyond, users)).all()


def test_window_query_and_peak_totals_take_sums_beyond_int64():
    """svt's window query (`window_query`) and peak's window totals (`fixedpoint.total`) of sums past int64: the
    exact quotient, rounded once, clipped to [0, 1]."""
    from dpstream.pipelines.mechanisms.fixedpoint import exact_value, rounded_quotient, total
    from dpstream.pipelines.transforms.svt import window_query

    sums = pd.Series(np.array([2**64, -(2**63) - 5, 7], dtype=object), index=["a", "b", "c"])
    assert total(sums) == 2**63 + 2
    quantum = 2.0**-40
    maximum = float(2**25)
    assert window_query("sum", maximum, sums, quantum) == min(rounded_quotient(exact_value(2**63 + 2, quantum),
                                                                               maximum), 1.0)
    assert window_query("sum", 2.0**60, sums, quantum) == rounded_quotient(exact_value(2**63 + 2, quantum), 2.0**60)


SCALE = 2**32
"""A record at the bound is worth about 2**30 units: reaching 2**63 in one partition and window takes 2**33 such
records, too many for a test. The DirectRunner tests below shrink the unit instead: each record's units are
multiplied by SCALE (`to_units` patched in `bounding`), so a record at the bound is worth about 2**62 units
(still an int64 cell) and a few users take a partition far past int64, through the pipeline's own DoFns,
combiners and shard merges."""
BIG_BOUNDS = ContributionBounds(max_partitions=1, max_contributions=1, min_value=-1000.0, max_value=1000.0)


def _big_records() -> pa.RecordBatch:
    """Window 0: 9 users at +1000 in 'hot' (about 2**65.1 units once scaled), 6 at -1000 in 'neg', 3 small in
    'cold'; window 1: 2 users at 999.75 in 'hot' (just below 2**63 units: int64 again), 2 in 'cold'. One record per user and window: nothing is
    sampled away, so the oracle is the plain sum."""
    rows = ([(f"h{i}", 0, "hot", 1000.0) for i in range(9)] + [(f"n{i}", 0, "neg", -1000.0) for i in range(6)]
            + [(f"c{i}", 0, "cold", 1.5 * (i + 1)) for i in range(3)]
            + [(f"h{i}", 1, "hot", 999.75) for i in range(2)] + [(f"c{i}", 1, "cold", -0.25) for i in range(2)])
    users, days, partitions, values = zip(*rows)
    seconds = START + np.array(days) * DAY + 3600.0 + np.arange(len(rows))
    return events(list(users), seconds, list(partitions), list(values))


def _big_oracle(batch: pa.RecordBatch, bounds: ContributionBounds) -> dict[int, dict[str, int]]:
    return {index: {p: units * SCALE for p, units in sums.items()} for index, sums in _oracle(batch, bounds).items()}


def _scaled_units(monkeypatch) -> None:
    from dpstream.pipelines.transforms import bounding

    monkeypatch.setattr(bounding, "to_units", lambda values, quantum: to_units(values, quantum) * SCALE)


@pytest.mark.parametrize("shards, units", [(1, False), (3, False), (3, True)])
def test_direct_runner_sums_past_int64_are_exact_instead_of_an_error(monkeypatch, shards, units):
    """BoundContributions + PerWindowSums on the DirectRunner, one and three user shards, with and without the
    users per partition: a partition past int64 (which raised SumOverflowError before issue 32) gets its exact
    sum; the others keep theirs (int64 in a window where every sum fits)."""
    from dpstream.pipelines.transforms.aggregation import empty_sums, empty_sums_and_units

    _scaled_units(monkeypatch)
    batch = _big_records()
    expected = _big_oracle(batch, BIG_BOUNDS)
    assert expected[0]["hot"] > 2**65 and expected[0]["neg"] < -(2**64) and max(expected[1].values()) < 2**63
    path = os.path.join(tempfile.mkdtemp(prefix="dpstream-big-"), "sums.json")

    def store(actual):
        with open(path, "w") as handle:
            json.dump(actual, handle)

    def row(element):
        index, sums = element
        column = sums["sum"] if units else sums
        users = {} if not units else {str(p): int(v) for p, v in sums["units"].items()}
        return [index, str(column.dtype), {str(p): int(v) for p, v in column.items()}, users]

    with TestPipeline() as pipeline:
        sums = (pipeline | beam.Create([batch.slice(0, 7), batch.slice(7)])
                | BoundContributions(BIG_BOUNDS, WINDOW, seed=SEED, shards=shards, units=units)
                | PerWindowSums(WINDOW, empty_sums_and_units if units else empty_sums))
        assert_that(sums | beam.Map(row), store)
    with open(path) as handle:
        rows = {index: (dtype, got, users) for index, dtype, got, users in json.load(handle)}
    assert sorted(rows) == [0, 1]
    assert rows[0][:2] == ("object", expected[0]) and rows[1][:2] == ("int64", expected[1])
    if units:
        assert rows[0][2] == {"cold": 3, "hot": 9, "neg": 6} and rows[1][2] == {"cold": 2, "hot": 2}


def test_release_graph_over_sums_past_int64_gives_rows_equal_to_the_mechanisms_on_exact_sums(monkeypatch):
    """The whole release graph (histogram over listed and over unknown partitions, top-k with counts, peak) on
    the DirectRunner, on partitions past int64: every release gives its rows, where SumOverflowError failed the run
    before; the listed histogram's values are those of its mechanism on the exact (Python-int) sums."""
    from dpstream.pipelines.config.specs import HistogramSpec, PeakSpec, TopKSpec
    from dpstream.pipelines.mechanisms import clamp_to_range
    from dpstream.pipelines.planning import plan_job
    from dpstream.pipelines.transforms.histogram import histogram_release
    from dpstream.pipelines.transforms.windowing import iso, release_rng
    from tests.pipelines.helpers import graph_rows

    _scaled_units(monkeypatch)
    listed = ("cold", "hot", "neg", "none")
    releases = (HistogramSpec("known", partitions=listed), HistogramSpec("unknown"),
                TopKSpec("top", k=2, partitions=listed, counts=True), PeakSpec("peak", period=2 * DAY, maximum=1e6))
    plan = plan_job(releases, BIG_BOUNDS, WINDOW, 3.0, 1e-6)
    batch = _big_records()
    rows = graph_rows(beam.Create([batch]), releases, plan, BIG_BOUNDS, WINDOW, SEED)
    expected = _big_oracle(batch, BIG_BOUNDS)
    assert {name: bool(found) for name, found in rows.items()} == {"known": True, "unknown": True, "top": True,
                                                                   "peak": True}
    for index in range(WINDOW.count):
        sums = pd.Series(expected[index], dtype=object).sort_index()
        _, release = histogram_release(plan["known"], sums, release_rng(SEED, "known", index), BIG_BOUNDS.quantum)
        values = clamp_to_range(release.value, *plan["known"].value_range)
        start = iso(WINDOW.bounds(index)[0])
        got = {r["partition"]: r["value"] for r in rows["known"] if r["window_start"] == start}
        assert got == dict(zip(listed, values.tolist()))
    top0 = sorted((r for r in rows["top"] if r["window_start"] == iso(WINDOW.bounds(0)[0])), key=lambda r: r["rank"])
    assert top0[0]["partition"] == "hot"  # 2**65 units ahead of the rest: the exponential mechanism's clear pick
