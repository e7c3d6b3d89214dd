"""The value grid and exact sums (`pipelines.mechanisms.fixedpoint`): the quantum rule, the quantised bounds the sensitivities
come from, exact sums beyond int64 instead of wrap-around or an error, and the one-rounding quotient of peak and svt
queries."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dpstream.pipelines.config.specs import ContributionBounds, SpecError
from dpstream.pipelines.mechanisms.fixedpoint import (
    QUOTIENT_ROUNDING,
    VALUE_BITS,
    exact_value,
    group_sums,
    rounded_quotient,
    to_units,
    total,
    value_quantum,
)
from dpstream.pipelines.planning.grid import normalised_sensitivity
from dpstream.pipelines.transforms.aggregation import SumSeriesFn


@pytest.mark.parametrize("value, quantum", [
    (1.0, 1.0), (3.0, 1.0), (-7.0, 1.0), (2.0, 2.0), (0.75, 0.25), (2.0**40, 2.0**40), (0.0, 1.0),
    (0.1, 2.0**-33),  # 0.1 needs 52 bits: the precision rule, as for value ranges
    (2.0**30 + 1, 2.0),  # odd with 31 bits: no grid of 2**30 units holds it, so the rule (it is quantised to 2**30)
])
def test_counting_jobs_take_the_coarsest_grid_holding_their_value(value, quantum):
    assert value_quantum(value, value) == quantum


@pytest.mark.parametrize("low, high", [(-2.0, 3.0), (0.0, 100.0), (-1000.3, 999.7), (0.0, 0.1), (-1e-6, 5e-7), (0, 2.0**40)])
def test_value_ranges_resolve_the_largest_bound_to_value_bits(low, high):
    q = value_quantum(low, high)
    largest = max(abs(low), abs(high))
    assert math.frexp(q)[0] == 0.5  # a power of two
    assert 2.0**(VALUE_BITS - 1) < largest / q <= 2.0**VALUE_BITS
    bounds = ContributionBounds(2, 3, low, high)
    k_min, k_max = bounds.value_units
    assert (k_min, k_max) == (int(np.rint(low / q)), int(np.rint(high / q)))
    assert abs(k_min * q - low) <= q / 2 and abs(k_max * q - high) <= q / 2
    assert bounds.linf == 3 * max(abs(k_min), abs(k_max)) * q and bounds.l1 == 2 * bounds.linf
    if float(low).is_integer() and float(high).is_integer() and largest <= 2.0**30:  # integers lie on the grid
        assert bounds.quantised_range == (low, high) and bounds.linf == 3 * largest


def test_quantised_bounds_can_exceed_the_declared_ones_and_the_sensitivities_follow_them():
    bounds = ContributionBounds(max_partitions=2, max_contributions=3, min_value=-1000.3, max_value=0.7)
    low, high = bounds.quantised_range
    assert low < -1000.3  # rint moved the bound outwards: a record at -1000.3 adds low
    assert bounds.linf == 3 * -low > 3 * 1000.3 and bounds.l1 == 2 * bounds.linf
    assert bounds.l2 == pytest.approx(math.sqrt(2) * bounds.linf, rel=1e-15) and \
        Fraction(bounds.l2) ** 2 >= 2 * Fraction(bounds.linf) ** 2  # rounded up
    assert bounds.sum_range == (-math.inf, math.inf)
    tiny = ContributionBounds(min_value=-1e-12, max_value=1.0)  # -1e-12 rounds to 0 units: sums are non-negative
    assert tiny.value_units[0] == 0 and tiny.sum_range == (0.0, math.inf)


@pytest.mark.parametrize("low, high", [(1.0, 1.0), (-3.0, 3.0), (0.0, 100.0), (-2.0, 0.0), (2.0, 2.0)])
def test_integer_bounds_keep_the_sensitivities_of_the_declared_bounds(low, high):
    """Integer bounds up to 2**30 lie on their grid: Linf, L1, L2 and the sum range are exactly what they were."""
    bounds = ContributionBounds(max_partitions=3, max_contributions=2, min_value=low, max_value=high)
    declared = 2 * max(abs(low), abs(high))
    assert (bounds.linf, bounds.l1) == (declared, 3 * declared)
    assert bounds.l2 == _smallest_double_at_least_root(3 * declared ** 2)
    assert bounds.sum_range == (0.0 if low >= 0 else -math.inf, 0.0 if high <= 0 else math.inf)


def test_rint_is_monotone_and_within_half_a_quantum():
    rng = np.random.default_rng(1)
    q = value_quantum(-5.0, 5.0)
    ties = (np.arange(-40, 40) + 0.5) * q  # exact half units: rint rounds them to even, still monotone
    values = np.sort(np.concatenate([rng.uniform(-5, 5, 100_000), ties, [-5.0, 5.0, np.nextafter(5.0, 0)]]))
    units = to_units(values, q)
    assert units.dtype == np.int64 and np.all(np.diff(units) >= 0)
    assert np.max(np.abs(units * q - values)) <= q / 2
    assert np.array_equal(to_units(ties, q) % 2, np.zeros(ties.size, dtype=np.int64))
    with pytest.raises(ValueError, match="values must be numbers, got NaN"):
        to_units(np.array([1.0, np.nan]), q)


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_contributions=2**32 + 1), "privacy.max_contributions must be at most 2\\*\\*32"),
    (dict(min_value=-1e-300, max_value=0.0), "must be 0 or lie in \\[2\\*\\*-256, 2\\*\\*256\\], got 1e-300"),
    (dict(min_value=0.0, max_value=1e300), "got 1e\\+300"),
])
def test_bounds_outside_the_exact_range_are_refused(kwargs, message):
    with pytest.raises(SpecError, match=message):
        ContributionBounds(**kwargs)


def test_sums_are_exact_int64_up_to_the_limit():
    big = 2**61
    parts = pd.Series([big, big - 1, -5, 3, big], index=["a", "a", "a", "b", "b"])
    sums = group_sums(parts)
    assert sums.dtype == np.int64 and sums.to_dict() == {"a": 2 * big - 6, "b": big + 3}
    assert total(pd.Series([big // 4 + 1, big // 2, -(big // 2)])) == big // 4 + 1  # |terms| add up to 2.5 * 2**60


def test_a_partition_beyond_int64_is_summed_exactly_not_wrapped_nor_refused():
    """Issue 32: a sum past 2**63 units used to raise SumOverflowError (a failure that depends on the data, not
    debited). It is now the exact sum, as Python ints for that partition; the others keep their int64 values."""
    parts = pd.Series([2**61] * 4 + [3, 4], index=["hot"] * 4 + ["cold"] * 2)  # hot: 2**63, one past int64
    assert parts.groupby(level=0).sum()["hot"] == -(2**63)  # what an unchecked int64 sum returns (negative control)
    sums = group_sums(parts)
    assert sums.dtype == object and sums.to_dict() == {"cold": 7, "hot": 2**63}
    assert all(type(value) is int for value in sums)  # Python ints: later additions stay exact
    merged = SumSeriesFn().extract_output([parts.iloc[:2], parts.iloc[2:]])  # the shard merge, the same way
    assert merged.to_dict() == {"cold": 7, "hot": 2**63} and list(merged.index) == ["cold", "hot"]
    again = SumSeriesFn().extract_output([merged, pd.Series([-(2**63), 1], index=["hot", "new"])])  # object + int64
    assert again.dtype == np.int64 and again.to_dict() == {"cold": 7, "hot": 0, "new": 1}  # back inside int64
    assert total(pd.Series([2**61] * 5, index=list("abcde"))) == 5 * 2**61  # peak and svt window totals
    assert total(merged) == 2**63 + 7


@pytest.mark.parametrize("terms, expected_dtype", [
    ([2**62, 2**62 - 1], np.int64),  # 2**63 - 1: the largest int64, through the exact path
    ([-(2**62), -(2**62)], np.int64),  # -2**63: the smallest int64
    ([2**62, 2**62], object),  # 2**63: one past
    ([-(2**62), -(2**62), -1], object),  # -2**63 - 1
    ([2**62, 2**62, -(2**62), -(2**62) + 5], np.int64),  # past the |terms| limit, but the sum is 5
])
def test_sums_at_the_int64_edges_are_exact_and_int64_whenever_they_fit(terms, expected_dtype):
    sums = group_sums(pd.Series(np.array(terms, dtype=np.int64), index=["a"] * len(terms)))
    assert sums.dtype == expected_dtype and sums["a"] == sum(terms)
    multi = pd.Series(np.array(terms, dtype=np.int64), index=pd.MultiIndex.from_arrays([["a"] * len(terms),
                                                                                         [0] * len(terms)]))
    assert group_sums(multi)[("a", 0)] == sum(terms)  # (partition, bucket) labels: the same
    assert total(pd.Series(np.array(terms, dtype=np.int64))) == sum(terms)


def test_many_partitions_may_exceed_the_limit_together():
    """The limit holds per partition: 8 partitions of 2**60 units each add up to 2**63 but sum exactly."""
    parts = pd.Series([2**59] * 16, index=[f"p{i // 2}" for i in range(16)])
    assert group_sums(parts).tolist() == [2**60] * 8
    frame = pd.DataFrame({"sum": parts, "units": np.ones(16, dtype=np.int64)})
    assert group_sums(frame)["units"].tolist() == [2] * 8


def test_sums_of_floats_are_refused():
    with pytest.raises(TypeError, match="exact sums need int64 value units, got dtype float64"):
        group_sums(pd.Series([1.5], index=["a"]))


def test_rounded_quotient_is_correctly_rounded_beyond_two_to_the_53():
    rng = np.random.default_rng(3)
    for _ in range(2000):
        units = int(rng.integers(0, 2**62)) | 1  # odd, most above 2**53: not a double
        quantum = 2.0 ** int(rng.integers(-40, 0))
        maximum = float(rng.uniform(1, 1e6)) * 2.0**62 * quantum
        exact = exact_value(units, quantum) / Fraction(maximum)
        result = rounded_quotient(exact_value(units, quantum), maximum)
        assert abs(Fraction(result) - exact) <= Fraction(math.ulp(result)) / 2


def test_one_rounding_moves_normalised_queries_by_at_most_two_to_the_minus_53():
    """Exact totals a, b = a + d divided by m and clipped: the change exceeds d / m for some (a, m) (so the
    planned 2**-53 is needed), never by more than QUOTIENT_ROUNDING, and never beyond normalised_sensitivity."""
    rng = np.random.default_rng(4)

    def query(units: int, maximum: float) -> float:
        return min(max(rounded_quotient(units, maximum), 0.0), 1.0)

    excess = []
    for _ in range(20_000):
        maximum = float(rng.uniform(100, 5000))
        a, d = int(rng.integers(-10, int(maximum) + 10)), int(rng.integers(1, 5))
        change = Fraction(query(a + d, maximum)) - Fraction(query(a, maximum))
        excess.append(change - Fraction(d) / Fraction(maximum))
        assert change <= Fraction(normalised_sensitivity(d, maximum))
    assert max(excess) > 0 and max(excess) <= Fraction(QUOTIENT_ROUNDING)


def test_normalised_sensitivity_is_one_at_most_unless_the_maximum_is_too_small():
    assert normalised_sensitivity(2.0, 1100.0) > 2.0 / 1100.0 + QUOTIENT_ROUNDING
    assert normalised_sensitivity(500.0, 500.0) == 1.0
    assert normalised_sensitivity(2.0, 1.0) > 1.0  # callers refuse it (maximum below the sensitivity)


def _smallest_double_at_least_root(square) -> float:
    root = math.sqrt(square)
    while Fraction(root) ** 2 < square:
        root = math.nextafter(root, math.inf)
    return root
