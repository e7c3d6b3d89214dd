"""Exact Gaussian composition against the closed form and an mpmath reference."""
import math

import mpmath
import numpy as np
import pytest

from dpstream.accounting import Accountant
from dpstream.accounting.bounds.gaussian import gdp_delta, gdp_epsilon
from dpstream.accounting.events import Gaussian


def mp_gdp_delta(mu, eps):
    mpmath.mp.dps = 50
    mu, eps = mpmath.mpf(mu), mpmath.mpf(eps)
    return mpmath.ncdf(-eps / mu + mu / 2) - mpmath.exp(eps) * mpmath.ncdf(-eps / mu - mu / 2)


@pytest.mark.parametrize("mu", [0.01, 0.1, 0.5, 1.0, 3.0, 10.0, 50.0])
@pytest.mark.parametrize("eps", [0.0, 0.1, 1.0, 5.0, 20.0])
def test_gdp_delta_matches_mpmath(mu, eps):
    exact = mp_gdp_delta(mu, eps)
    if exact < 1e-290:
        assert gdp_delta(mu, eps) < 1e-280
        return
    assert gdp_delta(mu, eps) == pytest.approx(float(exact), rel=1e-9)


def test_heterogeneous_composition_matches_closed_form():
    rng = np.random.default_rng(7)
    sigmas = rng.uniform(5, 50, size=1000)
    accountant = Accountant()
    for s in sigmas:
        accountant.compose(Gaussian(float(s)))
    mu = math.sqrt(float(np.sum(1 / sigmas**2)))
    eps = accountant.epsilon(1e-6)
    assert float(mp_gdp_delta(mu, eps)) <= 1e-6 * (1 + 1e-9)
    assert float(mp_gdp_delta(mu, eps * (1 - 1e-9))) >= 1e-6 * (1 - 1e-9)
    assert accountant.delta(eps) == pytest.approx(float(mp_gdp_delta(mu, eps)), rel=1e-9)


@pytest.mark.parametrize("mu", [0.05, 1.0, 20.0])
@pytest.mark.parametrize("delta", [1e-12, 1e-6, 0.1])
def test_epsilon_delta_round_trip_never_undershoots(mu, delta):
    eps = gdp_epsilon(mu, delta)
    assert gdp_delta(mu, eps) <= delta
    if eps > 0:
        assert gdp_delta(mu, eps - 1e-8 * max(eps, 1)) > delta
