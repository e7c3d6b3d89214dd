"""Log-space Gaussian expectations of products of normal CDFs: the numerics every selection bound is built on.

Numerics. Every pure bound is log E[exp(sum_j n_j log Phi(s_j x + c_j))] over
x ~ N(0, 1), differenced between the two worst-case datasets. The integrand is
log-concave (log Phi is concave) with curvature at least 1, so it has one mode,
found per integral by scalar code (bisection over a fixed grid, then
safeguarded Newton; a few dozen scalar special-function calls cost less than
as many numpy operations on tiny arrays). `log_gaussian_expectation` cuts
each side of the mode where the log integrand has dropped by 60 (k/5)^2,
k = 1..5 (equally spaced for a Gaussian, crowded where a sharp cut-off falls,
e.g. large t and small sigma_query). Past a drop of 60 the remaining mass is
below e^-55 of the total (a log-concave tail falls at least as fast as its
chord), so it is dropped. Each panel gets a 12-point Gauss–Legendre rule and
is halved until halving changes it by at most 1e-13 of the row's total; the
panels and their first halving are evaluated in one vectorised pass over a
fixed table of nodes, so a typical call needs no further pass. Sums are formed
relative to the peak, so nothing underflows (t up to 10^6, d up to 10^7 tested).
The returned epsilon is rounded up by 1e-9 relative plus 1e-12 absolute plus
1e-14 per unit of |log E| (float rounding of large log-expectations), orders
of magnitude above the error measured against a 40-digit mpmath oracle
(tests/accounting/test_selection.py, benchmarks/selection.py).
Runtime: about 0.09 ms per scalar call (median over the settings of
benchmarks/selection.py, some 175x faster than mpmath.quad at 20 digits);
vectorised over arrays of t or d (about 0.03 ms per expectation, two per value).
"""
from __future__ import annotations

import math
from typing import TypeVar

import numpy as np
from scipy.special import erfcx, log_ndtr

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_SQRT_HALF = math.sqrt(0.5)

# Quadrature design (see module docstring).
_LEVELS_PER_SIDE = 5
_MAX_DROP = 60.0
_NODES_PER_PANEL = 12
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(_NODES_PER_PANEL)
_LEVELS = _MAX_DROP * (np.arange(1, _LEVELS_PER_SIDE + 1) / _LEVELS_PER_SIDE) ** 2
# Level points of both sides in one row: the left side's levels, then the right side's.
_LEVEL_SIDES = np.repeat([-1.0, 1.0], _LEVELS_PER_SIDE)
_LEVEL_DROPS = np.tile(_LEVELS, 2)
_LEVEL_SCALES = np.sqrt(2.0 * _LEVEL_DROPS)  # distances of the levels for a unit Gaussian
_LEVEL_STEPS = _LEVEL_SIDES * _LEVEL_SCALES
# The first pass evaluates every panel's rule and the rules on its two halves at once: nodes on [-1, 1],
# and weights whose columns give, in units of the panel's half-width, the left half, the right half,
# their sum (the refined value) and their sum minus the whole panel's rule (the change on halving).
_FIRST_PASS_NODES = np.concatenate([_GL_NODES, 0.5 * (_GL_NODES - 1.0), 0.5 * (_GL_NODES + 1.0)])
_FIRST_PASS_WEIGHTS = np.zeros((3 * _NODES_PER_PANEL, 4))
_FIRST_PASS_WEIGHTS[_NODES_PER_PANEL : 2 * _NODES_PER_PANEL, 0] = 0.5 * _GL_WEIGHTS
_FIRST_PASS_WEIGHTS[2 * _NODES_PER_PANEL :, 1] = 0.5 * _GL_WEIGHTS
_FIRST_PASS_WEIGHTS[:, 2] = _FIRST_PASS_WEIGHTS[:, 0] + _FIRST_PASS_WEIGHTS[:, 1]
_FIRST_PASS_WEIGHTS[:, 3] = _FIRST_PASS_WEIGHTS[:, 2]
_FIRST_PASS_WEIGHTS[:_NODES_PER_PANEL, 3] = -_GL_WEIGHTS
_MODE_ITERATIONS = 200
_MODE_TOLERANCE = 1e-2  # Newton step, in units of the local scale
_MAX_REFINEMENTS = 40
_PANEL_TOLERANCE = 1e-13
_ROW_BLOCK = 64

