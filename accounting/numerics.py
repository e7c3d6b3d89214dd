"""Shared numerics for privacy bounds: log-space arithmetic and safe inversion.

Privacy quantities are rounded towards the conservative side: an inverted
epsilon is the upper end of its final bracket, never the midpoint.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

LOG_TINY = -745.0  # log of the smallest positive float64, about 5e-324


def log_sub_exp(log_a: float, log_b: float) -> float:
    """log(e^a - e^b) for a >= b; -inf when equal."""
    if log_b == -math.inf:
        return log_a
    if log_b > log_a:
        raise ValueError(f"log_sub_exp needs a >= b, got a={log_a}, b={log_b}")
    diff = log_b - log_a
    if diff == 0.0:
        return -math.inf
    return log_a + math.log(-math.expm1(diff))


def log_add_exp(log_a: float, log_b: float) -> float:
    return float(np.logaddexp(log_a, log_b))


def epsilon_from_delta_curve(
    delta_of_epsilon: Callable[[float], float],
    target_delta: float,
    upper: float,
    lower: float = 0.0,
    rtol: float = 1e-10,
    atol: float = 1e-12,
) -> float:
    """Smallest epsilon in [lower, upper] with delta(epsilon) <= target_delta, rounded up.

    `delta_of_epsilon` must be non-increasing. Returns `math.inf` when even
    `upper` does not reach the target, `lower` when it already does. The
    answer is the upper end of the final bracket, so it never undershoots.
    """
    if delta_of_epsilon(upper) > target_delta:
        return math.inf
    if delta_of_epsilon(lower) <= target_delta:
        return lower
    lo, hi = lower, upper
    while hi - lo > max(atol, rtol * hi):
        mid = 0.5 * (lo + hi)
        if delta_of_epsilon(mid) <= target_delta:
            hi = mid
        else:
            lo = mid
    return hi


def expanding_upper(delta_of_epsilon: Callable[[float], float], target_delta: float, start: float, limit: float = 1e6) -> float:
    """An epsilon at which delta(epsilon) <= target_delta, found by doubling from `start`; inf if none below `limit`."""
    upper = max(start, 1e-6)
    while delta_of_epsilon(upper) > target_delta:
        upper *= 2.0
        if upper > limit:
            return math.inf
    return upper


def expm1_minus_x(x):
    """e^x - 1 - x, accurate to a few ulps for all x <= 709 (numpy arrays accepted).

    Near 0 the direct form loses all digits (both terms are about x), so
    |x| < 0.7 uses the Taylor series sum_{n>=2} x^n / n!, truncated after
    n = 18 (the remainder is below 3e-17 relative there).
    """
    x = np.asarray(x, dtype=float)
    result = np.empty_like(x)
    small = np.abs(x) < 0.7
    xs = x[small]
    series = np.full_like(xs, _INVERSE_FACTORIALS[0])
    for coefficient in _INVERSE_FACTORIALS[1:]:  # Horner: x^2 (1/2! + x (1/3! + x (...)))
        series = series * xs + coefficient
    result[small] = series * xs * xs
    large = ~small
    with np.errstate(over="ignore"):
        result[large] = np.expm1(x[large]) - x[large]
    return result[()] if result.ndim == 0 else result


_INVERSE_FACTORIALS = tuple(1.0 / math.factorial(n) for n in range(18, 1, -1))
