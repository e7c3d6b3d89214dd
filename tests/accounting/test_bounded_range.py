"""Dong–Durfee–Rogers BR composition bounds against exact, brute-force and reference values.

Reference values are the [COMPUTED] tables of notes/dong-durfee-rogers.md (Sec. 8.2,
8.3, 8.5, 8.6), checked there in float64, mpmath and brute force.
"""
import itertools
import math

import mpmath
import numpy as np
import pytest
from scipy.stats import binom

from dpstream.accounting import Accountant
from dpstream.accounting.bounds import generalized_rr as rr
from dpstream.accounting.bounds.bounded_range import (
    MGFBound,
    OptimalNonadaptiveBR,
    OptKL,
    br_optimal_delta,
    br_optimal_epsilon,
    maxkl,
    mgf_delta,
    mgf_epsilon,
    mgf_log_moment,
    optkl_delta,
    optkl_epsilon,
)
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import BoundedRange, Composed, PureDP, SelfComposed

# (k, eps, eps_g, delta_OPT) from the note's Sec. 8.2.
THEOREM3_VALUES = [
    (1, 1.0, 0.0, 0.24491866240370913),
    (1, 1.0, 0.3, 0.13796280335447106),
    (2, 1.0, 0.0, 0.2883172623686342),
    (2, 1.0, 0.2, 0.22986552515990227),
    (2, 1.0, 0.25, 0.2160545287211976),
    (2, 1.0, -0.25, 0.38946265308278716),
    (3, 1.0, 0.5, 0.20646776583118825),
    (3, 1.0, -0.8, 0.6078553220082009),
    (5, 0.5, 0.7, 0.04476454370554598),
    (10, 0.1, 0.3, 0.002185168490485766),
    (50, 0.1, 1.0, 0.0003998429905380195),
    (100, 1.0, 5.0, 0.8967664985076451),
    (200, 0.1, 2.0, 0.00126123697090024),
    (300, 0.01, 0.3, 6.74958866874572e-6),
    (100, 1.0, 20.0, 0.0428914600524608),
    (500, 0.1, 3.5, 0.00134142090125439),
]

# (eps, k, BR OptComp, OptKL, MGF): eps_g at delta = 1e-6, note Sec. 8.3.
FIGURE1_VALUES = [
    (1.0, 1, 0.99841, 1.00000, 1.00000),
    (1.0, 5, 4.57596, 5.00000, 4.79649),
    (1.0, 10, 7.71332, 9.54431, 8.29406),
    (1.0, 25, 13.86829, 16.22384, 15.24033),
    (1.0, 50, 21.77443, 24.74969, 23.82969),
    (1.0, 100, 34.76837, 38.61276, 37.67892),
    (1.0, 200, 56.76878, 61.82953, 60.80989),
    (0.1, 1, 0.09938, 0.10000, 0.10000),
    (0.1, 10, 0.62864, 0.84363, 0.76718),
    (0.1, 50, 1.53374, 1.92095, 1.88766),
    (0.1, 100, 2.24603, 2.75324, 2.72863),
    (0.1, 200, 3.30075, 3.96689, 3.94818),
    (0.1, 500, 5.54498, 6.50188, 6.48819),
    (0.1, 1000, 8.30065, 9.56112, 9.54974),
    (0.1, 2000, 12.58958, 14.25359, 14.24361),
    (0.01, 1, 0.00980, 0.01000, 0.01000),
    (0.01, 10, 0.05457, 0.08324, 0.07599),
    (0.01, 100, 0.18891, 0.26408, 0.26200),
    (0.01, 1000, 0.64795, 0.84363, 0.84295),
    (0.01, 2000, 0.94039, 1.20039, 1.19990),
    (0.01, 5000, 1.54354, 1.92096, 1.92063),
    (0.01, 10000, 2.25401, 2.75326, 2.75302),
]

# k = 2, eps = 1: exact adaptive optimum and Thm 3 (note Sec. 8.5).
ADAPTIVE_K2 = {
    -0.45: (0.467351810401, 0.467200553329),
    -0.25: (0.393257547944, 0.389462653083),
    0.0: (0.303365496483, 0.288317262369),
    0.10: (0.269178138622, 0.258475966411),
    0.25: (0.220927270177, 0.216054528721),
    0.45: (0.164641353673, 0.164404135363),
    0.60: (0.129782296274, 0.129782296274),
    1.0: (0.057005329028, 0.057005329028),
    1.5: (0.009054832389, 0.009054832389),
}


