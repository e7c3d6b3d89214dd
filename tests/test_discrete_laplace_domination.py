"""Discrete Laplace noise is dominated by the continuous Laplace at shift |v_i| + 1 grid units per changed cell.

The accountant composes Laplace events by the PLD of the continuous pair (Lap(0, b), Lap(Delta, b)); the
mechanisms add discrete Laplace noise on a grid. Oracle: exact hockey-stick divergences of discrete Laplace
pairs (closed-form tails summed in mpmath, one dimension; brute-force enumeration of the product, two) against
the continuous curve and against the accountant (docs/proofs/pipelines.mechanisms.additive.laplace.md,
"Discreteness"). Negative control: at the unshifted sensitivity the continuous curve is too small, so the term
`noise.grid_sensitivity` adds for norm 1 is needed.
"""
from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

from dpstream.accounting.accountant import Accountant
from dpstream.accounting.calibrate import Release, calibrate
from dpstream.accounting.events import Laplace
from dpstream.pipelines.config.specs import ContributionBounds, HistogramSpec, Noise, WindowSpec
from dpstream.pipelines.mechanisms.noise import granularity, grid_sensitivity
from dpstream.pipelines.planning import plan_job

EPSILONS = [-3, -1, -0.2, 0.0, 0.05, 0.3, 0.9, 1.5, 2.5, 4]


def discrete_tail(t, k: int) -> mp.mpf:
    """P[Z >= k] for Z discrete Laplace, P[x] proportional to exp(-|x| / t): geometric sums in closed form."""
    r = mp.e ** (-1 / mp.mpf(t))
    return r ** k / (1 + r) if k >= 1 else 1 - r ** (1 - k) / (1 + r)


def discrete_hockey_stick(t, m: int, eps) -> mp.mpf:
    """H_{e^eps}(DL(m) || DL(0)): the loss (|x| - |x - m|) / t rises with x, so the optimal sets are {x >= k}."""
    alpha = mp.e ** mp.mpf(eps)
    return max([mp.mpf(0)] + [discrete_tail(t, k - m) - alpha * discrete_tail(t, k) for k in range(-m - 2, 2 * m + 3)])


def continuous_hockey_stick(a, eps) -> mp.mpf:
    """H_{e^eps}(Lap(a, 1) || Lap(0, 1)) for a > 0 (Koskela–Jälkö–Honkela 2020's Laplace curve)."""
    a, eps = mp.mpf(a), mp.mpf(eps)
    if eps >= a:
        return mp.mpf(0)
    if eps <= -a:
        return 1 - mp.e ** eps
    return 1 - mp.e ** ((eps - a) / 2)


def test_continuous_curve_matches_numerical_integration():
    a = mp.mpf("0.7")
    for eps in [-1, -0.3, 0, 0.4]:
        def gap(y):
            return max(mp.e ** (-abs(y - a)) / 2 - mp.e ** eps * mp.e ** (-abs(y)) / 2, 0)
        integral = mp.quad(gap, sorted([-mp.inf, 0, a, (eps + a) / 2, mp.inf]))  # the gap's kinks
        assert abs(integral - continuous_hockey_stick(a, eps)) < 1e-12


@pytest.mark.parametrize("t", [0.5, 1.0, 3.0, 10.0, 2.0 ** 19])
def test_one_coordinate_is_dominated_at_shift_plus_one(t):
    for m in sorted({1, 2, 3, 7, 20}):
        for eps in EPSILONS:
            scaled = eps * m / 3  # the eps grid in units of the shift, so every regime of the curve is visited
            assert discrete_hockey_stick(t, m, scaled) <= continuous_hockey_stick((m + 1) / mp.mpf(t), scaled)


def test_swapped_order_is_dominated_too():
    # H(DL(0) || DL(m)) = H(DL(m) || DL(0)) by the reflection x -> m - x; checked directly by enumeration
    t, m = mp.mpf(2), 3
    for eps in EPSILONS:
        alpha = mp.e ** mp.mpf(eps)
        direct = mp.fsum(max(mp.e ** (-abs(x) / t) - alpha * mp.e ** (-abs(x - m) / t), 0) for x in range(-200, 200))
        normaliser = mp.fsum(mp.e ** (-abs(x) / t) for x in range(-200, 200))
        assert direct / normaliser <= continuous_hockey_stick((m + 1) / t, eps) + mp.mpf(10) ** -25


