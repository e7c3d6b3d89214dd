"""Numerical privacy-loss-distribution (PLD) composition for mixed plans.

Privacy: add/remove neighbours (one privacy unit), (epsilon, delta)-DP. For a
composition of PureDP, ApproxDP, Laplace, Gaussian, GaussianThreshold and BoundedRange events,
run adaptively (each mechanism may depend on earlier outputs) with parameters
fixed in advance, the reported delta(epsilon) is an upper bound on the
optimal delta for every epsilon in R, and epsilon(delta) an upper bound on the
optimal epsilon. Not a privacy filter.

Proof (details in docs/proofs/accounting.bounds.pld.md):
- Each leaf has a dominating pair (P_i, Q_i) whose trade-off function
  T(P_i, Q_i) is symmetric and lower-bounds the mechanism's trade-off function
  for every ordered pair of neighbours:
    PureDP(eps)          -> RR(eps, 0)        (Kairouz–Oh–Viswanath 2017; Chourasia et al. Thm 4.5)
    ApproxDP(eps, delta) -> RR(eps, delta)    (Chourasia et al. Thm 4.5)
    Laplace(b, Delta)    -> (Lap(0, b), Lap(Delta, b))
    Gaussian(sigma, D)   -> (N(0, 1), N(D / sigma, 1))  (Dong–Roth–Su 2019)
    BoundedRange(eps)    -> (U[0,1], density -f_BR') with
                            f_BR(x) = (1 - x) / (1 + (e^eps - 1) x), the pointwise
                            minimum over t of Dong–Durfee–Rogers' l_{t,eps}
                            (their Lemma 4.1 and App. A; proof note).
- Dong–Roth–Su 2019, Thm 3.2: the adaptive composition is
  T(prod P_i, prod Q_i)-DP, so delta(eps) <= delta_{P|Q}(eps) =
  p_inf + E[(1 - e^{eps - sum Z_i})_+] with independent Z_i ~ PLD(P_i || Q_i)
  (Chourasia et al. eq. 20). All pairs being symmetric, delta_{Q|P} equals
  delta_{P|Q}, so one direction is computed (the reversal identity, eq. 7,
  would multiply the discretisation error by e^eps).
- The Gaussian losses sum to N(kappa, 2 kappa) with mu^2 = 2 kappa = sum mu_i^2,
  whose expectation is the mu-GDP profile, so
  delta(eps) = 1 - keep + keep * (p_inf + sum_z P(z) delta_mu(eps - shift - z)),
  the E_Z form of Chourasia et al. Thm 4.2, with keep = prod (1 - delta_i).
- GaussianThreshold(sigma, D, delta) has the asymmetric dominating pair
  P = (1 - delta) N(mu, 1) + delta bottom, Q = N(0, 1) (event docstring). Its
  loss is +infinity w.p. delta, else the Gaussian loss + log(1 - delta) (P
  against Q), and the Gaussian loss - log(1 - delta) (Q against P). Both
  directions' composed deltas are at most the expression above with delta in
  `keep` and shift = -sum log(1 - delta) (docs/proofs/accounting.events.GaussianThreshold.md),
  so one curve covers both.
- Pessimistic discretisation: each non-Gaussian loss is rounded up to the grid
  step * Z, mass beyond a truncation point moves to +infinity (or, on the
  left, up to the truncation point). (1 - e^{eps - z})_+ and delta_mu(eps - z)
  are non-decreasing in z, so under the monotone coupling every such move only
  increases delta: the result is an upper bound for every grid.
Checks: `applies` admits only the six event classes; steps are positive.
Caller must ensure: the events' parameters were fixed before any mechanism ran.
Numerics: direct convolution (relative error) when one side has at most 32
atoms, else FFT; FFT masses are clipped at 0 and an upper bound on the L1
floating-point error (Higham, Accuracy and Stability of Numerical Algorithms,
Thm 24.2, times 4) is carried and added to delta, like the mass at +infinity;
the finite part is rounded up by a relative 1e-12; ApproxDP deltas combine in
log space (log1p / expm1). The loss grid is 1e-4, finer for narrow plans (up to
2^17 bins, not below 1e-6) and coarser only past 2^21 bins; it overestimates
epsilon by at most (number of non-Gaussian events) * step, typically a third
of that. epsilon(delta) is a binary search over grid points m * step using a
table of delta_mu (each loss difference looks up the entry at or below it),
refined between grid points on the exact curve for lattices up to 2^14 atoms,
then stepped right until the direct delta meets the target.
Runtime: O(B log B) per distinct event (repeated squaring) with B bins, once
per composition (cached by `PLDBound`); delta(eps) is O(B) special-function
calls; epsilon(delta) is one table of delta_mu plus about 25 O(B) lookups.
24 Laplace + 24 Gaussian + 24 BR at delta = 1e-6: about 0.5 s on 2 cores.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy.fft import irfft, next_fast_len, rfft
from scipy.optimize import brentq
from scipy.special import log_ndtr

from dpstream.accounting.bounds import Bound
from dpstream.accounting.bounds.basic import pure_epsilon
from dpstream.accounting.bounds.gaussian import gdp_epsilon
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import ApproxDP, BoundedRange, Event, Gaussian, GaussianThreshold, Laplace, PureDP

DEFAULT_STEP = 1e-4  # loss grid for large plans
MIN_STEP = 1e-6  # finest grid used for small plans
TARGET_BINS = 2**17  # small plans get a finer grid up to this many bins
MAX_BINS = 2**21  # plans wider than this get a coarser grid
LOG_TAIL = math.log(1e-25)  # Hoeffding tail mass allowed beyond the truncation window
GAUSS_CUT_SIGMAS = 10.0  # delta_mu(x) < Phi(-10) ~ 8e-24 beyond x = mu^2/2 + 10 mu
UNIT_ROUNDOFF = 2.0**-53
TABLE_LEFT = -40.0  # below this loss difference the table uses delta_mu = 1 (true value >= 1 - 4e-18)
TABLE_MAX = 2**22  # entries of the delta_mu table; wider tables use a stride
REFINE_BINS = 2**14  # lattices up to this size refine epsilon between grid points
DIRECT_NONZEROS = 32  # sparse side small enough for direct convolution
FINITE_ROUND_UP = 1.0 + 1e-12  # covers summation and log_ndtr rounding in the finite part

SUPPORTED = (PureDP, ApproxDP, Laplace, Gaussian, GaussianThreshold, BoundedRange)
GAUSSIAN_PART = (Gaussian, GaussianThreshold)  # composed in closed form through mu, not on the lattice


# --- leaf privacy-loss distributions ----------------------------------------------------------------


@dataclass(frozen=True)
class LossLaw:
    """The law of the privacy loss Z = log(P/Q)(theta), theta ~ P, of a dominating pair with bounded loss.

    Z lies in [lo, hi]: an atom `atom_lo` at lo, an atom `atom_hi` at hi, and
    between them a continuous part with Pr[a < Z <= b] = `increment(a, b)` for
    lo <= a <= b < hi (numpy arrays in and out, each value to a few ulps).
    """

    lo: float
    hi: float
    atom_lo: float
    atom_hi: float
    increment: Callable[[np.ndarray, np.ndarray], np.ndarray]


def _logistic(x: float) -> float:
    """1 / (1 + e^-x), without overflow for any x."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    return math.exp(x) / (1.0 + math.exp(x))


