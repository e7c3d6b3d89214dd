"""Kairouz–Oh–Viswanath optimal homogeneous pure-DP composition against exact references."""
import math

import pytest

from dpstream.accounting import Accountant
from dpstream.accounting.bounds.pure_dp import KairouzOhViswanath, kov_delta, kov_epsilon
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import ApproxDP, BoundedRange, Gaussian, Laplace, PureDP
from tests.accounting.dp_oracles import kov_delta_mp, rr_sign_atoms_mp, rr_sign_enumeration_mp, smallest_epsilon_mp


def test_cesar_rogers_macbeth_value():
    # Cesar–Rogers §6.2: 25 counts at 0.1-DP each, delta = 1e-6, "eps'(delta) = 2.08"; exact 2.079056...
    ours = kov_epsilon(25, 0.1, 1e-6)
    exact = smallest_epsilon_mp(lambda t: kov_delta_mp(25, 0.1, t), 1e-6, 3.0)
    assert round(ours, 4) == 2.0791
    assert ours >= exact
    assert ours - exact < 1e-9
    assert kov_delta(25, 0.1, 2.08) == pytest.approx(9.7532e-07, rel=1e-4)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 10])
@pytest.mark.parametrize("eps", [0.05, 0.5, 2.0])
def test_equals_brute_force_enumeration(k, eps):
    atoms = rr_sign_atoms_mp([(eps, 0.0)] * k)
    for t in (-1.0, 0.0, 0.3 * eps, eps, 0.5 * k * eps, k * eps - 1e-3):
        exact = rr_sign_enumeration_mp([(eps, 0.0)] * k, t, atoms)
        assert kov_delta_mp(k, eps, t) == pytest.approx(exact, rel=1e-30, abs=1e-35)
        ours = kov_delta(k, eps, t)
        assert ours >= exact
        assert ours == pytest.approx(float(exact), rel=1e-11, abs=1e-300)


def test_dong_durfee_rogers_dp_optcomp_values():
    # DDR note §8.2 (homogeneous KOV, equal to the 2^k Murtagh–Vadhan sum).
    assert kov_delta(1, 0.5, 0.3) == pytest.approx(0.11283273420654323, rel=1e-11)
    assert kov_delta(4, 0.5, 0.3) == pytest.approx(0.30604776471818906, rel=1e-11)
    assert kov_delta(1, 0.5, 0.3) >= 0.11283273420654323
    assert kov_delta(4, 0.5, 0.3) >= 0.30604776471818906


@pytest.mark.parametrize(
    "eps, k, expected",
    [(1.0, 10, 9.99998), (0.1, 10, 0.99937), (0.1, 1000, 19.34467), (0.01, 1000, 1.36545), (0.01, 10000, 4.88552)],
)
def test_dong_durfee_rogers_figure_one_column(eps, k, expected):
    # DDR note §8.3, "eps-DP OptComp" at delta = 1e-6 (5 decimals); k = 10^4 stays finite and fast.
    assert round(kov_epsilon(k, eps, 1e-6), 5) == expected


@pytest.mark.parametrize("k, eps, delta", [(25, 0.1, 1e-6), (7, 0.5, 1e-5), (100, 1.0, 1e-10), (3, 2.0, 0.2)])
def test_epsilon_never_below_mpmath_and_round_trip(k, eps, delta):
    ours = kov_epsilon(k, eps, delta)
    exact = smallest_epsilon_mp(lambda t: kov_delta_mp(k, eps, t), delta, k * eps)
    assert exact <= ours <= exact + 1e-9 * max(1.0, float(exact))
    assert kov_delta(k, eps, ours) <= delta
    assert kov_delta(k, eps, ours - 1e-8) > delta


def test_large_k_is_finite_and_matches_mpmath():
    k, eps = 10_000, 0.05
    for t in (0.0, 20.0):
        ours = kov_delta(k, eps, t)
        exact = kov_delta_mp(k, eps, t)
        assert math.isfinite(ours)
        assert ours >= exact
        assert ours == pytest.approx(float(exact), rel=1e-9)
    assert math.isfinite(kov_epsilon(k, 1.0, 1e-6))


def test_monotone_in_k_epsilon_and_delta():
    values = [kov_epsilon(k, 0.1, 1e-6) for k in (1, 2, 5, 10, 50, 200)]
    assert values == sorted(values)
    values = [kov_epsilon(20, e, 1e-6) for e in (0.01, 0.05, 0.1, 0.5, 1.0)]
    assert values == sorted(values)
    values = [kov_epsilon(20, 0.2, d) for d in (1e-12, 1e-9, 1e-6, 1e-3, 0.1)]
    assert values == sorted(values, reverse=True)
    deltas = [kov_delta(20, 0.2, t) for t in (-2.0, -0.5, 0.0, 0.5, 1.0, 2.0, 4.0)]
    assert deltas == sorted(deltas, reverse=True)


def test_profile_edges():
    # Above k * eps nothing is left; far below 0 the trivial bound 1 - e^t is reached.
    assert kov_delta(5, 0.3, 1.5) == 0.0
    assert kov_epsilon(5, 0.3, 1e-300) <= 1.5 * (1 + 1e-10)
    assert kov_delta(5, 0.3, -3.0) >= -math.expm1(-3.0)
    assert kov_epsilon(5, 0.3, 0.99) == 0.0


def test_bound_applies_to_equal_pure_events_only():
    bound = KairouzOhViswanath()
    assert bound.applies(Composition.of(PureDP(0.1), Laplace(scale=10.0), BoundedRange(0.1)))
    assert not bound.applies(Composition.of(PureDP(0.1), PureDP(0.2)))
    assert not bound.applies(Composition.of(PureDP(0.1), ApproxDP(0.1, 1e-9)))
    assert not bound.applies(Composition.of(Gaussian(1.0)))
    with pytest.raises(ValueError, match="one epsilon"):
        bound.delta(Composition.of(PureDP(0.1), PureDP(0.2)), 1.0)


def test_bound_answers_same_for_every_event_form():
    bound = KairouzOhViswanath()
    reference = kov_epsilon(12, 0.25, 1e-6)
    for composition in (
        Composition.of(*([PureDP(0.25)] * 12)),
        Composition().plus(PureDP(0.25), 12),
        Composition.of(*([Laplace(scale=4.0)] * 12)),
        Composition.of(*([PureDP(0.25)] * 5), *([BoundedRange(0.25)] * 7)),
    ):
        assert bound.epsilon(composition, 1e-6) == reference


def test_accountant_uses_kov():
    accountant = Accountant(bounds=[KairouzOhViswanath()]).compose(PureDP(0.1), count=25)
    explanation = accountant.explain(1e-6)
    assert explanation.winner == "kairouz_oh_viswanath"
    assert round(explanation.value, 4) == 2.0791


@pytest.mark.parametrize("args, message", [((0, 0.1, 0.0), "integer >= 1"), ((3, -0.1, 0.0), "positive finite")])
def test_invalid_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        kov_delta(*args)
