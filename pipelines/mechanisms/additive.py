"""Additive noise on a power-of-two grid: discrete Laplace (`laplace`) and discrete Gaussian (`gaussian`) noise on
vectors of bounded sums, and the projection of noisy values onto the range a bounded sum can take
(`clamp_to_range`, post-processing).

Neighbouring relation: add or remove all records of one privacy unit; the caller states how far that moves the
input (`sensitivity`, and the number of coordinates it can change, `max_partitions`). Inputs may be integer units
of a power-of-two `quantum` (the exact bounded sums of `pipelines.transforms.bounding`); they reach the noise grid
by exact integer arithmetic (`noise.to_grid`)."""
from __future__ import annotations

import numpy as np

from dpstream.accounting.events import Gaussian, Laplace
from dpstream.pipelines.mechanisms.noise import SecureRandom, granularity, grid_sensitivity, to_grid
from dpstream.pipelines.mechanisms.release import Release, changed, checked_rng, positive, release, vector


def noisy_on_grid(
    owner: str, values, parameter: float, rng: SecureRandom, sensitivity: float, max_partitions: int | None, norm: int,
    minimum: int = 1, quantum: float = 1.0,
) -> tuple[np.ndarray, float, float]:
    """(noisy values, grid step, grid sensitivity) for `laplace` (norm=1) or `gaussian` (norm=2).

    Rounds `values` (in units of `quantum`) to the power-of-two grid of
    `parameter` (the Laplace scale or the Gaussian sigma), adds integer noise
    in grid units (discrete Laplace for norm 1, discrete Gaussian for norm 2)
    and scales back. The grid sensitivity is `sensitivity` in that norm after
    rounding (`pipelines.mechanisms.noise.grid_sensitivity`).
    """
    sensitivity = positive(owner, "sensitivity", sensitivity)
    array = vector(owner, "values", values, minimum)
    rng = checked_rng(owner, rng)
    step = granularity(parameter)
    units, exact = to_grid(array, step, quantum)
    effective = grid_sensitivity(sensitivity, step, exact, changed(owner, max_partitions, array.size), norm=norm)
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
    docs/proofs/pipelines.mechanisms.additive.laplace.md.
    Checks: scale, sensitivity positive; values finite 1-d; quantum a power of two.
    Caller must ensure: the sensitivity and max_partitions follow from contribution bounding.
    Numerics: hardened (outputs are multiples of the grid step; pipelines.mechanisms.noise); integer inputs reach the
    grid exactly (no rounding when quantum >= the grid step).
    Runtime: O(n), about 0.15 us per value.
    """
    owner = "laplace"
    scale = positive(owner, "scale", scale)
    noisy, step, effective = noisy_on_grid(owner, values, scale, rng, sensitivity, max_partitions, norm=1, quantum=quantum)
    return release(owner, noisy, Laplace(scale, effective), scale=scale, granularity=step, sensitivity=effective)


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
    coordinates; docs/proofs/pipelines.mechanisms.noise.discrete_gaussian_domination.md, from the
    tail bounds of Canonne–Kamath–Steinke 2020); rounding as in
    docs/proofs/pipelines.mechanisms.additive.laplace.md.
    Checks: sigma, sensitivity positive; values finite 1-d; quantum a power of two.
    Caller must ensure: the sensitivity and max_partitions follow from contribution bounding.
    Numerics: hardened (outputs are multiples of the grid step); integer inputs reach the grid exactly.
    Runtime: O(n), about 0.4 us per value.
    """
    owner = "gaussian"
    sigma = positive(owner, "sigma", sigma)
    noisy, step, effective = noisy_on_grid(owner, values, sigma, rng, sensitivity, max_partitions, norm=2, quantum=quantum)
    return release(owner, noisy, Gaussian(sigma, effective), sigma=sigma, granularity=step, sensitivity=effective)


def clamp_to_range(noisy_values, lower: float, upper: float) -> np.ndarray:
    """Each noisy value clamped to [lower, upper], the range the true value is known to lie in.

    This is the Euclidean projection onto the box [lower, upper]^n, so when the
    true vector x lies in the box, |clamped_i - x_i| <= |noisy_i - x_i| for
    every coordinate and every draw: the error never grows, and it shrinks
    wherever noise pushed a value outside the range (counts below 0). The
    clamped values are biased towards the range, so sums of them over many
    partitions overstate the total; release unclamped values when that matters.
    Privacy: post-processing of the noisy values; the bounds must be public
    (here they follow from the job's clipping range).
    Proof: Dwork–Roth 2014, Prop. 2.1 (post-processing).
    Runtime: O(n).
    """
    if not lower <= upper:
        raise ValueError(f"clamp_to_range: lower must be <= upper, got {lower!r} > {upper!r}")
    return np.clip(np.asarray(noisy_values, dtype=np.float64), lower, upper)
