"""Exact fixed-point arithmetic for bounded values: the value grid, exact int64 sums, one-rounding quotients.

Why. Contribution bounding promises that one privacy unit moves a bounded
per-partition sum by at most Linf (`spec.ContributionBounds`). Sums of
floats are rounded at every addition, in an order set by the data's arrival,
so the computed sums of two neighbouring inputs can differ by more than Linf
plus the one grid step the planner allows for rounding (Casacuberta–Shoemate–
Vadhan–Wagaman 2022, "Widespread underestimation of sensitivity in
differentially private libraries and how to fix it"). dpstream
instead maps each clipped value to an integer number of units of a public
power-of-two quantum q and adds integers, which is exact and independent of
order, batching and sharding.

The value grid (`value_quantum`), chosen from the public bounds only:
- counting jobs (min_value = max_value = v): every kept record is worth v, so
  q = the largest power of two dividing v whenever v / q needs at most
  VALUE_BITS bits (every integer |v| <= 2**30: q >= 1, and v = 1 gives q = 1,
  so sums are the plain int64 counts they always were); otherwise as below;
- otherwise q = the smallest power of two >= M 2**-VALUE_BITS, M = max(|min_value|,
  |max_value|); integer bounds with M <= 2**30 lie on this grid (q <= 1).
A clipped value v becomes k = rint(v / q) (round half to even: monotone, and
exact because v / q is an exact division by a power of two); the bounds become
k_min = rint(min_value / q), k_max = rint(max_value / q), and every record's k
lies in [k_min, k_max] because rint is monotone. The sensitivities are those of
the quantised bounds (`ContributionBounds.linf`), which exceed the declared ones
by at most q / 2 < M 2**-VALUE_BITS per record: exactly what the code can produce.

VALUE_BITS = 30 trades resolution against capacity. Each record is an integer
|k| <= 2**30 (M / q lies in (2**29, 2**30]) resolved to q / 2 < 2**-30 M, about
1e-9 of the largest value: typically a thousand times finer than the noise grid
(2**-20 of the noise scale, `noise.GRANULARITY_BITS`), as noise scales are
usually at least Linf >= M. One user's at most max_contributions records of a
partition sum to at most max_contributions 2**30 units, so max_contributions is
capped at 2**32 (`spec.ContributionBounds`) and a user's cell always fits int64.
A larger VALUE_BITS coarsens nothing but costs int64 headroom (below), a
smaller one coarsens the values towards the noise grid.

Sums (`group_sums`, `sums_by_code`, `label_sums`, `code_sums`, `total`) are
exact for every input, however many records: int64 addition wraps modulo 2**64,
which is associative, so an int64 sum equals the true sum in any order whenever
the true sum lies in [-2**63, 2**63). The fast path adds int64 and keeps a sum
when the sum of its |terms| (computed in float64, relative error below
n 2**-53 for n < EXACT_TERMS = 2**51 terms) is at most SUM_LIMIT = 2**62, which
proves that (proof: docs/proofs/pipelines.transforms.bounding.BoundContributions.md,
Claim 3): at least 2**(62 - VALUE_BITS) = 2**32 records at the largest |value|
per partition and window. A sum (a label, a code, a cell) that fails this test,
and only such a sum, is added again in Python integers (arbitrary precision),
which are exact whatever the magnitude. The test only decides how the true sum
is computed, never what it is. A result is int64 when every sum of it lies in
int64 and otherwise an object array of Python ints (`narrowed`); the noise path
takes both (`noise.to_grid`: the same grid units for the same numbers), as do
`total` and `exact_value`. Nothing raises: the int64 range is no limit on the
data (the former `SumOverflowError` is gone).

Quotients by a public maximum (`rounded_quotient`): the exact value
units * q / m with one correctly rounded division (Python rationals), so a
query clipped to [0, 1] moves by at most |a - b| / m + 2**-53 between exact
totals a and b (docs/proofs/pipelines.planning.job.plan_job.md, "Normalised queries").

Numerics: exact (integer arithmetic) except `rounded_quotient`, which rounds once.
Runtime: O(n) per sum (one int64 and one float64 pass, plus a groupby when the
float pass exceeds the limit over all labels together, plus a Python-int pass
over the items of the labels beyond the limit: about 0.4 us per item, 2 us in
`group_sums`, measured on 10^6 items).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd

VALUE_BITS = 30
"""A value resolves to 2**-VALUE_BITS of the largest |bound|; see the module docstring for the choice."""

SUM_LIMIT = 2.0**62
"""Largest sum of |units| the int64 fast path keeps (half of 2**63, for the float64 estimate of that sum); a sum
beyond it is added in Python integers instead."""

EXACT_TERMS = 2**51
"""A sum of this many terms or more is added in Python integers whatever its magnitude: below it the float64 sum
of |terms| errs by less than a quarter, which the SUM_LIMIT test needs (module docstring)."""

INT64_RANGE = (-(2**63), 2**63)
"""[low, high) of int64: a result is int64 when every sum lies here (`narrowed`)."""

MAX_CONTRIBUTIONS = 2**62 // 2**VALUE_BITS
"""max_contributions at most this (2**32), so one user's records of a partition sum to at most 2**62 units."""

