"""Chourasia–Javaid–Sikdar exact (eps_i, delta_i) composition against exact and brute-force references."""
import itertools
import math
from collections import Counter

import numpy as np
import pytest

from dpstream.accounting import Accountant
from dpstream.accounting.bounds.approx_dp import (
    ChourasiaRecursion,
    approx_dp_delta,
    approx_dp_epsilon,
    approx_dp_pld,
    lattice_spacing,
)
from dpstream.accounting.bounds.basic import BasicComposition
from dpstream.accounting.bounds.pure_dp import KairouzOhViswanath, kov_delta, kov_epsilon
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import ApproxDP, BoundedRange, Gaussian, Laplace, PureDP
from tests.accounting.dp_oracles import (
    rr_product_hockey_stick_mp,
    rr_sign_atoms_mp,
    rr_sign_enumeration_mp,
    smallest_epsilon_mp,
)


def lattice_only(pairs, **kwargs):
    """The lattice evaluation, even where exact enumeration would be used."""
    return approx_dp_pld(Counter(pairs).items(), max_exact_atoms=1, **kwargs)


@pytest.mark.parametrize(
    "t, expected",
    [(0, 0.46270877459873947), (0.5, 0.31591119397563416), (1, 0.17995285224366803), (1.5, 0.046404357698941417), (1.7, 0.0010999)],
)
def test_note_heterogeneous_oracle(t, expected):
    # Chourasia note §4B, Thm 4.6 with (1, 1e-3), (0.5, 1e-4), (0.2, 0).
    ours = approx_dp_delta([(1.0, 1e-3), (0.5, 1e-4), (0.2, 0.0)], t)
    assert ours >= expected * (1 - 1e-15)
    assert ours == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "k, at_zero, eps_at_1e6",
    [
        (1, 0.0499583844583, 0.0999981142092),
        (2, 0.0499583939587, 0.199996444156),
        (5, 0.0935162549807, 0.499976175798),
        (10, 0.122536311308, 0.999433832902),
        (20, 0.174740215786, 1.79282997463),
        (50, 0.274950058237, 3.26413307878),
        (100, 0.381973230643, 6.96961878374),
    ],
)
def test_note_homogeneous_oracle(k, at_zero, eps_at_1e6):
    # Chourasia note §4B, Cor 4.7 with k copies of (0.1, 1e-8) (the paper's Fig. 2 setting).
    pairs = [(0.1, 1e-8)] * k
    assert approx_dp_delta(pairs, 0.0) == pytest.approx(at_zero, rel=1e-11)
    eps = approx_dp_epsilon(pairs, 1e-6)
    # The target is close to the floor 1 - (1 - 1e-8)^k, so the float64 rounding of that floor
    # (pessimistic, a few ulps) moves epsilon by up to ~1e-10 relative at k = 100.
    assert eps_at_1e6 * (1 - 1e-12) <= eps <= eps_at_1e6 * (1 + 1e-10)
    assert approx_dp_delta(pairs, eps) <= 1e-6


@pytest.mark.parametrize("k, expected", [(10, 0.999994339916), (50, 3.77946575427), (99, 6.25609561629), (100, 7.95550572013)])
def test_note_figure_four_setting_is_finite_at_k_100(k, expected):
    # (0.1, 1e-10) at delta 1e-8: the paper's "eps = inf at k = 100" is float cancellation (note §4B erratum).
    # At k = 100 only 5e-17 of the target is left above the floor, so the float64 floor's few-ulp
    # pessimistic rounding costs ~1e-8 in epsilon; it never goes below.
    eps = approx_dp_epsilon([(0.1, 1e-10)] * k, 1e-8)
    assert expected * (1 - 1e-12) <= eps <= expected * (1 + 1e-8)


def test_unreachable_delta_is_infinite():
    pairs = [(0.1, 1e-4)] * 10  # floor 1 - (1 - 1e-4)^10 = 9.9955e-4
    assert approx_dp_epsilon(pairs, 9.99e-4) == math.inf
    assert math.isfinite(approx_dp_epsilon(pairs, 1e-3))
    assert approx_dp_delta(pairs, 5.0) == pytest.approx(-math.expm1(10 * math.log1p(-1e-4)), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_heterogeneous_pure_equals_sign_enumeration(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 11))
    pairs = [(float(e), 0.0) for e in rng.uniform(0.01, 1.5, size=k)]
    atoms = rr_sign_atoms_mp(pairs)
    lattice = lattice_only(pairs)
    for t in (-0.5, 0.0, 0.2, 1.0, 2.5, sum(e for e, _ in pairs) * 0.8):
        exact = rr_sign_enumeration_mp(pairs, t, atoms)
        ours = approx_dp_delta(pairs, t)
        assert ours >= exact
        assert ours == pytest.approx(float(exact), rel=1e-11, abs=1e-300)
        # The lattice path is pessimistic, and its grid error is tiny at this size.
        approx = lattice.delta(t)
        assert approx >= exact
        assert approx == pytest.approx(float(exact), rel=1e-6, abs=1e-12)
    exact_eps = smallest_epsilon_mp(lambda t: rr_sign_enumeration_mp(pairs, t, atoms), 1e-3, 20.0)
    ours = approx_dp_epsilon(pairs, 1e-3)
    assert exact_eps <= ours <= exact_eps + 1e-9
    assert exact_eps <= lattice.epsilon(1e-3) <= exact_eps + 1e-4