# Upward rounding of every reported epsilon (module docstring).
EPSILON_SLACK = 1e-9
EPSILON_FLOOR = 1e-12
_ROUNDING_PER_LOG = 1e-14  # float rounding in a log-expectation of size |log E|


def _sum_terms(x):
    """Sum over the leading (term) axis; for the one or two terms used here cheaper than np.add.reduce."""
    total = x[0]
    for term in x[1:]:
        total = total + term
    return total


class _Integrand:
    """h(x) = -x^2/2 + sum_j n_j log Phi(s_j x + c_j), one parameter row per integral.

    h is the log integrand up to the constant -log sqrt(2 pi) of the normal
    density, which `_log_gaussian_expectation` adds once at the end.

    `n`, `s`, `c` have shape (rows, J). Points come as an array of shape
    (rows, m), row i's points in x[i] (or shape (m,): the same points for every
    row); `value` also takes panels of points, shape (panels, m), with `row`
    naming each panel's row. The parameters are kept as (J, rows, 1) so that
    every elementwise step runs over contiguous points and the sum over j adds
    whole arrays.
    """

    def __init__(self, n, s, c):
        self.n, self.s, self.c = n, s, c
        self._n, self._s, self._c = n.T[:, :, None], s.T[:, :, None], c.T[:, :, None]
        self._ns = self._n * self._s

    def value(self, x, row=None):
        if row is None:
            n, s, c = self._n, self._s, self._c
        else:
            n, s, c = self._n[:, row], self._s[:, row], self._c[:, row]
        return _sum_terms(n * log_ndtr(s * x + c)) - 0.5 * x * x

    def value_slope(self, x):
        """Value and slope (derivative, decreasing in x) at x."""
        u = self._s * x + self._c
        # Inverse Mills ratio lambda(u) = phi(u) / Phi(u) = sqrt(2/pi) / erfcx(-u/sqrt 2), finite for every u.
        mills = _SQRT_2_OVER_PI / erfcx(u * -_SQRT_HALF)
        return _sum_terms(self._n * log_ndtr(u)) - 0.5 * x * x, _sum_terms(self._ns * mills) - x


# Candidate points for bracketing the mode: 0 and +-2^(k/2), k = -40..39 (about 1e-6 to 7e5).
_BRACKET_GRID = np.concatenate([-(2.0 ** np.arange(19.5, -20.5, -0.5)), [0.0], 2.0 ** np.arange(-20.0, 20.0, 0.5)]).tolist()
_FAR = 1e300


def _row_slope(terms, x):
    """Slope of one row's h at x (`_row_slope_bend` without the curvature, for bracketing)."""
    slope = -x
    for n, s, c in terms:
        slope += n * s * _SQRT_2_OVER_PI / float(erfcx((s * x + c) * -_SQRT_HALF))
    return slope


def _row_slope_bend(terms, x):
    """Slope of one row's h at x and its bend -h''(x) (at least the row's min curvature)."""
    slope, bend = -x, 1.0
    for n, s, c in terms:
        u = s * x + c
        # Inverse Mills ratio lambda(u) = phi(u) / Phi(u) = sqrt(2/pi) / erfcx(-u/sqrt 2): finite for every u
        # (it tends to -u below and to 0 above). Its derivative -lambda (u + lambda) lies in [-1, 0].
        mills = _SQRT_2_OVER_PI / float(erfcx(u * -_SQRT_HALF))
        slope += n * s * mills
        bend += n * s * s * min(max(mills * (u + mills), 0.0), 1.0)
    return slope, bend


