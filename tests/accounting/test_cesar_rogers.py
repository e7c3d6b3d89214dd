"""Cesar–Rogers mixed pure-DP / BR / concentrated bounds against printed, computed and brute-force values.

Oracles: the paper's Sec 6.2 numbers (eps'(delta) = 2.08, sigma = 13.1), the
note's Sec 4.C values (computed from the paper's formulas), mpmath sums,
exhaustive enumeration of randomized-response products (non-adaptive optimum
over a t-grid) and the Lemma 5.1 recursion on a t-grid (a lower bound on the
adaptive optimum). No test here is statistical.
"""
import itertools
import math

import mpmath
import numpy as np
import pytest

from dpstream.accounting import Accountant
from dpstream.accounting.bounds.bounded_range import br_optimal_delta, optkl_epsilon
from dpstream.accounting.bounds.cesar_rogers import (
    THM3_MAX_TERMS,
    MixedMGF,
    MixedNonadaptive,
    MixedProfile,
    MixedSetwise,
    SingleBRAdaptive,
    br_mean,
    mgf_delta,
    mgf_epsilon,
    mixed_optimal_delta,
    mixed_optimal_epsilon,
    setwise_delta,
    setwise_epsilon,
    thm3_cost,
)
from dpstream.accounting.bounds.gaussian import gdp_delta, gdp_epsilon
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import ZCDP, ApproxDP, BoundedRange, Gaussian, Laplace, PureDP

# ---------------------------------------------------------------- oracles

def rr_pair(eps, t):
    """(P, Q) of RR_{eps,t} on outputs (0, 1); RR_{2e,e} is e-DP randomized response."""
    den = -math.expm1(-eps)
    q = -math.expm1(t - eps) / den
    p = (math.exp(-t) - math.exp(-eps)) / den
    return np.array([q, 1 - q]), np.array([p, 1 - p])


def product_delta(pairs, eps_g):
    """Exact hockey-stick divergence of a product of (P, Q) pairs, by enumerating every outcome."""
    big_p, big_q = np.ones(1), np.ones(1)
    for p, q in pairs:
        big_p, big_q = np.outer(big_p, p).ravel(), np.outer(big_q, q).ravel()
    return float(np.sum(np.maximum(big_p - math.exp(eps_g) * big_q, 0.0)))


def brute_nonadaptive(pure_eps, br_eps, eps_g, grid=13):
    """max over a t-grid (each BR its own t) of the product delta: a lower bound on the non-adaptive optimum."""
    dp_pairs = [rr_pair(2 * e, e) for e in pure_eps]
    best = 0.0
    for frac in itertools.product(np.linspace(0, 1, grid), repeat=len(br_eps)):
        pairs = dp_pairs + [rr_pair(e, f * e) for e, f in zip(br_eps, frac)]
        best = max(best, product_delta(pairs, eps_g))
    return best


def adaptive_recursion(mechanisms, eps_g, grid=41):
    """Cesar–Rogers Lemma 5.1 with the sup over t taken on a grid: a lower bound on the adaptive optimum."""
    if not mechanisms:
        return max(0.0, -math.expm1(eps_g))
    (kind, eps), rest = mechanisms[0], mechanisms[1:]
    if kind == "dp":
        q = math.exp(eps) / (1 + math.exp(eps))
        return q * adaptive_recursion(rest, eps_g - eps, grid) + (1 - q) * adaptive_recursion(rest, eps_g + eps, grid)
    best = 0.0
    for t in np.linspace(0, eps, grid):
        q = rr_pair(eps, t)[0][0]
        best = max(best, q * adaptive_recursion(rest, eps_g - t, grid) + (1 - q) * adaptive_recursion(rest, eps_g + eps - t, grid))
    return best


def mp_thm1(k, eps, eps_g):
    """Kairouz–Oh–Viswanath optimal delta (Cesar–Rogers Thm 1) in mpmath."""
    with mpmath.workdps(60):
        eps, eps_g = mpmath.mpf(eps), mpmath.mpf(eps_g)
        total = mpmath.mpf(0)
        for ell in range(k + 1):
            term = mpmath.exp(ell * eps) - mpmath.exp(eps_g + (k - ell) * eps)
            if term > 0:
                total += mpmath.binomial(k, ell) * term
        return total / (1 + mpmath.exp(eps)) ** k


