"""Gaussian AboveThreshold: pure ex-post DP of its outcomes (LPB Thm 17), ex-ante RDP (Zhu–Wang, LPB Thm 6)
and the probabilistic DP it implies (LPB Sec 2)."""
from __future__ import annotations

import functools
import math

import numpy as np

from dpstream.accounting.selection.arguments import (
    require_counts,
    require_finite,
    require_positive,
    require_range,
)
from dpstream.accounting.selection.quadrature import (
    EPSILON_FLOOR,
    EPSILON_SLACK,
    log_gaussian_expectation,
    rounded_up_log_ratio,
)


def above_threshold_expost_epsilon(
    t, sigma_threshold, sigma_query, threshold, sensitivity, lower=0.0, upper=1.0, halted=True
):
    """Pure ex-post DP loss of one Gaussian AboveThreshold instance after t answers.

    Mechanism (Lebensold–Precup–Balle 2024, Algorithm 3; Zhu–Wang 2020): draw
    rho_hat = threshold + N(0, sigma_threshold^2) once; for i = 1, 2, ...
    answer TOP and halt if q_i(D) + N(0, sigma_query^2) >= rho_hat, else BOT.

    Privacy: epsilon_post-ex-post-DP for the realised output o: for every pair
    of neighbours (each query moves by at most `sensitivity`),
    log Pr[M(D)=o] / Pr[M(D')=o] <= epsilon_post(o). With x ~ N(0, 1),
    r = sigma_threshold / sigma_query, a = lower, b = upper, rho = threshold,
    and U_k = Phi(r x + (rho - b + k)/sigma_query), T_k = Phi(-r x + (a - rho + k)/sigma_query):
    - halted=True, o = BOT^(t-1) TOP:
      epsilon = log E[U_Delta^(t-1) T_Delta] - log E[U_0^(t-1) T_0].
      Proof: LPB Thm 17 and Lemma 18 (worst case y_1..y_{t-1} = b, y_t = a,
      D' queries at y, D at y - Delta on BOT steps and y_t + Delta on the TOP step);
      the printed Thm 10/17 garbles offsets, this is the form of the proof.
    - halted=False, o = BOT^t (instance stopped from outside, e.g. at the end
      of a batch run): epsilon = log E[U_Delta^t] - log E[U_0^t]. Proof: the
      same conditioning on rho_hat as LPB Lemma 18 without the TOP factor; the
      ratio increases in every y_i (LPB Lemma 16 argument), so y_i = b is the
      worst case; docs/proofs/accounting.selection.above_threshold.above_threshold_expost_epsilon.md.
    Both values are attained by a pair of neighbours, so they are tight.
    Checks: t integer(s) >= 1; sigmas > 0; threshold finite; lower < upper;
    0 <= sensitivity <= upper - lower.
    Caller must ensure: every query maps into [lower, upper] with sensitivity
    at most `sensitivity` (queries may be chosen adaptively: before a TOP all
    answers are BOT, so the sequence is fixed by the data-independent prefix);
    a new instance draws a fresh rho_hat. The value is data-dependent through o:
    feed it to a filter (FSRC), never publish it.
    Numerics: log-space adaptive Gauss–Legendre (module docstring); before
    rounding up it agrees with 40-digit mpmath to 1e-10 relative on the test
    grid (t up to 10^4), after rounding within 2e-7 and never below.
    Runtime: about 0.09 ms per call (median, benchmarks/selection.py); `t` may
    be a numpy array (vectorised, about 0.06 ms per t value).
    Returns a float for scalar t, else an array shaped like t.
    """
    owner = "above_threshold_expost_epsilon"
    counts, shape = require_counts(owner, "t", t, 1)
    sigma_x = require_positive(owner, "sigma_threshold", sigma_threshold)
    sigma_z = require_positive(owner, "sigma_query", sigma_query)
    rho = require_finite(owner, "threshold", threshold)
    sensitivity, lower, upper = require_range(owner, sensitivity, lower, upper)
    if not isinstance(halted, (bool, np.bool_)):
        raise ValueError(f"{owner}: halted must be True or False, got {halted!r}")
    ratio = sigma_x / sigma_z
    size = counts.size
    # Rows: the shifted (Delta) expectation for every t, then the unshifted one; columns: BOT factor, TOP factor.
    columns = 2 if halted else 1
    n = np.ones((2 * size, columns))
    n[:size, 0] = n[size:, 0] = counts - 1.0 if halted else counts
    s = np.empty_like(n)
    s[:] = [ratio, -ratio][:columns]
    c = np.empty_like(n)
    c[:size] = [(rho - upper + sensitivity) / sigma_z, (lower - rho + sensitivity) / sigma_z][:columns]
    c[size:] = [(rho - upper) / sigma_z, (lower - rho) / sigma_z][:columns]
    log_values = log_gaussian_expectation(n, s, c)
    return rounded_up_log_ratio(log_values[:size], log_values[size:], shape)


