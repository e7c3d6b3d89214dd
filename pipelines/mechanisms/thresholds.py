"""Selection of partitions not known in advance: noisy sums (or noisy numbers of distinct units) released only
above a cutoff, so that partitions only one privacy unit holds appear with probability at most delta
(`gaussian_threshold`, `distinct_threshold`, `truncated_gaussian`)."""
from __future__ import annotations

import math

import numpy as np
from scipy.special import log_ndtr, ndtri

from dpstream.accounting.events import ZCDP, GaussianThreshold
from dpstream.accounting.numerics import epsilon_from_delta_curve, expanding_upper, log_sub_exp
from dpstream.pipelines.mechanisms.additive import noisy_on_grid
from dpstream.pipelines.mechanisms.fixedpoint import exact_integers, is_power_of_two
from dpstream.pipelines.mechanisms.noise import (
    SecureRandom,
    granularity,
    grid_sensitivity,
    rounded_sensitivity,
    to_grid,
)
from dpstream.pipelines.mechanisms.release import Release, checked_rng, count, positive, release, vector


def check_delta(owner: str, delta: float) -> float:
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


def gaussian_threshold_cutoff(sigma: float, threshold: float, max_partitions: int, delta: float, exact: bool) -> float:
    """The cutoff of `gaussian_threshold` (value units) a noisy sum must exceed; public: a function of the
    parameters and of whether the sums reach the noise grid exactly (`noise.to_grid`)."""
    step = granularity(sigma)
    tau = rounded_sensitivity(threshold, step, exact, changed=1, norm=1)
    return tau + selection_margin(sigma / step, max_partitions, delta) * step


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
    Proof: docs/proofs/accounting.events.GaussianThreshold.md.
    Checks: sigma, threshold positive; delta in (0, 1); counts finite 1-d; quantum a power of two.
    Caller must ensure: contribution bounding gives the stated L0 and Linf bounds.
    Numerics: hardened (grid); the cutoff is rounded up (see `selection_margin`).
    Runtime: O(n).
    """
    owner = "gaussian_threshold"
    sigma = positive(owner, "sigma", sigma)
    threshold = positive(owner, "threshold", threshold)
    partitions = count(owner, "max_partitions", max_partitions)
    delta = check_delta(owner, delta)
    array = vector(owner, "counts", counts, minimum=0)
    rng = checked_rng(owner, rng)
    step = granularity(sigma)
    units, exact = to_grid(array, step, quantum)
    tau = rounded_sensitivity(threshold, step, exact, changed=1, norm=1)
    sensitivity = grid_sensitivity(math.sqrt(partitions) * threshold, step, exact, changed=partitions, norm=2)
    cutoff = gaussian_threshold_cutoff(sigma, threshold, partitions, delta, exact)
    noisy = (units + rng.discrete_gaussian(sigma / step, array.size)) * step
    kept = np.flatnonzero(noisy > cutoff)
    return release(
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
    Proof: docs/proofs/pipelines.mechanisms.thresholds.distinct_threshold.md.
    Checks: sigma, extra_sigma, linf positive; |unit_value| <= linf; delta in (0, 1); units, sums finite 1-d of equal
    length; quantum a power of two.
    Caller must ensure: contribution bounding gives the stated L0 and Linf bounds, and
    units/sums come from the same bounded records.
    Numerics: hardened (grid, as `gaussian_threshold` and `gaussian`); extra is exact integer arithmetic (int64,
    or Python ints for sums beyond int64) when units and sums are integer arrays and unit_value is an integer
    multiple of quantum (as after `pipelines.transforms.bounding`).
    Runtime: O(n).
    """
    owner = "distinct_threshold"
    units = vector(owner, "units", units, minimum=0)
    sums = vector(owner, "sums", sums, minimum=0)
    if units.shape != sums.shape:
        raise ValueError(f"{owner}: units and sums must have the same length, got {units.size} and {sums.size}")
    linf = positive(owner, "linf", linf)
    if not is_power_of_two(quantum):
        raise ValueError(f"{owner}: quantum must be a positive power of two, got {quantum!r}")
    if not (math.isfinite(unit_value) and 0 < abs(unit_value) <= linf):
        raise ValueError(f"{owner}: unit_value must be non-zero with |unit_value| <= linf={linf!r}, got {unit_value!r}")
    selection = gaussian_threshold(units, sigma, 1.0, rng, delta=delta, max_partitions=max_partitions)
    kept, noisy_units = selection.value
    assert isinstance(selection.event, GaussianThreshold)
    values, mu = unit_value * noisy_units, selection.event.mu
    extra_linf = linf - abs(unit_value)
    if extra_linf > 0:
        if extra_sigma is None:
            raise ValueError(f"{owner}: extra_sigma is required when linf={linf!r} exceeds |unit_value|={abs(unit_value)!r}")
        extra_sigma = positive(owner, "extra_sigma", extra_sigma)
        per_unit = unit_value / quantum  # what one record adds, in units of quantum (exact: quantum a power of two)
        integral = sums.dtype.kind in "iuO" and units.dtype.kind in "iuO" and float(per_unit).is_integer()
        if not integral:
            beyond = sums[kept].astype(np.float64) - per_unit * units[kept].astype(np.float64)
        elif "O" in (sums.dtype.kind, units.dtype.kind):  # sums beyond int64 (Python ints): exact, as below
            beyond = exact_integers(sums[kept]) - int(per_unit) * exact_integers(units[kept])
        else:  # |extra| <= |sums|: no int64 overflow
            beyond = sums[kept] - int(per_unit) * units[kept]
        extra, _, extra_sensitivity = noisy_on_grid(
            owner, beyond, extra_sigma, rng,
            math.sqrt(max_partitions) * extra_linf, max_partitions, norm=2, minimum=0, quantum=quantum)
        values = values + extra
        mu = math.hypot(mu, extra_sensitivity / extra_sigma)
    sensitivity = sigma * mu
    for _ in range(4):  # the two quotients, the hypot and the product, each rounded
        sensitivity = math.nextafter(sensitivity, math.inf)
    event = GaussianThreshold(sigma, sensitivity, selection.event.delta)
    return release(owner, (kept, values), event, **selection.parameters, extra_sigma=extra_sigma, unit_value=unit_value)


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
    sigma = positive(owner, "sigma", sigma)
    tau = positive(owner, "threshold", threshold)
    partitions = count(owner, "max_partitions", max_partitions)
    delta = check_delta(owner, delta)
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
    docs/proofs/pipelines.mechanisms.thresholds.truncated_gaussian.md (tau and T rounded up to the grid).
    Checks: sigma, threshold positive; delta in (0, 1); counts finite 1-d; quantum a power of two.
    Caller must ensure: contribution bounding gives the stated L0 and Linf bounds.
    Numerics: hardened (grid); T solved in log space and rounded up.
    Runtime: O(n) plus about 60 evaluations of log_ndtr for T.
    """
    owner = "truncated_gaussian"
    sigma = positive(owner, "sigma", sigma)
    threshold = positive(owner, "threshold", threshold)
    partitions = count(owner, "max_partitions", max_partitions)
    array = vector(owner, "counts", counts, minimum=0)
    rng = checked_rng(owner, rng)
    step = granularity(sigma)
    units, exact = to_grid(array, step, quantum)
    tau = rounded_sensitivity(threshold, step, exact, changed=1, norm=1)
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
    return release(
        owner, (kept, noisy[kept]), event,
        sigma=sigma, threshold=tau, truncation=level_units * step, cutoff=cutoff, granularity=step,
    )