@pytest.mark.parametrize("t", [1.0, 4.0, 10.0])
def test_same_shift_is_not_enough(t):
    # negative control: just below the largest loss m / t the discrete curve is about (1 + 1/(2t)) times the
    # continuous one (the atom at the largest loss weighs 1 / (1 + e^(-1/t)) instead of 1/2)
    m = 4
    eps = (m - mp.mpf("0.01")) / t
    assert discrete_hockey_stick(t, m, eps) > (1 + 1 / (4 * mp.mpf(t))) * continuous_hockey_stick(m / mp.mpf(t), eps)


def brute_force_product(t: float, shift: tuple[int, int], eps: float) -> float:
    """H_{e^eps} of the product of two discrete Laplace pairs, summed over the grid (tails below 1e-40)."""
    support = np.arange(-int(95 * t) - 10, int(95 * t) + 11)
    one = np.exp(-np.abs(support) / t)
    q = np.outer(one, one)
    p = np.outer(np.exp(-np.abs(support - shift[0]) / t), np.exp(-np.abs(support - shift[1]) / t))
    return float(np.maximum(p / p.sum() - math.exp(eps) * q / q.sum(), 0.0).sum())


@pytest.mark.parametrize("t", [0.7, 1.5, 4.0])
@pytest.mark.parametrize("shift", [(1, 1), (2, 1), (3, 0), (2, 2)])
def test_cell_events_bound_the_discrete_vector(t, shift):
    """The accountant's composition of one Laplace(t, |v_i| + 1) event per changed cell (what the planner and
    `grid_sensitivity` charge) is never below the exact curve of the discrete product."""
    accountant = Accountant()
    for v in shift:
        if v:
            accountant.compose(Laplace(scale=t, sensitivity=v + 1))
    for eps in np.linspace(0.0, sum(v + 1 for v in shift) / t, 12):
        assert brute_force_product(t, shift, eps) <= accountant.delta(float(eps)) + 1e-12


def test_unshifted_cell_events_are_exceeded():
    # negative control for the product: charging |v_i| (no discreteness term) is too small somewhere
    t, shift = 1.0, (2, 2)
    accountant = Accountant().compose(Laplace(scale=t, sensitivity=2), count=2)
    assert any(brute_force_product(t, shift, eps) > 1.05 * accountant.delta(float(eps))
               for eps in np.linspace(2.5, 3.9, 8))


@pytest.mark.parametrize("exact", [True, False])
def test_grid_sensitivity_adds_one_step_per_cell_for_the_laplace(exact):
    step = granularity(3.0)
    rounding = 0.0 if exact else 4 * step
    assert grid_sensitivity(1.0, step, exact, changed=4, norm=1) >= 1.0 + rounding + 4 * step


PARTITIONS = tuple(f"p{i}" for i in range(12))


@pytest.mark.parametrize("l0, total, size", [(3, None, "1d"), (12, 20, "1d"), (2, None, "7d"), (12, 5, "1d")])
def test_cell_composition_is_never_noisier_than_l1_events(l0, total, size):
    """The plan's Laplace scale is at most what the window's L1 per window, or the whole vector's L1 T Linf as
    one event, would need at the same (epsilon, delta)."""
    window = WindowSpec.of(size, "2024-01-01", "2024-02-26")
    bounds = ContributionBounds(max_partitions=l0, max_contributions=2, max_partitions_total=total)
    spec = HistogramSpec("c", partitions=PARTITIONS, noise=Noise.LAPLACE)
    plan = plan_job((spec,), bounds, window, 1.0, 1e-6)["c"]
    windows = plan.runs
    alternatives = [Release("c", "laplace", 1.0, l0 * bounds.linf, windows)]
    if total is not None and total < windows * l0:
        alternatives.append(Release("c", "laplace", 1.0, total * bounds.linf, 1))
    for release in alternatives:
        scale = calibrate([release], 1.0, 1e-6).releases[0].event.scale
        assert plan.event.scale <= scale * (1 + 1e-9)
    assert plan.cells == min(windows * l0, total or windows * l0)
