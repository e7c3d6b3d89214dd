"""The pessimistic PLD bound against exact or brute-force privacy curves; it must never fall below them."""
import itertools
import math

import mpmath
import numpy as np
import pytest
from scipy import integrate
from scipy.stats import binom

from dpstream.accounting import Accountant
from dpstream.accounting.bounds.gaussian import gdp_delta, gdp_epsilon, gdp_log_delta
from dpstream.accounting.bounds.pld import (
    ComposedCurve,
    Lattice,
    PLDBound,
    bounded_range_tradeoff,
    convolve,
    discretise,
    gdp_delta_array,
    laplace_law,
)
from dpstream.accounting.bounds.registry import default_bounds
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import ZCDP, ApproxDP, BoundedRange, Composed, Gaussian, Laplace, PureDP, SelfComposed


def curve(*events, step=None):
    return ComposedCurve(Composition.of(*events), step)


def smallest_epsilon(delta_of, target, upper):
    """Reference inversion by bisection on an exact curve (upper end of the bracket)."""
    lo, hi = 0.0, upper
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if delta_of(mid) <= target else (mid, hi)
    return hi


# --- exact reference curves -------------------------------------------------------------------------


def laplace_delta(eps0, e):
    """Exact profile of one Laplace mechanism with eps0 = sensitivity / scale, for every real e."""
    if e >= eps0:
        return 0.0
    if e >= -eps0:
        return -math.expm1(0.5 * (e - eps0))
    return -math.expm1(e)


def laplace_expectation(eps0, inner, inner_kinks, e):
    """E_Z[inner(e - Z)] over the Laplace PLD (atoms and density), by adaptive quadrature split at inner's kinks."""
    atoms = 0.5 * inner(e - eps0) + 0.5 * math.exp(-eps0) * inner(e + eps0)
    density = lambda z: 0.25 * math.exp(0.5 * (z - eps0)) * inner(e - z)  # noqa: E731
    points = sorted(e - k for k in inner_kinks if -eps0 < e - k < eps0)
    part, _ = integrate.quad(density, -eps0, eps0, points=points or None, limit=200, epsabs=1e-15, epsrel=1e-12)
    return atoms + part


def composed_laplace_delta(eps_list, e):
    """Exact profile of Laplace mechanisms composed, by nested quadrature (kinks at the signed sums of eps)."""
    if len(eps_list) == 1:
        return laplace_delta(eps_list[0], e)
    rest = eps_list[1:]
    kinks = {sum(s * v for s, v in zip(signs, rest)) for signs in itertools.product((1, -1), repeat=len(rest))}
    return laplace_expectation(eps_list[0], lambda x: composed_laplace_delta(rest, x), kinks, e)


def kov_delta(k, eps, e):
    """Homogeneous optimal pure-DP composition (Kairouz–Oh–Viswanath): binomial sum over the RR PLD."""
    i = np.arange(k + 1)
    losses = (k - 2 * i) * eps
    weights = binom.pmf(i, k, 1 / (1 + math.exp(eps)))
    return float(np.sum(weights * np.where(losses > e, -np.expm1(np.minimum(e - losses, 0.0)), 0.0)))


def rr_enumeration_delta(pairs, e):
    """Brute force over the 2^k outcomes of RR(eps_i, delta_i) (Chourasia et al. Thm 4.5 / 4.6)."""
    keep = math.prod(1 - d for _, d in pairs)
    total = 0.0
    for signs in itertools.product((1, -1), repeat=len(pairs)):
        prob = math.prod(1 / (1 + math.exp(-s * eps)) for s, (eps, _) in zip(signs, pairs))
        loss = sum(s * eps for s, (eps, _) in zip(signs, pairs))
        total += prob * max(0.0, -math.expm1(e - loss))
    return 1 - keep + keep * total


def br_single_delta(eps, e):
    """One eps-BR mechanism: Dong–Durfee–Rogers' optimum (1 - e^{(e-eps)/2})^2 / (1 - e^{-eps}) on [-eps, eps]."""
    if e >= eps:
        return 0.0
    if e <= -eps:
        return -math.expm1(e)
    return math.expm1(0.5 * (e - eps)) ** 2 / -math.expm1(-eps)


# --- Gaussian only: the analytic part is exact -----------------------------------------------------