def matches_printed(value, printed):
    """`value` rounds to the 5-decimal `printed` value and is not below it by more than the rounding."""
    return abs(value - printed) <= 5e-6 + 1e-12 and value >= printed - 5e-6


# ---------------------------------------------------------------- Theorem 3


@pytest.mark.parametrize("k, eps, eps_g, exact", THEOREM3_VALUES)
def test_theorem3_reference_values(k, eps, eps_g, exact):
    ours = br_optimal_delta(k, eps, eps_g)
    assert ours >= exact
    assert ours == pytest.approx(exact, rel=1e-10)


def mp_theorem3(k, eps, eps_g):
    """DDR Thm 3 in its printed p-form (Lemma 5.5 at the candidates), 50 digits."""
    mpmath.mp.dps = 50
    eps, eps_g = mpmath.mpf(eps), mpmath.mpf(eps_g)
    best = max(mpmath.mpf(0), 1 - mpmath.exp(eps_g))
    for ell in range(k + 1):
        t = min(max((eps_g + (ell + 1) * eps) / (k + 1), 0), eps)
        p = (mpmath.exp(-t) - mpmath.exp(-eps)) / (1 - mpmath.exp(-eps))
        total = mpmath.fsum(
            mpmath.binomial(k, i) * p ** (k - i) * (1 - p) ** i * max(mpmath.exp(k * t - i * eps) - mpmath.exp(eps_g), 0)
            for i in range(k + 1)
        )
        best = max(best, total)
    return best


@pytest.mark.parametrize(
    "k, eps, eps_g",
    [(1, 0.3, 0.1), (4, 1.0, 0.0), (7, 0.01, 0.02), (12, 2.0, -3.0), (20, 0.5, 2.5), (20, 3.0, 10.0), (15, 1.0, -13.9)],
)
def test_theorem3_matches_mpmath(k, eps, eps_g):
    exact = float(mp_theorem3(k, eps, eps_g))
    ours = br_optimal_delta(k, eps, eps_g)
    assert ours >= exact
    assert ours == pytest.approx(exact, rel=1e-11)


def test_theorem3_trivial_regions_and_single_mechanism():
    assert br_optimal_delta(7, 0.3, 2.1) == 0.0  # eps_g >= k eps (Lemma 5.2)
    assert br_optimal_delta(7, 0.3, 5.0) == 0.0
    assert br_optimal_delta(7, 0.3, -2.1) == pytest.approx(-math.expm1(-2.1), rel=1e-14)
    assert br_optimal_delta(7, 0.3, -2.1) >= -math.expm1(-2.1)
    for eps in (0.01, 0.5, 1.0, 4.0):
        for frac in (0.0, 0.3, 0.9):
            eps_g = frac * eps
            closed = math.expm1((eps_g - eps) / 2) ** 2 / -math.expm1(-eps)  # (1 - e^{(eg-eps)/2})^2 / (1 - e^-eps)
            assert br_optimal_delta(1, eps, eps_g) == pytest.approx(closed, rel=1e-12)
        assert br_optimal_delta(1, eps, 0.0) == pytest.approx(math.tanh(eps / 4), rel=1e-12)


@pytest.mark.parametrize("k, eps_g", [(2, 0.25), (3, 0.7), (10, 1.3), (40, 4.0)])
def test_theorem3_negative_eps_g_symmetry(k, eps_g):
    # delta(-eg) = 1 - e^{-eg} + e^{-eg} delta(eg): swapping the two datasets (note Sec. 2).
    lhs = br_optimal_delta(k, 1.0, -eps_g)
    rhs = -math.expm1(-eps_g) + math.exp(-eps_g) * br_optimal_delta(k, 1.0, eps_g)
    assert lhs == pytest.approx(rhs, rel=1e-11)  # both sides carry the upward rounding margin


def lemma31_bruteforce(k, eps, eps_g, points=41):
    """max over a t-grid in [0, eps]^k of the 2^k-subset sum of DDR Lemma 3.1 (heterogeneous t)."""
    grid = np.linspace(0.0, eps, points)
    ts = np.array(list(itertools.product(grid, repeat=k)))  # (points^k, k)
    q = np.exp(rr.log_q(eps, ts))
    p = np.exp(rr.log_p(eps, ts))
    total = np.zeros(len(ts))
    for subset in itertools.product((0, 1), repeat=k):
        s = np.array(subset, dtype=bool)
        first = np.prod(np.where(s, 1 - q, q), axis=1)
        second = np.prod(np.where(s, 1 - p, p), axis=1)
        total += np.maximum(first - math.exp(eps_g) * second, 0.0)
    return float(total.max())


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("eps, eps_g", [(1.0, 0.0), (1.0, 0.4), (1.0, -0.7), (0.5, 0.2), (2.0, 1.9)])
def test_theorem3_never_below_lemma31_bruteforce(k, eps, eps_g):
    brute = lemma31_bruteforce(k, eps, eps_g)
    ours = br_optimal_delta(k, eps, eps_g)
    assert brute <= ours
    assert brute >= ours * (1 - 2e-3)  # the grid comes close to the optimum


