"""All randomness of dpstream: a CSPRNG-backed generator and noise on a power-of-two grid.

Why a grid. Textbook Laplace or Gaussian noise added in floating point leaks
the un-noised value through the low bits of the result (Mironov 2012): the set
of doubles that `x + noise` can take depends on `x`. dpstream instead draws
*integer* noise and scales it by a granularity g that is a power of two, as
Google's and OpenDP's libraries do. A released value is `(n + Z) * g` with n
and Z integers, which is an exact double; its low bits carry nothing but n + Z.

Granularity choice: g = the smallest power of two >= scale * 2**-GRANULARITY_BITS
(scale is the Laplace scale b or the Gaussian sigma). In grid units the noise
scale is then t = scale / g in [2**19, 2**20]: fine enough that the discrete
noise is, for accounting purposes, the continuous one (the grid step is
< 1e-6 of the scale), coarse enough that the float arithmetic below resolves
every grid point (see Numerics).

Randomness. `SecureRandom()` reads its bits from the operating system's CSPRNG
(`os.urandom`: getrandom(2), ChaCha20 on Linux) in large blocks; nothing is
seeded from the clock or a user value. `SecureRandom(seed)` replaces the bit
source by numpy's PCG64 for deterministic tests only; the transformations from
bits to noise are the same code in both modes.

Samplers (all vectorised, all driven by 64-bit words):
- exponential: E = -log(U) with U = (w + 1/2) 2**-64 from one word w;
- discrete Laplace in grid units with scale t: G1 - G2 with G = floor(t * E)
  geometric (P[G >= k] = exp(-k / t)), so P[X = x] is proportional to
  exp(-|x| / t) (Canonne–Kamath–Steinke 2020, Sec. 5.2);
- discrete Gaussian in grid units with parameter s: Canonne–Kamath–Steinke
  2020, Algorithm 3 (discrete Laplace proposal with t = floor(s) + 1, accepted
  with probability exp(-(|Y| - s^2/t)^2 / (2 s^2)), tested as E >= exponent);
- standard normal (Box–Muller from E and U) and standard Gumbel (-log E) for
  mechanisms that release only an index, never a noisy value.

Numerics: sampling is near-exact, not exact. E carries a relative rounding
error of about 2**-53 and U is resolved to 2**-64, so G = floor(t E) lands in
the wrong integer only when t E is within about t E 2**-52 <= 2**-26 grid units
of an integer, or (tail) when U < 2**-40, an event of probability 2**-40.
The resulting deviation of the noise pmf from the ideal one is neither
accounted nor measurable by our statistical tests; see docs/proofs/pipelines.mechanisms.noise.md.
Runtime: O(n) with about 8 bytes of entropy per exponential draw (Laplace: 16
bytes per value; Gaussian: about 40 bytes per value).
"""
from __future__ import annotations

import math
import os

import numpy as np

from dpstream.pipelines.mechanisms.fixedpoint import is_integer_objects, is_power_of_two, power_of_two_at_least

GRANULARITY_BITS = 20
"""The grid step is at most scale * 2**-GRANULARITY_BITS and at least half that."""

MAX_GRID_UNITS = 2.0**51
"""Values are clipped to +-MAX_GRID_UNITS grid steps so every sum stays an exact double."""

_URANDOM_BLOCK = 1 << 24  # bytes per os.urandom call (16 MiB)
_TWO_TO_MINUS_64 = 2.0**-64


