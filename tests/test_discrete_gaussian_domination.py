"""Discrete Gaussian noise is dominated by the continuous Gaussian at shift ||v|| + sqrt(d) grid units.

Oracle: exact hockey-stick divergences of discrete Gaussians (mpmath sums in one
dimension, brute-force enumeration in two) against the continuous curve
(docs/proofs/pipelines.mechanisms.noise.discrete_gaussian_domination.md). Negative control: at the
unshifted sensitivity the continuous curve is too small, so the term in
`noise.grid_sensitivity` is needed.
"""
from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

from dpstream.pipelines.mechanisms.noise import granularity, grid_sensitivity

DIGITS = 120  # at eps = -2 and s = 20 the two curves differ by about 1e-92
EPSILONS = [-2, -0.5, 0.0, 0.01, 0.1, 0.3, 0.5, 1, 2, 3, 5, 8, 12]


@pytest.fixture(autouse=True)
def precision():
    """Every test here works at DIGITS, without changing mpmath's precision for other modules."""
    with mp.workdps(DIGITS):
        yield


def discrete_tail(s: float):
    """k -> P[Z >= k] for Z ~ N_Z(0, s^2), exact to 120 digits (support truncated at 40 s, mass below 1e-340)."""
    support = int(40 * s) + 10
    weights = [mp.e ** (-mp.mpf(x) ** 2 / (2 * mp.mpf(s) ** 2)) for x in range(-support, support + 1)]
    upper = [mp.mpf(0)] * (len(weights) + 1)
    for i in range(len(weights) - 1, -1, -1):
        upper[i] = upper[i + 1] + weights[i]
    total = upper[0]

    def tail(k: int):
        i = min(max(k + support, 0), len(weights))
        return upper[i] / total
    return tail


def discrete_hockey_stick(tail, s: float, m: int, eps) -> mp.mpf:
    """H_{e^eps}(N_Z(m, s^2) || N_Z(0, s^2)): the optimal set is {x >= k}, k the first x with loss > eps."""
    k = int(mp.floor(eps * s * s / m + mp.mpf(m) / 2)) + 1
    return tail(k - m) - mp.e ** eps * tail(k)


def continuous_hockey_stick(mu, eps) -> mp.mpf:
    mu = mp.mpf(mu)
    return mp.ncdf(-eps / mu + mu / 2) - mp.e ** eps * mp.ncdf(-eps / mu - mu / 2)


def theta(s: float) -> mp.mpf:
    return 2 * mp.nsum(lambda j: mp.e ** (-2 * mp.pi ** 2 * s * s * j * j), [1, mp.inf])


@pytest.mark.parametrize("s", [1.5, 2.0, 3.7, 10.0, 20.0])
def test_one_coordinate_is_dominated_at_shift_plus_one(s):
    tail, carried = discrete_tail(s), theta(s)
    for m in sorted({1, 2, 3, 5, int(s) + 1, int(2 * s)}):
        for eps in map(mp.mpf, EPSILONS):
            slack = (1 + mp.e ** eps) * carried
            assert discrete_hockey_stick(tail, s, m, eps) <= continuous_hockey_stick((m + 1) / mp.mpf(s), eps) + slack


def test_same_shift_is_not_enough():
    # negative control: the discrete curve exceeds the continuous one at the same shift
    s, m, eps = 1.5, 1, mp.mpf(5)
    discrete = discrete_hockey_stick(discrete_tail(s), s, m, eps)
    assert discrete > 1.8 * continuous_hockey_stick(m / mp.mpf(s), eps)


def brute_force_hockey_stick_2d(s: float, shift: tuple[int, int], eps: float) -> float:
    support = np.arange(-int(14 * s) - 3, int(14 * s) + 4)
    one = np.exp(-support.astype(float) ** 2 / (2 * s * s))
    q = np.outer(one, one)
    p = np.outer(np.exp(-(support - shift[0]) ** 2 / (2 * s * s)), np.exp(-(support - shift[1]) ** 2 / (2 * s * s)))
    return float(np.maximum(p / p.sum() - math.exp(eps) * q / q.sum(), 0.0).sum())


@pytest.mark.parametrize("s", [1.0, 1.5, 2.0, 3.0])
@pytest.mark.parametrize("shift", [(1, 1), (2, 1), (1, 0), (3, 2)])
def test_vectors_are_dominated_at_norm_plus_sqrt_d(s, shift):
    w = math.hypot(*(abs(v) + (v != 0) for v in shift)) / s
    assert w <= (math.hypot(*shift) + math.sqrt(sum(v != 0 for v in shift))) / s
    carried = float(theta(s))
    for eps in np.linspace(-2, 10, 49):
        bound = float(continuous_hockey_stick(w, mp.mpf(eps)))
        # float64 sums: 1e-13 absolute; theta(1.0) ~ 5e-9 per coordinate, carried explicitly
        slack = 2 * (1 + math.exp(eps)) * carried + 1e-13
        assert brute_force_hockey_stick_2d(s, shift, eps) <= bound + slack


def test_unshifted_vector_curve_is_exceeded():
    s, shift = 1.0, (1, 1)
    worst = max(brute_force_hockey_stick_2d(s, shift, eps) / float(continuous_hockey_stick(math.hypot(*shift) / s, mp.mpf(eps)))
                for eps in np.linspace(-2, 10, 49))
    assert worst > 1.5


@pytest.mark.parametrize("exact", [True, False])
def test_grid_sensitivity_adds_sqrt_d_steps_for_the_gaussian(exact):
    step = granularity(3.0)
    rounding = 0.0 if exact else 2 * step
    assert grid_sensitivity(1.0, step, exact, changed=4, norm=2) >= 1.0 + rounding + 2 * step
    assert grid_sensitivity(1.0, step, exact, changed=4, norm=1) >= 1.0 + 2 * rounding + 4 * step  # L1: 4 steps each
