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
usually at least Linf >= M. An exact int64 sum admits SUM_LIMIT = 2**62 units of
magnitude, so at least 2**(62 - VALUE_BITS) = 2**32 (4.3e9) records at the
largest |value| per partition and window (more when values are smaller); one
user's at most max_contributions records of a partition sum to at most
max_contributions 2**30 units, so max_contributions is capped at 2**32
(`spec.ContributionBounds`). A larger VALUE_BITS halves the capacity per bit,
a smaller one coarsens the values towards the noise grid.

Sums (`group_sums`, `total`) are int64 sums, checked: int64 addition wraps
modulo 2**64, which is associative, so the result equals the true sum in any
order whenever the true sum lies in [-2**63, 2**63); the check requires the sum
of |terms| (computed in float64, relative error below n 2**-53 for n < 2**51
terms) to be at most SUM_LIMIT = 2**62, which proves that (proof:
docs/proofs/pipelines.transforms.bounding.BoundContributions.md, Claim 3). Otherwise
`SumOverflowError`, never a silent wrap.

Quotients by a public maximum (`rounded_quotient`): the exact value
units * q / m with one correctly rounded division (Python rationals), so a
query clipped to [0, 1] moves by at most |a - b| / m + 2**-53 between exact
totals a and b (docs/proofs/pipelines.planning.job.plan_job.md, "Normalised queries").

Numerics: exact (integer arithmetic) except `rounded_quotient`, which rounds once.
Runtime: O(n) per sum (one int64 and one float64 pass, plus a groupby when the
float pass exceeds the limit over all labels together).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd

VALUE_BITS = 30
"""A value resolves to 2**-VALUE_BITS of the largest |bound|; see the module docstring for the choice."""

SUM_LIMIT = 2.0**62
"""Largest sum of |units| an exact int64 sum accepts (half of 2**63, for the float64 estimate of that sum)."""

MAX_CONTRIBUTIONS = 2**62 // 2**VALUE_BITS
"""max_contributions at most this (2**32), so one user's records of a partition sum to at most 2**62 units."""

MAGNITUDE_RANGE = (2.0**-256, 2.0**256)
"""Nonzero max(|min_value|, |max_value|) must lie here, so the quantum and every sum are normal finite doubles."""


QUOTIENT_ROUNDING = 2.0**-53
"""How far `rounded_quotient` can move a difference of two quotients in [0, 1]: two roundings of 2**-54 at most."""


class SumOverflowError(ArithmeticError):
    """An exact int64 sum of value units would leave the int64 range; the message names the partition."""


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


def _require_in_range(magnitudes: pd.Series, where: str) -> None:
    over = magnitudes[magnitudes > SUM_LIMIT]
    if len(over):
        label = f" {over.index[0]!r}" if where == "partition" else ""
        raise SumOverflowError(
            f"bounded values of {where}{label} add up to {over.iloc[0]:.4g} units of the value grid in "
            f"absolute value; exact int64 sums allow at most 2**62 (2**{62 - VALUE_BITS} records at the largest |value|): "
            f"use fewer records per partition and window, or narrower value bounds")


def _magnitudes(parts: pd.Series | pd.DataFrame) -> np.ndarray:
    values = parts.to_numpy()
    if values.dtype.kind != "i":
        raise TypeError(f"exact sums need int64 value units, got dtype {values.dtype}")
    return np.abs(values.astype(np.float64))


def group_sums(parts: pd.Series | pd.DataFrame) -> pd.Series | pd.DataFrame:
    """Exact int64 sums per index label (per tuple of labels for a MultiIndex), sorted by label; `SumOverflowError`
    when a sum could leave int64.

    Every column of a DataFrame is summed and checked alike.
    """
    magnitudes = _magnitudes(parts)
    if magnitudes.sum() > SUM_LIMIT:  # all labels together exceed the limit: check label by label
        per_label = pd.DataFrame(magnitudes.reshape(len(parts), -1), index=parts.index).groupby(level=0).sum()
        _require_in_range(per_label.max(axis=1), "partition")
    return parts.groupby(level=list(range(parts.index.nlevels)), sort=True).sum()