def test_theorem3_windowed_sums_match_binomial_cdf_form():
    # Independent form: delta^k(t) = BinCDF(m; k, 1-q_t) - e^{eg} BinCDF(m; k, 1-p_t), maximised over the candidates.
    for k, eps, eps_g in [(2000, 1.0, 50.0), (10000, 0.01, 2.0), (5000, 0.1, 30.0)]:
        ell = np.arange(k + 1)
        t = (eps_g + (ell + 1) * eps) / (k + 1)
        t = t[(t > 0) & (t < eps)]
        m = np.floor((k * t - eps_g) / eps)
        q = np.exp(rr.log_q(eps, t))
        p = np.exp(rr.log_p(eps, t))
        values = binom.cdf(m, k, 1 - q) - math.exp(eps_g) * binom.cdf(m, k, 1 - p)
        exact = float(values.max())
        ours = br_optimal_delta(k, eps, eps_g)
        assert math.isfinite(ours) and ours >= exact * (1 - 1e-9)
        assert ours == pytest.approx(exact, rel=1e-8)


def test_theorem3_is_monotone_and_finite_for_large_k():
    for k, eps in [(10000, 1.0), (3000, 5.0)]:  # e^{kt} and C(k, i) far outside float64 range
        grid = np.linspace(-0.25 * k * eps, k * eps, 6)
        values = [br_optimal_delta(k, eps, float(g)) for g in grid]
        assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in values)
        assert all(a >= b for a, b in zip(values, values[1:]))


# ---------------------------------------------------------------- inversions and Figure 1


@pytest.mark.parametrize("eps, k, br, kl, mgf", FIGURE1_VALUES)
def test_figure1_epsilons(eps, k, br, kl, mgf):
    ours_br = br_optimal_epsilon(k, eps, 1e-6)
    ours_kl = optkl_epsilon([eps], 1e-6, counts=[k])
    ours_mgf = mgf_epsilon([eps], 1e-6, counts=[k])
    assert matches_printed(ours_br, br)
    assert matches_printed(ours_kl, kl)
    assert matches_printed(ours_mgf, mgf)
    assert ours_br <= ours_mgf <= ours_kl
    assert ours_mgf <= k * eps * (1 + 1e-12)
    assert ours_kl <= k * eps * (1 + 1e-12)


@pytest.mark.parametrize("k, eps, delta", [(10, 1.0, 1e-6), (100, 0.1, 1e-6), (37, 0.7, 1e-3), (500, 0.05, 1e-10), (3, 2.0, 0.2)])
def test_theorem3_inversion_is_tight_and_never_undershoots(k, eps, delta):
    eps_g = br_optimal_epsilon(k, eps, delta)
    assert br_optimal_delta(k, eps, eps_g) <= delta
    assert br_optimal_delta(k, eps, eps_g - 1e-9 * max(1.0, eps_g)) > delta


# ---------------------------------------------------------------- adaptive bounds


def test_maxkl_values_and_printed_forms():
    reference = {0.01: 1.2499982638927709e-05, 0.1: 0.001249826427459834, 1.0: 0.12330156148224447, 3.0: 1.0075056198629566}
    for eps, value in reference.items():
        assert float(maxkl(eps)) == pytest.approx(value, rel=1e-12)
        b = eps / -math.expm1(-eps)  # the Cor 3.1 form eps/(1-e^-eps) - 1 - ln(eps/(1-e^-eps))
        assert float(maxkl(eps)) == pytest.approx(b - 1 - math.log(b), rel=1e-9)
        assert float(maxkl(eps)) < eps**2 / 8


