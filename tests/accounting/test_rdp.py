"""RDP composition: per-event curves against mpmath, the BR supremum, the conversion, never-below checks."""
import math

import mpmath
import numpy as np
import pytest

from dpstream.accounting.bounds.gaussian import gdp_epsilon
from dpstream.accounting.bounds.rdp import (
    RDPComposition,
    bounded_range_rdp,
    bounded_range_worst_t,
    generalized_rr_rdp,
    laplace_rdp,
    randomized_response_rdp,
    renyi_curve,
)
from dpstream.accounting.bounds.rdp_conversion import COARSE_GAPS
from dpstream.accounting.bounds.zcdp import ZCDPComposition, zcdp_epsilon
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import ZCDP, ApproxDP, BoundedRange, Composed, Gaussian, Laplace, PureDP, SelfComposed
from dpstream.accounting.numerics import expm1_minus_x
from tests.accounting import renyi_oracles as oracle
from tests.accounting.composition_checks import PUBLISHED_OPTIMA, assert_finite_round_trip

BOUND = RDPComposition()
EPSILONS = [1e-7, 1e-3, 0.1, 1.0, 5.0, 40.0]
GAPS = [1e-6, 1e-3, 0.5, 1.0, 3.0, 9.0, 99.0, 1e4, 1e7]


def _close(ours, exact, rel):
    exact = float(exact)
    assert abs(ours - exact) <= rel * abs(exact) + 1e-300, (ours, exact)


@pytest.mark.parametrize("x", [-800.0, -40.0, -0.7, -0.6999, -0.2, -1e-8, 0.0, 3e-10, 1e-4, 0.3, 0.7, 5.0, 700.0])
def test_expm1_minus_x_matches_mpmath(x):
    with mpmath.workdps(50):
        exact = mpmath.expm1(mpmath.mpf(x)) - mpmath.mpf(x)
    _close(float(expm1_minus_x(x)), exact, 4e-16)


@pytest.mark.parametrize("eps", EPSILONS)
def test_laplace_rdp_matches_mpmath(eps):
    ours = laplace_rdp(eps, np.array(GAPS))
    for value, gap in zip(ours, GAPS):
        _close(value, oracle.laplace_rdp(eps, 1 + mpmath.mpf(gap)), 1e-12)


@pytest.mark.parametrize("eps", EPSILONS)
def test_randomized_response_rdp_matches_mpmath(eps):
    ours = randomized_response_rdp(eps, np.array(GAPS))
    for value, gap in zip(ours, GAPS):
        _close(value, oracle.randomized_response_rdp(eps, 1 + mpmath.mpf(gap)), 1e-12)


@pytest.mark.parametrize(
    "curve, eps, values",  # Chourasia note §4B (mpmath), orders 1.5, 2, 4, 10
    [
        (laplace_rdp, 1.0, [0.512883511294509, 0.619123629998593, 0.813689296592622, 0.92868290209668]),
        (laplace_rdp, 0.1, [0.00724748538932853, 0.00964420784034467, 0.0189912149633842, 0.0427151824656869]),
        (randomized_response_rdp, 1.0, [0.627332647049499, 0.735325664055519, 0.895883259645184, 0.965193146453842]),
        (
            randomized_response_rdp,
            0.1,
            [0.00748441861604189, 0.00995858439495622, 0.0195964629372957, 0.0438877886899322],
        ),
    ],
)
def test_printed_rdp_values(curve, eps, values):
    np.testing.assert_allclose(curve(eps, np.array([0.5, 1.0, 3.0, 9.0])), values, rtol=1e-13)


