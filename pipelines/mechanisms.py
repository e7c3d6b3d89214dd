"""Differentially private mechanisms on numpy arrays, each returning what may be released and its event.

Every function here takes the data-dependent input (noise-free aggregates),
public parameters and a `SecureRandom`, and returns a `Release`: the value
that is safe to publish and the `accounting.events` event that states its
privacy cost. The Beam transforms and the tests share these functions; no
Beam import.

Neighbouring relation throughout: add or remove all records of one privacy
unit; the caller states how far that moves the input (`sensitivity`, and the
number of coordinates it can change, `max_partitions`).

Mechanisms that release noisy *values* (laplace, gaussian, gaussian_threshold,
distinct_threshold, truncated_gaussian, count_mle) add integer noise on a power-of-two grid (`pipelines.noise`), so
the released numbers are exact multiples of the grid step. Their inputs may be
integer units of a power-of-two `quantum` (the exact bounded sums of
`pipelines.bounding`, in units of `ContributionBounds.quantum`): they then
reach the grid by exact integer arithmetic, with no rounding at all when
quantum >= the grid step (`noise.to_grid`). Mechanisms that
release only *indices* (exponential_top_k, report_noisy_max, above_threshold
and their Laplace baselines) use continuous noise from the same CSPRNG: the
noisy scores are never released, so their low bits cannot leak.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np
from scipy.special import log_ndtr, ndtri

from accounting import selection
from accounting.events import BoundedRange, Event, Gaussian, GaussianThreshold, Laplace, PureDP, SelfComposed, ZCDP
from accounting.numerics import epsilon_from_delta_curve, expanding_upper, log_sub_exp
from pipelines.fixedpoint import is_power_of_two
from pipelines.noise import SecureRandom, granularity, grid_sensitivity, to_grid

TOP_K_METHODS = ("gumbel", "peel")


@dataclass(frozen=True)
class Release:
    """The output of one mechanism run: `value` may be published; `event` is what it costs.

    `parameters` holds the public parameters actually used (noise scale, grid
    step, effective sensitivity, ...), for reports. Array values are read-only.
    `ex_post_epsilon` (AboveThreshold only) is the pure ex-post loss of the
    outcome released: data-dependent spend for a privacy filter or the sealed
    ledger, never for publication (DESIGN.md section 1).
    """

    mechanism: str
    value: Any
    event: Event
    parameters: Mapping[str, Any]
    ex_post_epsilon: float | None = None

    def describe(self) -> str:
        """One line for reports: mechanism, public parameters and event."""
        params = ", ".join(f"{name}={value}" for name, value in self.parameters.items())
        return f"{self.mechanism}({params}) -> {self.event!r}"


def _release(mechanism: str, value: Any, event: Event, ex_post_epsilon: float | None = None, **parameters: Any) -> Release:
    if isinstance(value, np.ndarray):
        value.setflags(write=False)
    return Release(mechanism, value, event, MappingProxyType(parameters), ex_post_epsilon)


def _positive(owner: str, name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) or not (
        math.isfinite(value) and value > 0
    ):
        raise ValueError(f"{owner}: {name} must be a positive finite number, got {value!r}")
    return float(value)


def _count(owner: str, name: str, value: int, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _rng(owner: str, rng: SecureRandom) -> SecureRandom:
    if not isinstance(rng, SecureRandom):
        raise TypeError(f"{owner}: rng must be a pipelines.noise.SecureRandom, got {type(rng).__name__}")
    return rng


def _vector(owner: str, name: str, values: Any, minimum: int = 1) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1 or array.size < minimum or array.dtype.kind not in "iuf":
        raise ValueError(
            f"{owner}: {name} must be a 1-d numeric array with at least {minimum} entries, "
            f"got shape {array.shape} and dtype {array.dtype}"
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{owner}: {name} must be finite, got NaN or infinity")
    return array


def _changed(owner: str, max_partitions: int | None, size: int) -> int:
    return size if max_partitions is None else _count(owner, "max_partitions", max_partitions)


def _grid_noise(
    owner: str, values, parameter: float, rng: SecureRandom, sensitivity: float, max_partitions: int | None, norm: int,
    minimum: int = 1, quantum: float = 1.0,
) -> tuple[np.ndarray, float, float]:
    """(noisy values, grid step, grid sensitivity) for `laplace` (norm=1) or `gaussian` (norm=2).

    Rounds `values` (in units of `quantum`) to the power-of-two grid of
    `parameter` (the Laplace scale or the Gaussian sigma), adds integer noise
    in grid units (discrete Laplace for norm 1, discrete Gaussian for norm 2)
    and scales back. The grid sensitivity is `sensitivity` in that norm after
    rounding (`pipelines.noise.grid_sensitivity`).
    """
    sensitivity = _positive(owner, "sensitivity", sensitivity)
    array = _vector(owner, "values", values, minimum)
    rng = _rng(owner, rng)
    step = granularity(parameter)
    units, exact = to_grid(array, step, quantum)
    effective = grid_sensitivity(sensitivity, step, exact, _changed(owner, max_partitions, array.size), norm=norm)
    draw = rng.discrete_laplace if norm == 1 else rng.discrete_gaussian
    return (units + draw(parameter / step, array.size)) * step, step, effective


def laplace(values, scale: float, rng: SecureRandom, *, sensitivity: float = 1.0, max_partitions: int | None = None,
            quantum: float = 1.0) -> Release:
    """Discrete Laplace noise of scale `scale` on a power-of-two grid, added to each value.

    `values` count multiples of `quantum` (a power of two): they stand for values * quantum.
    Privacy: add/remove one privacy unit moves values * quantum by at most
    `sensitivity` in L1 over at most `max_partitions` coordinates (default: all).
    The release is epsilon-DP with epsilon = sensitivity_grid / scale, event
    `Laplace(scale, sensitivity_grid)`, where sensitivity_grid >= sensitivity is
    the L1 sensitivity after rounding the inputs to the grid (`noise.grid_sensitivity`).
    Proof: the noise in grid units has P[x] proportional to exp(-|x| / t),
    t = scale / step; a shift by m grid units changes every probability by at
    most exp(m / t) (Canonne–Kamath–Steinke 2020, Sec. 5.2 for the discrete
    Laplace; Dwork–McSherry–Nissim–Smith 2006 for the mechanism); see
    docs/proofs/mechanisms.laplace.md.
    Checks: scale, sensitivity positive; values finite 1-d; quantum a power of two.
    Caller must ensure: the sensitivity and max_partitions follow from contribution bounding.
    Numerics: hardened (outputs are multiples of the grid step; pipelines.noise); integer inputs reach the
    grid exactly (no rounding when quantum >= the grid step).
    Runtime: O(n), about 0.15 us per value.
    """
    owner = "laplace"
    scale = _positive(owner, "scale", scale)
    noisy, step, effective = _grid_noise(owner, values, scale, rng, sensitivity, max_partitions, norm=1, quantum=quantum)
    return _release(owner, noisy, Laplace(scale, effective), scale=scale, granularity=step, sensitivity=effective)


def gaussian(values, sigma: float, rng: SecureRandom, *, sensitivity: float = 1.0, max_partitions: int | None = None,
             quantum: float = 1.0) -> Release:
    """Discrete Gaussian noise with parameter `sigma` on a power-of-two grid, added to each value.

    `values` count multiples of `quantum` (a power of two): they stand for values * quantum.
    Privacy: add/remove one privacy unit moves values * quantum by at most
    `sensitivity` in L2 over at most `max_partitions` coordinates (default: all).
    Event `Gaussian(sigma, sensitivity_grid)`: mu-GDP with mu = sensitivity_grid / sigma,
    where sensitivity_grid >= sensitivity accounts for rounding to the grid and
    adds sqrt(max_partitions) grid steps for the noise being discrete.
    Proof: a discrete Gaussian shifted by an integer vector v is dominated by
    the continuous Gaussian shifted by ||v||_2 + sqrt(d) grid units (d changed
    coordinates; docs/proofs/noise.discrete_gaussian_domination.md, from the
    tail bounds of Canonne–Kamath–Steinke 2020); rounding as in
    docs/proofs/mechanisms.laplace.md.
    Checks: sigma, sensitivity positive; values finite 1-d; quantum a power of two.
    Caller must ensure: the sensitivity and max_partitions follow from contribution bounding.
    Numerics: hardened (outputs are multiples of the grid step); integer inputs reach the grid exactly.
    Runtime: O(n), about 0.4 us per value.
    """
    owner = "gaussian"
    sigma = _positive(owner, "sigma", sigma)
    noisy, step, effective = _grid_noise(owner, values, sigma, rng, sensitivity, max_partitions, norm=2, quantum=quantum)
    return _release(owner, noisy, Gaussian(sigma, effective), sigma=sigma, granularity=step, sensitivity=effective)


def _check_delta(owner: str, delta: float) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise ValueError(f"{owner}: delta must lie in (0, 1), got {delta!r}")
    return float(delta)


def selection_margin(sigma_units: float, max_partitions: int, delta: float) -> int:
    """m (grid units) such that max_partitions independent draws of N_Z(0, sigma_units^2) all stay <= m w.p. >= 1 - delta.

    Each draw must exceed m with probability at most p1 = 1 - (1 - delta)^(1 / max_partitions)
    (computed, then lowered by a few ulps). For the discrete Gaussian,
    Pr[X >= m + 1] <= Phi_bar(m / s): the mass above m + 1 is at most the
    integral of exp(-x^2 / 2s^2) over [m, inf), and the normaliser is at least
    sqrt(2 pi) s (Poisson summation). So m = ceil(s z) with Phi_bar(z) <= p1.
    """
    p1 = -math.expm1(math.log1p(-delta) / max_partitions)
    for _ in range(4):  # the log1p, division and expm1 roundings
        p1 = math.nextafter(p1, 0.0)
    target = math.log(p1)
    z = -float(ndtri(p1))
    while float(log_ndtr(-z)) > target - 1e-12 * abs(target):
        z = math.nextafter(z, math.inf) * (1.0 + 1e-15)
    return math.ceil(sigma_units * z * (1.0 + 1e-12))


def gaussian_threshold(
    counts, sigma: float, threshold: float, rng: SecureRandom, *, delta: float, max_partitions: int = 1,
    quantum: float = 1.0,
) -> Release:
    """Gaussian thresholding: discrete Gaussian noise on every observed sum; only those above a cutoff are released.

    For partitions not known in advance. Returns (indices into `counts`, noisy
    sums) of the partitions whose noisy sum exceeds cutoff = tau + m * step,
    where tau is `threshold` (the largest |sum| one privacy unit can give a
    partition alone) and m = `selection_margin`, so that a privacy unit's own
    partitions, at most `max_partitions` of them, appear with probability at most
    `delta` all together. Noisy sums are unbiased (no truncation), unlike
    `truncated_gaussian`. `counts` are in units of `quantum` (a power of two);
    `threshold` and the released sums are in value units.
    Privacy: one privacy unit changes at most `max_partitions` sums (L0), each by
    at most `threshold` (Linf). Event `GaussianThreshold(sigma, sqrt(L0) tau_g, delta)`:
    on partitions both neighbours hold it is the Gaussian mechanism (L2
    sensitivity sqrt(L0) tau_g), and the partitions only one holds appear with
    probability <= delta, independently; this gives the event's dominating
    pair (Wilkins–Kifer–Zhang–Karrer 2023 analyse the same mechanism exactly).
    Proof: docs/proofs/events.GaussianThreshold.md.
    Checks: sigma, threshold positive; delta in (0, 1); counts finite 1-d; quantum a power of two.
    Caller must ensure: contribution bounding gives the stated L0 and Linf bounds.
    Numerics: hardened (grid); the cutoff is rounded up (see `selection_margin`).
    Runtime: O(n).
    """
    owner = "gaussian_threshold"
    sigma = _positive(owner, "sigma", sigma)
    threshold = _positive(owner, "threshold", threshold)
    partitions = _count(owner, "max_partitions", max_partitions)
    delta = _check_delta(owner, delta)
    array = _vector(owner, "counts", counts, minimum=0)
    rng = _rng(owner, rng)
    step = granularity(sigma)
    units, exact = to_grid(array, step, quantum)
    tau = grid_sensitivity(threshold, step, exact, changed=1, norm=1)
    sensitivity = grid_sensitivity(math.sqrt(partitions) * threshold, step, exact, changed=partitions, norm=2)
    cutoff = tau + selection_margin(sigma / step, partitions, delta) * step
    noisy = (units + rng.discrete_gaussian(sigma / step, array.size)) * step
    kept = np.flatnonzero(noisy > cutoff)
    return _release(
        owner, (kept, noisy[kept]), GaussianThreshold(sigma, sensitivity, delta),
        sigma=sigma, threshold=tau, cutoff=cutoff, granularity=step, sensitivity=sensitivity,
    )


def distinct_threshold(
    units, sums, sigma: float, extra_sigma: float | None, rng: SecureRandom, *,
    unit_value: float, linf: float, delta: float, max_partitions: int = 1, quantum: float = 1.0,
) -> Release:
    """Selection on the number of distinct privacy units, then the value from that count plus the records beyond it.

    For counting jobs over partitions not known in advance: every kept record
    is worth `unit_value`, so a unit present in a partition adds between
    |unit_value| and `linf` to its sum. units[i] is how many units a partition
    holds, sums[i] its bounded sum in units of `quantum` (a power of two; unit_value
    and linf are in value units). `gaussian_threshold` with threshold 1 on
    `units` (noise `sigma`) picks the partitions; each picked partition's
    extra = sums - unit_value * units (what units add beyond their first
    record, at most linf - |unit_value| per unit) gets independent discrete
    Gaussian noise `extra_sigma` (None when linf = |unit_value|: nothing
    beyond). Returns (indices, unit_value * noisy units + noisy extra).
    Against a selection on the sum itself, the cutoff drops from linf to one
    unit plus a margin in units of sigma, and with the planner's split of mu
    (`planning.plan_job`) the released values are exactly as noisy.
    Privacy: one privacy unit changes at most `max_partitions` partitions, each
    by 1 in units and at most linf - |unit_value| in extra. On partitions both
    neighbours hold, (units, extra) gets independent Gaussian noise, which after
    scaling each coordinate by its sigma is one Gaussian mechanism with
    mu^2 = mu_units^2 + mu_extra^2 (each mu at its grid sensitivity); a
    partition only one neighbour holds has units 1 and appears, all of them
    together, with probability <= delta. Event GaussianThreshold(sigma,
    sigma * mu, delta), the dominating pair of `gaussian_threshold`.
    Proof: docs/proofs/mechanisms.distinct_threshold.md.
    Checks: sigma, extra_sigma, linf positive; |unit_value| <= linf; delta in (0, 1); units, sums finite 1-d of equal
    length; quantum a power of two.
    Caller must ensure: contribution bounding gives the stated L0 and Linf bounds, and
    units/sums come from the same bounded records.
    Numerics: hardened (grid, as `gaussian_threshold` and `gaussian`); extra is exact int64 arithmetic when units
    and sums are integer arrays and unit_value is an integer multiple of quantum (as after `pipelines.bounding`).
    Runtime: O(n).
    """
    owner = "distinct_threshold"
    units = _vector(owner, "units", units, minimum=0)
    sums = _vector(owner, "sums", sums, minimum=0)
    if units.shape != sums.shape:
        raise ValueError(f"{owner}: units and sums must have the same length, got {units.size} and {sums.size}")
    linf = _positive(owner, "linf", linf)
    if not is_power_of_two(quantum):
        raise ValueError(f"{owner}: quantum must be a positive power of two, got {quantum!r}")
    if not (math.isfinite(unit_value) and 0 < abs(unit_value) <= linf):
        raise ValueError(f"{owner}: unit_value must be non-zero with |unit_value| <= linf={linf!r}, got {unit_value!r}")
    selection = gaussian_threshold(units, sigma, 1.0, rng, delta=delta, max_partitions=max_partitions)
    kept, noisy_units = selection.value
    values, mu = unit_value * noisy_units, selection.event.mu
    extra_linf = linf - abs(unit_value)
    if extra_linf > 0:
        if extra_sigma is None:
            raise ValueError(f"{owner}: extra_sigma is required when linf={linf!r} exceeds |unit_value|={abs(unit_value)!r}")
        extra_sigma = _positive(owner, "extra_sigma", extra_sigma)
        per_unit = unit_value / quantum  # what one record adds, in units of quantum (exact: quantum a power of two)
        integral = sums.dtype.kind in "iu" and units.dtype.kind in "iu" and float(per_unit).is_integer()
        extra, _, extra_sensitivity = _grid_noise(
            owner, sums[kept] - (int(per_unit) if integral else per_unit) * units[kept], extra_sigma, rng,
            math.sqrt(max_partitions) * extra_linf, max_partitions, norm=2, minimum=0, quantum=quantum)
        values = values + extra
        mu = math.hypot(mu, extra_sensitivity / extra_sigma)
    sensitivity = sigma * mu
    for _ in range(4):  # the two quotients, the hypot and the product, each rounded
        sensitivity = math.nextafter(sensitivity, math.inf)
    event = GaussianThreshold(sigma, sensitivity, selection.event.delta)
    return _release(owner, (kept, values), event, **selection.parameters, extra_sigma=extra_sigma, unit_value=unit_value)


def truncation_level(sigma: float, threshold: float, max_partitions: int, delta: float) -> float:
    """T of Cesar–Rogers eq. (10): the smallest T with max_partitions * Pr[outside overlap] <= delta, rounded up.

    With s = sigma and tau = threshold, the probability that N_T(h, s^2) falls
    outside the overlap [h + tau - T, h + T] of the two truncated supports is
        [Phi((tau - T)/s) - Phi(-T/s)] / [Phi(T/s) - Phi(-T/s)],
    computed in log space (log_ndtr, log_sub_exp, log1p) and inverted by
    bisection that returns the upper end of its bracket (`accounting.numerics`).
    Paper symbols: the paper's sigma is our sigma / tau, Delta is max_partitions.
    """
    owner = "truncation_level"
    sigma = _positive(owner, "sigma", sigma)
    tau = _positive(owner, "threshold", threshold)
    partitions = _count(owner, "max_partitions", max_partitions)
    delta = _check_delta(owner, delta)
    target = math.log(delta / partitions)

    def log_failure(level: float) -> float:
        if level <= tau / 2:  # no overlap of the two supports at all
            return 0.0
        outside = log_sub_exp(float(log_ndtr((tau - level) / sigma)), float(log_ndtr(-level / sigma)))
        inside = math.log1p(-2.0 * math.exp(float(log_ndtr(-level / sigma))))
        return outside - inside

    start = tau + sigma * math.sqrt(2.0 * max(-target, 1.0))
    upper = expanding_upper(log_failure, target, start, limit=1e300)
    return epsilon_from_delta_curve(log_failure, target, upper, lower=tau / 2, rtol=1e-12, atol=0.0)


def truncated_gaussian(
    counts, sigma: float, threshold: float, rng: SecureRandom, *, delta: float, max_partitions: int = 1,
    quantum: float = 1.0,
) -> Release:
    """Cesar–Rogers Algorithm 2 (TruncGauss): truncated Gaussian counts, released only above threshold + T.

    For partitions not known in advance: every observed count gets noise from
    the discrete Gaussian with parameter `sigma` truncated to [-T, T]; only
    partitions whose noisy count exceeds threshold + T are released, as
    (indices into `counts`, noisy counts). A partition whose true count is at
    most `threshold` can never appear. `counts` are in units of `quantum` (a
    power of two); `threshold` and the released counts are in value units.
    Privacy: one privacy unit changes at most `max_partitions` counts (Delta,
    L0), each by at most `threshold` (tau, Linf), and a partition it adds has
    count <= tau. Event `ZCDP(rho, delta)` with rho = Delta tau^2 / (2 sigma^2):
    delta-approximate rho-zCDP.
    Proof: Cesar–Rogers Lemma 6.4 (with their erratum: Pr[E] >= 1 - delta/Delta);
    paper sigma = our sigma / tau. The grid version is argued in
    docs/proofs/mechanisms.truncated_gaussian.md (tau and T rounded up to the grid).
    Checks: sigma, threshold positive; delta in (0, 1); counts finite 1-d; quantum a power of two.
    Caller must ensure: contribution bounding gives the stated L0 and Linf bounds.
    Numerics: hardened (grid); T solved in log space and rounded up.
    Runtime: O(n) plus about 60 evaluations of log_ndtr for T.
    """
    owner = "truncated_gaussian"
    sigma = _positive(owner, "sigma", sigma)
    threshold = _positive(owner, "threshold", threshold)
    partitions = _count(owner, "max_partitions", max_partitions)
    array = _vector(owner, "counts", counts, minimum=0)
    rng = _rng(owner, rng)
    step = granularity(sigma)
    units, exact = to_grid(array, step, quantum)
    tau = grid_sensitivity(threshold, step, exact, changed=1, norm=1)
    level_units = math.ceil(truncation_level(sigma, tau, partitions, delta) / step)
    noise = np.empty(array.size, dtype=np.float64)
    missing = np.arange(array.size)
    while missing.size:
        draw = rng.discrete_gaussian(sigma / step, missing.size)
        inside = np.abs(draw) <= level_units
        noise[missing[inside]] = draw[inside]
        missing = missing[~inside]
    noisy = (units + noise) * step
    cutoff = tau + level_units * step
    kept = np.flatnonzero(noisy > cutoff)
    event = ZCDP(rho=partitions * tau * tau / (2.0 * sigma * sigma), delta=float(delta))
    return _release(
        owner, (kept, noisy[kept]), event,
        sigma=sigma, threshold=tau, truncation=level_units * step, cutoff=cutoff, granularity=step,
    )


def exponential_top_k(
    scores, k: int, epsilon: float, sensitivity: float, rng: SecureRandom, method: str = "gumbel"
) -> Release:
    """The k highest-scoring indices, in order, by k peeled exponential mechanisms.

    Each pick samples index i among the remaining ones with probability
    proportional to exp(epsilon * score_i / sensitivity). `method="gumbel"`
    adds Gumbel(sensitivity / epsilon) noise once and sorts (one pass, O(n));
    `method="peel"` samples k times from the stable softmax (O(k n)). Both
    have the same output distribution (Durfee–Rogers 2019, Sec. 4: one-shot
    Gumbel top-k equals peeling; checked by tests/test_mechanisms.py).
    Privacy: `sensitivity` is the range of score changes Delta-tilde
    (Dong–Durfee–Rogers 2019); for monotone scores such as counts it equals the
    Linf sensitivity. Each pick is epsilon-BR (Dong–Durfee–Rogers Prop 2 /
    Cesar–Rogers Def 2.3), and the k picks are adaptive: event
    `SelfComposed(BoundedRange(epsilon), k)`.
    Checks: k in [1, len(scores)]; epsilon, sensitivity positive; method known.
    Caller must ensure: the candidate set is public or fixed by an earlier private selection.
    Numerics: idealised float (scores and noise in float64); only indices are released.
    Runtime: gumbel O(n + k log k); peel O(k n).
    """
    owner = "exponential_top_k"
    array = _vector(owner, "scores", scores)
    k = _count(owner, "k", k)
    if k > array.size:
        raise ValueError(f"{owner}: k must be at most the number of scores {array.size}, got {k}")
    epsilon = _positive(owner, "epsilon", epsilon)
    sensitivity = _positive(owner, "sensitivity", sensitivity)
    if method not in TOP_K_METHODS:
        raise ValueError(f"{owner}: method must be one of {TOP_K_METHODS}, got {method!r}")
    rng = _rng(owner, rng)
    logits = array.astype(np.float64) * (epsilon / sensitivity)
    if method == "gumbel":
        chosen = _top_indices(logits + rng.gumbel(array.size), k)
    else:
        chosen = _peel(logits, k, rng)
    event = SelfComposed(BoundedRange(epsilon), k)
    return _release(owner, chosen, event, k=k, epsilon=epsilon, sensitivity=sensitivity, method=method)


def _top_indices(noisy: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries, largest first."""
    top = np.argpartition(-noisy, k - 1)[:k] if k < noisy.size else np.arange(noisy.size)
    return top[np.argsort(-noisy[top], kind="stable")]