@pytest.mark.parametrize("events", [(Gaussian(1.0),), (Gaussian(3.0, 2.0), SelfComposed(Gaussian(10.0), 40))])
def test_gaussian_only_equals_closed_form(events):
    mu = math.sqrt(sum(c * e.mu**2 for e, c in Composition.of(*events)))
    c = curve(*events)
    for e in (-2.0, -0.3, 0.0, 0.5, 2.0, 6.0):
        assert c.delta(e) == pytest.approx(gdp_delta(mu, e), rel=1e-9, abs=1e-300)
    for target in (1e-3, 1e-6, 1e-10):
        assert c.epsilon(target) == pytest.approx(gdp_epsilon(mu, target), rel=1e-9)
        assert gdp_delta(mu, c.epsilon(target)) <= target * (1 + 1e-12)


def test_gdp_delta_array_matches_scalar_profile():
    x = np.linspace(-30, 40, 141)
    for mu in (0.0, 0.05, 1.0, 7.0):
        expected = [math.exp(gdp_log_delta(mu, v)) for v in x]
        np.testing.assert_allclose(gdp_delta_array(mu, x), expected, rtol=1e-12, atol=1e-300)


# --- pure and approximate DP ----------------------------------------------------------------------


def test_homogeneous_pure_dp_matches_kairouz_oh_viswanath():
    mpmath.mp.dps = 40
    k, eps = 25, mpmath.mpf("0.1")
    p = mpmath.exp(eps) / (1 + mpmath.exp(eps))

    def exact(e):
        e = mpmath.mpf(e)
        return sum(
            mpmath.binomial(k, i) * p ** (k - i) * (1 - p) ** i * (1 - mpmath.exp(e - (k - 2 * i) * eps))
            for i in range(k + 1)
            if (k - 2 * i) * eps > e
        )

    truth = smallest_epsilon(lambda e: float(exact(e)), 1e-6, 2.5)
    assert truth == pytest.approx(2.0791, abs=1e-4)
    ours = PLDBound().epsilon(Composition.of(SelfComposed(PureDP(0.1), 25)), 1e-6)
    assert truth <= ours <= truth * (1 + 1e-3)
    c = curve(SelfComposed(PureDP(0.1), 25))
    for e in (0.0, 0.5, 1.0, 2.0, 2.4):
        assert c.delta(e) >= float(exact(e))


def test_many_pure_dp_events_with_truncation_stay_above_kov():
    k, eps = 300, 0.5
    c = curve(SelfComposed(PureDP(eps), k))
    assert c.bins < 2 * k * eps / c.step  # the truncation window is active
    for e in (10.0, 30.0, 50.0):
        assert c.delta(e) >= kov_delta(k, eps, e)
    truth = smallest_epsilon(lambda e: kov_delta(k, eps, e), 1e-6, k * eps)
    assert truth <= c.epsilon(1e-6) <= truth * (1 + 1e-3)


def test_heterogeneous_pure_dp_against_enumeration():
    pairs = [(0.3, 0.0), (0.7, 0.0), (0.1, 0.0), (1.3, 0.0)]
    c = curve(*(PureDP(eps) for eps, _ in pairs))
    for e in (-1.0, 0.0, 0.4, 1.0, 2.0, 2.39):
        exact = rr_enumeration_delta(pairs, e)
        assert exact <= c.delta(e) <= exact + 1e-4


def test_approx_dp_against_enumeration_and_chourasia_table():
    pairs = [(1.0, 1e-3), (0.5, 1e-4), (0.2, 0.0)]
    c = curve(ApproxDP(1.0, 1e-3), ApproxDP(0.5, 1e-4), PureDP(0.2))
    table = {0.0: 0.46270877459873947, 0.5: 0.31591119397563416, 1.0: 0.17995285224366803, 1.5: 0.046404357698941417}
    for e, value in table.items():
        assert rr_enumeration_delta(pairs, e) == pytest.approx(value, rel=1e-12)
        assert value <= c.delta(e) <= value + 1e-4
    floor = 1 - 0.999 * 0.9999
    assert c.delta(1.7) >= floor and c.delta(10.0) == pytest.approx(floor, rel=1e-9)
    assert c.epsilon(floor * 0.999) == math.inf
    truth = smallest_epsilon(lambda e: rr_enumeration_delta(pairs, e), 2e-3, 2.0)
    assert truth <= c.epsilon(2e-3) <= truth * (1 + 1e-3)