def _row_mode(terms):
    """(mode m, h(m), bend^-1/2, min curvature^-1/2) of one row, terms = [(n_j, s_j, c_j), ...] as floats.

    bend = -h''(m), so bend^-1/2 is the scale of the Gaussian with h's
    curvature at the mode. The min curvature 1 - sum_{n_j<0} |n_j| s_j^2
    bounds the bend from below everywhere (`_log_gaussian_expectation`); it
    must be positive.

    Bisection over the sorted _BRACKET_GRID brackets the root of the
    (decreasing) slope between neighbouring grid points (or beyond the
    outermost one, up to +-_FAR) and starts from their secant point; safeguarded
    Newton then falls back to bisection whenever it leaves the bracket. Only
    panel placement depends on the mode, so it stops once the Newton step is
    below _MODE_TOLERANCE of the local scale (step^2 |curvature| = step * slope).
    Scalar code: per row, a few dozen scalar special-function calls cost less
    than the same number of small numpy operations.
    """
    min_curvature = 1.0
    for n, s, _ in terms:
        if n < 0:
            min_curvature += n * s * s
    if not min_curvature > 0:
        raise ValueError(f"_log_gaussian_expectation needs 1 - sum over negative exponents of |n_j| s_j^2 > 0, got {min_curvature!r}")
    below, above = -1, len(_BRACKET_GRID)  # slope(grid[below]) > 0 >= slope(grid[above])
    below_slope = above_slope = 0.0
    while above - below > 1:
        middle = (below + above) // 2
        slope = _row_slope(terms, _BRACKET_GRID[middle])
        if slope > 0:
            below, below_slope = middle, slope
        else:
            above, above_slope = middle, slope
    lo = _BRACKET_GRID[below] if below >= 0 else -_FAR
    hi = _BRACKET_GRID[above] if above < len(_BRACKET_GRID) else _FAR
    if below < 0:
        x = hi
    elif above == len(_BRACKET_GRID):
        x = lo
    else:
        x = lo + (hi - lo) * below_slope / (below_slope - above_slope)
    for _ in range(_MODE_ITERATIONS):
        slope, bend = _row_slope_bend(terms, x)
        step = slope / bend
        if step * slope <= _MODE_TOLERANCE**2:
            value = -0.5 * x * x
            for n, s, c in terms:
                value += n * float(log_ndtr(s * x + c))
            return x, value, bend**-0.5, min_curvature**-0.5
        if slope > 0:
            lo = x
        else:
            hi = x
        x += step
        if not lo <= x <= hi:  # a Newton point outside the bracket is replaced by the midpoint
            x = 0.5 * (lo + hi)
    raise ArithmeticError(f"mode search for the selection-bound integrand did not converge in {_MODE_ITERATIONS} steps")


def _mode(f):
    """`_row_mode` for every row of f: four arrays of shape (rows, 1)."""
    rows = [
        [(n, s, c) for n, s, c in zip(n_row, s_row, c_row) if n != 0]
        for n_row, s_row, c_row in zip(f.n.tolist(), f.s.tolist(), f.c.tolist())
    ]
    found = np.array([_row_mode(terms) for terms in rows])
    return found[:, 0:1], found[:, 1:2], found[:, 2:3], found[:, 3:4]


def _panel_edges(f, mode, peak, scale, widest):
    """Panel boundaries per row, shape (rows, 2K + 1): the mode and, per side, where h has dropped by about each level.

    The distance d > 0 from the mode for each level comes from one Newton step
    on the convex increasing drop function from the Gaussian guess
    sqrt(2 L) scale, scale = (-h'' at the mode)^-1/2. By convexity the Newton
    point lies at or beyond its root, and the root lies within sqrt(2 L) widest,
    widest = min curvature^-1/2 (the drop grows at least that fast), so capping
    there keeps it beyond the root: the last panel reaches a drop of at least
    _MAX_DROP. The distances are only panel boundaries: they need not be exact.
    """
    guess = _LEVEL_SCALES * scale
    value, slope = f.value_slope(mode + _LEVEL_STEPS * scale)
    # drop(d) = peak - value(mode + side d), and d drop / dd = -side * slope > 0.
    step = (value - (peak - _LEVEL_DROPS)) / np.maximum(-_LEVEL_SIDES * slope, 1e-300)
    dist = np.minimum(np.maximum(guess + step, guess * 1e-3), _LEVEL_SCALES * widest).reshape(-1, 2, _LEVELS_PER_SIDE)
    dist = np.maximum.accumulate(dist, axis=-1)
    return np.concatenate([mode - dist[:, 0, ::-1], mode, mode + dist[:, 1]], axis=1)


def _panel_sums(f, row, a, b, peak):
    """Gauss–Legendre estimate of the integral of exp(h - peak) over each panel [a, b] of its row."""
    half = 0.5 * (b - a)
    points = (0.5 * (a + b))[:, None] + half[:, None] * _GL_NODES
    return half * (np.exp(f.value(points, row) - peak[row]) @ _GL_WEIGHTS)


