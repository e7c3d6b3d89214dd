"""Privacy filters against the oracles of the Regehr et al. and Lebensold et al. notes.

Exact references are computed with mpmath (40 digits) in the tests only.
"""
from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import pytest

from dpstream.accounting.events import ZCDP, ApproxDP, BoundedRange, Gaussian, Laplace, PureDP, SelfComposed
from dpstream.accounting.filters import (
    ApproxDPFilter,
    FSRCFilter,
    GDPFilter,
    GDPResidueFilter,
    PrivacyFilter,
    PureDPFilter,
    UnsupportedByFilterError,
    WhitehouseFilter,
    ZCDPFilter,
    gdp_mu_for,
    randomized_response_mu,
    scope_filter,
    zcdp_rho_for,
)
from dpstream.accounting.filters.fsrc import basel_delta

mpmath.mp.dps = 40


def _mp_gdp_delta(mu, s):
    """H_{e^s}(G_mu) = Phi(-s/mu + mu/2) - e^s Phi(-s/mu - mu/2), exact."""
    mu, s = mpmath.mpf(mu), mpmath.mpf(s)
    return mpmath.ncdf(-s / mu + mu / 2) - mpmath.exp(s) * mpmath.ncdf(-s / mu - mu / 2)


# -- contract suite: every event filter ------------------------------------------------------------


class EventFilterContract:
    """Subclasses give `make()` and an event the filter prices; the contract checks the shared semantics."""

    event = PureDP(0.3)

    def make(self):
        raise NotImplementedError

    def test_admits_changes_nothing(self):
        f = self.make()
        before = f.to_dict()
        assert f.admits(self.event)
        assert f.to_dict() == before

    def test_refusal_leaves_state_or_halts(self):
        f = self.make()
        while f.try_spend(self.event):
            pass
        state = f.to_dict()
        assert not f.try_spend(self.event)
        assert f.to_dict() == state
        if f.halts_on_refusal:
            assert f.halted and not f.try_spend(SelfComposed(self.event, 0))
        else:
            assert not f.halted

    def test_serialisation_round_trip(self):
        f = self.make()
        f.try_spend(self.event)
        g = PrivacyFilter.from_dict(f.to_dict())
        assert g.to_dict() == f.to_dict()
        assert [f.try_spend(self.event) for _ in range(30)] == [g.try_spend(self.event) for _ in range(30)]


@pytest.mark.parametrize(
    "make,bad",
    [
        (lambda: PureDPFilter(1.0), Gaussian(1.0)),
        (lambda: ZCDPFilter(1.0), ZCDP(0.01, delta=1e-9)),
        (lambda: GDPFilter(1.0), ApproxDP(0.1, 1e-9)),
        (lambda: GDPResidueFilter(1.0), ZCDP(0.01)),
    ],
)
def test_unknown_leaf_is_an_error_and_changes_nothing(make, bad):
    from dpstream.accounting.events import Composed

    f = make()
    before = f.to_dict()
    with pytest.raises(UnsupportedByFilterError, match=f"cannot price {type(bad).__name__}"):
        f.try_spend(Composed((PureDP(0.01), bad)))
    assert f.to_dict() == before


class TestPureContract(EventFilterContract):
    def make(self):
        return PureDPFilter(2.0)


class TestApproxContract(EventFilterContract):
    event = Gaussian(4.0)

    def make(self):
        return ApproxDPFilter(3.0, 1e-6)


class TestZCDPContract(EventFilterContract):
    def make(self):
        return ZCDPFilter(0.5)


class TestWhitehouseContract(EventFilterContract):
    def make(self):
        return WhitehouseFilter(2.0, 1e-6)


class TestGDPContract(EventFilterContract):
    def make(self):
        return GDPFilter(1.5)


class TestGDPResidueContract(EventFilterContract):
    def make(self):
        return GDPResidueFilter(1.5)


@pytest.mark.parametrize(
    "make",
    [lambda: PureDPFilter(3.0), lambda: ZCDPFilter(0.4), lambda: WhitehouseFilter(3.0, 1e-6), lambda: GDPFilter(2.0)],
)
def test_additive_filters_price_count_k_like_k_spends(make):
    """Exact rational filters agree exactly; the float GDP filter to rounding, never leaving more after k spends."""
    for event in (PureDP(0.2), Laplace(5.0), BoundedRange(0.3), Gaussian(9.0)):
        once, one_by_one = make(), make()
        if isinstance(once, PureDPFilter) and isinstance(event, Gaussian):
            continue
        assert once.try_spend(SelfComposed(event, 7))
        for _ in range(7):
            assert one_by_one.try_spend(event)
        if isinstance(once, GDPFilter):
            assert one_by_one.remaining_mu == pytest.approx(once.remaining_mu, rel=1e-13)
        else:
            assert once.to_dict()["state"] == one_by_one.to_dict()["state"]