@pytest.mark.parametrize(
    "pairs",
    [
        [(0.5, 0.01), (1.0, 0.0), (0.2, 0.05)],
        [(0.0, 0.02), (0.7, 1e-3), (0.7, 1e-3), (1.3, 0.0), (0.05, 0.1)],
        [(2.0, 0.3), (0.1, 0.0), (0.4, 1e-6), (0.4, 0.0)],
    ],
)
def test_delta_i_against_rr_product_enumeration(pairs):
    # Brute force over the 4^k outcomes of the product of RR(eps_i, delta_i) (Chourasia eq. 38).
    lattice = lattice_only(pairs)
    for t in (-1.0, 0.0, 0.3, 0.9, 1.6, 3.0):
        exact = rr_product_hockey_stick_mp(pairs, t)
        ours = approx_dp_delta(pairs, t)
        assert ours >= exact
        assert ours == pytest.approx(float(exact), rel=1e-11)
        assert exact <= lattice.delta(t) <= exact * (1 + 1e-6) + 1e-12


@pytest.mark.parametrize("k, eps", [(1, 0.3), (25, 0.1), (200, 0.5), (3000, 0.05)])
def test_homogeneous_equals_kov(k, eps):
    pairs = [(eps, 0.0)] * k
    for t in (0.0, 0.5, 2.0, 7.0):
        assert approx_dp_delta(pairs, t) == kov_delta(k, eps, t)
        assert lattice_only(pairs).delta(t) == pytest.approx(kov_delta(k, eps, t), rel=1e-11, abs=1e-300)
    assert approx_dp_epsilon(pairs, 1e-6) == kov_epsilon(k, eps, 1e-6)


def test_commensurate_epsilons_use_an_exact_lattice():
    # 0.1, 0.2, 0.3 are multiples of 0.1 up to float rounding: the lattice is exact (no split), with
    # the spacing rounded up so every multiple is >= its epsilon.
    groups = [(0.1, 40), (0.2, 40), (0.30000000000000004, 40)]
    spacing = lattice_spacing(groups)
    assert spacing == pytest.approx(0.1, rel=1e-15) and 3 * spacing >= 0.30000000000000004
    weighted = [((e, 0.0), n) for e, n in groups]
    lattice = approx_dp_pld(weighted)  # 41^3 atoms: above the enumeration limit
    exact = approx_dp_pld(weighted, max_exact_atoms=10**6)
    for t in (0.0, 1.0, 3.0, 6.0):
        assert lattice.delta(t) == pytest.approx(exact.delta(t), rel=1e-11)
    assert lattice.epsilon(1e-6) == pytest.approx(exact.epsilon(1e-6), rel=1e-11)


def test_lattice_sandwich_for_many_distinct_epsilons():
    # Rounding every eps_i down to a grid gives a lower bound on the exact epsilon (RR(a) is dominated
    # by RR(eps)), rounding up an upper bound; both are exact lattice computations. The split lattice
    # must lie between them, and near the middle (its own grid error is much smaller).
    rng = np.random.default_rng(3)
    eps = rng.uniform(0.01, 0.1, size=300)
    ours = approx_dp_epsilon([(float(e), 0.0) for e in eps], 1e-6)
    grid = 1e-4
    lower = approx_dp_epsilon([(math.floor(e / grid) * grid, 0.0) for e in eps], 1e-6)
    upper = approx_dp_epsilon([(math.ceil(e / grid) * grid, 0.0) for e in eps], 1e-6)
    assert lower <= ours <= upper
    assert ours - lower <= 0.6 * (upper - lower)


def test_aligned_and_split_groups_against_exact_enumeration():
    # 301^2 atoms: the default takes the lattice, aligned with the 0.1 group, splitting 0.1234567.
    weighted = [((0.1, 0.0), 300), ((0.1234567, 1e-9), 300)]
    lattice = approx_dp_pld(weighted)
    exact = approx_dp_pld(weighted, max_exact_atoms=10**5)
    for t in (0.0, 2.0, 5.0, 8.0):
        assert exact.delta(t) <= lattice.delta(t) <= exact.delta(t) * (1 + 1e-4) + 1e-15
    assert exact.epsilon(1e-6) <= lattice.epsilon(1e-6) <= exact.epsilon(1e-6) + 1e-4


def test_thousand_distinct_epsilons_are_tight():
    rng = np.random.default_rng(11)
    pairs = [(float(e), 0.0) for e in rng.uniform(0.01, 0.1, size=1000)]
    eps = approx_dp_epsilon(pairs, 1e-6)
    finer = lattice_only(pairs, max_lattice=2**17).epsilon(1e-6)
    assert abs(eps - finer) < 5e-4
    assert approx_dp_delta(pairs, eps) <= 1e-6


