"""Composition of epsilon-bounded-range (BR) mechanisms, such as the exponential mechanism.

Dong–Durfee–Rogers (DDR, "Optimal Differential Privacy Composition for
Exponential Mechanisms and the Cost of Adaptivity") reduce every epsilon-BR
mechanism to generalized randomized response RR_{eps,t}, t in [0, eps]
(their Lemma 4.1 and Cor 4.1), and give three bounds implemented here:

- `OptimalNonadaptiveBR`: Thm 3, the exact optimal delta(eps_g) for k
  epsilon-BR mechanisms all fixed in advance (non-adaptive, homogeneous);
- `OptKL`: Cor 3.1, a closed-form adaptive bound, heterogeneous epsilons;
- `MGFBound`: Thm 5, an adaptive bound from the exact conditional moment
  generating function, heterogeneous epsilons, tighter than `OptKL`.

Paper symbols: eps (per mechanism) is `BoundedRange.epsilon`, k the number of
mechanisms, (eps_g, delta_g) the global parameters (`epsilon`, `delta` below).
The plain functions (`br_optimal_delta`, `br_optimal_epsilon`, `optkl_delta`,
`optkl_epsilon`, `mgf_delta`, `mgf_epsilon`, `mgf_log_moment`, `maxkl`) are a
stable interface for other bounds and the benchmarks.
"""
from __future__ import annotations

import functools
import math
from typing import Iterable, Sequence

import numpy as np
from scipy.optimize import brentq, minimize_scalar
from scipy.special import gammaln

from dpstream.accounting.bounds import Bound
from dpstream.accounting.bounds import generalized_rr as rr
from dpstream.accounting.bounds.basic import pure_epsilon
from dpstream.accounting.bounds.pure_dp import MAX_ENUMERATED
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import BoundedRange

_ULP = 2.0**-52
_LOG_FLOOR = -1.0e4  # stands in for log(0) while root finding on log delta; far below any float64 delta
_WINDOW_LOG_DECAY = 40.0  # each inner-sum window reaches where the binomial mass fell by about e^-40
_CHUNK_ENTRIES = 1 << 20  # summed terms evaluated per numpy block
_LOG_LAMBDA_RANGE = (-30.0, 30.0)  # MGF search interval for ln(lambda)
_CLOSED_FORM_SLACK = 1e-12  # relative upward rounding of the closed-form and MGF answers


def _round_up(value: float, rel: float = _CLOSED_FORM_SLACK) -> float:
    """`value` increased by a relative `rel` and one ulp (privacy quantities round up)."""
    if value <= 0.0 or math.isinf(value):
        return value
    return math.nextafter(value * (1.0 + rel), math.inf)


def _check_k_eps(k: int, epsilon: float) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")


def _check_delta(delta: float) -> None:
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")


def _check_eps_g(eps_g: float) -> None:
    if not (isinstance(eps_g, (int, float)) and not math.isnan(eps_g)):
        raise ValueError(f"eps_g must be a number, got {eps_g!r}")


# --------------------------------------------------------------------------------------------
# DDR Theorem 3: optimal non-adaptive homogeneous composition
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _log_binomial_row(k: int) -> np.ndarray:
    """ln C(k, i) for i = 0..k (cached: the Theorem 3 inversion reuses one row ~15 times)."""
    i = np.arange(k + 1, dtype=float)
    row = gammaln(k + 1.0) - gammaln(i + 1.0) - gammaln(k - i + 1.0)
    row.setflags(write=False)
    return row