def test_extreme_epsilons_stay_finite_and_valid():
    assert float(maxkl(1.0)) == pytest.approx(float(maxkl(np.nextafter(1.0, 2.0))), rel=1e-12)  # both branches agree
    assert float(maxkl(800.0)) == pytest.approx(799.0 - math.log(800.0), rel=1e-12)
    # one 800-BR mechanism: exact delta(eg) = (1 - e^{(eg - eps)/2})^2 / (1 - e^-eps), so eg(1e-6) = 800 + 2 ln(1 - 1e-3)
    exact = 800.0 + 2.0 * math.log1p(-1e-3)
    for value in (mgf_epsilon([800.0], 1e-6), optkl_epsilon([800.0], 1e-6), br_optimal_epsilon(1, 800.0, 1e-6)):
        assert math.isfinite(value) and value >= exact - 1e-9
    assert br_optimal_epsilon(1, 800.0, 1e-6) == pytest.approx(exact, abs=1e-9)
    assert br_optimal_epsilon(50, 1e-9, 1e-6) == 0.0  # delta(0) = TV distance is about 1e-9 already
    assert 0.0 < mgf_epsilon([1e-9], 1e-6, counts=[10**6]) <= optkl_epsilon([1e-9], 1e-6, counts=[10**6])


@pytest.mark.parametrize("eps", [0.01, 0.3, 1.0, 3.0])
@pytest.mark.parametrize("lam", [1e-3, 0.1, 1.0, 5.0, 40.0, 1e3])
def test_mgf_log_moment_closed_form_is_the_supremum(eps, lam):
    # Independent q-form: E[e^{lam L}] = q e^{lam t} + (1-q) e^{lam (t - eps)}, maximised on a fine grid.
    t = np.linspace(0.0, eps, 200001)
    log_mgf = np.logaddexp(rr.log_q(eps, t) + lam * t, rr.log_one_minus_q(eps, t) + lam * (t - eps))
    ours = float(mgf_log_moment(eps, lam))
    assert ours >= float(log_mgf.max()) - 1e-13 * max(1.0, abs(ours))
    assert ours == pytest.approx(float(log_mgf.max()), rel=1e-8, abs=1e-14)


def test_mgf_log_moment_limits_and_figure2_values():
    for eps in (0.01, 0.5, 2.0):
        lam = 1e-7
        assert float(mgf_log_moment(eps, lam)) / lam == pytest.approx(float(maxkl(eps)), rel=1e-4)
    for lam, value in [(0.1, 0.0135431), (0.5, 0.0915563), (1, 0.2402290), (2, 0.6867520), (5, 2.7742207), (10, 7.1079484)]:
        assert float(mgf_log_moment(1.0, lam)) == pytest.approx(value, abs=1e-7)
    huge = mgf_log_moment(1.0, np.array([1e2, 1e3, 1e4, 1e8]))
    assert np.all(np.isfinite(huge))


def test_mgf_and_optkl_delta_reference_and_round_trip():
    assert mgf_delta([0.1], 0.5, counts=[10]) == pytest.approx(0.0062420287, rel=1e-7)
    for epsilons, counts in [([1.0], [10]), ([0.1, 0.5], [50, 10]), ([0.01], [10000])]:
        for delta in (1e-3, 1e-6, 1e-12):
            e_mgf = mgf_epsilon(epsilons, delta, counts=counts)
            e_kl = optkl_epsilon(epsilons, delta, counts=counts)
            if e_mgf < sum(e * c for e, c in zip(epsilons, counts)):
                assert mgf_delta(epsilons, e_mgf, counts=counts) <= delta * (1 + 1e-6)
            if e_kl < sum(e * c for e, c in zip(epsilons, counts)):
                assert optkl_delta(epsilons, e_kl, counts=counts) <= delta * (1 + 1e-9)


def test_heterogeneous_reference_values():
    epsilons = [0.1] * 50 + [0.5] * 10
    assert matches_printed(mgf_epsilon(epsilons, 1e-6), 4.58198)
    assert matches_printed(optkl_epsilon(epsilons, 1e-6), 4.92619)
    grouped = mgf_epsilon([0.5, 0.1], 1e-6, counts=[10, 50])
    assert grouped == pytest.approx(mgf_epsilon(epsilons, 1e-6), rel=1e-12)


@pytest.mark.parametrize("eps_g, values", sorted(ADAPTIVE_K2.items()))
def test_adaptive_bounds_never_below_exact_adaptive_optimum_k2(eps_g, values):
    adaptive, nonadaptive = values
    assert br_optimal_delta(2, 1.0, eps_g) == pytest.approx(nonadaptive, rel=1e-10)
    assert mgf_delta([1.0], eps_g, counts=[2]) >= adaptive
    assert optkl_delta([1.0], eps_g, counts=[2]) >= adaptive