def log_gaussian_expectation(n, s, c):
    """log E_{x~N(0,1)}[prod_j Phi(s_j x + c_j)^{n_j}] for each row.

    n, s, c: arrays of shape (rows, J), real exponents n_j. The log integrand
    has curvature -1 - sum_j n_j s_j^2 lambda'(u_j) with lambda' in [-1, 0], at
    most -(1 - sum_{n_j<0} |n_j| s_j^2); that bound must be positive (strict
    log-concavity; always so when every n_j >= 0). Returns shape (rows,).
    Panels start at the level points and are halved until halving changes no
    panel by more than _PANEL_TOLERANCE of its row's total. The first halving
    of every panel is evaluated together with the panel itself (one table of
    nodes); only panels it does not settle enter the refinement loop. Rows are
    integrated _ROW_BLOCK at a time, so that the temporaries over every node of
    a block stay in the processor's cache.
    """
    n, s, c = np.asarray(n, dtype=float), np.asarray(s, dtype=float), np.asarray(c, dtype=float)
    if n.shape[0] <= _ROW_BLOCK:
        return _log_gaussian_expectation_block(_Integrand(n, s, c))
    blocks = range(0, n.shape[0], _ROW_BLOCK)
    return np.concatenate(
        [_log_gaussian_expectation_block(_Integrand(n[i : i + _ROW_BLOCK], s[i : i + _ROW_BLOCK], c[i : i + _ROW_BLOCK])) for i in blocks]
    )


def _log_gaussian_expectation_block(f):
    """`_log_gaussian_expectation` for the rows of one integrand f."""
    rows = f.n.shape[0]
    mode, peak, scale, widest = _mode(f)
    edges = _panel_edges(f, mode, peak, scale, widest)
    a, b = edges[:, :-1], edges[:, 1:]
    half = 0.5 * (b - a)
    mid = 0.5 * (a + b)
    points = (mid[..., None] + half[..., None] * _FIRST_PASS_NODES).reshape(rows, -1)
    sums = np.dot(np.exp(f.value(points) - peak).reshape(half.size, -1), _FIRST_PASS_WEIGHTS).reshape(rows, -1, 4) * half[..., None]
    left, right, refined, change = sums[..., 0], sums[..., 1], sums[..., 2], sums[..., 3]
    row_total = np.add.reduce(refined - change, axis=1)  # the whole panels' rule, summed over the row
    done = np.abs(change) <= _PANEL_TOLERANCE * row_total[:, None]
    offset = peak[:, 0] - _LOG_SQRT_2PI  # the sums are of exp(h - peak); the normal density has 1/sqrt(2 pi)
    if np.count_nonzero(done) == done.size:
        return offset + np.log(np.add.reduce(refined, axis=1))
    total = np.add.reduce(np.where(done, refined, 0.0), axis=1)
    keep = ~done
    row = np.nonzero(keep)[0]
    row = np.concatenate([row, row])
    a, b = np.concatenate([a[keep], mid[keep]]), np.concatenate([mid[keep], b[keep]])
    whole = np.concatenate([left[keep], right[keep]])
    for _ in range(_MAX_REFINEMENTS - 1):
        mid = 0.5 * (a + b)
        halves = _panel_sums(f, np.concatenate([row, row]), np.concatenate([a, mid]), np.concatenate([mid, b]), peak)
        left, right = halves[: a.size], halves[a.size :]
        refined = left + right
        done = np.abs(refined - whole) <= _PANEL_TOLERANCE * row_total[row]
        total += np.bincount(row[done], refined[done], minlength=rows)
        keep = ~done
        if not keep.any():
            return offset + np.log(total)
        row = np.concatenate([row[keep], row[keep]])
        a, b = np.concatenate([a[keep], mid[keep]]), np.concatenate([mid[keep], b[keep]])
        whole = np.concatenate([left[keep], right[keep]])
    raise ArithmeticError(f"selection-bound quadrature did not reach its tolerance after {_MAX_REFINEMENTS} refinements")



FloatOrArray = TypeVar("FloatOrArray", float, np.ndarray)


def rounded_up_log_ratio(log_num: np.ndarray, log_den: np.ndarray, shape: tuple) -> float | np.ndarray:
    """log_num - log_den rounded up by the module's slack; a float for shape (), else an array of that shape."""
    if shape == ():  # Python floats: cheaper than numpy for one value
        return max(_rounded_up_difference(float(log_num[0]), float(log_den[0])), 0.0)
    return np.maximum(_rounded_up_difference(log_num, log_den), 0.0).reshape(shape)


def _rounded_up_difference(log_num: FloatOrArray, log_den: FloatOrArray) -> FloatOrArray:
    """log_num - log_den plus the module's slack, for floats and arrays alike (not yet clipped at 0)."""
    epsilon = log_num - log_den
    return epsilon + EPSILON_SLACK * abs(epsilon) + EPSILON_FLOOR + _ROUNDING_PER_LOG * (abs(log_num) + abs(log_den))
