"""Privacy of Gaussian selection mechanisms on bounded queries: report-noisy-max and AboveThreshold.

Bounds (Lebensold–Precup–Balle 2024, "On the Privacy of Selection Mechanisms
with Gaussian Noise", cited below as LPB; Zhu–Wang 2020, "Improving Sparse
Vector Technique with Renyi Differential Privacy", cited as ZW):

- `report_noisy_max_epsilon`: pure DP of Gaussian report-noisy-max on d queries
  with values in [lower, upper] (LPB Thm 8 = Thm 12, worst case from Lemma 13
  and Lemma 16).
- `above_threshold_expost_epsilon`: pure ex-post DP of Gaussian AboveThreshold
  (LPB Algorithm 3) after it output BOT^(t-1) TOP (LPB Thm 17, worst case from
  Lemma 18), or after it was stopped from outside having output BOT^t (same
  argument; docs/proofs/selection.above_threshold_expost_epsilon.md).
- `above_threshold_rdp`, `above_threshold_pdp_epsilon`: ex-ante RDP of Gaussian
  AboveThreshold on queries bounded below (ZW's general bound, LPB Thm 6, with
  the worst-case stopping-time moment computed exactly; the closed form of LPB
  Thm 7 undershoots that moment near threshold = lower and is not used) and
  the probabilistic DP it implies (LPB Sec 2, from Mironov 2017).

Neighbouring relation: any pair of datasets on which every query differs by at
most `sensitivity` (for dpstream: add or remove one privacy unit). Measures:
pure DP and pure ex-post DP (a bound on the log ratio of output probabilities),
RDP, and probabilistic DP (a tail bound on the privacy loss random variable,
which implies approximate DP with the same (epsilon, delta)).

Numerics. Every pure bound is log E[exp(sum_j n_j log Phi(s_j x + c_j))] over
x ~ N(0, 1), differenced between the two worst-case datasets. The integrand is
log-concave (log Phi is concave) with curvature at least 1, so it has one mode,
found per integral by scalar code (bisection over a fixed grid, then
safeguarded Newton; a few dozen scalar special-function calls cost less than
as many numpy operations on tiny arrays). `_log_gaussian_expectation` cuts
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
_EPSILON_SLACK = 1e-9
_EPSILON_FLOOR = 1e-12
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


def _log_gaussian_expectation(n, s, c):
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


# ----------------------------------------------------------------------------
# Argument checks (one-line messages naming the function, the rule and the value).


def _require_positive(owner: str, name: str, value) -> float:
    if not (isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{owner}: {name} must be a positive finite number, got {value!r}")
    return float(value)


def _require_finite(owner: str, name: str, value) -> float:
    if not (isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(value)):
        raise ValueError(f"{owner}: {name} must be a finite number, got {value!r}")
    return float(value)


def _require_range(owner: str, sensitivity, lower, upper) -> tuple[float, float, float]:
    lower = _require_finite(owner, "lower", lower)
    upper = _require_finite(owner, "upper", upper)
    if not upper > lower:
        raise ValueError(f"{owner}: upper must exceed lower, got lower={lower!r}, upper={upper!r}")
    sensitivity = _require_finite(owner, "sensitivity", sensitivity)
    if not 0 <= sensitivity <= upper - lower:
        raise ValueError(
            f"{owner}: sensitivity must lie in [0, upper - lower] = [0, {upper - lower!r}], got {sensitivity!r}"
        )
    return sensitivity, lower, upper


def _require_counts(owner: str, name: str, value, minimum: int) -> tuple[np.ndarray, tuple]:
    """An integer or array of integers >= minimum, as a flat float array (exponents), and its shape."""
    if type(value) is int and minimum <= value <= 2**53:  # the common scalar call, exactly a float
        return np.array([float(value)]), ()
    try:
        counts = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum} or an array of them, got {value!r}") from err
    if counts.size == 0 or not np.all(np.isfinite(counts)) or np.any(counts != np.floor(counts)) or np.any(counts < minimum):
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum} or an array of them, got {value!r}")
    return counts.ravel(), counts.shape


def _rounded_up_log_ratio(log_num: np.ndarray, log_den: np.ndarray, shape: tuple) -> float | np.ndarray:
    """log_num - log_den rounded up by the module's slack; a float for shape (), else an array of that shape."""
    scalar = shape == ()
    if scalar:  # Python floats: cheaper than numpy for one value
        log_num, log_den = float(log_num[0]), float(log_den[0])
    epsilon = log_num - log_den
    epsilon = epsilon + _EPSILON_SLACK * abs(epsilon) + _EPSILON_FLOOR + _ROUNDING_PER_LOG * (abs(log_num) + abs(log_den))
    return max(epsilon, 0.0) if scalar else np.maximum(epsilon, 0.0).reshape(shape)


# ----------------------------------------------------------------------------
# Public bounds.