def _log_delta_at_candidates(k: int, epsilon: float, eps_g: float, t: np.ndarray) -> float:
    """max over the candidate t (all in (0, eps)) of ln delta^k(t, eps_g), rigorously rounded up.

    Uses the q-form of DDR eq. (6) (App. C.1): delta^k(t) is the sum over
    i <= m(t) of C(k,i) q_t^{k-i} (1-q_t)^i (1 - e^{eps_g - kt + i eps}), m(t) the
    largest i with kt - i eps > eps_g. Each summand is at most the Binomial(k,
    1-q_t) mass at i, which is log-concave. Per candidate only a window of terms
    around c = min(m, mode) is summed, wide enough that the binomial mass has
    fallen by about e^-40 at its edges; the omitted terms are replaced by
    (count omitted) x (mass at the window edge), an upper bound whatever the
    width (docs/proofs/accounting.bounds.bounded_range.OptimalNonadaptiveBR.md).
    """
    log_c = _log_binomial_row(k)
    lq = rr.log_q(epsilon, t)
    l1q = rr.log_one_minus_q(epsilon, t)
    x0 = k * t - eps_g  # kt - eps_g; summand i has x_i = x0 - i eps
    m = np.minimum(np.floor(x0 / epsilon), k).astype(np.int64)
    keep = m >= 0
    if not np.any(keep):
        return -math.inf
    lq, l1q, x0, m = lq[keep], l1q[keep], x0[keep], m[keep]
    success = np.exp(l1q)  # 1 - q_t, the Binomial parameter
    mode = np.floor((k + 1) * success).astype(np.int64).clip(0, k)
    centre = np.minimum(m, mode)
    # Window: Gaussian-type decay near the mode, geometric decay (ratio r(c) = mass(c-1)/mass(c)) in the tail.
    spread = np.sqrt(2.0 * _WINDOW_LOG_DECAY * k * success * (1.0 - success)) + _WINDOW_LOG_DECAY + 4.0
    with np.errstate(divide="ignore"):
        log_ratio = np.log(centre) - np.log(k - centre + 1.0) + lq - l1q
    geometric = np.where(log_ratio < -1e-3, _WINDOW_LOG_DECAY / -np.minimum(log_ratio, -1e-3) + 4.0, np.inf)
    lo = np.maximum(centre - np.ceil(np.minimum(spread, geometric)).astype(np.int64), 0)
    hi = np.minimum(centre + np.ceil(spread).astype(np.int64), m)
    widths = hi - lo + 1
    # Omitted terms: i < lo are each at most the mass at lo - 1 (mass rises up to the mode);
    # lo... hi are summed; hi < i <= m are each at most the mass at hi + 1 (mass falls after the mode).
    below_j = np.maximum(lo - 1, 0)
    below = np.where(
        lo > 0, np.log(np.maximum(lo, 1)) + log_c[below_j] + (k - below_j) * lq + below_j * l1q, -np.inf
    )
    above_j = np.minimum(hi + 1, k)
    above = np.where(
        hi < m, np.log(np.maximum(m - hi, 1)) + log_c[above_j] + (k - above_j) * lq + above_j * l1q, -np.inf
    )
    # Float64 error of each log summand is a few ulps of its largest part; add 64 ulps of that.
    margin = 64.0 * _ULP * (log_c[k // 2] + k * np.maximum(np.abs(lq), np.abs(l1q)) + abs(eps_g) + k * epsilon + 1.0)
    ends = np.cumsum(widths)
    best = -math.inf
    start = 0
    while start < widths.size:
        stop = int(np.searchsorted(ends, ends[start - 1] + _CHUNK_ENTRIES if start else _CHUNK_ENTRIES, side="right"))
        stop = max(stop, start + 1)
        w = widths[start:stop]
        row = np.repeat(np.arange(start, stop), w)
        first = np.concatenate(([0], np.cumsum(w)[:-1]))
        idx = lo[row] + (np.arange(int(w.sum())) - np.repeat(first, w))
        x = x0[row] - idx * epsilon
        with np.errstate(divide="ignore"):
            terms = log_c[idx] + (k - idx) * lq[row] + idx * l1q[row] + np.log(-np.expm1(-np.maximum(x, 0.0)))
        peak = np.maximum.reduceat(terms, first)
        finite_peak = np.where(np.isfinite(peak), peak, 0.0)
        with np.errstate(divide="ignore"):
            sums = finite_peak + np.log(np.add.reduceat(np.exp(terms - np.repeat(finite_peak, w)), first))
        sums = np.logaddexp(np.logaddexp(sums, below[start:stop]), above[start:stop])
        best = max(best, float(np.max(sums + margin[start:stop])))
        start = stop
    return best


def br_optimal_log_delta(k: int, epsilon: float, eps_g: float) -> float:
    """ln of `br_optimal_delta(k, epsilon, eps_g)` (-inf when delta is 0); accurate far below 1e-300."""
    _check_k_eps(k, epsilon)
    _check_eps_g(eps_g)
    k = int(k)
    if eps_g >= k * epsilon:  # DDR Lemma 5.2
        return -math.inf
    floor = math.log(-math.expm1(eps_g)) if eps_g < 0 else -math.inf  # value of the clipped candidates t in {0, eps}
    if eps_g <= -k * epsilon:  # DDR Lemma 5.2
        return floor
    ell = np.arange(k + 1, dtype=float)
    t = (eps_g + (ell + 1.0) * epsilon) / (k + 1)  # DDR Thm 3 / Cor 5.4 candidates t_l*
    t = t[(t > 0.0) & (t < epsilon)]
    best = _log_delta_at_candidates(k, epsilon, eps_g, t) if t.size else -math.inf
    return float(min(max(best, floor), 0.0))  # a delta is never above 1


def br_optimal_delta(k: int, epsilon: float, eps_g: float) -> float:
    """Optimal delta(eps_g) of k non-adaptively composed epsilon-BR mechanisms (DDR Thm 3), rounded up.

    O(k^1.5) per call: k candidate values of t, each summing O(sqrt(k)) terms
    of its binomial series plus a rigorous bound on the rest.
    """
    return math.exp(br_optimal_log_delta(k, epsilon, eps_g))


def br_optimal_epsilon(k: int, epsilon: float, delta: float) -> float:
    """Smallest eps_g >= 0 with `br_optimal_delta(k, epsilon, eps_g) <= delta`, rounded up.

    Brent's method on ln delta(eps_g) (non-increasing in eps_g), bracketed by
    [0, min(k eps, MGF epsilon)]: about a dozen Theorem 3 evaluations, which
    share one cached row of ln C(k, i). The root is then moved right until the
    exact check delta <= target holds, so the answer never undershoots.
    """
    _check_k_eps(k, epsilon)
    _check_delta(delta)
    k = int(k)
    target = math.log(delta)

    @functools.lru_cache(maxsize=None)  # brentq re-evaluates the bracket ends
    def excess(eps_g: float) -> float:
        return max(br_optimal_log_delta(k, epsilon, eps_g), _LOG_FLOOR) - target

    if excess(0.0) <= 0.0:
        return 0.0
    upper = k * epsilon
    adaptive = mgf_epsilon([epsilon], delta, counts=[k])  # valid for adaptive, hence for non-adaptive
    if adaptive < upper and excess(adaptive) <= 0.0:
        upper = adaptive
    tol = 1e-13 * max(1.0, upper)
    root = brentq(excess, 0.0, upper, xtol=tol, rtol=4 * _ULP)
    root = min(root + tol, upper)
    while excess(root) > 0.0:
        root = min(root + tol, upper)
        tol *= 2.0
    return root


# --------------------------------------------------------------------------------------------
# Adaptive bounds: DDR Cor 3.1 (OptKL) and Thm 5 (MGF)
# --------------------------------------------------------------------------------------------


def _grouped(epsilons: Iterable[float] | float, counts: Iterable[int] | None) -> tuple[np.ndarray, np.ndarray]:
    """Distinct epsilons and their multiplicities, validated."""
    eps = np.atleast_1d(np.asarray(epsilons, dtype=float))
    cnt = np.ones_like(eps) if counts is None else np.atleast_1d(np.asarray(counts, dtype=float))
    if eps.ndim != 1 or eps.size == 0:
        raise ValueError(f"epsilons must be a non-empty sequence of numbers, got {epsilons!r}")
    if cnt.shape != eps.shape:
        raise ValueError(f"counts must have one entry per epsilon ({eps.size}), got {cnt.size}")
    if not np.all(np.isfinite(eps) & (eps > 0)):
        raise ValueError(f"every epsilon must be a finite number > 0, got {eps.tolist()}")
    if not np.all((cnt >= 0) & (cnt == np.round(cnt))) or cnt.sum() == 0:
        raise ValueError(f"counts must be integers >= 0, not all 0, got {cnt.tolist()}")
    values, inverse = np.unique(eps, return_inverse=True)
    totals = np.bincount(inverse, weights=cnt)
    return values[totals > 0], totals[totals > 0]


def maxkl(epsilon):
    """max over t of KL(RR_{eps,t}(0) || RR_{eps,t}(1)) = a - 1 - ln a, a = eps / (e^eps - 1) (DDR Sec. 3.4, Sec. 7).

    Computed as d - log1p(d) with d = a - 1 for eps <= 1 (keeps its digits for small
    epsilon) and from ln a = ln eps - eps - ln(1 - e^-eps) above (no overflow).
    """
    eps = np.asarray(epsilon, dtype=float)
    small = np.minimum(eps, 1.0)
    d = small / np.expm1(small) - 1.0
    log_a = np.log(eps) - eps - np.log(-np.expm1(-eps))
    return np.where(eps <= 1.0, d - np.log1p(d), np.exp(log_a) - 1.0 - log_a)


def optkl_delta(epsilons, eps_g: float, counts=None) -> float:
    """delta(eps_g) of DDR Cor 3.1 via its Lemma 7.1 form: exp(-2 (eps_g - sum maxkl)^2 / sum eps_i^2).

    0 from eps_g >= sum eps_i on (basic composition), 1 where the exponent is not negative.
    """
    eps, cnt = _grouped(epsilons, counts)
    _check_eps_g(eps_g)
    if eps_g >= math.fsum(eps * cnt):
        return 0.0
    mean = math.fsum(maxkl(eps) * cnt)
    if eps_g <= mean:
        return 1.0
    exponent = -2.0 * (eps_g - mean) ** 2 / math.fsum(eps * eps * cnt)
    return min(1.0, _round_up(math.exp(exponent)))


def optkl_epsilon(epsilons, delta: float, counts=None) -> float:
    """DDR Cor 3.1: min{sum eps_i, sum maxkl(eps_i) + sqrt(sum eps_i^2 ln(1/delta) / 2)}, rounded up."""
    eps, cnt = _grouped(epsilons, counts)
    _check_delta(delta)
    total = math.fsum(eps * cnt)
    bound = math.fsum(maxkl(eps) * cnt) + math.sqrt(0.5 * math.fsum(eps * eps * cnt) * -math.log(delta))
    return min(_round_up(total, rel=0.0), _round_up(bound))


def mgf_log_moment(epsilon: float, lam):
    """h_eps(lambda) of DDR Thm 5: sup over t in [0, eps] of ln E[e^{lambda L}] for one RR_{eps,t} round.

    h = lambda (eps - t) + ln(1 + p_t (e^{-lambda eps} - 1)); the sup is taken at
    the closed-form maximiser s* = eps - t* = clip(ln(lambda/(lambda+1)) +
    ln(1 + (e^eps - 1)/(1 - e^{-lambda eps})), 0, eps)
    (docs/proofs/accounting.bounds.bounded_range.MGFBound.md). Accepts an array of lambda > 0.
    """
    lam = np.asarray(lam, dtype=float)
    log_expm1_eps = epsilon + np.log(-np.expm1(-epsilon))
    with np.errstate(over="ignore"):
        log_one_minus_decay = np.log(-np.expm1(-lam * epsilon))  # ln(1 - e^{-lambda eps})
    s = np.log(lam) - np.log1p(lam) + np.logaddexp(0.0, log_expm1_eps - log_one_minus_decay)
    s = np.clip(s, 0.0, epsilon)
    t = epsilon - s
    log_p = rr.log_p(epsilon, t)
    p = np.exp(log_p)
    shrink = p * np.expm1(-lam * epsilon)  # in (-1, 0]
    with np.errstate(divide="ignore"):
        near = np.log1p(np.maximum(shrink, -1.0))
        far = np.logaddexp(rr.log_one_minus_p(epsilon, t), log_p - lam * epsilon)
    return lam * s + np.where(shrink > -0.5, near, far)


def _total_log_moment(eps: np.ndarray, cnt: np.ndarray, lam: float) -> float:
    return math.fsum(float(c) * float(mgf_log_moment(float(e), lam)) for e, c in zip(eps, cnt))


def mgf_log_delta(epsilons, eps_g: float, counts=None) -> float:
    """ln of `mgf_delta`."""
    eps, cnt = _grouped(epsilons, counts)
    _check_eps_g(eps_g)
    if eps_g >= math.fsum(eps * cnt):
        return -math.inf
    if eps_g <= 0.0:
        return 0.0

    def objective(u: float) -> float:
        lam = math.exp(u)
        return -lam * eps_g + _total_log_moment(eps, cnt, lam)

    res = minimize_scalar(objective, bounds=_LOG_LAMBDA_RANGE, method="bounded", options={"xatol": 1e-9})
    value = min(float(res.fun), objective(_LOG_LAMBDA_RANGE[0]))
    scale = math.exp(float(res.x)) * eps_g + 1.0
    return min(0.0, value + 64.0 * _ULP * scale * max(1.0, float(cnt.sum())))


def mgf_delta(epsilons, eps_g: float, counts=None) -> float:
    """DDR Thm 5: inf over lambda > 0 of exp(-lambda eps_g + sum_i h_{eps_i}(lambda)), at most 1; 0 from sum eps_i on."""
    return math.exp(mgf_log_delta(epsilons, eps_g, counts))


def mgf_epsilon(epsilons, delta: float, counts=None) -> float:
    """min{sum eps_i, inf over lambda of (sum_i h_{eps_i}(lambda) + ln(1/delta)) / lambda}, rounded up (DDR Thm 5 inverted).

    For any lambda the value e returned satisfies exp(-lambda e + sum h) = delta,
    so the answer is valid whatever lambda the 1-D search settles on.
    """
    eps, cnt = _grouped(epsilons, counts)
    _check_delta(delta)
    total = math.fsum(eps * cnt)
    log_inv = -math.log(delta)

    def objective(u: float) -> float:
        lam = math.exp(u)
        return (_total_log_moment(eps, cnt, lam) + log_inv) / lam

    res = minimize_scalar(objective, bounds=_LOG_LAMBDA_RANGE, method="bounded", options={"xatol": 1e-9})
    bound = _round_up(float(res.fun), rel=_CLOSED_FORM_SLACK + 64.0 * _ULP * float(cnt.sum()))
    return min(_round_up(total, rel=0.0), bound)


# --------------------------------------------------------------------------------------------
# Bounds the accountant chooses from
# --------------------------------------------------------------------------------------------


def _br_groups(composition: Composition) -> tuple[list[float], list[int]]:
    epsilons = [pure_epsilon(event) for event, _ in composition]
    counts = [int(count) for _, count in composition]
    return epsilons, counts


class OptimalNonadaptiveBR(Bound):
    """Exact optimal composition of k epsilon-BR mechanisms fixed in advance (DDR Thm 3).

    Privacy: add/remove neighbours of one privacy unit; (eps_g, delta)-DP. The
      composition of k mechanisms, each epsilon-BR, all chosen before any runs,
      is (eps_g, delta(eps_g))-DP with the smallest such delta, for every eps_g.
    Proof: Dong–Durfee–Rogers Thm 3 (via Lemma 3.1, Lemma 5.5, Cor 5.3, Cor 5.4);
      the truncation of each inner sum and the inversion are in
      docs/proofs/accounting.bounds.bounded_range.OptimalNonadaptiveBR.md.
    Checks: the composition is only `BoundedRange` events with one epsilon.
    Caller must ensure: the mechanisms, not only their parameters, were fixed
      before any output was seen (the accountant's `adaptive=False`). Adaptive
      choice can need a larger delta (DDR Thm 4).
    Numerics: log space (gammaln, expm1, log-sum-exp); omitted terms replaced by an
      upper bound; ln delta raised by 64 ulps of its largest summand; the
      inverted epsilon is moved right until delta <= target holds exactly.
      Finite for k up to 10^4 and beyond.
    Runtime: O(k^1.5) per delta (0.1-0.3 s at k = 10^4); epsilon takes about a
      dozen delta evaluations (under 10 ms for k <= 100).
    Paper symbols: eps = BoundedRange.epsilon, k = total count, eps_g = epsilon.
    """

    max_events = MAX_ENUMERATED

    name = "br_optimal_nonadaptive"
    reference = "Dong–Durfee–Rogers 2020, Thm 3 (optimal non-adaptive BR composition)"
    nonadaptive_only = True

    def applies(self, composition: Composition) -> bool:
        return composition.only(BoundedRange) and len({pure_epsilon(e) for e, _ in composition}) == 1

    def is_exact(self, composition: Composition) -> bool:
        return True  # DDR Thm 3 is the optimum over non-adaptive compositions of epsilon-BR mechanisms

    def _k_eps(self, composition: Composition) -> tuple[int, float]:
        epsilons, counts = _br_groups(composition)
        return sum(counts), epsilons[0]

    def delta(self, composition: Composition, epsilon: float) -> float:
        k, eps = self._k_eps(composition)
        return br_optimal_delta(k, eps, epsilon)

    def epsilon(self, composition: Composition, delta: float) -> float:
        k, eps = self._k_eps(composition)
        return br_optimal_epsilon(k, eps, delta)


class OptKL(Bound):
    """Closed-form adaptive composition of epsilon_i-BR mechanisms (DDR Cor 3.1, "OptKL").

    Privacy: add/remove neighbours; (eps_g, delta)-DP for the adaptive
      composition (mechanisms may be chosen from earlier outputs, their epsilon_i
      fixed in advance), with
      eps_g = min{sum eps_i, sum maxkl(eps_i) + sqrt(sum eps_i^2 ln(1/delta) / 2)}.
    Proof: Dong–Durfee–Rogers Cor 3.1 (Lemma 7.1 with Hoeffding's Lemma 7.2 and
      the exact maximal KL of RR_{eps,t}); the delta(eps_g) form is that lemma at
      its optimal lambda, see docs/proofs/accounting.bounds.bounded_range.OptKL.md.
    Checks: the composition is only `BoundedRange` events.
    Caller must ensure: each epsilon_i was fixed before any mechanism ran.
    Numerics: fsum over distinct epsilons; maxkl without cancellation; answers
      raised by 1e-12 relative.
    Runtime: O(number of distinct epsilons).
    """

    name = "br_optkl"
    reference = "Dong–Durfee–Rogers 2020, Cor 3.1 (OptKL, adaptive BR composition)"

    def applies(self, composition: Composition) -> bool:
        return composition.only(BoundedRange)

    def delta(self, composition: Composition, epsilon: float) -> float:
        epsilons, counts = _br_groups(composition)
        return optkl_delta(epsilons, epsilon, counts=counts)

    def epsilon(self, composition: Composition, delta: float) -> float:
        epsilons, counts = _br_groups(composition)
        return optkl_epsilon(epsilons, delta, counts=counts)


class MGFBound(Bound):
    """Adaptive composition of epsilon_i-BR mechanisms from the exact round MGF (DDR Thm 5, "MGF").

    Privacy: add/remove neighbours; the adaptive composition (mechanisms chosen
      from earlier outputs, epsilon_i fixed in advance) is (eps_g, delta)-DP with
      delta = inf_lambda exp(-lambda eps_g + sum_i h_{eps_i}(lambda)).
    Proof: Dong–Durfee–Rogers Thm 5 (Lemma 7.1 and Lemma 7.3); the closed-form
      inner maximiser and the inversion are in docs/proofs/accounting.bounds.bounded_range.MGFBound.md.
    Checks: the composition is only `BoundedRange` events.
    Caller must ensure: each epsilon_i was fixed before any mechanism ran.
    Numerics: h in the theorem's form (no e^{lambda eps} overflow), log1p or
      logaddexp near p = 1; every lambda gives a valid bound, so an inexact
      1-D search over ln lambda in [-30, 30] only loosens it; answers rounded up.
    Runtime: O(number of distinct epsilons) per objective, about 30 objectives.
    """

    name = "br_mgf"
    reference = "Dong–Durfee–Rogers 2020, Thm 5 (MGF, adaptive BR composition)"

    def applies(self, composition: Composition) -> bool:
        return composition.only(BoundedRange)

    def delta(self, composition: Composition, epsilon: float) -> float:
        epsilons, counts = _br_groups(composition)
        return mgf_delta(epsilons, epsilon, counts=counts)

    def epsilon(self, composition: Composition, delta: float) -> float:
        epsilons, counts = _br_groups(composition)
        return mgf_epsilon(epsilons, delta, counts=counts)


__all__: Sequence[str] = (
    "MGFBound",
    "OptKL",
    "OptimalNonadaptiveBR",
    "br_optimal_delta",
    "br_optimal_epsilon",
    "br_optimal_log_delta",
    "maxkl",
    "mgf_delta",
    "mgf_epsilon",
    "mgf_log_delta",
    "mgf_log_moment",
    "optkl_delta",
    "optkl_epsilon",
)
