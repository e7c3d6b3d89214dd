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
    from dpstream.pipelines.mechanisms.fixedpoint import SUM_LIMIT, SumOverflowError, sums_by_code

    rng = np.random.default_rng(seed)
    names = np.array([f"p{i}" for i in range(7)], dtype=object)
    codes = rng.integers(0, 7, 500)
    units = rng.integers(-(2**52), 2**52, 500, dtype=np.int64)
    present, totals, counts = sums_by_code(codes, units, names)
    expected = group_sums(pd.Series(units, index=names[codes]))
    assert list(names[present]) == list(expected.index) and totals.tolist() == expected.tolist()
    assert totals.tolist() == [sum(int(u) for u, c in zip(units, codes) if c == p) for p in present]
    assert counts.tolist() == [int((codes == p).sum()) for p in present]
    huge = np.full(4, 2**61, dtype=np.int64)  # one partition past 2**62 units: refused, never wrapped
    with pytest.raises(SumOverflowError, match="partition 'p0'"):
        sums_by_code(np.zeros(4, dtype=np.int64), huge, names)
    assert sums_by_code(np.arange(4), huge, names)[1].tolist() == [2**61] * 4 and 4 * 2.0**61 > SUM_LIMIT
    spread = 10**12  # codes far apart take the sorting path instead of the bincount: the same answers
    sparse, sparse_totals, sparse_counts = sums_by_code(codes * spread, units)
    assert (sparse.tolist(), sparse_totals.tolist(), sparse_counts.tolist()) == (
        [p * spread for p in present], totals.tolist(), counts.tolist())
    with pytest.raises(SumOverflowError):
        sums_by_code(np.zeros(4, dtype=np.int64) + spread, huge)


@pytest.mark.parametrize("seed", range(3))
def test_label_sums_and_the_shard_merge_equal_group_sums(seed):
    """Window sums (`label_sums`) and the merge of a window's shards (`SumSeriesFn`, which takes the same path for
    Series) against `group_sums` on the concatenated parts: same labels, same order, same int64 values, same index
    dtype; with counts, the number of items per label. A shard sum past 2**62 units is refused, never wrapped."""
    from dpstream.pipelines.mechanisms.fixedpoint import SumOverflowError, label_sums
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
    huge = [pd.Series([2**61, 2**60], index=pd.Index(["a", "b"])) for _ in range(3)]  # a: 1.5 * 2**62
    for merge in (lambda: group_sums(pd.concat(huge)), lambda: combine.extract_output(huge)):
        with pytest.raises(SumOverflowError, match="partition 'a'"):
            merge()