class SecureRandom:
    """The single source of randomness: OS CSPRNG bits, or seeded PCG64 bits in test mode.

    Checks: `seed` is None or a non-negative integer.
    Caller must ensure: production code never passes a seed (the seeded mode is
    predictable by anyone who knows the seed).
    Runtime: production mode reads entropy in 16 MiB blocks (about 300 MB/s here).
    """

    __slots__ = ("_generator",)

    def __init__(self, seed: int | None = None):
        if seed is None:
            self._generator = None
        else:
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
                raise ValueError(f"SecureRandom seed must be None or an integer >= 0, got {seed!r}")
            self._generator = np.random.Generator(np.random.PCG64(int(seed)))

    @property
    def deterministic(self) -> bool:
        """True in seeded test mode."""
        return self._generator is not None

    def words(self, n: int) -> np.ndarray:
        """n independent uniform 64-bit words."""
        if self._generator is not None:
            return self._generator.bit_generator.random_raw(n)
        chunks = []
        remaining = 8 * n
        while remaining > 0:
            size = min(remaining, _URANDOM_BLOCK)
            chunks.append(os.urandom(size))
            remaining -= size
        return np.frombuffer(b"".join(chunks), dtype=np.uint64).copy() if n else np.empty(0, np.uint64)

    def uniform(self, n: int) -> np.ndarray:
        """n draws from the uniform distribution on (0, 1), resolved to 2**-53."""
        return ((self.words(n) >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53

    def exponential(self, n: int) -> np.ndarray:
        """n draws of Exp(1): -log(U) with U resolved to 2**-64 (accurate far into the tail)."""
        u = (self.words(n).astype(np.float64) + 0.5) * _TWO_TO_MINUS_64
        return -np.log(u)

    def standard_normal(self, n: int) -> np.ndarray:
        """n draws of N(0, 1) by Box–Muller (radius sqrt(2E), angle 2 pi U); both coordinates used."""
        half = (n + 1) // 2
        radius = np.sqrt(2.0 * self.exponential(half))
        angle = (2.0 * math.pi) * self.uniform(half)
        return np.concatenate((radius * np.cos(angle), radius * np.sin(angle)))[:n]

    def gumbel(self, n: int) -> np.ndarray:
        """n draws of the standard Gumbel distribution, -log(E) with E ~ Exp(1)."""
        return -np.log(self.exponential(n))

    def geometric(self, t: float, n: int) -> np.ndarray:
        """n draws of G with P[G >= k] = exp(-k / t), k = 0, 1, ... (as float64 integers)."""
        return np.floor(t * self.exponential(n))

    def discrete_laplace(self, t: float, n: int) -> np.ndarray:
        """n draws with P[X = x] proportional to exp(-|x| / t) over the integers (float64 integers)."""
        _check_unit_scale("discrete_laplace", "t", t)
        return self.geometric(t, n) - self.geometric(t, n)

    def discrete_gaussian(self, s: float, n: int) -> np.ndarray:
        """n draws with P[X = x] proportional to exp(-x^2 / (2 s^2)) over the integers (float64 integers).

        Canonne–Kamath–Steinke 2020, Algorithm 3, vectorised: each round draws
        proposals for every missing sample; the acceptance rate is above 1/2.
        """
        _check_unit_scale("discrete_gaussian", "s", s)
        t = math.floor(s) + 1.0
        shift = s * s / t
        out = np.empty(n, dtype=np.float64)
        filled = 0
        while filled < n:
            need = n - filled
            batch = need + need // 2 + 16
            proposal = self.discrete_laplace(t, batch)
            exponent = (np.abs(proposal) - shift) ** 2 / (2.0 * s * s)
            accepted = proposal[self.exponential(batch) >= exponent][:need]
            out[filled : filled + accepted.size] = accepted
            filled += accepted.size
        return out


def _check_unit_scale(name: str, parameter: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= 2.0**40):
        raise ValueError(f"{name}: {parameter} must be a number in (0, 2**40] grid units, got {value!r}")


def granularity(scale: float) -> float:
    """The smallest power of two >= scale * 2**-GRANULARITY_BITS."""
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"granularity: scale must be a positive finite number, got {scale!r}")
    return power_of_two_at_least(math.ldexp(float(scale), -GRANULARITY_BITS))


def to_grid(values: np.ndarray, step: float, quantum: float = 1.0) -> tuple[np.ndarray, bool]:
    """Values in units of `quantum` -> grid units of `step` (round half up, a monotone map), clipped to +-MAX_GRID_UNITS.

    `values` count multiples of `quantum` (a power of two, default 1): they stand
    for values * quantum. Returns (grid units as float64 integers, exact):
    - integer arrays (signed, or unsigned up to 32 bits, or object arrays of
      Python ints: the exact sums beyond int64, `fixedpoint.narrowed`) are
      converted exactly: when quantum >= step they are multiplied by
      quantum / step (a power of two) and no rounding happens (`exact` True);
      otherwise the quotient by 2**j = step / quantum is rounded half up in
      integer arithmetic (floor of (k + 2**(j-1)) / 2**j, without overflow), so
      neighbouring integer inputs map to grid units whose difference is the
      exact quotient's, rounded. Python ints are scaled, rounded and clipped in
      integer arithmetic before they become doubles, so they give the very grid
      units an int64 array of the same numbers gives;
    - float arrays are scaled in float64 and rounded by floor(x + 1/2) (`exact` False).
    Clipping at +-MAX_GRID_UNITS is monotone and 1-Lipschitz; below it the
    integer results are exact (a double holds every integer up to 2**53).
    `exact` depends only on the dtype, step and quantum, never on the data; it
    generalises "integers on a grid of step <= 1" (quantum 1).
    """
    array = np.asarray(values)
    integer_objects = is_integer_objects(array)
    if array.dtype.kind not in "iuf" and not integer_objects:
        raise ValueError(f"values must be an integer or float array, got dtype {array.dtype}")
    if not is_power_of_two(quantum):
        raise ValueError(f"to_grid: quantum must be a positive power of two, got {quantum!r}")
    if integer_objects:
        return _integers_to_grid(array, math.frexp(step)[1] - math.frexp(quantum)[1])
    if array.dtype.kind == "i" or (array.dtype.kind == "u" and array.dtype.itemsize < 8):
        shift = math.frexp(step)[1] - math.frexp(quantum)[1]  # step / quantum = 2**shift (both powers of two)
        exact = shift <= 0
        if exact:
            units = array.astype(np.float64) * math.ldexp(1.0, -shift)
        else:
            units = _round_half_up_shift(array.astype(np.int64), shift).astype(np.float64)
        return np.clip(units, -MAX_GRID_UNITS, MAX_GRID_UNITS), exact
    scaled = array.astype(np.float64) * (quantum / step)
    if not np.all(np.isfinite(scaled)):
        raise ValueError("values must be finite numbers, got NaN or infinity")
    return np.clip(np.floor(scaled + 0.5), -MAX_GRID_UNITS, MAX_GRID_UNITS), False


def _integers_to_grid(values: np.ndarray, shift: int) -> tuple[np.ndarray, bool]:
    """`to_grid` of an object array of integers (step / quantum = 2**shift) in Python integers: k * 2**-shift
    (shift <= 0, exact) or floor((k + 2**(shift-1)) / 2**shift) (round half up), clipped to +-MAX_GRID_UNITS, then
    doubles (exact: at most 2**51). For numbers inside int64 these are the int64 path's grid units."""
    limit = int(MAX_GRID_UNITS)
    if shift <= 0:
        scaled = [int(k) << -shift for k in values.flat]
    else:
        half = 1 << (shift - 1)
        scaled = [(int(k) + half) >> shift for k in values.flat]  # >> is floor division by 2**shift
    units = np.array([min(max(k, -limit), limit) for k in scaled], dtype=np.float64).reshape(values.shape)
    return units, shift <= 0


def _round_half_up_shift(units: np.ndarray, shift: int) -> np.ndarray:
    """floor(units / 2**shift + 1/2) for int64 units and shift >= 1, exactly (no overflow)."""
    if shift >= 64:  # |units| <= 2**63, so units / 2**shift lies in [-1/2, 1/2), which rounds half up to 0
        return np.zeros_like(units)
    floor = units >> shift  # arithmetic shift: floor division by 2**shift
    remainder = units & np.int64((1 << shift) - 1)  # units - floor * 2**shift, in [0, 2**shift)
    return floor + (remainder >= (1 << (shift - 1)))


def rounded_sensitivity(sensitivity: float, step: float, exact: bool, changed: int, norm: int) -> float:
    """How far neighbouring values `sensitivity` apart in L1 (norm 1) or L2 (norm 2) can be once rounded to the grid.

    Round-half-up is monotone and moves each coordinate by less than step/2, so
    a coordinate difference d becomes at most step * ceil(d / step) < d + step.
    Over at most `changed` changed coordinates the L1 distance grows by less
    than changed * step and the L2 distance by less than sqrt(changed) * step.
    When no rounding happens (`exact`), nothing is added.
    """
    if exact:
        return float(sensitivity)
    return math.nextafter(float(sensitivity) + step * (changed if norm == 1 else math.sqrt(changed)), math.inf)


def grid_sensitivity(sensitivity: float, step: float, exact: bool, changed: int, norm: int) -> float:
    """The sensitivity at which the continuous event bounds grid noise: norm 1 discrete Laplace, norm 2 discrete Gaussian.

    The rounded distance (`rounded_sensitivity`) plus one grid step per changed
    coordinate in the noise's norm, because the discrete noise's privacy curve
    can exceed the continuous one's at the same shift, while a shift by an
    integer vector v is dominated by the continuous noise shifted by |v_i| + 1
    grid units in every changed coordinate:
    - discrete Gaussian: by a relative 2e-11 at 2**19 grid units; dominated at
      ||v||_2 + sqrt(changed) (docs/proofs/pipelines.mechanisms.noise.discrete_gaussian_domination.md);
    - discrete Laplace: by a relative 1 / (2 t) at scale t grid units (its pure-DP
      ratio is exact, but the accountant's Laplace PLD is the continuous one);
      dominated at ||v||_1 + changed (docs/proofs/pipelines.mechanisms.additive.laplace.md).
    """
    rounded = rounded_sensitivity(sensitivity, step, exact, changed, norm)
    return math.nextafter(rounded + step * (changed if norm == 1 else math.sqrt(changed)), math.inf)
