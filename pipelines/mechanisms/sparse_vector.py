"""AboveThreshold (sparse vector): the index of the first query above a noisy threshold, with Gaussian noise
(`above_threshold`, Lebensold–Precup–Balle Alg. 3) or Laplace noise (`laplace_above_threshold`, Lyu–Su–Li 2017
Alg. 1, the svt monitor's "laplace" method). Only the index is released."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from dpstream.accounting import selection
from dpstream.accounting.events import PureDP
from dpstream.pipelines.mechanisms.noise import SecureRandom
from dpstream.pipelines.mechanisms.release import Release, bounded_vector, checked_rng, positive, release, vector


def above_threshold(
    values,
    sigma_threshold: float,
    sigma_query: float,
    threshold: float,
    rng: SecureRandom,
    *,
    sensitivity: float,
    lower: float,
    upper: float,
) -> Release:
    """Gaussian AboveThreshold: the index of the first value whose noisy copy reaches the noisy threshold, or None.

    rho_hat = threshold + N(0, sigma_threshold^2) is drawn once; value t
    (clipped to [lower, upper]) answers TOP when value_t + N(0, sigma_query^2)
    >= rho_hat; the first TOP halts. Lebensold–Precup–Balle 2024, Algorithm 3
    (Zhu–Wang 2020).
    Privacy: each value moves by at most `sensitivity` between neighbours.
    Pure ex-post DP per outcome (LPB Thm 17): `Release.ex_post_epsilon` is
    the loss of the outcome actually released (for a filter; never published).
    The event is the ex-ante pure bound over
    the len(values) possible outcomes and the all-BOT outcome:
    `PureDP(max_t ex_post_epsilon(t))`.
    Proof: LPB Thm 17 with the worst case of Lemma 18
    (`accounting.selection.above_threshold_expost_epsilon`); every outcome's
    log-ratio is at most its ex-post loss, so the largest one over the
    outcomes bounds them all.
    Checks: sigmas, sensitivity positive; lower < upper; finite threshold.
    Caller must ensure: the number of values is public; values arrive in a data-independent order.
    Numerics: idealised float noise; only the index is released.
    Runtime: O(n) plus the epsilon quadrature over n outcomes (memoised per parameter set).
    """
    owner = "above_threshold"
    sigma_threshold = positive(owner, "sigma_threshold", sigma_threshold)
    sigma_query = positive(owner, "sigma_query", sigma_query)
    sensitivity = positive(owner, "sensitivity", sensitivity)
    if not math.isfinite(threshold):
        raise ValueError(f"{owner}: threshold must be finite, got {threshold!r}")
    array = bounded_vector(owner, values, lower, upper, minimum=1)
    rng = checked_rng(owner, rng)
    noisy_threshold = threshold + sigma_threshold * rng.standard_normal(1)[0]
    tops = np.flatnonzero(array + sigma_query * rng.standard_normal(array.size) >= noisy_threshold)
    index = int(tops[0]) if tops.size else None
    bound = _above_threshold_epsilons(array.size, sigma_threshold, sigma_query, threshold, sensitivity, lower, upper)
    ex_post = bound.stopped if index is None else bound.top[index]
    return release(
        owner, index, PureDP(bound.ex_ante), ex_post, sigma_threshold=sigma_threshold, sigma_query=sigma_query,
        threshold=threshold, sensitivity=sensitivity, lower=lower, upper=upper,
    )


@dataclass(frozen=True)
class _ThresholdEpsilons:
    top: tuple[float, ...]  # ex-post loss of BOT^t TOP, t = 0..n-1
    stopped: float  # ex-post loss of BOT^n
    ex_ante: float


@functools.lru_cache(maxsize=256)
def _above_threshold_epsilons(n, sigma_threshold, sigma_query, threshold, sensitivity, lower, upper):
    positions = np.arange(1, n + 1)
    common = dict(sigma_threshold=sigma_threshold, sigma_query=sigma_query, threshold=threshold,
                  sensitivity=sensitivity, lower=lower, upper=upper)
    top = np.asarray(selection.above_threshold_expost_epsilon(positions, halted=True, **common), dtype=float)
    stopped = float(selection.above_threshold_expost_epsilon(n, halted=False, **common))
    return _ThresholdEpsilons(tuple(float(e) for e in top), stopped, max(float(top.max()), stopped))


def laplace_noise(rng: SecureRandom, scale: float, n: int) -> np.ndarray:
    return scale * (rng.exponential(n) - rng.exponential(n))


def laplace_above_threshold_epsilon(
    scale_threshold: float, scale_query: float, sensitivity: float, monotone: bool = False
) -> float:
    """Pure epsilon of one Laplace AboveThreshold instance (see `laplace_above_threshold`).

    epsilon = sensitivity/scale_threshold + 2 sensitivity/scale_query, or
    sensitivity/scale_threshold + sensitivity/scale_query for monotone values
    (Lyu–Su–Li 2017, Thm 2 and its monotone remark). Public parameters only.
    """
    return sensitivity / scale_threshold + (1.0 if monotone else 2.0) * sensitivity / scale_query


def laplace_above_threshold(
    values,
    scale_threshold: float,
    scale_query: float,
    threshold: float,
    rng: SecureRandom,
    *,
    sensitivity: float = 1.0,
    monotone: bool = False,
) -> Release:
    """Baseline: Laplace AboveThreshold, the index of the first TOP or None.

    rho_hat = threshold + Lap(scale_threshold); value t answers TOP when
    value_t + Lap(scale_query) >= rho_hat; the first TOP halts.
    Privacy: each value moves by at most `sensitivity`. epsilon-DP with
    epsilon = sensitivity/scale_threshold + 2 sensitivity/scale_query, or
    sensitivity/scale_threshold + sensitivity/scale_query for monotone values.
    Proof: Lyu–Su–Li 2017, Thm 2 (Algorithm 1 with c = 1) and its monotone remark;
    Dwork–Roth 2014, Thm 3.23 is the case scale_query = 2 scale_threshold.
    Event `PureDP(epsilon)`.
    Checks: scales, sensitivity positive; finite threshold.
    Numerics: idealised float noise; only the index is released.
    Runtime: O(n).
    """
    owner = "laplace_above_threshold"
    scale_threshold = positive(owner, "scale_threshold", scale_threshold)
    scale_query = positive(owner, "scale_query", scale_query)
    sensitivity = positive(owner, "sensitivity", sensitivity)
    if not math.isfinite(threshold):
        raise ValueError(f"{owner}: threshold must be finite, got {threshold!r}")
    array = vector(owner, "values", values).astype(np.float64)
    rng = checked_rng(owner, rng)
    noisy_threshold = threshold + laplace_noise(rng, scale_threshold, 1)[0]
    tops = np.flatnonzero(array + laplace_noise(rng, scale_query, array.size) >= noisy_threshold)
    index = int(tops[0]) if tops.size else None
    epsilon = laplace_above_threshold_epsilon(scale_threshold, scale_query, sensitivity, monotone)
    return release(
        owner, index, PureDP(epsilon), scale_threshold=scale_threshold, scale_query=scale_query,
        threshold=threshold, sensitivity=sensitivity, monotone=bool(monotone),
    )
