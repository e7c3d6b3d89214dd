"""Brute force: no choice of bounded query values beats the worst cases of LPB Lemma 13/16 and Lemma 18.

For small t and d we search over the query values of both neighbours (each in
[lower, upper], differing by at most the sensitivity) for the largest log ratio
of output probabilities: 2,000 random pairs, a quarter of the coordinates
snapped to the corner values {lower, upper, lower + Delta, upper - Delta}, then
L-BFGS-B from the three best. Candidate probabilities come from the module's
own quadrature (vectorised), and the best pair found is re-evaluated with
scipy's adaptive quadrature, an independent method. The search must (a) never
exceed the bound and (b) reach it, since the bound is attained.
Deterministic: fixed seeds, no statistical false alarms.
"""
import math

import numpy as np
import pytest
from scipy import integrate, optimize
from scipy.special import log_ndtr

from dpstream.accounting.selection import above_threshold_expost_epsilon, report_noisy_max_epsilon
from dpstream.accounting.selection.quadrature import log_gaussian_expectation

LOWER, UPPER = 0.0, 1.0


def _pairs(unit, count, delta, rng):
    """Map points of [0,1]^(2 count) to neighbouring query vectors (q on D, q' on D'), both in [LOWER, UPPER]."""
    unit = np.atleast_2d(unit)
    q_prime = LOWER + (UPPER - LOWER) * unit[:, :count]
    low = np.maximum(q_prime - delta, LOWER)
    high = np.minimum(q_prime + delta, UPPER)
    q = low + (high - low) * unit[:, count:]
    return q, q_prime


def _random_unit(rng, rows, count, delta):
    """Random points, with a quarter of the coordinates at values that produce corner queries."""
    unit = rng.random((rows, 2 * count))
    snap = rng.random(unit.shape) < 0.25
    unit[snap] = rng.choice([0.0, 1.0, delta / (UPPER - LOWER), 1 - delta / (UPPER - LOWER)], size=snap.sum())
    return unit


def _at_terms(queries, sx, sz, rho, halted):
    """(n, s, c) rows whose Gaussian expectation is Pr[output] of AboveThreshold on these query values."""
    rows, count = queries.shape
    ratio = sx / sz
    n = np.ones((rows, count))
    s = np.full((rows, count), ratio)
    c = (rho - queries) / sz
    if halted:
        s[:, -1] = -ratio
        c[:, -1] = (queries[:, -1] - rho) / sz
    return n, s, c


def _at_log_ratio(unit, t, sx, sz, rho, delta, halted):
    q, q_prime = _pairs(unit, t, delta, None)
    both = np.concatenate([q, q_prime])
    logs = log_gaussian_expectation(*_at_terms(both, sx, sz, rho, halted))
    return logs[: len(q)] - logs[len(q) :]


def _at_log_probability_scipy(queries, sx, sz, rho, halted):
    """log Pr[output] by scipy's adaptive quadrature (independent of accounting.selection)."""

    def integrand(x):
        bots = queries[:-1] if halted else queries
        value = -0.5 * x * x + np.sum(log_ndtr((sx * x + rho - bots) / sz))
        if halted:
            value += log_ndtr((queries[-1] - rho - sx * x) / sz)
        return math.exp(value) / math.sqrt(2 * math.pi)

    value, _ = integrate.quad(integrand, -40, 40, points=[0.0], epsabs=0, epsrel=1e-12, limit=500)
    return math.log(value)


def _search(log_ratio, count, delta, seed):
    rng = np.random.default_rng(seed)
    unit = _random_unit(rng, 2000, count, delta)
    values = log_ratio(unit)
    best_value = values.max()
    best_unit = unit[values.argmax()]
    for start in unit[np.argsort(values)[-3:]]:
        result = optimize.minimize(
            lambda u: -log_ratio(u)[0], start, method="L-BFGS-B", bounds=[(0.0, 1.0)] * (2 * count)
        )
        if -result.fun > best_value:
            best_value, best_unit = -result.fun, result.x
    return best_value, best_unit


AT_SETTINGS = [
    # sigma_threshold, sigma_query, threshold, sensitivity
    (0.3, 0.5, 0.5, 0.1),
    (0.1, 0.1 * math.sqrt(3), 0.7, 0.05),
    (0.5, 0.2, 0.2, 0.3),
]


@pytest.mark.parametrize("halted", [True, False])
@pytest.mark.parametrize("t", [1, 2, 3])
@pytest.mark.parametrize("setting", AT_SETTINGS)
def test_above_threshold_search_never_beats_the_worst_case(setting, t, halted):
    sx, sz, rho, delta = setting
    bound = above_threshold_expost_epsilon(t, sx, sz, rho, delta, halted=halted)
    found, unit = _search(lambda u: _at_log_ratio(u, t, sx, sz, rho, delta, halted), t, delta, seed=t)
    assert found <= bound
    assert found >= bound - 1e-6 * bound  # the bound is attained by the corner pair
    q, q_prime = _pairs(unit, t, delta, None)
    independent = _at_log_probability_scipy(q[0], sx, sz, rho, halted) - _at_log_probability_scipy(
        q_prime[0], sx, sz, rho, halted
    )
    assert independent <= bound + 1e-9


def _rnm_log_ratio(unit, d, sigma, delta):
    """log Pr[M(D) = d] - log Pr[M(D') = d] for report-noisy-max; output d is the last query (all are alike)."""
    q, q_prime = _pairs(unit, d, delta, None)
    both = np.concatenate([q, q_prime])
    c = (both[:, -1:] - both[:, :-1]) / sigma
    logs = log_gaussian_expectation(np.ones_like(c), np.ones_like(c), c)
    return logs[: len(q)] - logs[len(q) :]


@pytest.mark.parametrize("d", [2, 3, 4])
@pytest.mark.parametrize("sigma, delta", [(0.2, 0.05), (0.5, 0.2), (0.1, 0.01)])
def test_report_noisy_max_search_never_beats_the_worst_case(d, sigma, delta):
    bound = report_noisy_max_epsilon(d, sigma, delta)
    found, unit = _search(lambda u: _rnm_log_ratio(u, d, sigma, delta), d, delta, seed=d)
    assert found <= bound
    assert found >= bound - 1e-6 * bound
    q, q_prime = _pairs(unit, d, delta, None)

    def log_probability(queries):
        gaps = (queries[-1] - queries[:-1]) / sigma
        value, _ = integrate.quad(
            lambda z: math.exp(-0.5 * z * z + np.sum(log_ndtr(z + gaps))) / math.sqrt(2 * math.pi),
            -40, 40, points=[0.0], epsabs=0, epsrel=1e-12, limit=500,
        )
        return math.log(value)

    assert log_probability(q[0]) - log_probability(q_prime[0]) <= bound + 1e-9


@pytest.mark.parametrize("sigma", [0.02, 0.05, 0.1, 0.3, 1.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-3, 0.05, 0.4])
@pytest.mark.parametrize("lower, upper", [(0.0, 1.0), (-2.0, 3.0)])
def test_two_queries_match_the_closed_form(sigma, delta, lower, upper):
    """d = 2: Pr[argmax = 2] = Phi((q_2 - q_1) / (sigma sqrt 2)), so epsilon is a ratio of two normal CDFs."""
    width = upper - lower
    scale = sigma * math.sqrt(2)
    exact = float(log_ndtr(-(width - 2 * delta) / scale) - log_ndtr(-width / scale))
    value = report_noisy_max_epsilon(2, sigma, delta, lower, upper)
    assert value >= exact
    assert value == pytest.approx(exact, rel=1e-8, abs=1e-11)