def randomized_response_law(epsilon: float) -> LossLaw:
    """RR(eps, 0): Z = +eps w.p. e^eps/(1+e^eps), -eps w.p. 1/(1+e^eps)."""
    return LossLaw(-epsilon, epsilon, _logistic(-epsilon), _logistic(epsilon), lambda a, b: np.zeros_like(a))


def laplace_law(epsilon: float) -> LossLaw:
    """(Lap(0,b), Lap(Delta,b)), eps = Delta/b: atoms e^{-eps}/2 at -eps and 1/2 at +eps, density e^{(z-eps)/2}/4 between."""
    return LossLaw(
        -epsilon, epsilon, 0.5 * math.exp(-epsilon), 0.5, lambda a, b: 0.5 * np.exp(0.5 * (a - epsilon)) * np.expm1(0.5 * (b - a))
    )


def bounded_range_law(epsilon: float) -> LossLaw:
    """(U[0,1], density e^eps/(1+(e^eps-1)x)^2): Z = 2 log(1+(e^eps-1)x) - eps, Pr[Z <= z] = expm1((z+eps)/2)/expm1(eps).

    The mass of (a, b] is e^((a+eps)/2) expm1((b-a)/2) / expm1(eps), computed as
    e^((a-eps)/2 - ln(1 - e^-eps)) expm1((b-a)/2) so that e^eps never overflows."""
    log_rest = math.log(-math.expm1(-epsilon))  # ln(expm1(eps)) - eps
    return LossLaw(
        -epsilon, epsilon, 0.0, 0.0, lambda a, b: np.exp(0.5 * (a - epsilon) - log_rest) * np.expm1(0.5 * (b - a))
    )