# -- F1 pure DP ----------------------------------------------------------------------------------


def test_pure_filter_ten_tenths_fill_one():
    f = PureDPFilter(1.0)
    assert [f.try_spend(PureDP(0.1)) for _ in range(11)] == [True] * 10 + [False]
    assert f.remaining == 0


def test_pure_filter_keeps_serving_smaller_requests():
    f = PureDPFilter(1.0)
    assert f.try_spend(PureDP(0.7))
    assert not f.try_spend(PureDP(0.5))
    assert f.try_spend(Laplace(scale=5.0, sensitivity=1.5))  # 0.3


# -- basic (epsilon, delta) ----------------------------------------------------------------------


def test_approx_filter_prices_with_the_accountant():
    from dpstream.accounting import Accountant

    f = ApproxDPFilter(2.0, 1e-6, release_delta=1e-7)
    release = SelfComposed(Gaussian(sigma=8.0), 3)
    expected = Accountant().compose(release).epsilon(1e-7)
    assert f.try_spend(release)
    assert f.public_dict()["spent_epsilon"] == pytest.approx(expected, rel=1e-15)
    assert f.public_dict()["spent_delta"] == pytest.approx(1e-7)
    assert f.try_spend(Composed_pure_approx())
    assert f.public_dict()["spent_delta"] == pytest.approx(1e-7 + 2e-8)


def Composed_pure_approx():
    from dpstream.accounting.events import Composed

    return Composed((PureDP(0.1), ApproxDP(0.2, 1e-8), ApproxDP(0.2, 1e-8)))


def test_approx_filter_delta_budget_binds():
    f = ApproxDPFilter(100.0, 1e-6, release_delta=3e-7)
    assert [f.try_spend(Gaussian(1.0)) for _ in range(4)] == [True, True, True, False]


# -- F4 zCDP and the Whitehouse filter -----------------------------------------------------------


@pytest.mark.parametrize("epsilon,delta", [(1.0, 1e-6), (0.1, 1e-9), (5.0, 1e-3)])
def test_zcdp_budget_converts_back_within_epsilon(epsilon, delta):
    rho = zcdp_rho_for(epsilon, delta)
    exact = (mpmath.sqrt(mpmath.log(1 / mpmath.mpf(delta)) + epsilon) - mpmath.sqrt(mpmath.log(1 / mpmath.mpf(delta)))) ** 2
    assert rho <= exact and rho == pytest.approx(float(exact), rel=1e-13)
    assert rho + 2 * math.sqrt(rho * math.log(1 / delta)) <= epsilon


def test_zcdp_filter_prices_each_kind():
    f = ZCDPFilter(1.0)
    assert f.try_spend(Gaussian(sigma=2.0, sensitivity=1.0))  # 1/8
    assert f.try_spend(PureDP(1.0))  # 1/2
    assert f.try_spend(BoundedRange(1.0))  # 1/8
    assert not f.try_spend(ZCDP(0.3))  # 0.75 + 0.3 > 1
    assert f.try_spend(Laplace(scale=2.0))  # 1/8
    assert f.public_dict()["spent_rho"] == 0.875


def test_whitehouse_matches_theorem_20_and_halts():
    """Lebensold et al. Thm 20: stop before step t+1 when eps < sqrt(2 ln(1/d') S) + S/2 (S = sum eps_m^2) or d'' < sum d_m."""
    epsilon, delta = 1.0, 1e-6
    f = WhitehouseFilter(epsilon, delta)
    costs = [(0.2, 1e-8), (0.15, 0.0), (0.3, 2e-7), (0.1, 0.0), (0.25, 1e-7), (0.2, 0.0), (0.05, 0.0)]
    squares, deltas, expected = 0.0, 0.0, []
    stopped = False
    for eps_t, delta_t in costs:
        s, d = squares + eps_t**2, deltas + delta_t
        ok = not stopped and math.sqrt(2 * math.log(2 / delta) * s) + s / 2 <= epsilon and d <= delta / 2
        stopped = stopped or not ok
        if ok:
            squares, deltas = s, d
        expected.append(ok)
        event = ApproxDP(eps_t, delta_t) if delta_t else PureDP(eps_t)
        assert f.try_spend(event) == ok
    assert expected.count(False) >= 1 and f.halted
    assert not f.try_spend(PureDP(1e-6))