def report_noisy_max_epsilon(d, sigma, sensitivity, lower=0.0, upper=1.0):
    """Pure DP epsilon of Gaussian report-noisy-max over d queries with values in [lower, upper].

    M(D) = argmax_i q_i(D) + Z_i with Z_i ~ N(0, sigma^2) independent.

    Privacy: epsilon-DP, for neighbours on which every query moves by at most
    `sensitivity`; epsilon = log of the largest ratio Pr[M(D)=i] / Pr[M(D')=i].
    Proof: Lebensold–Precup–Balle 2024, Thm 8 (= Thm 12): with c = upper - lower,
        epsilon = log E[Phi(z - (c - 2 Delta)/sigma)^(d-1)] - log E[Phi(z - c/sigma)^(d-1)],
    z ~ N(0, 1); the paper prints the ratio, its log is the privacy parameter.
    Lemma 13 reduces every neighbouring pair to that ratio with free offsets,
    Lemma 16 puts the supremum at q_1..q_{d-1} = upper - Delta, q_d = lower + Delta
    on D and upper, lower on D'; the value is attained, so the bound is tight.
    Checks: d integer(s) >= 2; sigma > 0; lower < upper; 0 <= sensitivity <= upper - lower.
    Caller must ensure: every query maps into [lower, upper] (clip before adding
    noise) and has sensitivity at most `sensitivity`; the noise is fresh.
    Numerics: log-space adaptive Gauss–Legendre (module docstring); before
    rounding up it agrees with 40-digit mpmath to 1e-10 relative on the test
    grid (d up to 10^5), after rounding within 2e-7 and never below.
    Runtime: about 0.08 ms per call; `d` may be a numpy array (vectorised,
    about 0.03 ms per d value).
    Returns a float for scalar d, else an array shaped like d.
    """
    owner = "report_noisy_max_epsilon"
    counts, shape = _require_counts(owner, "d", d, 2)
    sigma = _require_positive(owner, "sigma", sigma)
    sensitivity, lower, upper = _require_range(owner, sensitivity, lower, upper)
    width = upper - lower
    size = counts.size
    n = np.concatenate([counts, counts])[:, None] - 1.0
    c = np.empty_like(n)
    c[:size] = -(width - 2.0 * sensitivity) / sigma
    c[size:] = -width / sigma
    log_values = _log_gaussian_expectation(n, np.ones_like(n), c)
    return _rounded_up_log_ratio(log_values[:size], log_values[size:], shape)


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
      worst case; docs/proofs/selection.above_threshold_expost_epsilon.md.
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
    counts, shape = _require_counts(owner, "t", t, 1)
    sigma_x = _require_positive(owner, "sigma_threshold", sigma_threshold)
    sigma_z = _require_positive(owner, "sigma_query", sigma_query)
    rho = _require_finite(owner, "threshold", threshold)
    sensitivity, lower, upper = _require_range(owner, sensitivity, lower, upper)
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
    log_values = _log_gaussian_expectation(n, s, c)
    return _rounded_up_log_ratio(log_values[:size], log_values[size:], shape)


def _log_stopping_moments(gammas, sigma_x, sigma_z, margin):
    """log E_{x~N(0,1)}[Phi(-(margin + sigma_x x)/sigma_z)^(-gamma)] for each gamma, rounded up.

    This is log E[E[T|x]^gamma] for the all-`lower` query stream, the worst
    case over queries >= lower: there E[T|x] = 1/Phi(-(margin + sigma_x x)/sigma_z),
    and any other stream stops at least as fast. Finite, with a strictly
    log-concave integrand, when gamma sigma_x^2 < sigma_z^2.
    """
    gammas = np.asarray(gammas, dtype=float)
    ratio = sigma_x / sigma_z
    log_moment = _log_gaussian_expectation(
        -gammas[:, None], np.full((gammas.size, 1), -ratio), np.full((gammas.size, 1), -margin / sigma_z)
    )
    return log_moment + _EPSILON_SLACK * np.abs(log_moment) + _EPSILON_FLOOR


def _zhu_wang_terms(owner, gammas, sigma_threshold, sigma_query, threshold, sensitivity, lower):
    """(A, B) per gamma, with eps_RDP(alpha) = A alpha + B / (alpha - 1), after checking the arguments."""
    sigma_x = _require_positive(owner, "sigma_threshold", sigma_threshold)
    sigma_z = _require_positive(owner, "sigma_query", sigma_query)
    rho = _require_finite(owner, "threshold", threshold)
    lower = _require_finite(owner, "lower", lower)
    sensitivity = _require_finite(owner, "sensitivity", sensitivity)
    if sensitivity < 0:
        raise ValueError(f"{owner}: sensitivity must be >= 0, got {sensitivity!r}")
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
    (docs/proofs/selection.above_threshold_rdp.md, tests).
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
    only on public parameters (docs/proofs/selection.above_threshold_rdp.md).
    Checks: 0 < delta < 1, and those of `above_threshold_rdp`.
    Caller must ensure: as for `above_threshold_rdp`.
    Numerics: the stopping-time moments in one vectorised quadrature call,
    rounded up; the result rounded up by a few ulps.
    Runtime: about 0.8 ms with gamma=None, 0.08 ms for a fixed gamma.
    """
    owner = "above_threshold_pdp_epsilon"
    if not (isinstance(delta, (int, float, np.integer, np.floating)) and 0 < delta < 1):
        raise ValueError(f"{owner}: delta must lie in (0, 1), got {delta!r}")
    sigma_x = _require_positive(owner, "sigma_threshold", sigma_threshold)
    sigma_z = _require_positive(owner, "sigma_query", sigma_query)
    if gamma is None:
        gammas = 1.0 + (_GAMMA_GRID - 1.0) * ((sigma_z / sigma_x) ** 2 - 1.0)
        gammas = gammas[gammas > 1.0]
        if gammas.size == 0:
            raise ValueError(
                f"{owner}: needs sigma_query > sigma_threshold for a finite stopping-time moment, "
                f"got sigma_threshold={sigma_x!r}, sigma_query={sigma_z!r}"
            )
    else:
        gammas = gamma
    slope, stopping = _zhu_wang_terms(owner, gammas, sigma_x, sigma_z, threshold, sensitivity, lower)
    if np.all(slope == 0.0):
        return 0.0
    constant = stopping + math.log(1.0 / delta)
    epsilon = float(np.min(slope + 2.0 * np.sqrt(slope * constant)))
    return epsilon * (1.0 + 8.0 * np.finfo(float).eps)