def test_ten_thousand_events_finite():
    pairs = [(0.01, 1e-11)] * 5000 + [(0.02, 0.0)] * 5000
    eps = approx_dp_epsilon(pairs, 1e-6)
    assert math.isfinite(eps)
    assert approx_dp_delta(pairs, eps) <= 1e-6
    assert eps < 0.01 * 5000 + 0.02 * 5000


def test_monotone_in_k_epsilon_delta_i_and_target():
    base = [(0.3, 1e-7), (0.1, 0.0), (0.5, 1e-6)]
    values = [approx_dp_epsilon(base * k, 1e-5) for k in (1, 2, 4, 8, 16)]
    assert values == sorted(values)
    values = [approx_dp_epsilon([(e, 1e-7), (0.1, 0.0)] * 4, 1e-5) for e in (0.05, 0.1, 0.3, 1.0)]
    assert values == sorted(values)
    values = [approx_dp_epsilon([(0.3, d), (0.1, 0.0)] * 4, 1e-5) for d in (0.0, 1e-8, 1e-7, 1e-6)]
    assert values == sorted(values)
    values = [approx_dp_epsilon(base * 4, d) for d in (1e-9, 1e-7, 1e-5, 1e-3, 0.1)]
    assert values == sorted(values, reverse=True)
    deltas = [approx_dp_delta(base * 4, t) for t in np.linspace(-2, 4, 25)]
    assert all(a >= b for a, b in zip(deltas, deltas[1:]))


@pytest.mark.parametrize("target", [1e-10, 1e-6, 1e-3, 0.1])
def test_epsilon_delta_round_trip(target):
    rng = np.random.default_rng(5)
    pairs = [(float(e), float(d)) for e, d in zip(rng.uniform(0.05, 0.8, 40), rng.choice([0.0, 1e-12], 40))]
    for pld in (approx_dp_pld(Counter(pairs).items()), lattice_only(pairs)):
        eps = pld.epsilon(target)
        assert pld.delta(eps) <= target
        assert pld.delta(eps - 1e-8 * max(1.0, eps)) > target


def test_bound_in_accountant_covers_all_pure_and_approx_events():
    bound = ChourasiaRecursion()
    assert bound.applies(Composition.of(PureDP(0.1), ApproxDP(0.2, 1e-8), Laplace(scale=5.0), BoundedRange(0.3)))
    assert not bound.applies(Composition.of(PureDP(0.1), Gaussian(3.0)))
    accountant = Accountant(bounds=[BasicComposition(), KairouzOhViswanath(), ChourasiaRecursion()])
    accountant.compose(PureDP(0.1), count=10).compose(ApproxDP(0.3, 1e-8), count=5).compose(Laplace(scale=4.0))
    explanation = accountant.explain(1e-6)
    assert explanation.winner == "chourasia_recursion"
    assert explanation.value < BasicComposition().epsilon(accountant.composition, 1e-6)
    pairs = [(0.1, 0.0)] * 10 + [(0.3, 1e-8)] * 5 + [(0.25, 0.0)]
    assert explanation.value == approx_dp_epsilon(pairs, 1e-6)


def test_bound_same_answer_for_every_event_form():
    bound = ChourasiaRecursion()
    forms = [
        Composition.of(*([ApproxDP(0.2, 1e-9)] * 6), *([PureDP(0.4)] * 3)),
        Composition().plus(ApproxDP(0.2, 1e-9), 6).plus(PureDP(0.4), 3),
        Composition.of(*([PureDP(0.4)] * 3), *([ApproxDP(0.2, 1e-9)] * 6)),
        Composition.of(*([ApproxDP(0.2, 1e-9)] * 6), *([Laplace(scale=2.5)] * 3)),
    ]
    values = {bound.epsilon(c, 1e-7) for c in forms}
    assert len(values) == 1


@pytest.mark.parametrize(
    "pairs, message",
    [([(-0.1, 0.0)], "epsilon_i must be"), ([(0.1, 1.0)], "delta_i must lie"), ([(math.inf, 0.0)], "epsilon_i must be")],
)
def test_invalid_pairs(pairs, message):
    with pytest.raises(ValueError, match=message):
        approx_dp_delta(pairs, 0.0)


def test_small_exact_enumeration_agrees_with_itertools_float_sum():
    # Independent float64 brute force of the sign sum for k = 12 (4096 atoms).
    rng = np.random.default_rng(9)
    eps = rng.uniform(0.1, 0.9, 12)
    p = np.exp(eps) / (1 + np.exp(eps))
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=12)))
    probs = np.prod(np.where(signs > 0, p, 1 - p), axis=1)
    losses = signs @ eps
    t = 1.1
    reference = float(np.sum(probs * np.maximum(0.0, -np.expm1(t - losses))))
    assert approx_dp_delta([(float(e), 0.0) for e in eps], t) == pytest.approx(reference, rel=1e-12)