# -- F2 / F3 GDP ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "epsilon,nu", [(0.1, 0.125309), (0.25, 0.312979), (0.5, 0.623893), (1.0, 1.232035), (2.0, 2.357961)]
)
def test_randomized_response_mu(epsilon, nu):
    value = randomized_response_mu(epsilon)
    exact = 2 * mpmath.sqrt(2) * mpmath.erfinv(mpmath.tanh(mpmath.mpf(epsilon) / 2))
    assert value >= exact and value == pytest.approx(float(exact), rel=1e-12)
    assert value == pytest.approx(nu, abs=1e-6)
    # R_eps <= G_nu exactly when the Gaussian trade-off curve is below R_eps's kink (alpha*, alpha*).
    alpha = 1 / (1 + mpmath.exp(epsilon))
    assert mpmath.ncdf(mpmath.erfinv(1 - 2 * alpha) * mpmath.sqrt(2) - value) <= alpha
    assert mpmath.ncdf(mpmath.erfinv(1 - 2 * alpha) * mpmath.sqrt(2) - 0.999 * value) > alpha


@pytest.mark.parametrize(
    "epsilon,delta,mu", [(1.0, 1e-5, 0.268051), (1.0, 1e-6, 0.236704), (2.0, 1e-5, 0.501552), (0.5, 1e-6, 0.124106)]
)
def test_gdp_budget_for_epsilon_delta(epsilon, delta, mu):
    value = gdp_mu_for(epsilon, delta)
    assert value == pytest.approx(mu, abs=1e-6)
    assert _mp_gdp_delta(value, epsilon) <= delta
    assert _mp_gdp_delta(value * (1 + 1e-9), epsilon) > delta


def _count(f, event, limit=200):
    n = 0
    while n < limit and f.try_spend(event):
        n += 1
    return n


@pytest.mark.parametrize(
    "epsilon,mu,naive,residue",
    [(0.5, 2.0, 10, 15), (0.1, 1.0, 63, 98), (0.25, 1.0, 10, 15), (0.5, 1.0, 2, 3), (1.0, 2.0, 2, 3), (1.0, 3.0, 5, 8)],
)
def test_gdp_residue_counts(epsilon, mu, naive, residue):
    """Regehr note §3.2-C: identical randomized-response queries admitted naively and with residues."""
    assert _count(GDPFilter(mu), PureDP(epsilon)) == naive
    assert _count(GDPResidueFilter(mu), PureDP(epsilon)) == residue


def test_gdp_residue_trajectory():
    expected = [1.93646, 1.87071, 1.80250, 1.73153, 1.65744, 1.57976, 1.49791, 1.41112,
                1.31837, 1.21818, 1.10838, 0.98541, 0.84269, 0.66473, 0.37654]
    f = GDPResidueFilter(2.0)
    for value in expected:
        assert f.try_spend(PureDP(0.5))
        assert f.remaining_mu == pytest.approx(value, abs=1e-5)
    assert not f.try_spend(PureDP(0.5))


@pytest.mark.parametrize(
    "mu,epsilon,mu_res",
    [(2.0, 0.5, 1.93646), (1.0, 0.5, 0.85999), (0.5, 0.25, 0.42938), (2.0, 1.0, 1.72914), (3.0, 2.0, 2.27290)],
)
def test_gdp_residue_one_step_is_valid_and_maximal(mu, epsilon, mu_res):
    """Note §3.2-B values; residue condition and maximality checked in mpmath on a dense grid of x >= 1."""
    f = GDPResidueFilter(mu)
    assert f.try_spend(PureDP(epsilon))
    value = f.remaining_mu
    assert value == pytest.approx(mu_res, abs=1e-5)
    assert math.sqrt(mu**2 - randomized_response_mu(epsilon) ** 2) <= value <= mu
    p = mpmath.exp(epsilon) / (1 + mpmath.exp(epsilon))

    def gap(inner, s):  # h_{G_mu} - h_{G_inner (+) R_eps} at x = e^s
        return _mp_gdp_delta(mu, s) - p * _mp_gdp_delta(inner, s - epsilon) - (1 - p) * _mp_gdp_delta(inner, s + epsilon)

    grid = [mpmath.mpf(i) / 50 * mu for i in range(0, 400)]
    assert min(gap(value, s) for s in grid) >= -1e-30
    assert min(gap(value + 1e-4, s) for s in grid) < 0


