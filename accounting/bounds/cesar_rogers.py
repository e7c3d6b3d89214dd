"""Cesar–Rogers bounds for mixes of pure-DP, bounded-range (BR) and concentrated (Gaussian, zCDP) mechanisms.

Paper: M. Cesar and R. Rogers, "Bounding, Concentrating, and Truncating:
Unifying Privacy Loss Composition for Data Analytics" (cited below as CR).

Privacy (all bounds): add/remove neighbours of one privacy unit; the measure
is (epsilon, delta)-DP of the analyst's whole view. Event mapping:
    PureDP(eps), Laplace(scale, sens)   -> eps-DP with eps = sens / scale
    BoundedRange(eps)                   -> eps-BR (the exponential mechanism)
    Gaussian(sigma, sens)               -> (1/(2 s^2), 1/s)-CDP, s = sigma / sens (CR Def 2.6)
                                           = rho-zCDP with rho = 1 / (2 s^2)
    ZCDP(rho, delta)                    -> delta-approximate (0, rho)-zCDP (CR Def 2.7)
Paper symbols: eps_g is `epsilon` of the composition, m is the number of
pure-DP events, k - m the number of BR events (CR Thm 3), alpha a BR epsilon.

Four bounds, plus plain functions for benchmarks:
- `MixedNonadaptive`: CR Thm 3, the optimal delta of m eps-DP and k - m eps-BR
  mechanisms when the BR mechanisms are fixed in advance.
- `SingleBRAdaptive`: CR Cor 5.1, Thm 3 is also exact for adaptive choice when
  at most one mechanism is BR (with none it is Kairouz–Oh–Viswanath, CR Thm 1).
- `MixedSetwise`: CR Lemma 3.2 + Lemma 3.3 (Eq. 2, 3) and Lemma 3.4, the
  closed-form concentration bound for an adaptive, heterogeneous mix of DP,
  BR, Gaussian and approximate-zCDP events.
- `MixedMGF`: the moment-generating-function (Chernoff) form of the same
  set-wise argument with each class's exact worst-case log-MGF; for BR alone
  it is Dong–Durfee–Rogers Thm 5. Never looser than `MixedSetwise` (each exact
  log-MGF is at most lam mean_i + lam^2 rho_i), up to the rounding margins.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq, minimize_scalar
from scipy.special import gammaln, logsumexp

from dpstream.accounting.bounds import Bound
from dpstream.accounting.bounds import generalized_rr as rr
from dpstream.accounting.bounds.basic import pure_epsilon
from dpstream.accounting.bounds.bounded_range import mgf_log_moment as br_log_mgf
from dpstream.accounting.bounds.pure_dp import MAX_ENUMERATED
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import ZCDP, BoundedRange, Gaussian, Laplace, PureDP

# Relative slack added to computed privacy quantities so float rounding never
# reports a value below the exact formula (the formulas are accurate to ~1e-13).
_REL_SLACK = 1e-11
# Work limit for CR Thm 3: (number of t candidates) x (k - m + 1) x (m + 1) terms.
THM3_MAX_TERMS = 1_500_000
_CHUNK_TERMS = 1 << 20  # terms evaluated per numpy block
_LOG_FLOOR = -1.0e4  # stands in for ln 0 while root finding; far below any float64 delta

_PURE = (PureDP, Laplace)
_MIXED_KINDS = (PureDP, Laplace, BoundedRange, Gaussian, ZCDP)


# ---------------------------------------------------------------------------
# CR Thm 3 (and Thm 1 when there is no BR mechanism)
# ---------------------------------------------------------------------------

def _log_binomial_pmf(n: int, log_success, log_failure) -> np.ndarray:
    """log Pr[Binomial(n) = i], i = 0..n (last axis), for arrays of log success/failure probabilities (0 * log 0 = 0)."""
    log_success = np.asarray(log_success, dtype=float)[..., None]
    log_failure = np.asarray(log_failure, dtype=float)[..., None]
    i = np.arange(n + 1, dtype=float)
    log_choose = gammaln(n + 1.0) - gammaln(i + 1.0) - gammaln(n - i + 1.0)
    with np.errstate(invalid="ignore"):
        successes = np.where(i == 0, 0.0, i * log_success)
        failures = np.where(i == n, 0.0, (n - i) * log_failure)
    return log_choose + successes + failures


def _thm3_candidates(num_pure: int, num_br: int, epsilon: float, epsilon_g: float) -> np.ndarray:
    """CR Thm 3's t_l = (eps_g + eps (l + 1 - m)) / (k - m + 1), l = 0..k+m, clipped to [0, eps]; distinct values."""
    ell = np.arange(num_br + 2 * num_pure + 1, dtype=float)
    ts = np.clip((epsilon_g + epsilon * (ell + 1 - num_pure)) / (num_br + 1), 0.0, epsilon)
    return np.unique(ts)