def test_approx_dp_with_zero_epsilon_is_its_delta():
    c = curve(ApproxDP(0.0, 1e-3))
    assert c.delta(0.0) == pytest.approx(1e-3, rel=1e-9) and c.delta(0.0) >= 1e-3
    assert c.delta(-1.0) >= 1 - math.exp(-1.0)


# --- Laplace ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale, sensitivity", [(1.0, 1.0), (2.0, 3.0), (10.0, 1.0)])
def test_single_laplace_matches_closed_form(scale, sensitivity):
    eps0 = sensitivity / scale
    c = curve(Laplace(scale, sensitivity))
    for e in (-2 * eps0, -eps0, -0.4 * eps0, 0.0, 0.3 * eps0, 0.99 * eps0, 1.2 * eps0):
        exact = laplace_delta(eps0, e)
        assert exact <= c.delta(e) <= exact + 1e-5
    for target in (1e-2, 1e-6):
        exact_eps = eps0 + 2 * math.log1p(-target)  # inverse of 1 - e^{(e - eps0)/2}
        assert exact_eps <= c.epsilon(target) <= exact_eps * (1 + 1e-3)


@pytest.mark.parametrize("eps_list", [(0.5, 0.5), (1.0, 0.5), (0.5, 0.5, 0.5), (1.0, 0.3, 0.7)])
def test_composed_laplace_against_numerical_integration(eps_list):
    c = curve(*(Laplace(1.0, eps) for eps in eps_list))
    top = sum(eps_list)
    for e in (-0.5, 0.0, 0.3 * top, 0.7 * top, 0.95 * top):
        value = composed_laplace_delta(eps_list, e)
        assert value <= c.delta(e) <= value * (1 + 1e-3) + 1e-7
    truth = smallest_epsilon(lambda e: composed_laplace_delta(eps_list, e), 1e-3, top)
    assert truth <= c.epsilon(1e-3) <= truth * (1 + 1e-3)


# --- mixed -----------------------------------------------------------------------------------------


def test_gaussian_with_randomized_response_matches_chourasia_table():
    c = curve(Gaussian(1.0), PureDP(1.0))
    table = {-1: 0.737175074871807, 0: 0.530394250478223, 0.5: 0.408615539564347, 1: 0.285567781957923,
             2: 0.093211603715693, 3: 0.0153090766316191}
    for e, value in table.items():
        assert value <= c.delta(e) <= value * (1 + 1e-5)


def test_mixed_laplace_and_gaussian_against_high_precision_integration():
    mpmath.mp.dps = 30
    eps0, mu = 1.0, 1.0

    def gauss(x):
        return mpmath.ncdf(-x / mu + mpmath.mpf(mu) / 2) - mpmath.exp(x) * mpmath.ncdf(-x / mu - mpmath.mpf(mu) / 2)

    def exact(e):
        e = mpmath.mpf(e)
        atoms = gauss(e - eps0) / 2 + mpmath.exp(-eps0) * gauss(e + eps0) / 2
        return atoms + mpmath.quad(lambda z: mpmath.exp((z - eps0) / 2) / 4 * gauss(e - z), [-eps0, 0, eps0])

    c = curve(Laplace(1.0), Gaussian(1.0))
    for e in (-1.0, 0.0, 1.0, 2.5, 5.0):
        value = float(exact(e))
        assert value <= c.delta(e) <= value * (1 + 1e-4)
    ours = c.epsilon(1e-6)
    assert float(exact(ours)) <= 1e-6
    assert float(exact(ours * (1 - 1e-3))) > 1e-6  # within 1e-3 relative of the exact epsilon


def test_accountant_uses_the_pld_bound_for_mixed_plans():
    accountant = Accountant()
    accountant.compose(Laplace(2.0), count=5).compose(Gaussian(4.0), count=5).compose(BoundedRange(0.5), count=5)
    explanation = accountant.explain(1e-6)
    assert explanation.winner == PLDBound.name
    assert any(isinstance(b, PLDBound) for b in default_bounds())


def test_same_answer_however_the_plan_is_written():
    events = (Laplace(2.0), BoundedRange(0.4), Gaussian(3.0), PureDP(0.2))
    flat = Composition.of(*(e for e in events for _ in range(3)))
    nested = Composition.of(SelfComposed(Composed(events), 3))
    assert flat == nested
    assert PLDBound().epsilon(flat, 1e-6) == PLDBound().epsilon(nested, 1e-6)


