"""GaussianThreshold: the event, its zCDP relaxation, and the PLD bound against exact two-direction curves."""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import integrate

from dpstream.accounting import Accountant
from dpstream.accounting.bounds.gaussian import gdp_delta
from dpstream.accounting.bounds.pld import PLDBound
from dpstream.accounting.composition import Composition
from dpstream.accounting.event_spec import format_event, parse_event
from dpstream.accounting.events import (
    ZCDP,
    BoundedRange,
    Event,
    Gaussian,
    GaussianThreshold,
    InvalidEventError,
    Laplace,
    PureDP,
    SelfComposed,
)
from dpstream.accounting.filters.zcdp import zcdp_cost


def _gdp_delta(mu, x):
    """mu-GDP profile at x, in mpmath."""
    return mpmath.ncdf(-x / mu + mu / 2) - mpmath.exp(x) * mpmath.ncdf(-x / mu - mu / 2)


def exact_delta(mu: float, delta: float, runs: int, epsilon: float) -> float:
    """max over the two orders of the exact hockey-stick of `runs` composed dominating pairs (40 digits)."""
    mu, delta, epsilon = mpmath.mpf(mu), mpmath.mpf(delta), mpmath.mpf(epsilon)
    log_keep = runs * mpmath.log1p(-delta)
    keep, shift, total = mpmath.exp(log_keep), -log_keep, mpmath.sqrt(runs) * mu
    add = -mpmath.expm1(log_keep) + keep * _gdp_delta(total, epsilon + shift)
    remove = _gdp_delta(total, epsilon - shift)
    return float(max(add, remove))


def test_event_checks_and_round_trips():
    event = GaussianThreshold(sigma=4.0, sensitivity=2.0, delta=1e-8)
    assert event.mu == 0.5
    assert Event.from_dict(event.to_dict()) == event
    assert parse_event(format_event(event)) == event
    assert parse_event("gaussian_threshold:sigma=4,sensitivity=2,delta=1e-8") == event
    for bad in ({"sigma": 0.0, "sensitivity": 1.0, "delta": 1e-6}, {"sigma": 1.0, "sensitivity": -1.0, "delta": 1e-6},
                {"sigma": 1.0, "sensitivity": 1.0, "delta": 1.0}, {"sigma": 1.0, "sensitivity": 1.0, "delta": math.nan}):
        with pytest.raises(InvalidEventError, match="GaussianThreshold"):
            GaussianThreshold(**bad)


@pytest.mark.parametrize("sigma, sensitivity", [(3.0, 1.0), (0.7, 2.3), (152.70412693891814, 3.4641016151377544)])
def test_relaxation_is_approximate_zcdp_with_rho_rounded_up(sigma, sensitivity):
    relaxed = GaussianThreshold(sigma, sensitivity, 3e-9).relaxed()
    exact = mpmath.mpf(sensitivity) ** 2 / (2 * mpmath.mpf(sigma) ** 2)
    assert isinstance(relaxed, ZCDP) and relaxed.delta == 3e-9
    assert exact <= relaxed.rho <= exact * (1 + 1e-14)
    assert zcdp_cost(GaussianThreshold(sigma, sensitivity, 3e-9)) == zcdp_cost(relaxed)


@pytest.mark.parametrize("mu, delta, runs", [(0.4, 1e-8, 1), (0.4, 1e-8, 10), (0.05, 1e-9, 365), (1.5, 1e-4, 3)])
def test_pld_curve_covers_both_orders_and_is_tight(mu, delta, runs):
    composition = Composition.of(SelfComposed(GaussianThreshold(1.0 / mu, 1.0, delta), runs))
    bound = PLDBound()
    slack = -math.expm1(runs * math.log1p(-delta))  # one curve for both orders: at most 1 - keep above the larger
    for epsilon in (-0.5, 0.0, 0.3, 1.0, 2.5, 5.0):
        exact = exact_delta(mu, delta, runs, epsilon)
        computed = bound.delta(composition, epsilon)
        assert exact <= computed <= exact * (1 + 1e-9) + slack
    target = 10 * (1.0 - (1.0 - delta) ** runs)
    epsilon = bound.epsilon(composition, target)
    assert exact_delta(mu, delta, runs, epsilon) <= target
    assert bound.delta(composition, epsilon - 1e-6) > target  # the inversion is tight for its own curve