MAGNITUDE_RANGE = (2.0**-256, 2.0**256)
"""Nonzero max(|min_value|, |max_value|) must lie here, so the quantum and every sum are normal finite doubles."""


QUOTIENT_ROUNDING = 2.0**-53
"""How far `rounded_quotient` can move a difference of two quotients in [0, 1]: two roundings of 2**-54 at most."""


def is_integer_objects(values) -> bool:
    """True for a numpy object array whose every item is an integer (Python int or numpy integer, not bool): the
    exact sums beyond int64 (`narrowed`), which mechanisms take as they take int64 arrays."""
    array = np.asarray(values)
    return array.dtype == object and all(
        isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)) for item in array.flat)


def exact_integers(values) -> np.ndarray:
    """Integer units (a numpy integer array, or an object array of integers) as an object array of Python ints,
    whose additions are exact at any magnitude (numpy integers inside an object array would still wrap)."""
    array = np.asarray(values)
    if array.dtype.kind in "iu":
        return array.astype(object)  # numpy converts every item to a Python int
    return np.array([int(item) for item in array.flat], dtype=object).reshape(array.shape)


def narrowed(sums: np.ndarray) -> np.ndarray:
    """Exact sums (an object array of Python ints) as int64 when every one lies in int64, else as they are: the
    dtype says whether a result needed more than int64, never what its numbers are."""
    low, high = INT64_RANGE
    if not sums.size:
        return np.zeros(sums.shape, dtype=np.int64)
    if low <= sums.min() and sums.max() < high:
        return sums.astype(np.int64)
    return sums


def _units(values) -> np.ndarray:
    """`values` as a numpy array of value units: signed integers, or an object array of integers (sums beyond
    int64); TypeError otherwise (floats are never summed)."""
    array = np.asarray(values)
    if array.dtype.kind != "i" and not is_integer_objects(array):
        raise TypeError(f"exact sums need int64 value units, got dtype {array.dtype}")
    return array


def _fast_path_holds(units: np.ndarray) -> bool:
    """Whether the int64 sum of all `units` (signed integers) is exact: fewer than EXACT_TERMS terms whose |units|
    add up to at most SUM_LIMIT in float64 (module docstring)."""
    return units.size < EXACT_TERMS and np.abs(units.astype(np.float64)).sum() <= SUM_LIMIT


def power_of_two_at_least(x: float) -> float:
    """The smallest power of two >= x (x a positive finite double), computed exactly."""
    if not (isinstance(x, (int, float)) and math.isfinite(x) and x > 0):
        raise ValueError(f"power_of_two_at_least: x must be a positive finite number, got {x!r}")
    mantissa, exponent = math.frexp(float(x))  # x = mantissa * 2**exponent, mantissa in [0.5, 1)
    return math.ldexp(1.0, exponent - 1) if mantissa == 0.5 else math.ldexp(1.0, exponent)


def is_power_of_two(x: float) -> bool:
    """True when x is a positive finite power of two (2**e for an integer e)."""
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0 and math.frexp(float(x))[0] == 0.5


def value_quantum(min_value: float, max_value: float) -> float:
    """The public power-of-two quantum q of the value grid for clipping range [min_value, max_value] (module docstring).

    Checks: max(|min_value|, |max_value|) is zero or lies in MAGNITUDE_RANGE.
    Caller must ensure: min_value <= max_value, both finite (`ContributionBounds` checks it).
    """
    largest = max(abs(min_value), abs(max_value))
    if largest == 0.0:
        return 1.0  # every value is 0, which lies on every grid
    low, high = MAGNITUDE_RANGE
    if not low <= largest <= high:
        raise ValueError(f"max(|min_value|, |max_value|) must be 0 or lie in [2**-256, 2**256], got {largest!r}")
    if min_value == max_value:
        numerator, denominator = abs(float(min_value)).as_integer_ratio()  # denominator is a power of two
        twos = (numerator & -numerator).bit_length() - 1
        if numerator >> twos <= 2**VALUE_BITS:
            return math.ldexp(1.0, twos - (denominator.bit_length() - 1))
    return power_of_two_at_least(math.ldexp(largest, -VALUE_BITS))