# --- bounded range ---------------------------------------------------------------------------------


def test_bounded_range_tradeoff_is_the_lower_envelope_and_symmetric():
    eps = 1.3
    x = np.linspace(0, 1, 401)
    t = np.linspace(0, eps, 2001)[:, None]
    envelope = np.maximum(1 - np.exp(t) * x, np.exp(t - eps) * (1 - x)).min(axis=0)
    f = bounded_range_tradeoff(eps, x)
    assert np.all(f <= envelope + 1e-15) and np.max(envelope - f) < 1e-3
    crossing = -np.log(x + np.exp(-eps) * (1 - x))  # where the two branches of l_t meet, in [0, eps]
    assert np.all((crossing >= 0) & (crossing <= eps + 1e-15))
    np.testing.assert_allclose(1 - np.exp(crossing) * x, f, atol=1e-15)
    np.testing.assert_allclose(bounded_range_tradeoff(eps, f), x, atol=1e-13)  # f(f(x)) = x
    assert np.all(np.diff(f, 2) >= -1e-15) and np.all(np.diff(f) < 0)
    assert np.all(f <= 1 - x + 1e-15)


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_one_bounded_range_matches_dong_durfee_rogers_optimum(eps):
    c = curve(BoundedRange(eps))
    for e in (-eps, -0.5 * eps, 0.0, 0.3 * eps, 0.9 * eps):
        exact = br_single_delta(eps, e)
        # reversal identity: the pair is symmetric, delta_{Q|P}(e) = 1 - e^e + e^e delta_{P|Q}(-e) = delta_{P|Q}(e)
        assert -math.expm1(e) + math.exp(e) * br_single_delta(eps, -e) == pytest.approx(exact, rel=1e-12, abs=1e-15)
        assert exact <= c.delta(e) <= exact + 1e-5
    assert br_single_delta(eps, 0.0) == pytest.approx(math.tanh(eps / 4), rel=1e-12)


ADAPTIVE_TWO = {  # Dong–Durfee–Rogers note §8.5, eps = 1, exact adaptive optimum for k = 2
    -0.45: 0.467351810401, -0.25: 0.393257547944, 0.0: 0.303365496483, 0.10: 0.269178138622,
    0.25: 0.220927270177, 0.45: 0.164641353673, 0.60: 0.129782296274, 1.0: 0.057005329028, 1.5: 0.009054832389,
}


def test_two_bounded_range_dominate_the_exact_adaptive_optimum():
    c = curve(SelfComposed(BoundedRange(1.0), 2))
    for e, adaptive in ADAPTIVE_TWO.items():
        # the exact f_BR (x) f_BR curve is at least the rounded-up curve shifted by k * step, minus the error term
        assert c.delta(e + 2 * c.step) - c.floor >= adaptive
    assert c.delta(0.0) >= 0.303365496483


@pytest.mark.parametrize("k, e, lower", [(3, 0.5, 0.2115658444), (4, 0.0, 0.4046680832), (4, 1.5, 0.0681432921)])
def test_more_bounded_range_dominate_adaptive_grid_lower_bounds(k, e, lower):
    c = curve(SelfComposed(BoundedRange(1.0), k))
    assert c.delta(e + k * c.step) - c.floor >= lower


def test_ten_bounded_range_between_nonadaptive_optimum_and_mgf():
    ours = PLDBound().epsilon(Composition.of(SelfComposed(BoundedRange(1.0), 10)), 1e-6)
    assert 7.71332 <= ours < 8.29406  # DDR Thm 3 (non-adaptive) <= ours < DDR Thm 5 (MGF)
    assert ours == pytest.approx(8.1159, abs=1e-3)


# --- properties ------------------------------------------------------------------------------------


def test_monotone_in_epsilon_delta_and_plan():
    c = curve(SelfComposed(Laplace(2.0), 4), SelfComposed(BoundedRange(0.5), 3), Gaussian(2.0), ApproxDP(0.3, 1e-7))
    deltas = [c.delta(e) for e in np.linspace(-3, 8, 56)]
    assert all(a >= b for a, b in zip(deltas, deltas[1:]))
    eps = [c.epsilon(d) for d in (1e-2, 1e-4, 1e-6, 1e-8)]
    assert all(a <= b for a, b in zip(eps, eps[1:]))
    bigger = curve(SelfComposed(Laplace(2.0), 5), SelfComposed(BoundedRange(0.5), 3), Gaussian(2.0), ApproxDP(0.3, 1e-7))
    assert bigger.epsilon(1e-6) > eps[2]