def bounded_range_tradeoff(epsilon: float, x):
    """f_BR(x) = (1 - x) / (1 + (e^eps - 1) x): every eps-BR mechanism is f_BR-DP (proof note)."""
    x = np.asarray(x, dtype=float)
    return (1.0 - x) / (1.0 + math.expm1(epsilon) * x)


def loss_law(event: Event) -> LossLaw:
    """The finite part of the leaf's dominating PLD (ApproxDP's delta is handled as an atom at +infinity)."""
    if isinstance(event, (PureDP, ApproxDP)):
        return randomized_response_law(float(event.epsilon))
    if isinstance(event, Laplace):
        return laplace_law(event.epsilon)
    if isinstance(event, BoundedRange):
        return bounded_range_law(float(event.epsilon))
    raise TypeError(f"loss_law needs a PureDP, ApproxDP, Laplace or BoundedRange event, got {event!r}")


# --- the pessimistic lattice ---------------------------------------------------------------------


def ceil_index(value: float, step: float) -> int:
    """Smallest integer j with j * step >= value in floating point."""
    index = math.ceil(value / step)
    while (index - 1) * step >= value:
        index -= 1
    while index * step < value:
        index += 1
    return index


@dataclass(frozen=True)
class Lattice:
    """A discrete loss law on the grid: mass `masses[i]` at loss (offset + i) * step.

    `infinity` is mass placed at +infinity; `error` bounds the L1 distance
    between `masses` and the exact rounded-up law (floating-point error).
    """

    step: float
    offset: int
    masses: np.ndarray
    infinity: float = 0.0
    error: float = 0.0

    def losses(self) -> np.ndarray:
        return (self.offset + np.arange(self.masses.size)) * self.step

    def mean(self) -> float:
        total = float(self.masses.sum())
        return float((self.masses * self.losses()).sum()) / total if total > 0 else 0.0


def discretise(law: LossLaw, step: float) -> Lattice:
    """Round every loss up to the grid: bin j gets Pr[(j-1) step < Z <= j step]."""
    first, last = ceil_index(law.lo, step), ceil_index(law.hi, step)
    if first == last:
        masses = np.array([law.atom_lo + float(law.increment(np.array([law.lo]), np.array([law.hi]))[0]) + law.atom_hi])
    else:
        edges = np.concatenate(([law.lo], (first + np.arange(last - first)) * step, [law.hi]))
        masses = np.clip(law.increment(edges[:-1], edges[1:]), 0.0, None)
        masses[0] += law.atom_lo
        masses[-1] += law.atom_hi
    # each mass is within a few ulps of the truth, so the L1 error is below 8 ulps of the total
    return Lattice(step, first, masses, 0.0, 8 * UNIT_ROUNDOFF)


def _fft_error(a: np.ndarray, b: np.ndarray) -> float:
    """Upper bound on the L1 error of fftconvolve(a, b) (Higham Thm 24.2 per transform, x4 safety)."""
    n = next_fast_len(a.size + b.size - 1)
    per_transform = 5 * math.log2(max(n, 2)) * UNIT_ROUNDOFF
    l1a, l1b = float(np.abs(a).sum()), float(np.abs(b).sum())
    l2a, l2b = math.sqrt(float(np.square(a).sum())), math.sqrt(float(np.square(b).sum()))
    l2_error = 3 * per_transform * (l2a * l1b + l1a * l2b) + 2 * UNIT_ROUNDOFF * l2a * l2b
    return 4 * math.sqrt(a.size + b.size - 1) * l2_error