def test_adaptive_bounds_dominate_theorem3_on_a_grid():
    for k, eps in [(3, 1.0), (25, 0.3), (400, 0.05)]:
        for eps_g in np.linspace(0.0, k * eps, 9):
            exact = br_optimal_delta(k, eps, float(eps_g))
            assert mgf_delta([eps], float(eps_g), counts=[k]) >= exact
            assert optkl_delta([eps], float(eps_g), counts=[k]) >= mgf_delta([eps], float(eps_g), counts=[k]) * (1 - 1e-9)


# ---------------------------------------------------------------- accountant integration


def test_accountant_acceptance_values():
    nonadaptive = Accountant(adaptive=False).compose(BoundedRange(1.0), count=10)
    adaptive = Accountant(adaptive=True).compose(BoundedRange(1.0), count=10)
    explained = nonadaptive.explain(1e-6)
    assert matches_printed(explained.value, 7.71332)
    assert matches_printed(explained.to_dict()["candidates"]["br_optimal_nonadaptive"], 7.71332)
    explained = adaptive.explain(1e-6)
    assert 7.71332 <= explained.value <= 8.30  # never below the non-adaptive optimum
    assert "br_optimal_nonadaptive" in explained.not_applicable
    candidates = explained.to_dict()["candidates"]
    assert matches_printed(candidates["br_mgf"], 8.29406)
    assert matches_printed(candidates["br_optkl"], 9.54431)
    own = Accountant(adaptive=True, bounds=(OptimalNonadaptiveBR(), OptKL(), MGFBound())).compose(BoundedRange(1.0), count=10)
    assert own.explain(1e-6).winner == "br_mgf"


def test_same_answer_however_the_composition_is_written():
    event = BoundedRange(0.3)
    ways = [
        Accountant(adaptive=False).compose(event, count=6),
        Accountant(adaptive=False).compose(SelfComposed(event, 6)),
        Accountant(adaptive=False).compose(SelfComposed(event, 2), count=3),
        Accountant(adaptive=False).compose(Composed((event,) * 6)),
        Accountant(adaptive=False).compose(Composed((SelfComposed(event, 4), event))).compose(event),
    ]
    one_by_one = Accountant(adaptive=False)
    for _ in range(6):
        one_by_one.compose(event)
    ways.append(one_by_one)
    answers = {(a.epsilon(1e-5), a.delta(0.9)) for a in ways}
    assert len(answers) == 1


def test_applicability():
    homogeneous = Composition.of(BoundedRange(0.5), BoundedRange(0.5))
    mixed_eps = Composition.of(BoundedRange(0.5), BoundedRange(0.2))
    with_pure = Composition.of(BoundedRange(0.5), PureDP(0.2))
    assert OptimalNonadaptiveBR().applies(homogeneous) and OptimalNonadaptiveBR().nonadaptive_only
    assert not OptimalNonadaptiveBR().applies(mixed_eps)
    assert not OptimalNonadaptiveBR().applies(with_pure)
    for bound in (OptKL(), MGFBound()):
        assert bound.applies(homogeneous) and bound.applies(mixed_eps) and not bound.applies(with_pure)
        assert not bound.nonadaptive_only
    assert OptimalNonadaptiveBR().delta(homogeneous, 0.3) == br_optimal_delta(2, 0.5, 0.3)
    assert MGFBound().epsilon(mixed_eps, 1e-6) == mgf_epsilon([0.2, 0.5], 1e-6)
    assert OptKL().delta(mixed_eps, 0.6) == optkl_delta([0.2, 0.5], 0.6)


def test_input_errors_are_one_line_and_name_the_value():
    with pytest.raises(ValueError, match=r"k must be an integer >= 1, got 0"):
        br_optimal_delta(0, 1.0, 0.5)
    with pytest.raises(ValueError, match=r"epsilon must be a finite number > 0, got -1.0"):
        br_optimal_epsilon(3, -1.0, 1e-6)
    with pytest.raises(ValueError, match=r"delta must lie in \(0, 1\), got 0"):
        mgf_epsilon([1.0], 0)
    with pytest.raises(ValueError, match=r"every epsilon must be a finite number > 0"):
        optkl_epsilon([1.0, float("inf")], 1e-6)
    with pytest.raises(ValueError, match=r"counts must have one entry per epsilon \(2\), got 1"):
        mgf_delta([1.0, 2.0], 0.5, counts=[3])