def profile(pure=(), br=(), rho=0.0, zcdp_delta=0.0):
    return MixedProfile(tuple(pure), tuple(br), rho, zcdp_delta)


# ---------------------------------------------------------------- the paper's printed numbers (Sec 6.2)

def test_paper_oracle_eps_2_08_from_theorem_1():
    """KnownLap^{25,1} with eps = 0.1 per count, delta = 1e-6: the optimal composition gives eps' = 2.08."""
    assert round(mixed_optimal_epsilon(25, 0, 0.1, 1e-6), 2) == 2.08
    accountant = Accountant().compose(Laplace(scale=10.0), count=25)
    explanation = accountant.explain(1e-6)
    values = {c.name: c.value for c in explanation.candidates}
    assert values[SingleBRAdaptive.name] == pytest.approx(2.079056, abs=1e-6)
    assert mixed_optimal_delta(25, 0, 0.1, 2.08) == pytest.approx(9.7532e-07, rel=1e-4)


def test_paper_oracle_sigma_13_1_from_lemma_6_3():
    """Lemma 6.3 (rho = Delta/(2 sigma^2) through Lemma 2.3) solved for sigma at eps = 2.08, delta = 1e-6, Delta = 25."""
    log_inv = math.log(1e6)
    sqrt_rho = math.sqrt(log_inv + 2.08) - math.sqrt(log_inv)
    sigma = math.sqrt(25 / (2 * sqrt_rho**2))
    assert sigma == pytest.approx(13.0948, abs=1e-4)
    assert round(sigma, 1) == 13.1
    # The set-wise bound over 25 Gaussian counts is exactly Lemma 6.3's conversion.
    composition = Composition.of(*[Gaussian(sigma)] * 25)
    assert MixedSetwise().epsilon(composition, 1e-6) == pytest.approx(2.08, rel=1e-9)
    assert MixedSetwise().epsilon(composition, 1e-6) >= 2.08
    assert setwise_delta(MixedProfile.from_composition(composition), 2.08) == pytest.approx(1e-6, rel=1e-8)


# ---------------------------------------------------------------- the note's computed values (Sec 4.C)

THM3_TABLE = [
    (10, 0.1, 0.5, 0, 3.9978134053e-05), (10, 0.1, 0.5, 5, 2.1790915046e-03), (10, 0.1, 0.5, 10, 9.9296269174e-03),
    (20, 0.1, 1.0, 0, 1.9490993019e-07), (20, 0.1, 1.0, 10, 2.5306561704e-04), (20, 0.1, 1.0, 20, 2.3966924536e-03),
    (50, 0.1, 2.0, 0, 7.4410006896e-10), (50, 0.1, 2.0, 25, 4.0934598527e-05), (50, 0.1, 2.0, 50, 1.0213807448e-03),
    (10, 0.5, 2.0, 0, 3.8845728536e-03), (10, 0.5, 2.0, 5, 6.3290459675e-02), (10, 0.5, 2.0, 10, 1.4546644644e-01),
    (1000, 0.1, 15.0, 1000, 3.4810683362e-04),
]


@pytest.mark.parametrize("k, eps, eps_g, m, expected", THM3_TABLE)
def test_theorem_3_matches_note_table(k, eps, eps_g, m, expected):
    assert mixed_optimal_delta(m, k - m, eps, eps_g) == pytest.approx(expected, rel=1e-9)


def test_theorem_3_is_zero_at_total_epsilon():
    for m in range(11):
        assert mixed_optimal_delta(m, 10 - m, 0.1, 1.0) == 0.0


@pytest.mark.parametrize("k, m, expected", [
    (10, 0, 0.628637), (10, 2, 0.719136), (10, 5, 0.853656), (10, 7, 0.932497), (10, 10, 0.999371),
    (20, 5, 1.152310), (20, 15, 1.596216), (50, 25, 2.428395), (50, 50, 3.172903),
])
def test_theorem_3_smallest_epsilon_matches_note(k, m, expected):
    eps_g = mixed_optimal_epsilon(m, k - m, 0.1, 1e-6)
    assert eps_g == pytest.approx(expected, abs=1e-6)
    assert mixed_optimal_delta(m, k - m, 0.1, eps_g) <= 1e-6
    assert mixed_optimal_delta(m, k - m, 0.1, eps_g - 1e-8) > 1e-6