def _fft_convolve(a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """Linear convolution of a with b (with a itself when b is None: one forward transform)."""
    size = a.size + (a.size if b is None else b.size) - 1
    length = next_fast_len(size, real=True)
    spectrum = rfft(a, length)
    product = spectrum * spectrum if b is None else spectrum * rfft(b, length)
    return irfft(product, length)[:size]


def convolve(a: Lattice, b: Lattice) -> Lattice:
    """The law of the sum of independent losses.

    Direct summation when one side has at most DIRECT_NONZEROS atoms (each
    output is a sum of non-negative products, so the error is relative);
    FFT convolution otherwise, with negatives clipped and its error bounded.
    """
    mass_a, mass_b = float(a.masses.sum()), float(b.masses.sum())
    small, large = (a, b) if np.count_nonzero(a.masses) <= np.count_nonzero(b.masses) else (b, a)
    nonzero = np.flatnonzero(small.masses)
    if nonzero.size <= DIRECT_NONZEROS:
        masses = np.zeros(a.masses.size + b.masses.size - 1)
        for index in nonzero:
            masses[index : index + large.masses.size] += small.masses[index] * large.masses
        rounding = 2 * (nonzero.size + 1) * UNIT_ROUNDOFF * mass_a * mass_b
    else:
        masses = np.clip(_fft_convolve(a.masses, None if b is a else b.masses), 0.0, None)
        rounding = _fft_error(a.masses, b.masses)
    error = rounding + a.error * (mass_b + b.error) + b.error * mass_a
    return Lattice(a.step, a.offset + b.offset, masses, a.infinity + b.infinity, error)


def truncate(lattice: Lattice, radius: float) -> Lattice:
    """Keep losses within `radius` of the mean: mass above goes to +infinity, mass below up to the left edge."""
    centre = lattice.mean()
    lo = math.floor((centre - radius) / lattice.step) - lattice.offset
    hi = math.ceil((centre + radius) / lattice.step) - lattice.offset
    lo, hi = max(lo, 0), min(hi, lattice.masses.size - 1)
    if lo == 0 and hi == lattice.masses.size - 1:
        return lattice
    masses = lattice.masses[lo : hi + 1].copy()
    masses[0] += float(lattice.masses[:lo].sum())
    infinity = lattice.infinity + float(lattice.masses[hi + 1 :].sum())
    return Lattice(lattice.step, lattice.offset + lo, masses, infinity, lattice.error)


def self_compose(lattice: Lattice, count: int, radius: float) -> Lattice:
    """`count`-fold composition by repeated squaring, truncating after each convolution."""
    result: Lattice | None = None
    base = lattice
    while count:
        if count & 1:
            result = base if result is None else truncate(convolve(result, base), radius)
        count >>= 1
        if count:
            base = truncate(convolve(base, base), radius)
    assert result is not None  # count >= 1 for every item of a Composition
    return result


# --- the Gaussian profile on arrays ---------------------------------------------------------------


def gdp_delta_array(mu: float, x: np.ndarray) -> np.ndarray:
    """The mu-GDP profile delta_mu(x) on an array (the array form of `gaussian.gdp_log_delta`).

    mu = 0 gives the trivial profile (1 - e^x)_+.
    """
    x = np.asarray(x, dtype=float)
    if mu == 0.0:
        return np.where(x < 0, -np.expm1(np.minimum(x, 0.0)), 0.0)
    first = log_ndtr(-x / mu + mu / 2)
    second = x + log_ndtr(-x / mu - mu / 2)
    with np.errstate(invalid="ignore", over="ignore"):
        gap = np.minimum(second - first, 0.0)
        return np.where(second < first, np.exp(first) * -np.expm1(gap), 0.0)


# --- the composed curve ---------------------------------------------------------------------------


def choose_step(composition: Composition, step: float | None = None) -> float:
    """The loss grid: `step` if given, else DEFAULT_STEP, finer for narrow plans, coarser for very wide ones."""
    width = 2 * math.fsum(pure_epsilon(e) * c for e, c in composition if not isinstance(e, GAUSSIAN_PART))
    if step is not None:
        if not (isinstance(step, (int, float)) and math.isfinite(step) and step > 0):
            raise ValueError(f"PLD loss step must be a positive finite number, got {step!r}")
        return float(step)
    span = min(width, 2 * _radius(composition, DEFAULT_STEP))
    chosen = min(DEFAULT_STEP, max(span / TARGET_BINS, MIN_STEP))
    return max(chosen, span / MAX_BINS)


def _radius(composition: Composition, step: float) -> float:
    """Half-width of the truncation window: Hoeffding with losses in [-eps_i, eps_i + step]."""
    spread = math.fsum(
        c * (pure_epsilon(e) + step / 2) ** 2 for e, c in composition if not isinstance(e, GAUSSIAN_PART)
    )
    return math.sqrt(-2.0 * LOG_TAIL * spread)


class ComposedCurve:
    """delta(epsilon) of a composition, as an upper bound valid for every epsilon in R.

    `delta(eps) = 1 - keep + keep * (floor + sum_z P(z) delta_mu(eps - shift - z))`, where
    `floor` holds the mass at +infinity plus the floating-point error bound and
    `shift` = -sum log(1 - delta_i) over the GaussianThreshold events (0 without them).
    """

    def __init__(self, composition: Composition, step: float | None = None):
        if not composition.only(*SUPPORTED):
            names = [c.__name__ for c in SUPPORTED]
            raise TypeError(f"PLD composition covers only {names}, got {composition.to_dict()}")
        self.step = choose_step(composition, step)
        self.mu = math.sqrt(math.fsum(c * e.mu**2 for e, c in composition.select(*GAUSSIAN_PART)))
        self.log_keep = math.fsum(c * math.log1p(-e.delta) for e, c in composition.select(ApproxDP, GaussianThreshold))
        thresholds = composition.select(GaussianThreshold)
        self.shift = math.nextafter(-math.fsum(c * math.log1p(-e.delta) for e, c in thresholds), math.inf) if thresholds else 0.0
        radius = _radius(composition, self.step)
        lattice: Lattice | None = None
        for event, count in composition:
            if isinstance(event, GAUSSIAN_PART):
                continue
            leaf = self_compose(discretise(loss_law(event), self.step), count, radius)
            lattice = leaf if lattice is None else truncate(convolve(lattice, leaf), radius)
        if lattice is None:  # Gaussians only: the loss law besides them is an atom at 0
            lattice = Lattice(self.step, 0, np.ones(1))
        self.floor = lattice.infinity + lattice.error
        self.offset = lattice.offset
        self.bins = int(lattice.masses.size)
        self.indices = np.flatnonzero(lattice.masses > 0)  # sparse lattices (pure DP) keep few bins
        self.masses = lattice.masses[self.indices]
        self.losses = lattice.losses()[self.indices]
        self.cumulative = np.cumsum(self.masses)
        self._table: tuple[int, int, np.ndarray] | None = None

    # -- delta at any epsilon --------------------------------------------------------------------

    def delta(self, epsilon: float) -> float:
        if math.isinf(epsilon):
            return 1.0 if epsilon < 0 else self._combine(self.floor)
        return self._combine(self.floor + self._expectation(epsilon))

    def _expectation(self, epsilon: float) -> float:
        """sum_z P(z) delta_mu(epsilon - shift - z) over the finite losses, rounded up."""
        epsilon = epsilon - self.shift
        if self.mu == 0.0:
            start = int(np.searchsorted(self.losses, epsilon, side="right"))  # delta_0(x) = 0 for x >= 0
            head = 0.0
        else:
            cut = epsilon - (self.mu**2 / 2 + GAUSS_CUT_SIGMAS * self.mu)
            start = int(np.searchsorted(self.losses, cut, side="left"))
            head = 0.0
            if start > 0:  # every loss below the cut: delta_mu(epsilon - z) <= delta_mu(epsilon - losses[start-1])
                largest = gdp_delta_array(self.mu, np.array([epsilon - self.losses[start - 1]]))[0]
                head = float(self.cumulative[start - 1]) * float(largest)
        tail = float((self.masses[start:] * gdp_delta_array(self.mu, epsilon - self.losses[start:])).sum())
        return (head + tail) * FINITE_ROUND_UP

    def _combine(self, inside: float) -> float:
        """1 - keep + keep * inside, with keep = prod (1 - delta_i) for the ApproxDP events."""
        if inside >= 1.0:
            return 1.0
        return min(1.0, -math.expm1(self.log_keep + math.log1p(-inside)))

    # -- delta on the grid, from a table of delta_mu -----------------------------------------------

    def _grid_delta(self, m: int) -> float:
        """An upper bound on delta(m * step) from a table of delta_mu (no special functions per call).

        Table entry j >= 1 holds delta_mu at x - shift, x = (first + (j-1) * stride) * step, and
        entry 0 holds 1; a loss difference x uses the entry at or below it (delta_mu
        is non-increasing), clipped to the last entry above the table.
        """
        if self._table is None:
            top = self.mu**2 / 2 + GAUSS_CUT_SIGMAS * self.mu
            # m >= 0 in the search, so loss differences start at -(largest loss)
            first = math.floor(max(TABLE_LEFT, -float(self.losses[-1])) / self.step) - 1
            stride = max(1, math.ceil((top / self.step - first) / TABLE_MAX))
            size = math.ceil((top / self.step - first) / stride) + 1
            table = np.empty(size + 1)
            table[0] = 1.0
            table[1:] = gdp_delta_array(self.mu, (first + stride * np.arange(size)) * self.step - self.shift)
            self._table = (first, stride, table)
        first, stride, table = self._table
        differences = (m - self.offset - first) - self.indices
        index = np.clip(differences // stride + 1, 0, table.size - 1)
        inside = self.floor + float((self.masses * table[index]).sum()) * FINITE_ROUND_UP
        return self._combine(inside)

    # -- epsilon ---------------------------------------------------------------------------------

    def epsilon(self, delta: float) -> float:
        """Smallest epsilon >= 0 with delta(epsilon) <= `delta`, never below it; inf if none.

        Binary search over grid points m * step with `_grid_delta`; for small
        lattices the last grid interval is then refined on the exact curve.
        """
        if delta >= 1.0:
            return 0.0
        if self.delta(math.inf) > delta:
            return math.inf
        if self.delta(0.0) <= delta:
            return 0.0
        upper = float(self.losses[-1]) + self.step + self.shift
        if self.mu > 0:  # delta(upper + x) <= combine(floor + delta_mu(x) * FINITE_ROUND_UP)
            need = -math.expm1(math.log1p(-delta) - self.log_keep)
            upper += gdp_epsilon(self.mu, (need - self.floor) / FINITE_ROUND_UP / 2)
        low, high = 0, max(1, math.ceil(upper / self.step))
        while self._grid_delta(high) > delta:
            low, high = high, 2 * high
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if self._grid_delta(middle) <= delta else (middle, high)
        answer = high * self.step
        if self.masses.size <= REFINE_BINS:
            lower = (high - 1) * self.step
            if self.delta(lower) <= delta:
                lower = 0.0
            answer = brentq(lambda e: self.delta(e) - delta, lower, answer, xtol=1e-13, rtol=1e-12)
        while self.delta(answer) > delta:  # rounding between the table and the direct sum
            answer = math.nextafter(answer, math.inf) + 1e-12 * max(1.0, answer)
        return answer


class PLDBound(Bound):
    """Pessimistic numerical PLD composition of PureDP, ApproxDP, Laplace, Gaussian, GaussianThreshold and BoundedRange.

    Privacy: add/remove neighbours, (epsilon, delta)-DP; delta(eps) and
    epsilon(delta) are upper bounds on the optimum for the adaptive composition.
    Proof: Dong–Roth–Su 2019 Thm 3.2 over per-event dominating pairs
    (Chourasia et al. Thm 4.5 for RR; Dong–Durfee–Rogers Lemma 4.1 / App. A for
    BR), pessimistic rounding; docs/proofs/accounting.bounds.pld.md.
    Paper symbols: eps (Laplace) = sensitivity / scale; mu = sensitivity / sigma
    (mu^2 = 2 kappa); keep = prod (1 - delta_i).
    Checks: `step` (the loss grid), when given, is positive and finite.
    Caller must ensure: parameters fixed in advance (not a filter).
    Numerics and Runtime: see the module docstring; the composed curve of the
    last composition asked about is cached on the instance.
    """

    name = "pld_pessimistic"
    reference = (
        "Dong–Roth–Su 2019 Thm 3.2 (f-DP composition); Chourasia et al. Thm 4.2, 4.5; "
        "Dong–Durfee–Rogers Lemma 4.1 (BR trade-off); docs/proofs/accounting.bounds.pld.md"
    )

    def __init__(self, step: float | None = None):
        if step is not None:
            choose_step(Composition(), step)  # validates
        self.step = step
        self._cache: tuple[Composition, ComposedCurve] | None = None

    def applies(self, composition: Composition) -> bool:
        return composition.only(*SUPPORTED)

    def curve(self, composition: Composition) -> ComposedCurve:
        cached = self._cache
        if cached is not None and cached[0] == composition:
            return cached[1]
        curve = ComposedCurve(composition, self.step)
        self._cache = (composition, curve)
        return curve

    def delta(self, composition: Composition, epsilon: float) -> float:
        return self.curve(composition).delta(epsilon)

    def epsilon(self, composition: Composition, delta: float) -> float:
        return self.curve(composition).epsilon(delta)

    def __repr__(self) -> str:
        return f"PLDBound(step={self.step!r})"
