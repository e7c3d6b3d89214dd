"""From a Rényi-DP curve to (epsilon, delta): the tightest known pointwise conversion.

Privacy: if a mechanism satisfies D_alpha(M(x) || M(x')) <= R(alpha) for every
ordered pair of neighbours at some order alpha > 1, then for every epsilon it
is (epsilon, delta)-DP with
    delta = exp((alpha - 1)(R(alpha) - epsilon)) / (alpha - 1) * (1 - 1/alpha)^alpha,
equivalently, for every delta in (0, 1), (epsilon, delta)-DP with
    epsilon = R(alpha) + log((alpha - 1)/alpha) - (log delta + log alpha) / (alpha - 1).
Every alpha gives a valid guarantee, so the minimum over any set of orders is
valid too.
Proof: Canonne–Kamath–Steinke 2020, Prop 12 (their Cor 13 is the zCDP case
R(alpha) = alpha rho); the same bound is Balle–Barthe–Gaboardi–Hsu–Sato 2020,
Thm 21. Asoodeh et al. 2021 show the exact conversion from a single order has
no closed form; this one is the tightest closed form in use.
Checks: none here; callers pass a curve R defined for all alpha > 1 and a delta
in (0, 1) or an epsilon >= 0.
Numerics: orders are handled as gaps g = alpha - 1 so orders close to 1 keep
their digits; every logarithm of alpha is log1p(g). The minimum over alpha is
taken over a log-spaced grid g in [1e-6, 1e6] (6 points per decade) and then
refined eight times by a 9-point log-spaced grid between the neighbours of the
best order (each round shrinks the bracket fourfold, to about 1e-5 relative in
alpha at the end). Each candidate is inflated by RENYI_RTOL times the sum of the absolute
values of the terms it adds, which covers float rounding and the relative
error of the curve itself (every curve in `accounting.bounds` is accurate to
better than 1e-13 relative), so the reported value never undershoots the
formula at the order it came from.
Runtime: 145 curve evaluations per query, vectorised (one call with 73 orders,
eight with 9).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

RENYI_RTOL = 1e-11
"""Relative inflation of every candidate, for rounding and curve error."""

COARSE_GAPS = np.logspace(-6.0, 6.0, 73)
"""alpha - 1 for the first pass of the order search."""

_ZOOM_POINTS = 9
_ZOOM_ROUNDS = 8

Curve = Callable[[np.ndarray], np.ndarray]
"""Maps an array of gaps alpha - 1 > 0 to the Rényi bound R(alpha) at each."""


def _log_delta_and_allowance(curve_values: np.ndarray, gaps: np.ndarray, epsilon):
    """The conversion's log delta at each order and its rounding allowance (not yet added)."""
    excess = gaps * (curve_values - epsilon)
    shape = (1.0 + gaps) * (np.log(gaps) - np.log1p(gaps))  # alpha log(1 - 1/alpha)
    log_gap = np.log(gaps)
    allowance = RENYI_RTOL * (gaps * (np.abs(curve_values) + np.abs(epsilon)) + np.abs(shape) + np.abs(log_gap))
    return excess + shape - log_gap, allowance


def log_delta_at_orders(curve_values: np.ndarray, gaps: np.ndarray, epsilon: float) -> np.ndarray:
    """The conversion's log delta at each order, inflated by the rounding allowance."""
    value, allowance = _log_delta_and_allowance(curve_values, gaps, epsilon)
    return value + allowance


def epsilon_at_orders(curve_values: np.ndarray, gaps: np.ndarray, log_delta: float) -> np.ndarray:
    """The conversion's epsilon at each order, inflated by the rounding allowance.

    Besides its own terms' allowance, each value is raised by twice the log-delta
    allowance divided by alpha - 1, so that `log_delta_at_orders` at the returned
    epsilon and the same order is at most log_delta: epsilon and delta queries
    round-trip without overshooting.
    """
    log_ratio = np.log(gaps) - np.log1p(gaps)  # log((alpha - 1) / alpha)
    penalty = (log_delta + np.log1p(gaps)) / gaps
    value = curve_values + log_ratio - penalty
    _, delta_allowance = _log_delta_and_allowance(curve_values, gaps, value)
    own = RENYI_RTOL * (np.abs(curve_values) + np.abs(log_ratio) + np.abs(penalty))
    return value + own + 2.0 * delta_allowance / gaps


def _minimise_over_orders(objective: Callable[[np.ndarray], np.ndarray]) -> float:
    """min of objective(gaps) over the coarse grid and two zoomed grids around its best point."""
    gaps = COARSE_GAPS
    best = math.inf
    for round_index in range(_ZOOM_ROUNDS + 1):
        values = objective(gaps)
        values = np.where(np.isnan(values), np.inf, values)
        index = int(np.argmin(values))
        best = min(best, float(values[index]))
        if round_index == _ZOOM_ROUNDS or not math.isfinite(best):
            break
        low = gaps[max(index - 1, 0)]
        high = gaps[min(index + 1, len(gaps) - 1)]
        gaps = np.geomspace(low, high, _ZOOM_POINTS)
    return best


def renyi_epsilon(curve: Curve, delta: float) -> float:
    """Smallest epsilon the conversion certifies at `delta` (0 <= result, inf if none)."""
    if delta >= 1.0:
        return 0.0
    log_delta = math.log(delta)
    best = _minimise_over_orders(lambda gaps: epsilon_at_orders(curve(gaps), gaps, log_delta))
    return max(0.0, best)


def renyi_log_delta(curve: Curve, epsilon: float) -> float:
    """log of the smallest delta the conversion certifies at `epsilon` (at most 0)."""
    if epsilon == math.inf:  # every Renyi-bounded pair is (inf, 0)-DP
        return -math.inf
    best = _minimise_over_orders(lambda gaps: log_delta_at_orders(curve(gaps), gaps, epsilon))
    return min(0.0, best)