def thm3_cost(num_pure: int, num_br: int) -> int:
    """Number of terms CR Thm 3 evaluates (bounds its runtime)."""
    if num_br == 0:
        return num_pure + 1
    return (num_br + 3) * (num_br + 1) * (num_pure + 1)


def mixed_optimal_log_delta(num_pure: int, num_br: int, epsilon: float, epsilon_g: float) -> float:
    """log of CR Thm 3's delta_OPT for `num_pure` eps-DP and `num_br` eps-BR mechanisms (BR non-adaptive).

    With num_br == 0 this is CR Thm 1 (Kairouz–Oh–Viswanath), valid adaptively.
    epsilon_g < 0 gives log 1 (a trivial but valid answer). The result is
    rounded up by a relative 1e-11 of delta.
    """
    _check_counts(num_pure, num_br)
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    if epsilon_g < 0:
        return 0.0
    total = num_pure + num_br
    if total == 0 or epsilon_g >= total * epsilon:
        return -math.inf
    # DP part: j of the m randomized responses report the "other" bit; their loss is eps (m - 2j).
    log_q_dp = epsilon - float(np.logaddexp(0.0, epsilon))
    log_dp = _log_binomial_pmf(num_pure, -float(np.logaddexp(0.0, epsilon)), log_q_dp)
    j = np.arange(num_pure + 1, dtype=float)
    dp_loss = epsilon * (num_pure - 2.0 * j)
    if num_br == 0:
        gap = epsilon_g - dp_loss
        keep = gap < 0
        return _round_up_log(float(logsumexp(log_dp[keep] + np.log(-np.expm1(gap[keep])))))
    best = -math.inf
    i = np.arange(num_br + 1, dtype=float)[None, :, None]
    ts = _thm3_candidates(num_pure, num_br, epsilon, epsilon_g)
    rows = max(1, _CHUNK_TERMS // ((num_br + 1) * (num_pure + 1)))
    for start in range(0, ts.size, rows):
        t = ts[start:start + rows]
        # BR part: i of the k - m RR_{eps,t} report 1; loss (k - m) t - i eps.
        log_br = _log_binomial_pmf(num_br, rr.log_one_minus_q(epsilon, t), rr.log_q(epsilon, t))
        gap = epsilon_g - (dp_loss[None, None, :] + num_br * t[:, None, None] - epsilon * i)
        with np.errstate(divide="ignore"):
            log_bracket = np.where(gap < 0, np.log(-np.expm1(np.minimum(gap, 0.0))), -np.inf)
        terms = log_br[:, :, None] + log_dp[None, None, :] + log_bracket
        best = max(best, float(np.max(logsumexp(terms, axis=(1, 2)))))
    return _round_up_log(best)


def mixed_optimal_delta(num_pure: int, num_br: int, epsilon: float, epsilon_g: float) -> float:
    """CR Thm 3's delta_OPT (see `mixed_optimal_log_delta`)."""
    return min(1.0, math.exp(mixed_optimal_log_delta(num_pure, num_br, epsilon, epsilon_g)))


def mixed_optimal_epsilon(num_pure: int, num_br: int, epsilon: float, delta: float) -> float:
    """Smallest eps_g with CR Thm 3's delta_OPT <= delta (0 if delta_OPT(0) <= delta).

    delta_OPT is non-increasing in eps_g and 0 at eps_g = k eps. Brent's method on
    ln delta_OPT finds the crossing (about a dozen evaluations), then the answer
    is stepped up until delta_OPT(answer) <= delta holds, so it never undershoots.
    """
    _check_delta(delta)
    target = math.log(delta)
    upper = (num_pure + num_br) * epsilon

    def excess(eps_g: float) -> float:
        return max(mixed_optimal_log_delta(num_pure, num_br, epsilon, eps_g), _LOG_FLOOR) - target

    if excess(0.0) <= 0:
        return 0.0
    root = brentq(excess, 0.0, upper, xtol=1e-13 * upper, rtol=1e-15)
    while mixed_optimal_delta(num_pure, num_br, epsilon, root) > delta:
        root = min(upper, root + 1e-12 * upper)
    return root


def _pure_br_counts(composition: Composition) -> tuple[int, int, float]:
    """(number of pure-DP events, number of BR events, largest epsilon) of a pure/BR composition."""
    num_pure = sum(c for _, c in composition.select(*_PURE))
    num_br = sum(c for _, c in composition.select(BoundedRange))
    epsilon = max(pure_epsilon(e) for e, _ in composition)
    return num_pure, num_br, epsilon


class MixedNonadaptive(Bound):
    """Optimal composition of pure-DP and BR mechanisms fixed in advance (CR Thm 3).

    Privacy: add/remove neighbours, (epsilon, delta)-DP. For m eps-DP mechanisms
    (which may be chosen adaptively) and k - m eps-BR mechanisms fixed before
    any runs, in any pre-set order (CR Lemma 4.3), delta is exactly delta_OPT.
    Proof: Cesar–Rogers Thm 3 (with Lemmas 4.1–4.5); m = k is Thm 1, m = 0 is
    Dong–Durfee–Rogers Thm 3. Heterogeneous epsilons are evaluated at the
    largest epsilon, which is valid because an eps'-DP (eps'-BR) mechanism
    with eps' <= eps is eps-DP (eps-BR): docs/proofs/accounting.bounds.cesar_rogers.MixedNonadaptive.md.
    Exact only when all epsilons are equal.
    Checks: the composition holds only PureDP, Laplace and BoundedRange events,
    at least one pure-DP event and at least two BoundedRange runs (with none,
    Dong–Durfee–Rogers Thm 3 in `bounded_range` is the same value computed
    faster; with one, `SingleBRAdaptive` gives it adaptively), and
    thm3_cost(m, k - m) <= THM3_MAX_TERMS (about 0.05 s per delta).
    Caller must ensure: every BR mechanism (not only its epsilon) was fixed before
    any mechanism ran (accountant `adaptive=False`).
    Numerics: log space (gammaln, logsumexp, expm1), every term positive, no
    overflow for any k; delta rounded up by a relative 1e-11.
    Runtime: O((k - m)^2 m) per delta; epsilon by about 12 Brent steps on ln delta.
    """

    max_events = MAX_ENUMERATED

    name = "cesar_rogers_mixed_nonadaptive"
    reference = "Cesar–Rogers, Thm 3 (optimal non-adaptive pure-DP + BR composition)"
    nonadaptive_only = True

    def applies(self, composition: Composition) -> bool:
        if not composition.only(*_PURE, BoundedRange):
            return False
        num_pure, num_br, _ = _pure_br_counts(composition)
        return num_pure >= 1 and num_br >= 2 and thm3_cost(num_pure, num_br) <= THM3_MAX_TERMS

    def delta(self, composition: Composition, epsilon: float) -> float:
        return mixed_optimal_delta(*_pure_br_counts(composition), epsilon)

    def epsilon(self, composition: Composition, delta: float) -> float:
        num_pure, num_br, eps = _pure_br_counts(composition)
        return mixed_optimal_epsilon(num_pure, num_br, eps, delta)


class SingleBRAdaptive(Bound):
    """Optimal adaptive composition of pure-DP mechanisms and at most one BR mechanism (CR Cor 5.1).

    Privacy: add/remove neighbours, (epsilon, delta)-DP, for k - 1 eps-DP
    mechanisms and one eps-BR mechanism all chosen adaptively, the BR one at any
    round; with no BR mechanism, k adaptive eps-DP mechanisms.
    Proof: Cesar–Rogers Prop 2 and Cor 5.1 (Thm 3 with m = k - 1 is exact
    adaptively); without BR, Cesar–Rogers Thm 1 (Kairouz–Oh–Viswanath Thm 3.3).
    Heterogeneous epsilons use the largest (class inclusion):
    docs/proofs/accounting.bounds.cesar_rogers.MixedNonadaptive.md.
    Checks: only PureDP, Laplace and BoundedRange events, at most one BoundedRange run.
    Caller must ensure: the epsilons were fixed before any mechanism ran.
    Numerics: as `MixedNonadaptive`. Runtime: O(k) per delta.
    """

    max_events = MAX_ENUMERATED

    name = "cesar_rogers_one_br_adaptive"
    reference = "Cesar–Rogers, Cor 5.1 and Thm 1 (one adaptive BR among pure-DP mechanisms)"

    def applies(self, composition: Composition) -> bool:
        return composition.only(*_PURE, BoundedRange) and _pure_br_counts(composition)[1] <= 1

    def delta(self, composition: Composition, epsilon: float) -> float:
        return mixed_optimal_delta(*_pure_br_counts(composition), epsilon)

    def epsilon(self, composition: Composition, delta: float) -> float:
        num_pure, num_br, eps = _pure_br_counts(composition)
        return mixed_optimal_epsilon(num_pure, num_br, eps, delta)


# ---------------------------------------------------------------------------
# Set-wise adaptive composition (CR Sec 3): concentration and MGF bounds
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class MixedProfile:
    """What the set-wise bounds need from a composition.

    `pure` and `bounded_range` are (epsilon, count) pairs; `rho` is the total
    zCDP rho of the Gaussian and ZCDP events (a Gaussian with s = sigma / sens
    contributes 1 / (2 s^2)); `zcdp_delta` the total delta of approximate-zCDP events.
    """

    pure: tuple[tuple[float, int], ...] = ()
    bounded_range: tuple[tuple[float, int], ...] = ()
    rho: float = 0.0
    zcdp_delta: float = 0.0

    def __post_init__(self) -> None:
        for name, pairs in (("pure", self.pure), ("bounded_range", self.bounded_range)):
            for eps, count in pairs:
                if not (math.isfinite(eps) and eps > 0) or isinstance(count, bool) or not isinstance(count, int) or count < 0:
                    raise ValueError(f"MixedProfile.{name} needs (epsilon > 0, count >= 0) pairs, got {(eps, count)!r}")
        if not (math.isfinite(self.rho) and self.rho >= 0):
            raise ValueError(f"MixedProfile.rho must be a finite number >= 0, got {self.rho!r}")
        if not (math.isfinite(self.zcdp_delta) and self.zcdp_delta >= 0):
            raise ValueError(f"MixedProfile.zcdp_delta must be a finite number >= 0, got {self.zcdp_delta!r}")

    @classmethod
    def from_composition(cls, composition: Composition) -> "MixedProfile":
        if not composition.only(*_MIXED_KINDS):
            kinds = sorted(t.__name__ for t in composition.kinds())
            raise ValueError(f"Cesar–Rogers set-wise bounds cover PureDP, Laplace, BoundedRange, Gaussian and ZCDP, got {kinds}")
        pure: dict[float, int] = {}
        br: dict[float, int] = {}
        for event, count in composition:
            if isinstance(event, _PURE):
                pure[pure_epsilon(event)] = pure.get(pure_epsilon(event), 0) + count
            elif isinstance(event, BoundedRange):
                br[float(event.epsilon)] = br.get(float(event.epsilon), 0) + count
        rho = math.fsum(c * e.mu**2 / 2 for e, c in composition.select(Gaussian))
        rho += math.fsum(c * e.rho for e, c in composition.select(ZCDP))
        zdelta = math.fsum(c * e.delta for e, c in composition.select(ZCDP))
        return cls(tuple(sorted(pure.items())), tuple(sorted(br.items())), rho, zdelta)

    def is_empty(self) -> bool:
        return not any(c for _, c in self.pure) and not any(c for _, c in self.bounded_range) and self.rho == 0


def dp_mean(epsilon: float) -> float:
    """Bound on E[L] of an eps-DP mechanism: eps tanh(eps / 2) (CR Lemma 3.2, from Kairouz–Oh–Viswanath)."""
    return epsilon * math.tanh(epsilon / 2)


def br_mean(alpha: float) -> float:
    """Bound on E[L] of an alpha-BR mechanism: a - 1 - ln a with a = alpha / (e^alpha - 1) (CR Lemma 3.2, DDR).

    Below alpha = 0.05 the Taylor series alpha^2/8 - alpha^4/576 + alpha^6/25920
    - alpha^8/1075200 avoids cancellation (truncation error < 1e-17 relative). Above, ln a =
    ln alpha - alpha - ln(1 - e^-alpha) in log space, so that e^alpha never overflows (alpha > 709: a job at
    epsilon 1000).
    """
    if alpha < 0.05:
        a2 = alpha * alpha
        return a2 / 8 - a2 * a2 / 576 + a2**3 / 25920 - a2**4 / 1075200
    log_ratio = math.log(alpha) - alpha - math.log1p(-math.exp(-alpha))
    return math.exp(log_ratio) - 1 - log_ratio


def setwise_moments(profile: MixedProfile) -> tuple[float, float]:
    """(sum of mean bounds, sum of rho) over the profile, with rho_i = tau_i^2 / 2 (CR Lemma 3.2)."""
    mean = math.fsum(c * dp_mean(e) for e, c in profile.pure) + math.fsum(c * br_mean(a) for a, c in profile.bounded_range)
    rho = math.fsum(c * e * e / 2 for e, c in profile.pure) + math.fsum(c * a * a / 8 for a, c in profile.bounded_range)
    return mean + profile.rho, rho + profile.rho


def setwise_epsilon(profile: MixedProfile, delta: float) -> float:
    """CR Eq. (2)/(3) with Lemma 3.4: eps_g = sum mean_i + 2 sqrt(sum rho_i ln(1 / (delta - sum delta_i))), rounded up."""
    _check_delta(delta)
    if profile.is_empty():
        return 0.0
    slack = delta - profile.zcdp_delta
    if slack <= 0:
        return math.inf
    mean, rho = setwise_moments(profile)
    return _round_up(mean + 2 * math.sqrt(rho * math.log(1 / slack)))


def setwise_delta(profile: MixedProfile, epsilon: float) -> float:
    """The inverse of `setwise_epsilon`: exp(-(eps_g - M)^2 / (4 R)) + sum delta_i, rounded up (1 when eps_g <= M)."""
    if profile.is_empty():
        return max(0.0, -math.expm1(epsilon))
    mean, rho = setwise_moments(profile)
    if epsilon <= mean:
        return 1.0
    exponent = -((epsilon - mean) ** 2) / (4 * rho)
    return min(1.0, math.exp(exponent) * (1 + _REL_SLACK) + profile.zcdp_delta)


def dp_log_mgf(epsilon: float, lam):
    """sup over eps-DP pairs of ln E[e^{lam L}]: randomized response RR_{2 eps, eps} (any eps-DP pair is its post-processing)."""
    lam = np.asarray(lam, dtype=float)
    return np.logaddexp(epsilon * (lam + 1), -lam * epsilon) - np.logaddexp(0.0, epsilon)


def log_conversion_factor(lam):
    """ln max_{y >= 0} (1 - e^{-y}) e^{-lam y} = ln(lam^lam / (lam + 1)^(lam + 1))."""
    lam = np.asarray(lam, dtype=float)
    return -lam * np.log1p(1 / lam) - np.log1p(lam)


def mixed_log_mgf(profile: MixedProfile, lam):
    """Sum over the profile of each class's worst-case ln E[e^{lam L}] (Gaussian/zCDP: lam (lam + 1) rho)."""
    lam = np.asarray(lam, dtype=float)
    total = profile.rho * lam * (lam + 1)
    for eps, count in profile.pure:
        total = total + count * dp_log_mgf(eps, lam)
    for eps, count in profile.bounded_range:
        total = total + count * br_log_mgf(eps, lam)
    return total


_LOG_LAMBDA_RANGE = (-25.0, 25.0)


def _minimise_over_log_lambda(objective) -> tuple[float, float]:
    """(min value, argmin lam) of a unimodal objective of lam over ln lam in a fixed range: grid, then Brent."""
    grid = np.linspace(*_LOG_LAMBDA_RANGE, 201)
    values = objective(np.exp(grid))
    k = int(np.nanargmin(values))
    best_value, best_lam = float(values[k]), float(np.exp(grid[k]))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    result = minimize_scalar(lambda u: float(objective(np.exp(u))), bounds=(lo, hi), method="bounded",
                             options={"xatol": 1e-10})
    if result.success and result.fun < best_value:
        best_value, best_lam = float(result.fun), float(np.exp(result.x))
    return best_value, best_lam


def _mgf_float_error(profile: MixedProfile, lam: float) -> float:
    """An upper bound on the float error of ln(conversion factor) + `mixed_log_mgf` at lam.

    The log-MGF of an eps event is at most lam eps in size; measured against
    mpmath, `br_log_mgf` is accurate to a relative 1e-8 for lam < 1 and 1e-12
    above, `dp_log_mgf` to a few ulps of eps (lam + 1).
    """
    size = math.fsum(c * e for e, c in profile.pure) + math.fsum(c * e for e, c in profile.bounded_range)
    relative = 1e-15 + 2e-8 * min(lam, 1.0) + 1e-12 * lam
    return size * relative + 1e-13 * (profile.rho * lam * (lam + 1) + math.log1p(lam) + 1.0)


def _bounded_loss(profile: MixedProfile) -> float:
    """sum of eps over pure and BR events when there is no Gaussian/zCDP part (the loss never exceeds it), else inf."""
    if profile.rho > 0:
        return math.inf
    return math.fsum(c * e for e, c in profile.pure) + math.fsum(c * e for e, c in profile.bounded_range)


def mgf_log_delta(profile: MixedProfile, epsilon: float) -> float:
    """ln of inf_lam lam^lam/(lam+1)^(lam+1) exp(sum_i psi_i(lam) - lam eps): the MGF bound on delta, rounded up."""
    if profile.zcdp_delta > 0:
        raise ValueError(f"the MGF bound covers exact zCDP only, got total ZCDP delta {profile.zcdp_delta!r}")
    if profile.is_empty():
        return math.log(max(0.0, -math.expm1(epsilon))) if epsilon < 0 else -math.inf
    if epsilon >= _bounded_loss(profile):
        return -math.inf

    def objective(lam):
        return log_conversion_factor(lam) + mixed_log_mgf(profile, lam) - lam * epsilon

    value, lam = _minimise_over_log_lambda(objective)
    return min(0.0, value + _mgf_float_error(profile, lam) + lam * abs(epsilon) * 1e-13 + _REL_SLACK)


def mgf_delta(profile: MixedProfile, epsilon: float) -> float:
    return math.exp(mgf_log_delta(profile, epsilon))


def mgf_epsilon(profile: MixedProfile, delta: float) -> float:
    """inf_lam (sum_i psi_i(lam) + ln(lam^lam/(lam+1)^(lam+1)) + ln(1/delta)) / lam, floored at 0, rounded up."""
    _check_delta(delta)
    if profile.zcdp_delta > 0:
        raise ValueError(f"the MGF bound covers exact zCDP only, got total ZCDP delta {profile.zcdp_delta!r}")
    if profile.is_empty():
        return 0.0
    log_inv_delta = -math.log(delta)

    def objective(lam):
        return (mixed_log_mgf(profile, lam) + log_conversion_factor(lam) + log_inv_delta) / lam

    value, lam = _minimise_over_log_lambda(objective)
    value = _round_up(value + (_mgf_float_error(profile, lam) + 1e-13 * log_inv_delta) / lam)
    return max(0.0, min(value, _bounded_loss(profile)))


class MixedSetwise(Bound):
    """Closed-form adaptive bound for mixed pure-DP, BR, Gaussian and approximate-zCDP events (CR Eq. 2-3, Lemma 3.4).

    Privacy: add/remove neighbours, (epsilon, delta)-DP under CR's set-wise
    adaptive composition (Def 3.1): the multiset of privacy parameters is fixed
    in advance; which one runs next, and the mechanism, may depend on earlier
    outputs. For each event, with E[e^{lam (L - mean_i)} | past] <= e^{lam^2 rho_i}:
        eps-DP:  mean eps tanh(eps/2), rho eps^2/2;   alpha-BR: mean br_mean(alpha), rho alpha^2/8;
        Gaussian: mean = rho = 1/(2 s^2);             rho-zCDP: mean = rho = rho (plus its delta_i);
    eps_g = sum mean_i + 2 sqrt(sum rho_i ln(1 / (delta - sum delta_i))).
    Proof: Cesar–Rogers Lemma 3.2 (per-class constants), Lemma 3.3 (Eq. 2; Eq. 3
    for homogeneous classes), Lemma 3.4 (zCDP events and their delta_i). Using
    one formula for CDP and zCDP events together: docs/proofs/accounting.bounds.cesar_rogers.MixedSetwise.md.
    Checks: the composition holds only PureDP, Laplace, BoundedRange, Gaussian, ZCDP.
    Caller must ensure: the multiset of parameters was fixed before any mechanism ran.
    Numerics: closed form; br_mean by series below 0.05; result rounded up.
    Runtime: O(number of distinct events).
    """

    max_events = MAX_ENUMERATED

    name = "cesar_rogers_setwise"
    reference = "Cesar–Rogers, Lemma 3.2, Lemma 3.3 (Eq. 2-3) and Lemma 3.4 (set-wise adaptive)"

    def applies(self, composition: Composition) -> bool:
        return composition.only(*_MIXED_KINDS)

    def delta(self, composition: Composition, epsilon: float) -> float:
        return setwise_delta(MixedProfile.from_composition(composition), epsilon)

    def epsilon(self, composition: Composition, delta: float) -> float:
        return setwise_epsilon(MixedProfile.from_composition(composition), delta)


class MixedMGF(Bound):
    """Chernoff (MGF) bound for adaptive mixes of pure-DP, BR, Gaussian and exact zCDP events.

    Privacy: add/remove neighbours, (epsilon, delta)-DP under CR's set-wise
    adaptive composition (parameters fixed in advance, order and mechanisms adaptive):
        delta(eps) <= inf_{lam > 0} lam^lam/(lam+1)^(lam+1) * exp(sum_i psi_i(lam) - lam eps)
    with psi_i the worst-case conditional log-MGF of the privacy loss:
    `dp_log_mgf` (RR_{2eps,eps}), `br_log_mgf` (sup_t RR_{eps,t}, DDR Thm 5's h
    from `bounded_range.mgf_log_moment`), and
    lam (lam + 1) rho for Gaussian (rho = 1/(2 s^2)) and rho-zCDP events.
    Proof: the supermartingale of Cesar–Rogers Lemma 3.1/3.4 with exact MGFs in
    place of subgaussian ones; for BR alone this is Dong–Durfee–Rogers Thm 5.
    The lam^lam/(lam+1)^(lam+1) factor is the hockey-stick conversion
    (Canonne–Kamath–Steinke 2020, Prop 12 style): docs/proofs/accounting.bounds.cesar_rogers.MixedMGF.md.
    Checks: only PureDP, Laplace, BoundedRange, Gaussian and ZCDP with delta = 0.
    Caller must ensure: the multiset of parameters was fixed before any mechanism ran.
    With no Gaussian/zCDP part the loss is at most sum eps_i, so delta = 0 from
    there on (basic composition).
    Numerics: log space throughout; any lam gives a valid bound, so inexact
    minimisation only loosens; the result is rounded up for float error.
    Runtime: O(number of distinct epsilons) per lam, about 230 lam evaluations.
    """

    name = "cesar_rogers_mgf"
    reference = "Cesar–Rogers Lemma 3.1/3.4 with exact MGFs (Dong–Durfee–Rogers Thm 5 for BR)"

    def applies(self, composition: Composition) -> bool:
        return composition.only(*_MIXED_KINDS) and all(e.delta == 0 for e, _ in composition.select(ZCDP))

    def delta(self, composition: Composition, epsilon: float) -> float:
        return mgf_delta(MixedProfile.from_composition(composition), epsilon)

    def epsilon(self, composition: Composition, delta: float) -> float:
        return mgf_epsilon(MixedProfile.from_composition(composition), delta)


# ---------------------------------------------------------------------------

def _round_up(value: float) -> float:
    return value + abs(value) * _REL_SLACK


def _round_up_log(log_value: float) -> float:
    """Round a log-probability up by a relative 1e-11 of the probability (and float error of large exponents)."""
    if log_value == -math.inf:
        return log_value
    return log_value + _REL_SLACK + 1e-15 * abs(log_value)


def _check_counts(num_pure: int, num_br: int) -> None:
    for name, value in (("num_pure", num_pure), ("num_br", num_br)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


def _check_delta(delta: float) -> None:
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