def to_units(values, quantum: float) -> np.ndarray:
    """int64 units k = rint(values / quantum) of clipped values (round half to even: monotone and exact).

    Caller must ensure: values are clipped to bounds whose quantum this is (then |k| <= 2**VALUE_BITS).
    Checks: values are not NaN.
    """
    units = np.rint(np.asarray(values, dtype=np.float64) / quantum)
    if np.isnan(units).any():
        raise ValueError("values must be numbers, got NaN")
    return units.astype(np.int64)


def group_sums(parts: pd.Series | pd.DataFrame) -> pd.Series | pd.DataFrame:
    """Exact sums per index label (per tuple of labels for a MultiIndex), sorted by label.

    Every column of a DataFrame is summed alike. Columns are int64 value units or Python ints (sums beyond
    int64); each result column is int64 when all its sums lie in int64, else Python ints (`narrowed`).
    Fast path: pandas' int64 groupby, kept for every label whose |terms| pass the SUM_LIMIT test; the labels that
    do not (and every label when a column already holds Python ints) are summed again in Python integers.
    """
    levels = list(range(parts.index.nlevels))
    columns = [parts] if isinstance(parts, pd.Series) else [parts[name] for name in parts.columns]
    values = [_units(column.to_numpy()) for column in columns]
    if any(column.dtype == object for column in values):
        return _narrowed_pandas(_python_ints(parts).groupby(level=levels, sort=True).sum())
    sums = parts.groupby(level=levels, sort=True).sum()
    if all(_fast_path_holds(column) for column in values):
        return sums
    magnitudes = np.abs(np.column_stack(values).astype(np.float64))
    grouped = pd.DataFrame(magnitudes, index=parts.index).groupby(level=levels, sort=True)
    per_label = grouped.sum().max(axis=1)  # the same labels in the same order as `sums`
    over = ~(per_label.to_numpy() <= SUM_LIMIT) | (grouped.size().to_numpy() >= EXACT_TERMS)
    if not over.any():
        return sums
    rows = parts.index.isin(per_label.index[over])
    exact = _python_ints(parts[rows]).groupby(level=levels, sort=True).sum()  # the same labels, in the same order
    result = _python_ints(sums)
    if isinstance(result, pd.Series):
        result.iloc[np.flatnonzero(over)] = exact.to_numpy()
    else:
        result.iloc[np.flatnonzero(over), :] = exact.to_numpy()
    return _narrowed_pandas(result)


def _python_ints(parts: pd.Series | pd.DataFrame) -> pd.Series | pd.DataFrame:
    """The same Series or DataFrame with every column an object array of Python ints (`exact_integers`)."""
    if isinstance(parts, pd.Series):
        return pd.Series(exact_integers(parts.to_numpy()), index=parts.index, name=parts.name, dtype=object)
    return pd.DataFrame({name: exact_integers(parts[name].to_numpy()) for name in parts.columns}, index=parts.index,
                        dtype=object)


def _narrowed_pandas(sums: pd.Series | pd.DataFrame) -> pd.Series | pd.DataFrame:
    """`narrowed` column by column."""
    if isinstance(sums, pd.Series):
        return pd.Series(narrowed(sums.to_numpy(dtype=object)), index=sums.index, name=sums.name)
    return pd.DataFrame({name: narrowed(sums[name].to_numpy(dtype=object)) for name in sums.columns},
                        index=sums.index)