def _log_stopping_moments(gammas, sigma_x, sigma_z, margin):
    """log E_{x~N(0,1)}[Phi(-(margin + sigma_x x)/sigma_z)^(-gamma)] for each gamma, rounded up.

    This is log E[E[T|x]^gamma] for the all-`lower` query stream, the worst
    case over queries >= lower: there E[T|x] = 1/Phi(-(margin + sigma_x x)/sigma_z),
    and any other stream stops at least as fast. Finite, with a strictly
    log-concave integrand, when gamma sigma_x^2 < sigma_z^2.
    """
    gammas = np.asarray(gammas, dtype=float)
    ratio = sigma_x / sigma_z
    log_moment = log_gaussian_expectation(
        -gammas[:, None], np.full((gammas.size, 1), -ratio), np.full((gammas.size, 1), -margin / sigma_z)
    )
    return log_moment + EPSILON_SLACK * np.abs(log_moment) + EPSILON_FLOOR


SIGMA_RANGE = (1e-150, 1e150)  # noise scales whose squares neither underflow nor overflow a float


def _zhu_wang_terms(owner, gammas, sigma_threshold, sigma_query, threshold, sensitivity, lower):
    """(A, B) per gamma, with eps_RDP(alpha) = A alpha + B / (alpha - 1), after checking the arguments."""
    sigma_x = require_positive(owner, "sigma_threshold", sigma_threshold)
    sigma_z = require_positive(owner, "sigma_query", sigma_query)
    rho = require_finite(owner, "threshold", threshold)
    lower = require_finite(owner, "lower", lower)
    sensitivity = require_finite(owner, "sensitivity", sensitivity)
    if sensitivity < 0:
        raise ValueError(f"{owner}: sensitivity must be >= 0, got {sensitivity!r}")
    if not (SIGMA_RANGE[0] <= sigma_x <= SIGMA_RANGE[1] and SIGMA_RANGE[0] <= sigma_z <= SIGMA_RANGE[1]):
        raise ValueError(f"{owner}: sigma_threshold and sigma_query must be between 1e-150 and 1e150 (their squares "
                         f"are used), got {sigma_x!r} and {sigma_z!r}")
    gammas = np.asarray(gammas, dtype=float)
    limit = (sigma_z / sigma_x) ** 2
    if not np.all((gammas > 1) & (gammas < limit)):
        raise ValueError(
            f"{owner}: gamma must lie in (1, (sigma_query/sigma_threshold)^2) = (1, {limit!r}) "
            f"for a finite stopping-time moment, got {gammas.tolist() if gammas.ndim else float(gammas)!r}"
        )
    slope = gammas / (gammas - 1.0) * sensitivity**2 / (2.0 * sigma_x**2) + 2.0 * sensitivity**2 / sigma_z**2
    return slope, _log_stopping_moments(np.atleast_1d(gammas), sigma_x, sigma_z, rho - lower) / np.atleast_1d(gammas)


def above_threshold_rdp(alpha, sigma_threshold, sigma_query, threshold, sensitivity, lower=0.0, gamma=2.0):
    """Ex-ante RDP of Gaussian AboveThreshold run until its first TOP (no cap on the number of queries).

    Privacy: (alpha, eps)-RDP for neighbours on which every query moves by at
    most `sensitivity` (D), queries >= lower, sx = sigma_threshold, sz = sigma_query:
        eps = (gamma/(gamma-1)) alpha D^2/(2 sx^2) + 2 alpha D^2/sz^2 + log E_x[E[T|x]^gamma] / (gamma (alpha - 1)).
    Proof: Zhu–Wang 2020 general bound, as restated in Lebensold–Precup–Balle
    2024 Thm 6, with the stopping-time moment evaluated exactly for the worst
    stream (every query at `lower`: E[T|x] = 1/Phi(-(threshold - lower + x)/sz),
    x ~ N(0, sx^2); any stream of queries >= lower stops at least as fast).
    With gamma = 2 this replaces the closed-form moment bound of LPB Thm 7,
    1 + 2 sqrt(3) pi (1 + 9 m) e^m with m = (threshold - lower)^2/sx^2, which is
    smaller than the moment it bounds when (threshold - lower)/sx < 0.36 and
    sz = sqrt(3) sx (at threshold = lower: 11.88 against 12.96), so Thm 7 as
    printed is not used; elsewhere the exact moment is smaller than Thm 7's
    (docs/proofs/accounting.selection.above_threshold.above_threshold_rdp.md, tests).
    Checks: alpha > 1 (scalar or array); sigmas > 0; 1 < gamma < (sz/sx)^2 (finite
    moment; Zhu–Wang's sz >= sqrt(3) sx is not needed); sensitivity >= 0;
    threshold and lower finite (any threshold, also below lower).
    Caller must ensure: every query is >= lower with sensitivity at most `sensitivity`.
    Numerics: the moment by the module's log-space quadrature, rounded up.
    Runtime: about 0.08 ms, then O(1) per alpha.
    """
    owner = "above_threshold_rdp"
    try:
        orders = np.asarray(alpha, dtype=float)
        gamma_value = float(gamma)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{owner}: alpha must be a number > 1 or an array of them and gamma a number, got alpha={alpha!r}, gamma={gamma!r}") from err
    if orders.size == 0 or not np.all(orders > 1) or np.any(np.isnan(orders)) or np.any(np.isinf(orders)):
        raise ValueError(f"{owner}: alpha must be a finite number > 1 or an array of them, got {alpha!r}")
    slope, stopping = _zhu_wang_terms(owner, gamma_value, sigma_threshold, sigma_query, threshold, sensitivity, lower)
    value = slope * orders + stopping[0] / (orders - 1.0)
    return float(value) if value.ndim == 0 else value