@pytest.mark.parametrize("k, m_dp, expected", [
    (10, 0, 0.843627), (10, 5, 1.345359), (10, 10, 1.712217), (50, 0, 1.920952), (50, 25, 3.094627),
    (50, 50, 3.966714), (100, 50, 4.467929), (1000, 500, 16.264136), (1000, 1000, 21.618419),
])
def test_equation_3_matches_note(k, m_dp, expected):
    p = profile(pure=[(0.1, m_dp)], br=[(0.1, k - m_dp)])
    assert setwise_epsilon(p, 1e-6) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("eps_g, expected", [
    (0.0, 0.4774482515), (0.2, 0.4320301829), (0.3, 0.4075349056), (0.5, 0.3552477516), (0.8, 0.2701021818),
    (0.99, 0.2137559066),
])
def test_theorem_3_one_dp_two_br_matches_note(eps_g, expected):
    assert mixed_optimal_delta(1, 2, 1.0, eps_g) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("eps_g, expected", [(0.0, 0.3600322521), (0.3, 0.2658000541), (0.7, 0.1544478549), (1.2, 0.0666203837)])
def test_corollary_5_1_one_br_three_dp_matches_note_and_recursion(eps_g, expected):
    assert mixed_optimal_delta(3, 1, 0.5, eps_g) == pytest.approx(expected, rel=1e-9)
    # Cor 5.1: the adaptive optimum with the BR at any position equals Thm 3 (grid recursion approaches from below).
    for position in range(4):
        order = [("dp", 0.5)] * 3
        order.insert(position, ("br", 0.5))
        value = adaptive_recursion(order, eps_g, grid=401)
        assert value <= expected * (1 + 1e-9)
        assert value == pytest.approx(expected, rel=1e-5)


# ---------------------------------------------------------------- brute force: non-adaptive optimum

@pytest.mark.parametrize("m, n, eps, eps_g", [
    (1, 2, 1.0, 0.2), (2, 2, 0.5, 0.3), (2, 3, 0.3, 0.1), (3, 2, 0.7, 1.0), (1, 3, 0.2, 0.0), (4, 2, 0.25, 0.5),
])
def test_theorem_3_is_the_non_adaptive_optimum(m, n, eps, eps_g):
    optimum = mixed_optimal_delta(m, n, eps, eps_g)
    brute = brute_nonadaptive([eps] * m, [eps] * n, eps_g)
    assert brute <= optimum * (1 + 1e-9) + 1e-15
    assert brute == pytest.approx(optimum, rel=2e-2)
    # Equal t for every BR mechanism (CR Lemma 4.4) on a fine grid reaches the optimum.
    fine = max(product_delta([rr_pair(2 * eps, eps)] * m + [rr_pair(eps, t)] * n, eps_g) for t in np.linspace(0, eps, 2001))
    assert fine <= optimum * (1 + 1e-9)
    assert fine == pytest.approx(optimum, rel=1e-5)


@pytest.mark.parametrize("pure, br, eps_g", [
    ([0.3, 0.1], [0.4, 0.2], 0.2), ([0.5], [0.2, 0.2, 0.6], 0.4), ([0.1, 0.2, 0.3], [0.3, 0.5], 0.0),
])
def test_heterogeneous_theorem_3_at_largest_epsilon_is_valid(pure, br, eps_g):
    composition = Composition.of(*[PureDP(e) for e in pure], *[BoundedRange(e) for e in br])
    assert MixedNonadaptive().applies(composition)
    bound = MixedNonadaptive().delta(composition, eps_g)
    assert brute_nonadaptive(pure, br, eps_g) <= bound


# ---------------------------------------------------------------- adaptive bounds never below the optimum

@pytest.mark.parametrize("m, n, eps", [(1, 2, 1.0), (3, 3, 0.3), (5, 5, 0.1), (2, 6, 0.5), (10, 10, 0.1), (25, 25, 0.1)])
def test_adaptive_bounds_are_at_least_the_non_adaptive_optimum(m, n, eps):
    p = profile(pure=[(eps, m)], br=[(eps, n)])
    for eps_g in np.linspace(0, (m + n) * eps, 9):
        optimum = mixed_optimal_delta(m, n, eps, float(eps_g))
        assert mgf_delta(p, float(eps_g)) >= optimum
        assert setwise_delta(p, float(eps_g)) >= optimum
    for delta in (1e-2, 1e-6, 1e-10):
        # The optimal delta at each adaptive bound's epsilon is within the target (the Thm 3 inversion
        # itself is only bracketed to a relative 1e-10, so compare deltas, not epsilons).
        mgf, setwise = mgf_epsilon(p, delta), setwise_epsilon(p, delta)
        assert mixed_optimal_delta(m, n, eps, mgf) <= delta * (1 + 1e-9)
        assert mixed_optimal_delta(m, n, eps, setwise) <= delta * (1 + 1e-9)
        assert mgf <= setwise