def test_gdp_residue_equals_naive_for_gaussians():
    naive, residue = GDPFilter(1.0), GDPResidueFilter(1.0)
    for sigma in (3.0, 2.0, 4.0):
        assert naive.try_spend(Gaussian(sigma)) and residue.try_spend(Gaussian(sigma))
        assert residue.remaining_mu == naive.remaining_mu
    assert naive.remaining_mu == pytest.approx(math.sqrt(1 - 1 / 9 - 1 / 4 - 1 / 16), rel=1e-14)


def test_gdp_residue_release_of_many_events_is_one_residue_step():
    """A release of 99 RR_0.1 composed at once fits mu = 1 (exact non-adaptive count 99, note §3.2-C)."""
    f = GDPResidueFilter(1.0)
    assert f.try_spend(SelfComposed(PureDP(0.1), 99))
    assert not GDPResidueFilter(1.0).try_spend(SelfComposed(PureDP(0.1), 101))


def test_gdp_residue_prices_laplace_at_randomized_response():
    """Laplace(b=2) priced as R_0.5: one step from mu=2 gives 1.93646 <= the exact Laplace residue 1.94506 (note §3.2-D)."""
    f = GDPResidueFilter(2.0)
    assert f.try_spend(Laplace(scale=2.0))
    assert 1.91948 <= f.remaining_mu <= 1.94506
    assert f.remaining_mu == pytest.approx(1.93646, abs=1e-5)


# -- FSRC ----------------------------------------------------------------------------------------


def test_fsrc_admits_charges_and_halts():
    f = FSRCFilter(1.0, 1e-6)
    assert f.admits(0.4, 1e-7)
    f.charge(0.1)
    assert f.admits(0.8, 1e-7)  # 0.1 + 0.8 < 1
    f.charge(0.5)
    assert not f.admits(0.4, 1e-7)  # 0.6 + 0.4 >= 1: HALT (Alg. 4 uses >=)
    assert f.halted and not f.admits(0.0, 0.0)
    with pytest.raises(ValueError, match="needs an admitted mechanism"):
        f.charge(0.1)


def test_fsrc_deltas_of_admitted_mechanisms_add_up_and_the_delta_budget_halts():
    f = FSRCFilter(10.0, 1e-6)
    for _ in range(4):  # 4 x 0.25e-6 fills delta exactly (exact rationals: no drift)
        assert f.admits(0.1, 0.25e-6)
        f.charge(0.0)
    assert f.instances == 4 and f.delta_used == 1e-6 and not f.halted
    assert not f.admits(0.0, 1e-18)  # epsilon is far from spent, delta is not: HALT
    assert f.halted and f.public_dict() == {"filter": "fsrc", "epsilon": 10.0, "delta": 1e-6, "instances": 4,
                                            "delta_used": 1e-6, "halted": True}


def test_basel_schedule_sums_below_delta_and_feeds_the_filter_for_ever():
    delta = 1e-6
    terms = [basel_delta(delta, t) for t in range(1, 20001)]
    assert terms[0] == pytest.approx(delta * 6 / math.pi**2, rel=1e-15) and terms[0] < delta * 6 / math.pi**2
    assert all(a > b for a, b in zip(terms, terms[1:]))
    tail = delta * 6 / math.pi**2 / 20000  # the sum over t > 20000 of 1/t^2 is below 1/20000
    assert Fraction(0) < sum(map(Fraction, terms)) < Fraction(delta) - Fraction(tail) * Fraction(1, 2)
    f = FSRCFilter(1.0, delta)
    for t in range(1, 20001):
        assert f.admits(0.0, basel_delta(delta, t))
        f.charge(0.0)
    assert f.delta_used < delta and not f.halted
    with pytest.raises(ValueError, match="instance"):
        basel_delta(delta, 0)