def _laplace_loss_expectation(function, epsilon_laplace: float) -> float:
    """E[function(Z)] for the Laplace pair's privacy loss Z (atoms at +-eps, density between), by quadrature."""
    e = epsilon_laplace
    atoms = 0.5 * function(e) + 0.5 * math.exp(-e) * function(-e)
    inside, _ = integrate.quad(lambda z: 0.25 * math.exp((z - e) / 2) * function(z), -e, e, epsabs=1e-14, epsrel=1e-12)
    return atoms + inside


@pytest.mark.parametrize("epsilon", [0.2, 1.0, 2.0])
def test_pld_with_laplace_covers_the_exact_mixed_curve(epsilon):
    """One GaussianThreshold and one Laplace: both orders by quadrature over the Laplace loss."""
    mu, delta, e_lap = 0.6, 1e-6, 0.7
    shift = -math.log1p(-delta)
    add = delta + (1 - delta) * _laplace_loss_expectation(lambda z: gdp_delta(mu, epsilon + shift - z), e_lap)
    remove = _laplace_loss_expectation(lambda z: gdp_delta(mu, epsilon - shift - z), e_lap)
    composition = Composition.of(GaussianThreshold(1.0 / mu, 1.0, delta), Laplace(1.0 / e_lap))
    computed = PLDBound().delta(composition, epsilon)
    assert max(add, remove) <= computed <= max(add, remove) * (1 + 2e-3)


def test_accountant_uses_pld_and_reports_relaxed_bounds():
    threshold = GaussianThreshold(30.0, 4.0, 1e-9)
    accountant = Accountant().compose(threshold, 365).compose(Laplace(50.0, 10.0), 365).compose(BoundedRange(0.05), 20)
    explanation = accountant.explain(1e-6)
    names = {c.name: c.value for c in explanation.candidates}
    assert explanation.winner == "pld_pessimistic"
    assert {"rdp (relaxed)", "zcdp (relaxed)"} <= set(names)
    relaxed = Accountant().compose(threshold.relaxed(), 365).compose(Laplace(50.0, 10.0), 365).compose(BoundedRange(0.05), 20)
    assert names["rdp (relaxed)"] == relaxed.explain(1e-6).to_dict()["candidates"]["rdp"]
    assert explanation.value < names["rdp (relaxed)"]
    # the exact Gaussian bound never answers for thresholds: it does not know their delta
    assert "exact_gaussian" not in names


def test_relaxation_leaves_other_compositions_alone():
    composition = Composition.of(Gaussian(2.0), PureDP(0.5))
    assert composition.relaxed() is composition
    mixed = Composition.of(GaussianThreshold(2.0, 1.0, 1e-7), GaussianThreshold(2.0, 1.0, 1e-7), PureDP(0.5))
    assert mixed.relaxed() == Composition.of(SelfComposed(GaussianThreshold(2.0, 1.0, 1e-7).relaxed(), 2), PureDP(0.5))


def test_thresholds_cost_almost_nothing_beyond_their_gaussian():
    """The same sigmas as plain Gaussians cost at most the selection deltas more (PLD, both orders)."""
    runs, delta = 100, 1e-9
    thresholds = Accountant().compose(GaussianThreshold(20.0, 3.0, delta), runs)
    gaussians = Accountant().compose(Gaussian(20.0, 3.0), runs)
    target = 1e-6
    assert gaussians.epsilon(target) < thresholds.epsilon(target) <= gaussians.epsilon(target - runs * delta * 1.0001) + 2e-4
    assert np.isfinite(thresholds.epsilon(target))
