"""zCDP composition: event mapping, the Canonne–Kamath–Steinke conversion, and never-below checks."""
import math

import numpy as np
import pytest

from dpstream.accounting import Accountant
from dpstream.accounting.bounds.gaussian import gdp_epsilon
from dpstream.accounting.bounds.zcdp import (
    ZCDPComposition,
    composed_zcdp,
    zcdp_delta,
    zcdp_epsilon,
    zcdp_epsilon_classic,
)
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import ZCDP, ApproxDP, BoundedRange, Composed, Gaussian, Laplace, PureDP, SelfComposed
from tests.accounting import renyi_oracles as oracle
from tests.accounting.composition_checks import PUBLISHED_OPTIMA, assert_finite_round_trip

BOUND = ZCDPComposition()


@pytest.mark.parametrize("rho", [1e-6, 1e-3, 0.05, 0.5, 5.0, 200.0])
@pytest.mark.parametrize("delta", [1e-12, 1e-6, 1e-2])
def test_gaussian_sandwich_exact_below_conversion_below_classic(rho, delta):
    exact = gdp_epsilon(math.sqrt(2 * rho), delta)  # exact Gaussian: a lower bound for any valid conversion
    converted = zcdp_epsilon(rho, delta)
    assert exact <= converted <= zcdp_epsilon_classic(rho, delta)


@pytest.mark.parametrize(
    "rho, delta, printed",  # Chourasia note §2.4, CKS column (alpha step 0.01: at or above the true optimum)
    [(0.5, 1e-5, 4.7284), (0.5, 1e-6, 5.2215), (5.0, 1e-5, 19.0473), (5.0, 1e-6, 20.5520), (0.125, 1e-5, 2.1657)],
)
def test_matches_the_printed_conversion_values(rho, delta, printed):
    assert zcdp_epsilon(rho, delta) == pytest.approx(printed, abs=1.5e-4)


@pytest.mark.parametrize("rho, delta", [(1e-4, 1e-6), (0.125, 1e-5), (2.0, 1e-9), (300.0, 1e-6)])
def test_epsilon_matches_mpmath_brute_force_over_alpha(rho, delta):
    best = oracle.minimise_over_log_gap(lambda a: oracle.conversion_epsilon(a * rho, a, delta))
    ours = zcdp_epsilon(rho, delta)
    assert ours >= float(best)  # the inflation only ever adds
    assert ours <= float(best) * (1 + 1e-9)


@pytest.mark.parametrize("rho, epsilon", [(1e-3, 0.1), (0.125, 1.5), (2.0, 12.0), (50.0, 80.0)])
def test_delta_matches_mpmath_brute_force_over_alpha(rho, epsilon):
    best = oracle.minimise_over_log_gap(lambda a: oracle.conversion_delta(a * rho, a, epsilon))
    ours = zcdp_delta(rho, epsilon)
    assert ours >= float(best)
    assert ours <= float(best) * (1 + 1e-8)


@pytest.mark.parametrize("rho", [1e-5, 0.3, 40.0])
@pytest.mark.parametrize("delta", [1e-10, 1e-5])
def test_round_trips(rho, delta):
    eps = zcdp_epsilon(rho, delta)
    assert zcdp_delta(rho, eps) <= delta
    assert zcdp_epsilon(rho, zcdp_delta(rho, eps)) == pytest.approx(eps, rel=1e-7)


def test_event_mapping_and_approximate_deltas_add():
    composition = Composition.of(
        Gaussian(2.0, sensitivity=3.0),
        SelfComposed(PureDP(0.5), 3),
        Laplace(scale=4.0, sensitivity=2.0),
        SelfComposed(BoundedRange(0.8), 2),
        ApproxDP(0.3, 1e-7),
        ZCDP(0.2, 2e-8),
    )
    rho, delta_a = composed_zcdp(composition)
    expected_rho = 9 / 8 + 3 * 0.125 + 0.125 + 2 * 0.08 + 0.045 + 0.2
    assert rho == pytest.approx(expected_rho, rel=1e-14) and rho >= expected_rho
    assert delta_a == pytest.approx(1.2e-7, rel=1e-14) and delta_a >= 1.2e-7
    assert BOUND.epsilon(composition, 1e-6) == zcdp_epsilon(rho, math.nextafter(1e-6 - delta_a, 0.0))
    assert BOUND.delta(composition, 5.0) >= delta_a + zcdp_delta(rho, 5.0)
    assert BOUND.epsilon(composition, 1.2e-7) == math.inf


def test_approximate_dp_with_zero_epsilon_costs_only_delta():
    composition = Composition.of(SelfComposed(ApproxDP(0.0, 1e-8), 10))
    assert BOUND.epsilon(composition, 1e-6) == 0.0
    assert BOUND.delta(composition, 0.0) == pytest.approx(1e-7, rel=1e-12)


def test_same_answer_however_the_plan_is_written():
    event = BoundedRange(0.4)
    forms = [
        Composition().plus(event, 6),
        Composition.of(SelfComposed(event, 6)),
        Composition.of(*([event] * 6)),
        Composition.of(SelfComposed(SelfComposed(event, 2), 3)),
        Composition.of(Composed((event, SelfComposed(event, 2))), SelfComposed(event, 3)),
    ]
    values = {BOUND.epsilon(c, 1e-6) for c in forms}
    assert len(values) == 1


@pytest.mark.parametrize("k, eps", [(25, 0.1), (10, 0.5), (50, 0.2), (100, 0.05)])
def test_pure_dp_never_below_the_exact_optimal_composition(k, eps):
    ours = BOUND.epsilon(Composition.of(SelfComposed(PureDP(eps), k)), 1e-6)
    assert oracle.kov_delta(k, eps, ours) <= 1e-6


@pytest.mark.parametrize("composition, optimum", PUBLISHED_OPTIMA.values(), ids=PUBLISHED_OPTIMA.keys())
def test_never_below_the_published_optima(composition, optimum):
    assert BOUND.epsilon(composition, 1e-6) >= optimum


def test_delta_above_target_at_the_bounded_range_optimum():
    composition, optimum = PUBLISHED_OPTIMA["bounded-range-10x1"]
    assert BOUND.delta(composition, optimum) > 1e-6


def test_ten_thousand_events_stay_finite():
    rng = np.random.default_rng(3)
    composition = Composition.of(
        *(Gaussian(float(s)) for s in rng.uniform(50, 500, size=10_000)),
        SelfComposed(PureDP(1.0), 10_000),
        SelfComposed(BoundedRange(2.0), 10_000),
    )
    assert_finite_round_trip(BOUND, composition, 1e-9)


def test_registered_with_the_accountant():
    accountant = Accountant().compose(Gaussian(4.0), count=20).compose(ApproxDP(0.2, 1e-8), count=5)
    explanation = accountant.explain(1e-6)
    assert "zcdp" in {c.name for c in explanation.candidates}