@pytest.mark.parametrize("eps_g, dbb", [(0.0, 0.4927793457), (0.2, 0.4406620427), (0.5, 0.3576829711), (0.99, 0.2243286047)])
def test_adaptive_bounds_cover_the_worst_adaptive_order(eps_g, dbb):
    """Cesar–Rogers Lemma 5.4: (DP, BR, BR) at eps = 1 is the adaptive optimum; both bounds lie above it."""
    p = profile(pure=[(1.0, 1)], br=[(1.0, 2)])
    assert adaptive_recursion([("dp", 1.0), ("br", 1.0), ("br", 1.0)], eps_g) <= dbb * (1 + 1e-9)
    assert mgf_delta(p, eps_g) >= dbb
    assert setwise_delta(p, eps_g) >= dbb


@pytest.mark.parametrize("order, eps_g", [
    ([("dp", 0.3), ("br", 0.7), ("br", 0.5)], 0.2),
    ([("br", 0.7), ("dp", 0.3), ("br", 0.5)], 0.5),
    ([("br", 0.4), ("br", 0.9), ("dp", 0.2), ("dp", 0.6)], 0.3),
    ([("dp", 1.0), ("dp", 0.5), ("br", 2.0)], 1.0),
])
def test_adaptive_bounds_cover_heterogeneous_recursion(order, eps_g):
    pure = [(e, 1) for kind, e in order if kind == "dp"]
    br = [(e, 1) for kind, e in order if kind == "br"]
    lower = adaptive_recursion(order, eps_g, grid=21)
    assert mgf_delta(profile(pure, br), eps_g) >= lower
    assert setwise_delta(profile(pure, br), eps_g) >= lower


@pytest.mark.parametrize("sigma", [0.5, 2.0, 10.0])
@pytest.mark.parametrize("count", [1, 24, 1000])
def test_gaussian_only_bounds_are_at_least_the_exact_gaussian(sigma, count):
    p = profile(rho=count / (2 * sigma**2))
    mu = math.sqrt(count) / sigma
    for eps_g in (0.1, 1.0, 5.0):
        exact = gdp_delta(mu, eps_g)
        assert mgf_delta(p, eps_g) >= exact
        assert setwise_delta(p, eps_g) >= exact
    assert mgf_epsilon(p, 1e-6) >= gdp_epsilon(mu, 1e-6)


def test_mixed_plan_of_laplace_gaussian_and_exponential_gets_a_finite_valid_answer():
    """24 Laplace + 24 Gaussian + 24 exponential-mechanism events, adaptive: finite, and above valid lower bounds."""
    events = [Laplace(scale=10.0)] * 24 + [Gaussian(sigma=10.0)] * 24 + [BoundedRange(0.1)] * 24
    accountant = Accountant()
    for event in events:
        accountant.compose(event)
    composition = accountant.composition
    assert MixedMGF().applies(composition) and MixedSetwise().applies(composition)
    mgf = MixedMGF().epsilon(composition, 1e-6)
    setwise = MixedSetwise().epsilon(composition, 1e-6)
    assert math.isfinite(mgf) and mgf <= setwise
    values = {c.name: c.value for c in accountant.explain(1e-6).candidates}
    assert values[MixedMGF.name] == mgf and values[MixedSetwise.name] == setwise
    # A composition costs at least any of its parts: the exact Gaussian part and the optimal Laplace + BR part.
    assert mgf >= gdp_epsilon(math.sqrt(24) / 10.0, 1e-6)
    assert mgf >= mixed_optimal_epsilon(24, 24, 0.1, 1e-6)
    assert MixedMGF().delta(composition, mgf) <= 1e-6


# ---------------------------------------------------------------- reductions

@pytest.mark.parametrize("k, eps, eps_g", [(1, 0.5, 0.1), (5, 0.3, 0.2), (20, 0.1, 0.4), (60, 0.05, 1.0), (200, 0.1, 3.0)])
def test_all_br_theorem_3_equals_dong_durfee_rogers_theorem_3(k, eps, eps_g):
    assert mixed_optimal_delta(0, k, eps, eps_g) == pytest.approx(br_optimal_delta(k, eps, eps_g), rel=1e-9)