def _peel(logits: np.ndarray, k: int, rng: SecureRandom) -> np.ndarray:
    remaining = np.arange(logits.size)
    chosen = np.empty(k, dtype=np.int64)
    for pick, u in enumerate(rng.uniform(k)):
        current = logits[remaining]
        cumulative = np.cumsum(np.exp(current - current.max()))
        position = min(int(np.searchsorted(cumulative, u * cumulative[-1], side="right")), remaining.size - 1)
        chosen[pick] = remaining[position]
        remaining = np.delete(remaining, position)
    return chosen


def _bounded(owner: str, values, lower: float, upper: float, minimum: int) -> np.ndarray:
    array = _vector(owner, "values", values, minimum=minimum)
    if not (math.isfinite(lower) and math.isfinite(upper) and lower < upper):
        raise ValueError(f"{owner}: need finite lower < upper, got lower={lower!r}, upper={upper!r}")
    return np.clip(array.astype(np.float64), lower, upper)


@functools.lru_cache(maxsize=256)
def _report_noisy_max_epsilon(d: int, sigma: float, sensitivity: float, lower: float, upper: float) -> float:
    """Memoised `accounting.selection.report_noisy_max_epsilon` (a pure function of public parameters)."""
    return float(selection.report_noisy_max_epsilon(d, sigma, sensitivity, lower, upper))