_GAMMA_GRID = 1.0 + np.geomspace(0.02, 0.98, 40)  # 1 + fraction of the way from 1 to (sz/sx)^2


@functools.lru_cache(maxsize=256)
def _grid_terms(sigma_x: float, sigma_z: float, threshold: float, sensitivity: float,
                lower: float) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) of `_zhu_wang_terms` over the fixed gamma grid, read-only; public parameters only, so cached."""
    owner = "above_threshold_pdp_epsilon"
    gammas = 1.0 + (_GAMMA_GRID - 1.0) * ((sigma_z / sigma_x) ** 2 - 1.0)
    gammas = gammas[gammas > 1.0]
    if gammas.size == 0:
        raise ValueError(
            f"{owner}: needs sigma_query > sigma_threshold for a finite stopping-time moment, "
            f"got sigma_threshold={sigma_x!r}, sigma_query={sigma_z!r}"
        )
    slope, stopping = _zhu_wang_terms(owner, gammas, sigma_x, sigma_z, threshold, sensitivity, lower)
    for terms in (slope, stopping):
        terms.setflags(write=False)
    return slope, stopping


def above_threshold_pdp_epsilon(delta, sigma_threshold, sigma_query, threshold, sensitivity, lower=0.0, gamma=None):
    """Probabilistic DP epsilon of Gaussian AboveThreshold from its RDP, optimised over alpha (and gamma).

    Privacy: (epsilon, delta)-pDP (the privacy loss exceeds epsilon with
    probability at most delta), hence (epsilon, delta)-DP; neighbours and
    queries as in `above_threshold_rdp`. This is the eps_max with which the
    FSRC filter admits an instance (Lebensold–Precup–Balle 2024, Algorithm 4).
    Proof: (alpha, eps)-RDP implies (eps + log(1/delta)/(alpha - 1), delta)-pDP
    (Markov's inequality on exp((alpha - 1) L); Mironov 2017, restated in LPB
    Sec 2). For fixed gamma, eps(alpha) = A alpha + B/(alpha - 1) (see
    `above_threshold_rdp`), so with C = B + log(1/delta) the best order is
    alpha = 1 + sqrt(C/A) and the value A + 2 sqrt(A C) (A = 0 gives 0).
    `gamma=None` takes the smallest value over 40 fixed gammas spread over
    (1, (sz/sx)^2); every gamma gives a valid guarantee and the grid depends
    only on public parameters (docs/proofs/accounting.selection.above_threshold.above_threshold_rdp.md).
    Checks: 0 < delta < 1, and those of `above_threshold_rdp`.
    Caller must ensure: as for `above_threshold_rdp`.
    Numerics: the stopping-time moments in one vectorised quadrature call,
    rounded up; the result rounded up by a few ulps.
    Runtime: with gamma=None, about 0.8 ms for the first call with given
    (sigma_threshold, sigma_query, threshold, sensitivity, lower), then about
    0.02 ms per delta: the moments do not depend on delta and are cached (a
    monitor prices each instance at its own delta); 0.08 ms for a fixed gamma.
    """
    owner = "above_threshold_pdp_epsilon"
    if not (isinstance(delta, (int, float, np.integer, np.floating)) and 0 < delta < 1):
        raise ValueError(f"{owner}: delta must lie in (0, 1), got {delta!r}")
    sigma_x = require_positive(owner, "sigma_threshold", sigma_threshold)
    sigma_z = require_positive(owner, "sigma_query", sigma_query)
    if gamma is None:
        slope, stopping = _grid_terms(sigma_x, sigma_z, require_finite(owner, "threshold", threshold),
                                      require_finite(owner, "sensitivity", sensitivity),
                                      require_finite(owner, "lower", lower))
    else:
        slope, stopping = _zhu_wang_terms(owner, gamma, sigma_x, sigma_z, threshold, sensitivity, lower)
    if np.all(slope == 0.0):
        return 0.0
    constant = stopping + math.log(1.0 / delta)
    epsilon = float(np.min(slope + 2.0 * np.sqrt(slope * constant)))
    return epsilon * (1.0 + 8.0 * np.finfo(float).eps)