@pytest.mark.parametrize("k, eps, eps_g", [(1, 0.5, 0.1), (30, 0.2, 1.0), (200, 0.1, 2.0), (1000, 0.05, 3.0), (600, 1.0, 100.0)])
def test_all_pure_theorem_3_equals_kairouz_oh_viswanath(k, eps, eps_g):
    exact = mp_thm1(k, eps, eps_g)
    ours = mixed_optimal_delta(k, 0, eps, eps_g)
    assert ours >= float(exact) * (1 - 1e-15)
    assert ours == pytest.approx(float(exact), rel=1e-9)


def test_all_br_setwise_equals_dong_durfee_rogers_corollary_3_1():
    for k, eps in ((10, 0.1), (200, 0.05), (5000, 0.01)):
        ours = setwise_epsilon(profile(br=[(eps, k)]), 1e-6)
        assert ours == pytest.approx(optkl_epsilon([eps], 1e-6, counts=[k]), rel=1e-9)


def test_br_mean_is_accurate_at_both_ends():
    for alpha in (1e-8, 1e-4, 0.049, 0.051, 0.1, 1.0, 30.0, 200.0, 709.0, 750.0, 2000.0):
        with mpmath.workdps(50):
            a = mpmath.mpf(alpha)
            ratio = a / mpmath.expm1(a)
            reference = float(ratio - 1 - mpmath.log(ratio))
        assert br_mean(alpha) == pytest.approx(reference, rel=1e-12)


# ---------------------------------------------------------------- monotonicity, round trips, scale

@pytest.mark.parametrize("bound_profile", [
    profile(pure=[(0.1, 10)], br=[(0.2, 10)], rho=0.05), profile(br=[(1.0, 3)]), profile(pure=[(0.01, 500)], rho=2.0),
])
def test_delta_decreases_and_epsilon_round_trips(bound_profile):
    grid = np.linspace(0, 8, 33)
    for delta_of in (lambda e: mgf_delta(bound_profile, e), lambda e: setwise_delta(bound_profile, e)):
        values = [delta_of(float(e)) for e in grid]
        assert all(a >= b for a, b in zip(values, values[1:]))
    for delta in (1e-3, 1e-8, 1e-14):
        eps = mgf_epsilon(bound_profile, delta)
        assert mgf_delta(bound_profile, eps) <= delta * (1 + 1e-6)
        assert mgf_delta(bound_profile, eps * (1 - 1e-4)) > delta
        eps = setwise_epsilon(bound_profile, delta)
        assert setwise_delta(bound_profile, eps) <= delta * (1 + 1e-9)
        assert setwise_delta(bound_profile, eps * (1 - 1e-6)) > delta


def test_theorem_3_monotone_in_epsilon_g_and_in_mix():
    eps_gs = np.linspace(0, 2, 21)
    for m in (0, 3, 6, 10):
        values = [mixed_optimal_delta(m, 10 - m, 0.2, float(e)) for e in eps_gs]
        assert all(a >= b for a, b in zip(values, values[1:]))
    # Replacing a BR mechanism by a pure-DP one of the same epsilon never lowers delta (BR is a subclass of DP).
    for eps_g in (0.2, 0.8, 1.5):
        by_m = [mixed_optimal_delta(m, 10 - m, 0.2, eps_g) for m in range(11)]
        assert all(a <= b * (1 + 1e-12) for a, b in zip(by_m, by_m[1:]))


def test_more_noise_or_fewer_events_never_costs_more():
    base = profile(pure=[(0.1, 24)], br=[(0.1, 24)], rho=24 / (2 * 10.0**2))
    quieter = profile(pure=[(0.1, 24)], br=[(0.1, 24)], rho=24 / (2 * 20.0**2))
    fewer = profile(pure=[(0.1, 23)], br=[(0.1, 24)], rho=24 / (2 * 10.0**2))
    for fn in (mgf_epsilon, setwise_epsilon):
        assert fn(quieter, 1e-6) < fn(base, 1e-6)
        assert fn(fewer, 1e-6) < fn(base, 1e-6)