def report_noisy_max(
    values, sigma: float, rng: SecureRandom, *, sensitivity: float, lower: float, upper: float
) -> Release:
    """Gaussian report-noisy-max: the index of the largest value + N(0, sigma^2), on bounded queries.

    Values are clipped to [lower, upper] first (clipping keeps the sensitivity).
    Privacy: each value moves by at most `sensitivity` between neighbours.
    Pure DP, event `PureDP(epsilon)` with epsilon from
    `accounting.selection.report_noisy_max_epsilon` (Lebensold–Precup–Balle
    2024, Thm 8: the bounded range [lower, upper] is what makes it pure).
    Checks: at least 2 values; sigma, sensitivity positive; lower < upper.
    Caller must ensure: the number of values is public.
    Numerics: idealised float noise; only the index is released.
    Runtime: O(d) plus the epsilon quadrature (under 1 ms, memoised per parameter set).
    """
    owner = "report_noisy_max"
    sigma = _positive(owner, "sigma", sigma)
    sensitivity = _positive(owner, "sensitivity", sensitivity)
    array = _bounded(owner, values, lower, upper, minimum=2)
    rng = _rng(owner, rng)
    epsilon = _report_noisy_max_epsilon(array.size, sigma, sensitivity, float(lower), float(upper))
    index = int(np.argmax(array + sigma * rng.standard_normal(array.size)))
    return _release(owner, index, PureDP(epsilon), sigma=sigma, sensitivity=sensitivity, lower=lower, upper=upper)


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
    Checks: sigmas, sensitivity positive; lower < upper; finite threshold.
    Caller must ensure: the number of values is public; values arrive in a data-independent order.
    Numerics: idealised float noise; only the index is released.
    Runtime: O(n) plus the epsilon quadrature over n outcomes (memoised per parameter set).
    """
    owner = "above_threshold"
    sigma_threshold = _positive(owner, "sigma_threshold", sigma_threshold)
    sigma_query = _positive(owner, "sigma_query", sigma_query)
    sensitivity = _positive(owner, "sensitivity", sensitivity)
    if not math.isfinite(threshold):
        raise ValueError(f"{owner}: threshold must be finite, got {threshold!r}")
    array = _bounded(owner, values, lower, upper, minimum=1)
    rng = _rng(owner, rng)
    noisy_threshold = threshold + sigma_threshold * rng.standard_normal(1)[0]
    tops = np.flatnonzero(array + sigma_query * rng.standard_normal(array.size) >= noisy_threshold)
    index = int(tops[0]) if tops.size else None
    bound = _above_threshold_epsilons(array.size, sigma_threshold, sigma_query, threshold, sensitivity, lower, upper)
    ex_post = bound.stopped if index is None else bound.top[index]
    return _release(
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


def _laplace_noise(rng: SecureRandom, scale: float, n: int) -> np.ndarray:
    return scale * (rng.exponential(n) - rng.exponential(n))


def laplace_report_noisy_max(
    values, scale: float, rng: SecureRandom, *, sensitivity: float = 1.0, monotone: bool = False
) -> Release:
    """Baseline: the index of the largest value + Lap(scale).

    Privacy: each value moves by at most `sensitivity`. epsilon-DP with
    epsilon = 2 sensitivity / scale, or sensitivity / scale when the values are
    monotone (all move in the same direction between neighbours, e.g. counts
    under add/remove). Proof: Dwork–Roth 2014, Claim 3.9 (monotone); the
    general case by the same argument with a shift of 2 sensitivity.
    Event `PureDP(epsilon)`.
    Checks: at least 2 values; scale, sensitivity positive.
    Numerics: idealised float noise; only the index is released.
    Runtime: O(d).
    """
    owner = "laplace_report_noisy_max"
    scale = _positive(owner, "scale", scale)
    sensitivity = _positive(owner, "sensitivity", sensitivity)
    array = _vector(owner, "values", values, minimum=2).astype(np.float64)
    rng = _rng(owner, rng)
    epsilon = (1.0 if monotone else 2.0) * sensitivity / scale
    index = int(np.argmax(array + _laplace_noise(rng, scale, array.size)))
    return _release(owner, index, PureDP(epsilon), scale=scale, sensitivity=sensitivity, monotone=bool(monotone))


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
    scale_threshold = _positive(owner, "scale_threshold", scale_threshold)
    scale_query = _positive(owner, "scale_query", scale_query)
    sensitivity = _positive(owner, "sensitivity", sensitivity)
    if not math.isfinite(threshold):
        raise ValueError(f"{owner}: threshold must be finite, got {threshold!r}")
    array = _vector(owner, "values", values).astype(np.float64)
    rng = _rng(owner, rng)
    noisy_threshold = threshold + _laplace_noise(rng, scale_threshold, 1)[0]
    tops = np.flatnonzero(array + _laplace_noise(rng, scale_query, array.size) >= noisy_threshold)
    index = int(tops[0]) if tops.size else None
    epsilon = laplace_above_threshold_epsilon(scale_threshold, scale_query, sensitivity, monotone)
    return _release(
        owner, index, PureDP(epsilon), scale_threshold=scale_threshold, scale_query=scale_query,
        threshold=threshold, sensitivity=sensitivity, monotone=bool(monotone),
    )


def clamp_to_range(noisy_values, lower: float, upper: float) -> np.ndarray:
    """Each noisy value clamped to [lower, upper], the range the true value is known to lie in.

    This is the Euclidean projection onto the box [lower, upper]^n, so when the
    true vector x lies in the box, |clamped_i - x_i| <= |noisy_i - x_i| for
    every coordinate and every draw: the error never grows, and it shrinks
    wherever noise pushed a value outside the range (counts below 0). The
    clamped values are biased towards the range, so sums of them over many
    partitions overstate the total; release unclamped values when that matters.
    Privacy: post-processing of the noisy values (Dwork–Roth 2014, Prop. 2.1);
    the bounds must be public (here they follow from the job's clipping range).
    Runtime: O(n).
    """
    if not lower <= upper:
        raise ValueError(f"clamp_to_range: lower must be <= upper, got {lower!r} > {upper!r}")
    return np.clip(np.asarray(noisy_values, dtype=np.float64), lower, upper)


def order_consistent_counts(noisy_counts) -> np.ndarray:
    """The least-squares fit x_1 >= x_2 >= ... >= x_k >= 0 to noisy counts given in released order.

    Cesar–Rogers eq. (9): decreasing isotonic regression by pool-adjacent-
    violators, then clipping at 0 (equal to the constrained least-squares
    solution; the projection onto the monotone cone commutes with the
    non-negativity clip for a non-increasing fit). Pure post-processing.
    Runtime: O(k).
    """
    array = _vector("order_consistent_counts", "noisy_counts", noisy_counts, minimum=0).astype(np.float64)
    sums: list[float] = []
    sizes: list[int] = []
    for value in array:
        sums.append(float(value))
        sizes.append(1)
        while len(sums) > 1 and sums[-2] / sizes[-2] < sums[-1] / sizes[-1]:
            total, size = sums.pop(), sizes.pop()
            sums[-1] += total
            sizes[-1] += size
    fitted = np.repeat([s / n for s, n in zip(sums, sizes)], sizes) if sums else np.empty(0)
    return clamp_to_range(fitted, 0.0, math.inf)


def count_mle(
    counts, sigma: float, rng: SecureRandom, *, sensitivity: float = 1.0, max_partitions: int | None = None,
    quantum: float = 1.0,
) -> Release:
    """Cesar–Rogers Algorithm 1 (CountMLE): Gaussian counts for keys in released order, made order-consistent.

    `counts` are the true counts of the selected keys in the order a top-k
    selection released them. Adds `gaussian` noise, then projects onto
    non-increasing, non-negative vectors (`order_consistent_counts`).
    Privacy: exactly that of `gaussian` with the same arguments (post-processing);
    event `Gaussian(sigma, sensitivity_grid)`. `sensitivity` is L2 over the k counts
    (Cesar–Rogers Sec 6: Linf * sqrt(min(k, L0)) for counts).
    Proof: Cesar–Rogers Sec 3.6 (post-processing of the Gaussian mechanism).
    Checks and numerics: those of `gaussian`; outputs need not lie on the grid
    (they are functions of released grid values).
    Runtime: O(k).
    """
    noisy = gaussian(counts, sigma, rng, sensitivity=sensitivity, max_partitions=max_partitions, quantum=quantum)
    return _release("count_mle", order_consistent_counts(noisy.value), noisy.event, **noisy.parameters)