def sums_by_code(codes: np.ndarray, units: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the distinct codes in ascending order, the exact sum of `units` per code, how many items each had):
    `group_sums` for integer group codes, with a sort (or, for dense non-negative codes such as factorised labels,
    a bincount) instead of grouping labels. `units`: int64, or Python ints; the sums are int64 when every one
    lies in int64, else Python ints (`narrowed`). The int64 fast path is kept for every code whose |terms| pass
    the SUM_LIMIT test; the codes that do not are summed again in Python integers."""
    units, codes = _units(units), np.asarray(codes)
    if not units.size:
        return codes[:0], np.zeros(0, dtype=np.int64), np.array([], dtype=np.int64)
    if codes.min() >= 0 and codes.max() < 4 * codes.size + 1024:
        return _dense_sums(codes, units)
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    counts = np.diff(np.r_[starts, ordered.size])
    units = units[order]
    if units.dtype == object:
        return ordered[starts], narrowed(np.add.reduceat(exact_integers(units), starts)), counts
    units = units.astype(np.int64, copy=False)
    sums = np.add.reduceat(units, starts)
    if _fast_path_holds(units):
        return ordered[starts], sums, counts
    per_code = np.add.reduceat(np.abs(units.astype(np.float64)), starts)
    over = np.flatnonzero(~(per_code <= SUM_LIMIT) | (counts >= EXACT_TERMS))
    if not over.size:
        return ordered[starts], sums, counts
    exact = sums.astype(object)
    for code in over:  # a Python-int pass over these codes' items only
        exact[code] = sum(units[starts[code]:starts[code] + counts[code]].tolist())
    return ordered[starts], narrowed(exact), counts


def label_sums(labels, units: np.ndarray, counts: bool = False) -> pd.Series | pd.DataFrame:
    """Items (a label each, numpy or pandas; int64 value units, or Python ints) -> the exact sum per label, sorted
    by label: `group_sums` without pandas grouping; with `counts`, a DataFrame of the sums ("sum") and how many
    items each label had ("units")."""
    codes, names = pd.factorize(labels)
    return code_sums(codes, names, units, counts)


def code_sums(codes: np.ndarray, names, units: np.ndarray, counts: bool = False) -> pd.Series | pd.DataFrame:
    """`label_sums` of items given as codes into the labels `names` (numpy, pandas or Arrow)."""
    present, totals, items = sums_by_code(codes, units)
    labels = np.asarray(names.take(present), dtype=object)
    order = np.argsort(labels, kind="stable")  # sorted as pandas sorts an index of labels, without its overhead
    index = pd.Index(labels[order])
    if counts:
        return pd.DataFrame({"sum": totals[order], "units": items[order]}, index=index)
    return pd.Series(totals[order], index=index, copy=False)


def _dense_sums(codes: np.ndarray, units: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`sums_by_code` for small non-negative codes: counts by bincount, int64 sums by np.add.at (no partial sum can
    leave int64 while the magnitudes of all items add up to at most SUM_LIMIT), and the codes beyond the limit
    again in Python integers (np.add.at over an object array)."""
    counts = np.bincount(codes)
    present = np.flatnonzero(counts)
    codes_out = present.astype(codes.dtype, copy=False)
    if units.dtype == object:
        exact = np.zeros(counts.size, dtype=object)
        np.add.at(exact, codes, exact_integers(units))
        return codes_out, narrowed(exact[present]), counts[present]
    units = units.astype(np.int64, copy=False)
    sums = np.zeros(counts.size, dtype=np.int64)
    np.add.at(sums, codes, units)
    if _fast_path_holds(units):
        return codes_out, sums[present], counts[present]
    per_code = np.bincount(codes, weights=np.abs(units.astype(np.float64)), minlength=counts.size)
    over = ~(per_code <= SUM_LIMIT) | (counts >= EXACT_TERMS)
    if not over.any():
        return codes_out, sums[present], counts[present]
    rows = over[codes]  # the items of the codes beyond the limit, and only those, in Python integers
    exact = sums.astype(object)
    exact[over] = 0
    np.add.at(exact, codes[rows], exact_integers(units[rows]))
    return codes_out, narrowed(exact[present]), counts[present]


def total(units: pd.Series) -> int:
    """The exact sum of a Series of units (int64, or Python ints) as a Python int, at any magnitude."""
    values = _units(units.to_numpy())
    if values.dtype != object and _fast_path_holds(values):
        return int(values.astype(np.int64, copy=False).sum())
    return sum(exact_integers(values).tolist())


def exact_value(units: int, quantum: float) -> Fraction:
    """The number `units` units of `quantum` stand for, as an exact rational."""
    return Fraction(int(units)) * Fraction(quantum)


def rounded_quotient(numerator, denominator) -> float:
    """numerator / denominator of exact rationals (ints, floats or Fractions) with one correct rounding.

    Python's int true division is correctly rounded (round half to even), so
    |result - exact| <= ulp/2, which is at most 2**-54 for exact quotients in [0, 1].
    """
    quotient = Fraction(numerator) / Fraction(denominator)
    return quotient.numerator / quotient.denominator