@pytest.mark.parametrize("eps", [0.05, 0.5, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("gap", [0.01, 0.5, 1.0, 9.0, 99.0])
def test_bounded_range_supremum_against_a_dense_grid(eps, gap):
    t = np.linspace(0.0, eps, 200_001)[1:-1]  # interior: p or q is 0 at the ends, where the divergence is 0
    log_q = np.log(-np.expm1(t - eps)) - np.log(-np.expm1(-eps))
    log_p = np.log(np.exp(-t) - np.exp(-eps)) - np.log(-np.expm1(-eps))
    log_1q, log_1p = np.log1p(-np.exp(log_q)), np.log1p(-np.exp(log_p))
    alpha = 1 + gap
    forward = np.logaddexp(alpha * log_q + (1 - alpha) * log_p, alpha * log_1q + (1 - alpha) * log_1p) / gap
    backward = np.logaddexp(alpha * log_p + (1 - alpha) * log_q, alpha * log_1p + (1 - alpha) * log_1q) / gap
    grid_max = max(forward.max(), backward.max())
    ours = float(bounded_range_rdp(eps, gap))
    # the float grid formula itself carries about 1e-11 relative rounding (mpmath checks precision below)
    assert ours >= grid_max * (1 - 1e-10)
    assert ours <= grid_max * (1 + 1e-8)
    # the closed-form maximiser is where the grid peaks
    assert abs(float(bounded_range_worst_t(eps, gap)) - t[np.argmax(forward)]) <= 2 * eps / 200_000


@pytest.mark.parametrize(
    "eps, gap", [(1e-9, 1e-6), (1e-3, 0.5), (0.1, 0.5), (1.0, 1.0), (1.0, 19.0), (4.0, 2.0), (30.0, 0.01), (2e-5, 1e4)]
)
def test_bounded_range_supremum_matches_mpmath_both_orders(eps, gap):
    forward = oracle.bounded_range_rdp(eps, 1 + mpmath.mpf(gap))
    backward = oracle.bounded_range_rdp(eps, 1 + mpmath.mpf(gap), reverse=True)
    assert abs(forward - backward) <= 1e-40 + mpmath.mpf(10) ** -30 * forward  # reversed pair is RR_{eps, eps - t}
    _close(float(bounded_range_rdp(eps, gap)), forward, 1e-13)


@pytest.mark.parametrize("eps", EPSILONS)
def test_curve_orderings(eps):
    gaps = COARSE_GAPS
    laplace, rr, br = laplace_rdp(eps, gaps), randomized_response_rdp(eps, gaps), bounded_range_rdp(eps, gaps)
    alpha = 1 + gaps
    assert np.all(laplace <= rr * (1 + 1e-12))  # Laplace is eps-DP, RR_eps is the worst eps-DP pair
    assert np.all(rr <= alpha * eps**2 / 2 * (1 + 1e-12))  # Bun–Steinke Prop 1.4
    assert np.all(br <= alpha * eps**2 / 8 * (1 + 1e-15))  # Cesar–Rogers BR -> zCDP
    assert np.all(br <= rr * (1 + 1e-12))  # eps-BR implies eps-DP
    assert np.all(br >= randomized_response_rdp(eps / 2, gaps) * (1 - 1e-11))  # RR_{eps, eps/2} is eps/2-RR
    assert np.all(rr <= eps * (1 + 1e-12)) and np.all(laplace <= eps * (1 + 1e-12))


@pytest.mark.parametrize("curve", [laplace_rdp, randomized_response_rdp, bounded_range_rdp])
@pytest.mark.parametrize("eps", EPSILONS)
def test_rdp_is_non_decreasing_in_alpha(curve, eps):
    gaps = np.geomspace(1e-6, 1e8, 3000)
    values = curve(eps, gaps)
    assert np.all(np.isfinite(values)) and np.all(values >= 0)
    assert np.all(np.diff(values) >= -1e-12 * values[1:])


def test_generalized_rr_is_zero_at_both_ends():
    assert float(generalized_rr_rdp(1.0, 0.0, 2.0)) == 0.0
    assert float(generalized_rr_rdp(1.0, 1.0, 2.0)) == pytest.approx(0.0, abs=1e-15)


def _mixed_composition():
    return Composition.of(
        SelfComposed(Gaussian(3.0), 4),
        SelfComposed(Laplace(scale=5.0), 3),
        SelfComposed(PureDP(0.3), 2),
        SelfComposed(BoundedRange(0.7), 5),
        ZCDP(0.01),
    )


def _curve_mp(alpha):
    """The composed curve of `_mixed_composition` at 60 digits."""
    return (
        4 * alpha / 18
        + 3 * oracle.laplace_rdp(0.2, alpha)
        + 2 * oracle.randomized_response_rdp(0.3, alpha)
        + 5 * oracle.bounded_range_rdp(0.7, alpha)
        + alpha * mpmath.mpf("0.01")
    )


def test_composed_curve_matches_mpmath():
    curve = renyi_curve(_mixed_composition())
    for gap in [1e-4, 0.7, 12.0]:
        _close(float(curve(np.array([gap]))[0]), _curve_mp(1 + mpmath.mpf(gap)), 1e-12)


def _float_curve_at(curve):
    """alpha (mpf) -> the library's curve value at alpha, as mpf (the curve is checked against mpmath above)."""
    return lambda alpha: mpmath.mpf(float(curve(np.array([float(alpha - 1)]))[0]))


def test_epsilon_conversion_matches_brute_force_over_alpha():
    delta = 1e-6
    value = _float_curve_at(renyi_curve(_mixed_composition()))
    best = oracle.minimise_over_log_gap(lambda a: oracle.conversion_epsilon(value(a), a, delta), points=701)
    ours = BOUND.epsilon(_mixed_composition(), delta)
    assert ours >= float(best) * (1 - 1e-13)
    assert ours <= float(best) * (1 + 1e-9)


def test_delta_conversion_matches_brute_force_over_alpha():
    epsilon = 2.0
    value = _float_curve_at(renyi_curve(_mixed_composition()))
    best = oracle.minimise_over_log_gap(lambda a: oracle.conversion_delta(value(a), a, epsilon), points=701)
    ours = BOUND.delta(_mixed_composition(), epsilon)
    assert ours >= float(best) * (1 - 1e-12)
    assert ours <= float(best) * (1 + 1e-8)


def test_conversion_of_a_closed_form_curve_matches_mpmath():
    composition = Composition.of(SelfComposed(Laplace(scale=2.0), 7), SelfComposed(PureDP(0.4), 3), Gaussian(1.5))

    def exact(alpha):
        return (
            7 * oracle.laplace_rdp(0.5, alpha) + 3 * oracle.randomized_response_rdp(0.4, alpha) + alpha / (2 * 1.5**2)
        )

    best = oracle.minimise_over_log_gap(lambda a: oracle.conversion_epsilon(exact(a), a, 1e-8), points=701)
    ours = BOUND.epsilon(composition, 1e-8)
    assert float(best) <= ours <= float(best) * (1 + 1e-9)


ROUND_TRIP_PLANS = {
    "mixed": _mixed_composition(),
    "pure": Composition.of(SelfComposed(PureDP(0.3), 6)),  # optimum at the largest order: delta is hypersensitive there
    "laplace": Composition.of(SelfComposed(Laplace(scale=4.0), 6)),
    "bounded_range": Composition.of(SelfComposed(BoundedRange(0.5), 6)),
}


@pytest.mark.parametrize("plan", sorted(ROUND_TRIP_PLANS))
@pytest.mark.parametrize("delta", [1e-12, 1e-9, 1e-6, 1e-2])
def test_round_trips(plan, delta):
    composition = ROUND_TRIP_PLANS[plan]
    eps = BOUND.epsilon(composition, delta)
    assert BOUND.delta(composition, eps) <= delta  # the epsilon allowance covers the delta allowance
    assert BOUND.epsilon(composition, BOUND.delta(composition, eps)) == pytest.approx(eps, rel=1e-8)


@pytest.mark.parametrize("delta", [1e-10, 1e-5])
def test_gaussian_only_equals_zcdp_and_is_above_exact(delta):
    composition = Composition.of(Gaussian(2.0), SelfComposed(Gaussian(7.0, sensitivity=2.0), 3))
    rho = 1 / 8 + 3 * 4 / 98
    assert BOUND.epsilon(composition, delta) == pytest.approx(zcdp_epsilon(rho, delta), rel=1e-13)
    assert BOUND.epsilon(composition, delta) >= gdp_epsilon(math.sqrt(2 * rho), delta)


def test_rdp_never_worse_than_zcdp_without_approximate_events():
    composition = _mixed_composition()
    for delta in [1e-9, 1e-4]:
        assert BOUND.epsilon(composition, delta) <= ZCDPComposition().epsilon(composition, delta)


def test_applies_to_approximate_zcdp_but_not_approx_dp():
    assert BOUND.applies(_mixed_composition())
    assert BOUND.applies(Composition.of(ZCDP(0.3, 0.0)))
    assert BOUND.applies(Composition.of(Gaussian(1.0), ZCDP(0.3, 1e-9)))
    assert not BOUND.applies(Composition.of(PureDP(1.0), ApproxDP(0.5, 1e-8)))


def test_same_answer_however_the_plan_is_written():
    event = Laplace(scale=2.0)
    forms = [
        Composition().plus(event, 6),
        Composition.of(SelfComposed(event, 6)),
        Composition.of(*([event] * 6)),
        Composition.of(SelfComposed(SelfComposed(event, 2), 3)),
        Composition.of(Composed((event, SelfComposed(event, 2))), SelfComposed(event, 3)),
    ]
    assert len({BOUND.epsilon(c, 1e-6) for c in forms}) == 1


@pytest.mark.parametrize("k, eps", [(25, 0.1), (10, 0.5), (50, 0.2), (100, 0.05), (5, 2.0)])
def test_pure_dp_never_below_the_exact_optimal_composition(k, eps):
    ours = BOUND.epsilon(Composition.of(SelfComposed(PureDP(eps), k)), 1e-6)
    assert oracle.kov_delta(k, eps, ours) <= 1e-6


@pytest.mark.parametrize(
    "eps, k, optimum",  # Dong–Durfee–Rogers Thm 3 non-adaptive optima at delta 1e-6 (note §8.3, 5 decimals)
    [(1.0, 10, 7.71332), (1.0, 25, 13.86829), (1.0, 50, 21.77443), (0.1, 10, 0.62864), (0.1, 100, 2.24603),
     (0.01, 1000, 0.64795)],
)
def test_bounded_range_never_below_the_nonadaptive_optimum(eps, k, optimum):
    assert BOUND.epsilon(Composition.of(SelfComposed(BoundedRange(eps), k)), 1e-6) >= optimum - 5e-6


@pytest.mark.parametrize("composition, optimum", PUBLISHED_OPTIMA.values(), ids=PUBLISHED_OPTIMA.keys())
def test_never_below_the_published_optima(composition, optimum):
    assert BOUND.epsilon(composition, 1e-6) >= optimum


def test_ten_thousand_heterogeneous_events_stay_finite():
    rng = np.random.default_rng(5)
    composition = Composition.of(
        *(Laplace(scale=float(s)) for s in rng.uniform(1, 100, size=10_000)),
        SelfComposed(BoundedRange(3.0), 10_000),
        SelfComposed(PureDP(0.01), 10_000),
    )
    assert_finite_round_trip(BOUND, composition, 1e-9)



def test_approximate_zcdp_adds_its_delta_and_never_beats_the_exact_part():
    """ZCDP(rho, delta) composes as its curve plus delta: equal to the zero-delta answer shifted by delta."""
    from dpstream.accounting.bounds.rdp import RDPComposition
    from dpstream.accounting.composition import Composition
    from dpstream.accounting.events import ZCDP, Laplace

    bound = RDPComposition()
    exact_part = Composition.of(ZCDP(0.05), Laplace(10.0))
    with_delta = Composition.of(ZCDP(0.05, 2e-7), Laplace(10.0))
    assert bound.applies(with_delta)
    assert bound.delta(with_delta, 1.0) == pytest.approx(bound.delta(exact_part, 1.0) + 2e-7, rel=1e-12)
    assert bound.delta(with_delta, 1.0) >= bound.delta(exact_part, 1.0) + 2e-7
    assert bound.epsilon(with_delta, 1e-6) == pytest.approx(bound.epsilon(exact_part, 1e-6 - 2e-7), rel=1e-9)
    assert bound.epsilon(with_delta, 2e-7) == math.inf