def test_ten_thousand_events_stay_finite_and_fast():
    big = profile(pure=[(0.01, 10_000)], br=[(0.01, 10_000)], rho=10_000 / (2 * 100.0**2))
    for fn in (mgf_epsilon, setwise_epsilon):
        value = fn(big, 1e-9)
        assert math.isfinite(value) and 0 < value < 200
    assert 0 < mgf_delta(big, 20.0) < 1
    assert math.isfinite(mixed_optimal_epsilon(10_000, 0, 0.01, 1e-9))
    assert math.isfinite(mixed_optimal_epsilon(9_999, 1, 0.01, 1e-9))
    assert 0 < mixed_optimal_delta(9_999, 1, 0.01, 5.0) < 1
    accountant = Accountant(adaptive=False).compose(Laplace(100.0), 5_000).compose(BoundedRange(0.01), 5_000)
    assert not MixedNonadaptive().applies(accountant.composition)  # above the work limit
    assert thm3_cost(5_000, 5_000) > THM3_MAX_TERMS
    assert math.isfinite(accountant.epsilon(1e-9))


# ---------------------------------------------------------------- applicability and errors

def test_applicability_follows_the_theorems():
    pure_br = Composition.of(PureDP(0.1), Laplace(5.0), BoundedRange(0.1), BoundedRange(0.1))
    one_br = Composition.of(PureDP(0.1), PureDP(0.1), BoundedRange(0.1))
    with_gauss = pure_br.plus(Gaussian(3.0))
    with_zcdp = pure_br.plus(ZCDP(0.01, 1e-9))
    with_approx = pure_br.plus(ApproxDP(0.1, 1e-7))
    assert MixedNonadaptive.nonadaptive_only and not MixedSetwise.nonadaptive_only and not MixedMGF.nonadaptive_only
    assert MixedNonadaptive().applies(pure_br) and not MixedNonadaptive().applies(with_gauss)
    assert SingleBRAdaptive().applies(one_br) and not SingleBRAdaptive().applies(pure_br)
    assert MixedSetwise().applies(with_zcdp) and not MixedMGF().applies(with_zcdp)
    assert MixedMGF().applies(with_gauss) and MixedMGF().applies(pure_br.plus(ZCDP(0.01)))
    assert not MixedSetwise().applies(with_approx) and not MixedMGF().applies(with_approx)
    # Approximate-zCDP deltas add (Lemma 3.4): the set-wise epsilon needs delta above their sum.
    assert MixedSetwise().epsilon(with_zcdp, 1e-9) == math.inf
    assert MixedSetwise().delta(with_zcdp, 50.0) >= 1e-9


def test_accountant_uses_the_non_adaptive_theorem_only_when_told():
    events = (Laplace(10.0), Laplace(10.0), BoundedRange(0.1), BoundedRange(0.1), BoundedRange(0.1))
    adaptive = Accountant().compose(*events[:1]).compose(events[1]).compose(events[2], 3)
    fixed = Accountant(adaptive=False).compose(events[0], 2).compose(events[2], 3)
    assert MixedNonadaptive.name not in {c.name for c in adaptive.explain(1e-6).candidates}
    explanation = fixed.explain(1e-6)
    values = {c.name: c.value for c in explanation.candidates}
    assert values[MixedNonadaptive.name] == pytest.approx(mixed_optimal_epsilon(2, 3, 0.1, 1e-6))
    assert explanation.value <= values[MixedNonadaptive.name]


def test_bad_inputs_are_rejected_with_one_line_messages():
    with pytest.raises(ValueError, match=r"delta must lie in \(0, 1\), got 0"):
        mgf_epsilon(profile(pure=[(0.1, 1)]), 0)
    with pytest.raises(ValueError, match="num_br must be an integer >= 0, got -1"):
        mixed_optimal_delta(1, -1, 0.1, 0.5)
    with pytest.raises(ValueError, match="epsilon must be a positive finite number, got 0"):
        mixed_optimal_delta(1, 1, 0.0, 0.5)
    with pytest.raises(ValueError, match=r"MixedProfile.pure needs \(epsilon > 0, count >= 0\) pairs"):
        profile(pure=[(-0.1, 2)])
    with pytest.raises(ValueError, match="covers exact zCDP only"):
        mgf_delta(profile(rho=0.1, zcdp_delta=1e-9), 1.0)
    with pytest.raises(ValueError, match="set-wise bounds cover"):
        MixedProfile.from_composition(Composition.of(ApproxDP(0.1, 1e-6)))