def test_grid_refinement_never_drops_below_exact():
    eps_list = (1.0, 0.3, 0.7)
    points = (0.0, 0.8, 1.6)
    truth = [composed_laplace_delta(eps_list, e) for e in points]
    gaps = []
    for step in (3e-2, 1e-2, 1e-3, 1e-4):
        c = curve(*(Laplace(1.0, eps) for eps in eps_list), step=step)
        values = [c.delta(e) for e in points]
        assert all(v >= t for v, t in zip(values, truth))
        gaps.append(max(v - t for v, t in zip(values, truth)))
    assert gaps == sorted(gaps, reverse=True) and gaps[-1] < 1e-4


def test_fft_error_bound_covers_the_actual_error():
    rng = np.random.default_rng(11)
    for size_a, size_b in ((3000, 3000), (20000, 500), (4096, 12000)):
        a = rng.exponential(size=size_a) ** 4
        b = rng.exponential(size=size_b) ** 4
        a, b = a / a.sum(), b / b.sum()
        exact = np.convolve(a, b)  # direct sums of non-negative products: relative accuracy
        out = convolve(Lattice(0.1, 0, a), Lattice(0.1, 0, b))
        assert np.abs(out.masses - exact).sum() <= out.error
    leaf = discretise(laplace_law(0.7), 1e-4)  # heavy atoms: the largest ||a||_2 the bound sees
    square = convolve(leaf, leaf)
    assert np.abs(square.masses - np.convolve(leaf.masses, leaf.masses)).sum() <= square.error
    assert square.error < 1e-10


def test_ten_thousand_events_stay_finite_and_above_the_optima():
    # Dong–Durfee–Rogers note §8.3 (eps = 0.01, k = 10^4, delta = 1e-6, 5 decimals): eps-DP OptComp 4.88552,
    # BR non-adaptive optimum 2.25401
    pure = PLDBound().epsilon(Composition.of(SelfComposed(PureDP(0.01), 10_000)), 1e-6)
    assert 4.88552 - 5e-6 <= pure <= 4.88552 * (1 + 1e-3)
    br = PLDBound().epsilon(Composition.of(SelfComposed(BoundedRange(0.01), 10_000)), 1e-6)
    assert math.isfinite(br) and br >= 2.25401 - 5e-6


def test_only_supported_events_and_valid_step():
    assert not PLDBound().applies(Composition.of(ZCDP(0.1), Laplace(1.0)))
    assert PLDBound().applies(Composition.of(ApproxDP(0.1, 1e-6), BoundedRange(1.0), Gaussian(1.0)))
    with pytest.raises(ValueError, match="PLD loss step must be a positive finite number, got -1"):
        PLDBound(step=-1)


def test_large_plan_is_finite():
    plan = Composition.of(SelfComposed(Laplace(2.0), 24), SelfComposed(Gaussian(5.0), 24), SelfComposed(BoundedRange(0.5), 24))
    eps = PLDBound().epsilon(plan, 1e-6)
    assert math.isfinite(eps)


@pytest.mark.parametrize("epsilon", [1e-6, 0.5, 30.0, 709.0, 1000.0])
def test_loss_laws_stay_finite_up_to_the_largest_job_epsilon(epsilon):
    """Job files allow epsilon up to 1000, where e^epsilon overflows: the randomized-response and bounded-range
    laws are computed in log space and their masses still add up to 1 (reference: mpmath at 50 digits)."""
    from dpstream.accounting.bounds.pld import bounded_range_law, randomized_response_law

    rr = randomized_response_law(epsilon)
    with mpmath.workdps(50):
        assert rr.atom_lo == pytest.approx(float(1 / (1 + mpmath.exp(epsilon))), rel=1e-12)
    assert rr.atom_lo + rr.atom_hi == pytest.approx(1.0, abs=1e-15)
    br = bounded_range_law(epsilon)
    edges = np.linspace(-epsilon, epsilon, 2001)
    masses = br.increment(edges[:-1], edges[1:])
    assert np.all(np.isfinite(masses)) and masses.sum() == pytest.approx(1.0, rel=1e-9)