def test_fsrc_state_is_sealed_but_resumable():
    f = FSRCFilter(2.0, 1e-6)
    assert f.admits(0.5, 3e-7)
    f.charge(0.3125)
    assert "spent" not in str(f.public_dict()) and "0.3125" not in str(f.public_dict())
    g = PrivacyFilter.from_dict(f.to_dict())
    assert g.instances == 1 and g.delta_used == 3e-7
    assert g.admits(1.68, 7e-7) and not FSRCFilter.from_dict(f.to_dict()).admits(1.6875, 1e-7)
    assert not FSRCFilter.from_dict(f.to_dict()).admits(0.1, 7.000001e-7)


def test_fsrc_refuses_a_state_sealed_under_the_published_rule():
    legacy = {"filter": "fsrc", "parameters": {"epsilon": 1.0, "delta": 1e-6},
              "state": {"spent_epsilon": 0.2, "open": False}, "halted": False}
    with pytest.raises(ValueError, match="predates the filter's delta budget"):
        PrivacyFilter.from_dict(legacy)


def test_fsrc_rejects_bad_values():
    f = FSRCFilter(1.0, 1e-6)
    for bad in (-0.1, math.nan, math.inf):
        with pytest.raises(ValueError, match="eps_max"):
            f.admits(bad, 1e-7)
    for bad in (-1e-7, 1.0, math.nan):
        with pytest.raises(ValueError, match="delta"):
            f.admits(0.1, bad)
    assert f.instances == 0 and not f.halted


# -- scope construction --------------------------------------------------------------------------


def test_scope_filters_from_epsilon_delta():
    assert scope_filter("gdp", 1.0, 1e-5).mu == pytest.approx(0.268051, abs=1e-6)
    assert scope_filter("zcdp", 1.0, 1e-6).rho == zcdp_rho_for(1.0, 1e-6)
    with pytest.raises(ValueError, match="needs delta > 0"):
        scope_filter("gdp-residue", 1.0, 0.0)
    with pytest.raises(ValueError, match="unknown filter"):
        scope_filter("natural", 1.0, 1e-6)
    with pytest.raises(ValueError, match="takes options"):
        scope_filter("pure", 1.0, 0.0, release_delta=1e-7)


def test_approx_filter_charges_the_cheaper_valid_price():
    """25 x PureDP(0.1) in one release: basic costs (2.5, 0); KOV at 1e-7 costs about (2.2, 1e-7).
    With delta to spare the tight price is charged; with little delta budget the basic one."""
    from dpstream.accounting import Accountant
    from dpstream.accounting.events import SelfComposed as SC

    kov = Accountant().compose(PureDP(0.1), count=25).epsilon(1e-7)
    assert kov < 2.3
    roomy = ApproxDPFilter(10.0, 1e-4, release_delta=1e-7)
    assert roomy.try_spend(SC(PureDP(0.1), 25))
    assert roomy.public_dict()["spent_epsilon"] == pytest.approx(kov, rel=1e-12)
    assert roomy.public_dict()["spent_delta"] == pytest.approx(1e-7)

    tight_delta = ApproxDPFilter(10.0, 1e-9, release_delta=1e-9)
    assert tight_delta.try_spend(SC(PureDP(0.01), 3))  # KOV gains nothing at k=3: basic (0.03, 0) is cheaper
    assert tight_delta.public_dict()["spent_delta"] == 0


def test_basel_terms_never_exceed_the_exact_ones():
    """Each term is at most delta 6/(pi^2 t^2) exactly (50-digit pi), also where float arithmetic rounds up."""
    with mpmath.workdps(50):
        six_over_pi2 = 6 / mpmath.pi**2
        for delta, t in [(1e-6, 326416), (1e-6, 1), (0.3, 7), (1e-12, 10**9), (0.999, 2)] + [
            (1e-6, t) for t in range(1, 2000, 37)
        ]:
            assert mpmath.mpf(basel_delta(delta, t)) <= mpmath.mpf(delta) * six_over_pi2 / t**2
            assert basel_delta(delta, t) >= delta * 6 / math.pi**2 / t**2 * (1 - 1e-15)