def sums_by_code(codes: np.ndarray, units: np.ndarray, names=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the distinct codes in ascending order, the exact int64 sum of `units` per code, how many items each
    had): `group_sums` for integer group codes, with a sort (or, for dense non-negative codes such as
    factorised labels, a bincount) instead of grouping labels. `SumOverflowError` when a code's sum could leave
    int64, as `group_sums` (naming the label `names[code]` when given)."""
    units, codes = np.asarray(units), np.asarray(codes)
    if units.dtype.kind != "i":
        raise TypeError(f"exact sums need int64 value units, got dtype {units.dtype}")
    if not units.size:
        return codes[:0], units[:0].astype(np.int64), np.array([], dtype=np.int64)
    if codes.min() >= 0 and codes.max() < 4 * codes.size + 1024:
        return _dense_sums(codes, units.astype(np.int64, copy=False), names)
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    magnitudes = np.abs(units.astype(np.float64))[order]
    if magnitudes.sum() > SUM_LIMIT:  # all codes together exceed the limit: check code by code
        per_code = np.add.reduceat(magnitudes, starts)
        labels = ordered[starts] if names is None else np.asarray(names, dtype=object)[ordered[starts]]
        _require_in_range(pd.Series(per_code, index=labels), "partition")
    return ordered[starts], np.add.reduceat(units[order].astype(np.int64), starts), np.diff(np.r_[starts, ordered.size])


def label_sums(labels, units: np.ndarray, counts: bool = False) -> pd.Series | pd.DataFrame:
    """Items (a label each, numpy or pandas; int64 value units) -> the exact int64 sum per label, sorted by label:
    `group_sums` without pandas grouping; with `counts`, a DataFrame of the sums ("sum") and how many items each
    label had ("units")."""
    codes, names = pd.factorize(labels)
    return code_sums(codes, names, units, counts)


def code_sums(codes: np.ndarray, names, units: np.ndarray, counts: bool = False) -> pd.Series | pd.DataFrame:
    """`label_sums` of items given as codes into the labels `names` (numpy, pandas or Arrow)."""
    present, totals, items = sums_by_code(codes, units, names)
    labels = np.asarray(names.take(present), dtype=object)
    order = np.argsort(labels, kind="stable")  # sorted as pandas sorts an index of labels, without its overhead
    index = pd.Index(labels[order])
    if counts:
        return pd.DataFrame({"sum": totals[order], "units": items[order]}, index=index)
    return pd.Series(totals[order], index=index, copy=False)


def _dense_sums(codes: np.ndarray, units: np.ndarray, names) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`sums_by_code` for small non-negative codes: counts by bincount, exact int64 sums by np.add.at (no partial
    sum can leave int64 while the magnitudes of all items add up to at most SUM_LIMIT; else code by code)."""
    magnitudes = np.abs(units.astype(np.float64))
    if magnitudes.sum() > SUM_LIMIT:
        per_code = np.bincount(codes, weights=magnitudes)
        present = np.flatnonzero(per_code)
        labels = present if names is None else np.asarray(names, dtype=object)[present]
        _require_in_range(pd.Series(per_code[present], index=labels), "partition")
    counts = np.bincount(codes)
    sums = np.zeros(counts.size, dtype=np.int64)
    np.add.at(sums, codes, units)
    present = np.flatnonzero(counts)
    return present.astype(codes.dtype, copy=False), sums[present], counts[present]


def total(units: pd.Series) -> int:
    """The exact sum of an int64 Series of units as a Python int; `SumOverflowError` when it could leave int64."""
    magnitude = _magnitudes(units).sum()
    _require_in_range(pd.Series([magnitude]), "a window's partitions together")
    return int(units.to_numpy().sum())


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