EVEN_CASES = [  # (filter kind, one window's event, whether its windows may be paid one at a time)
    ("pure", (Laplace(20.0, 1.0), BoundedRange(0.01)), True),
    ("approx", (Laplace(20.0, 1.0), BoundedRange(0.01)), True),  # basic composition: the sum is the price
    ("approx", (Gaussian(10.0, 1.0),), False),  # the accountant prices the whole below the sum of its windows
    ("zcdp", (Gaussian(10.0, 1.0), BoundedRange(0.02)), True),
    ("whitehouse", (Gaussian(10.0, 1.0), Laplace(40.0, 1.0)), True),
    ("gdp", (Gaussian(10.0, 1.0), BoundedRange(0.02)), True),
    ("gdp-residue", (Gaussian(10.0, 1.0),), True),
    ("gdp-residue", (Gaussian(10.0, 1.0), BoundedRange(0.02)), False),  # the residue keeps more when together
    ("pure", (Gaussian(10.0, 1.0),), False),  # cannot price it at all
]


@pytest.mark.parametrize("kind, leaves, evenly", EVEN_CASES)
def test_charges_evenly_means_w_rounds_cost_exactly_one_charge_of_their_composition(kind, leaves, evenly):
    """Oracle: charge the W windows one round at a time and their composition once, on two copies of the same
    filter (after an earlier release), and compare what each leaves. `charges_evenly` must say yes only when
    every round is admitted and the two agree (exactly for rational filters, to 1e-12 for the GDP floats); the
    approx case with a Gaussian is the negative control: W rounds cost more there."""
    from dpstream.accounting.events import Composed

    windows, window = 24, Composed(tuple(leaves))
    budget_filter = scope_filter(kind, 4.0, 1e-6)
    if evenly:
        assert budget_filter.try_spend(window)  # an earlier release: the answer is about the state now
    assert budget_filter.charges_evenly(window, windows) == evenly
    if not evenly:
        return
    split, whole = (PrivacyFilter.from_dict(budget_filter.to_dict()) for _ in range(2))
    assert all(split.try_spend(window) for _ in range(windows)) and whole.try_spend(SelfComposed(window, windows))
    for name, value in whole.left_terms().items():
        assert split.left_terms()[name] == pytest.approx(value, rel=1e-12, abs=1e-15), name


OPENING_CASES = [  # (filter kind, one window's leaves, the monitors' opening, whether the rounds cost the whole)
    ("approx", (Laplace(20.0, 1.0),), ApproxDP(0.5, 1e-7), True),
    ("approx", (), ApproxDP(0.5, 1e-7), True),  # svt releases only: the opening is the whole price
    ("pure", (Laplace(20.0, 1.0), BoundedRange(0.01)), PureDP(0.5), True),
    ("approx", (Gaussian(10.0, 1.0),), ApproxDP(0.5, 1e-7), False),  # the windows compose below their sum
    ("approx", (Laplace(20.0, 1.0),), ApproxDP(3.9, 1e-7), False),  # the opening and 24 windows do not all fit
]


@pytest.mark.parametrize("kind, leaves, opening, evenly", OPENING_CASES)
def test_an_opening_then_w_window_rounds_cost_exactly_one_charge_of_the_whole(kind, leaves, opening, evenly):
    """A stream with svt monitors pays their budgets once when it opens them, then each window: the same oracle as
    above with the opening as the first round (and in the whole composition)."""
    from dpstream.accounting.events import Composed

    windows, window = 24, Composed(tuple(leaves))
    budget_filter = scope_filter(kind, 4.0, 1e-6)
    assert budget_filter.charges_evenly(window, windows, opening) == evenly
    if not evenly:
        return
    split, whole = (PrivacyFilter.from_dict(budget_filter.to_dict()) for _ in range(2))
    assert split.try_spend(opening) and all(split.try_spend(window) for _ in range(windows))
    assert whole.try_spend(Composed((opening, SelfComposed(window, windows))))
    for name, value in whole.left_terms().items():
        assert split.left_terms()[name] == pytest.approx(value, rel=1e-12, abs=1e-15), name


def test_an_approx_gaussian_split_into_rounds_would_cost_more():
    from dpstream.accounting.events import Composed

    window, approx = Composed((Gaussian(10.0, 1.0),)), ApproxDPFilter(4.0, 1e-6)
    assert 24 * approx.cost_terms(window)["epsilon"] > 2 * approx.cost_terms(SelfComposed(window, 24))["epsilon"]


def test_charges_evenly_refuses_when_the_rounds_do_not_all_fit_and_changes_nothing():
    from dpstream.accounting.events import Composed

    window, pure = Composed((Laplace(10.0, 1.0),)), PureDPFilter(1.0)  # 0.1 per window
    before = pure.to_dict()
    assert pure.charges_evenly(window, 10) and not pure.charges_evenly(window, 11)
    assert pure.to_dict() == before
