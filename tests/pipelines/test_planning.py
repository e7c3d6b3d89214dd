"""Planning: the whole job meets its budget, and what the mechanisms actually run never costs more than planned."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from dpstream.accounting.accountant import Accountant
from dpstream.accounting.events import ZCDP, Gaussian, GaussianThreshold, Laplace, PureDP, SelfComposed
from dpstream.pipelines import mechanisms
from dpstream.pipelines.config.specs import (
    ContributionBounds,
    HistogramSpec,
    PeakSpec,
    SpecError,
    SvtSpec,
    TopKSpec,
    WindowSpec,
)
from dpstream.pipelines.mechanisms.fixedpoint import to_units
from dpstream.pipelines.mechanisms.noise import SecureRandom, granularity, grid_sensitivity, rounded_sensitivity
from dpstream.pipelines.planning import PlanningError, plan_job
from dpstream.pipelines.planning.grid import grid_noise, normalised_sensitivity
from dpstream.pipelines.planning.histogram import SELECTION_DELTA_SHARE
from dpstream.pipelines.transforms.histogram import _HistogramMechanism, histogram_release
from dpstream.pipelines.transforms.peak import peak_release
from dpstream.pipelines.transforms.topk import topk_release
from tests.pipelines.helpers import DAY, START

LETTERS = tuple("ABCDEFGHIJ")
WINDOW = WindowSpec(size=DAY, start=START, end=START + 60 * DAY)
RELEASES = (
    HistogramSpec("laplace", noise="laplace", partitions=LETTERS, clamp=True),
    HistogramSpec("gaussian", weight=2.0, partitions=LETTERS, clamp=True),
    HistogramSpec("unknown", clamp=True),
    HistogramSpec("truncated", selection="truncated", clamp=True),
    TopKSpec("top", k=3, partitions=LETTERS, counts=True),
    PeakSpec("peak", period=7 * DAY, maximum=5000.0),
)


@pytest.mark.parametrize("bounds", [ContributionBounds(max_partitions=3, max_contributions=2),
                                    ContributionBounds(max_partitions=2, max_contributions=1, min_value=-0.5, max_value=2.5)])
@pytest.mark.parametrize("epsilon, delta", [(1.0, 1e-6), (4.0, 1e-8)])
def test_plan_meets_the_budget(bounds, epsilon, delta):
    plan = plan_job(RELEASES, bounds, WINDOW, epsilon, delta)
    accountant = Accountant()
    for event in plan.events():
        accountant.compose(event)
    assert accountant.epsilon(delta) <= epsilon
    assert plan.epsilon <= epsilon
    assert set(plan.describe()) == {r.name for r in RELEASES}
    selections = (plan["unknown"], plan["truncated"])
    assert sum(s.selection_delta * s.runs for s in selections) <= SELECTION_DELTA_SHARE * delta * (1 + 1e-12)
    assert plan["peak"].runs == 9 and plan["peak"].period_sizes[-1] == 4  # 60 days in weeks: 8 full weeks and 4 days


def _sums(values, partitions):
    return pd.Series(values, index=list(partitions))


@pytest.mark.parametrize("bounds", [ContributionBounds(max_partitions=3, max_contributions=2),
                                    ContributionBounds(max_partitions=2, max_contributions=3, min_value=-0.5, max_value=2.5)])
def test_run_events_never_exceed_planned_events(bounds):
    plan = plan_job(RELEASES, bounds, WINDOW, 2.0, 1e-6)
    rng = SecureRandom(1)
    quantum = bounds.quantum
    data = np.arange(len(LETTERS)) * 37 + (0 if bounds.counting else 0.3)
    sums = _sums(to_units(data, quantum), LETTERS)  # bounded sums are int64 units of the quantum
    for name in ("laplace", "gaussian"):
        planned = plan[name]
        _, release = histogram_release(planned, sums, rng, quantum)
        event = release.event
        if isinstance(event, Laplace):  # a window's L1 against the planned per-cell events of its L0 cells
            assert event.sensitivity / event.scale <= planned.max_partitions * planned.event.sensitivity / planned.event.scale
        else:
            assert isinstance(event, Gaussian) and event.mu <= planned.event.mu
    planned = plan["unknown"]
    _, release = histogram_release(planned, sums, rng, quantum)
    assert isinstance(release.event, GaussianThreshold) and planned.mechanism == "gaussian_threshold"
    assert release.event.mu <= planned.event.mu and release.event.delta == planned.event.delta
    planned = plan["truncated"]
    _, release = histogram_release(planned, sums, rng, quantum)
    assert isinstance(release.event, ZCDP) and planned.mechanism == "truncated_gaussian"
    assert release.event.rho <= planned.event.rho and release.event.delta == planned.event.delta
    planned = plan["top"]
    chosen, selection, counts = topk_release(planned, sums, rng, quantum)
    assert selection.event == planned.event == SelfComposed(planned.event.event, 3) and len(set(chosen)) == 3
    assert counts.event.mu <= planned.count_event.mu
    planned = plan["peak"]
    for size in set(planned.period_sizes):
        _, release = peak_release(planned, to_units(np.linspace(0, 4000, size), quantum), quantum, rng)
        assert isinstance(release.event, PureDP) and release.event.epsilon <= planned.epsilon


@pytest.mark.parametrize("bounds", [ContributionBounds(max_partitions=3, max_contributions=2),
                                    ContributionBounds(max_partitions=4, max_contributions=3, min_value=2.0, max_value=2.0),
                                    ContributionBounds(max_partitions=2, max_contributions=1)])
def test_distinct_selection_is_as_noisy_as_the_sum_selection_and_never_above_plan(bounds):
    releases = (HistogramSpec("sum"), HistogramSpec("distinct", selection="distinct"))
    plan = plan_job(releases, bounds, WINDOW, 2.0, 1e-6)
    distinct, single = plan["distinct"], plan["sum"]
    assert distinct.event == single.event  # same calibration entry, same budget
    assert math.isclose(distinct.noise_stddev, single.noise_stddev, rel_tol=1e-5)
    assert (distinct.extra_noise is None) == (bounds.max_contributions == 1)
    units = np.array([0, 1, 3, 50, 5000])
    frame = pd.DataFrame({"sum": units * bounds.value_units[0] * bounds.max_contributions, "units": units},
                         index=list("vwxyz"))
    partitions, release = histogram_release(distinct, frame, SecureRandom(2), bounds.quantum)
    assert release.event.mu <= distinct.event.mu and release.event.delta == distinct.event.delta
    assert partitions == ["z"]  # far above the cutoff of about 370 units; 50 units far below
    assert "number of distinct privacy units" in distinct.describe()


def test_distinct_selection_needs_a_counting_job():
    bounds = ContributionBounds(max_partitions=2, min_value=0.0, max_value=5.0)
    with pytest.raises(PlanningError, match='release \'d\': selection "distinct" needs a counting job'):
        plan_job((HistogramSpec("d", selection="distinct"),), bounds, WINDOW, 1.0, 1e-6)


@pytest.mark.parametrize("value", [0.1, -0.3, 0.5])  # not dyadic (quantised to 2**-33, 2**-31), dyadic
def test_distinct_selection_with_a_fractional_count_is_exact_and_never_above_plan(value):
    """A fractional counting value lies on its value grid after quantisation, so sums and extras are exact int64
    units and the run's event stays within the plan (formerly refused: float extras could exceed the allowance)."""
    bounds = ContributionBounds(max_partitions=2, max_contributions=3, min_value=value, max_value=value)
    distinct = plan_job((HistogramSpec("d", selection="distinct"),), bounds, WINDOW, 2.0, 1e-6)["d"]
    assert distinct.unit_value == bounds.quantised_range[0] and distinct.sensitivity == bounds.linf
    units = np.array([1, 50, 3000, 3000])
    records = units * np.array([1, 2, 3, 1])
    frame = pd.DataFrame({"sum": records * bounds.value_units[0], "units": units}, index=list("wxyz"))
    partitions, release = histogram_release(distinct, frame, SecureRandom(4), bounds.quantum)
    assert release.event.mu <= distinct.event.mu and release.event.delta == distinct.event.delta
    assert partitions == ["y", "z"]
    kept, values = release.value
    np.testing.assert_allclose(values, records[kept] * bounds.quantised_range[0], atol=30 * distinct.noise_stddev)


def test_counting_plan_keeps_the_calibrated_noise():
    plan = plan_job(RELEASES[:2], ContributionBounds(max_partitions=2), WINDOW, 1.0, 1e-6)
    # Laplace: enlarged only by the discrete-Laplace domination term, one grid step per cell event
    laplace = plan.calibrated.by_name()["laplace"].event
    assert laplace.scale < plan["laplace"].noise <= laplace.scale * (1 + 2 * 2.0**-19 * laplace.scale / laplace.sensitivity)
    # Gaussian: enlarged only by the discrete-Gaussian domination term, sqrt(L0) grid steps of sensitivity
    calibrated = plan.calibrated.by_name()["gaussian"].event
    gaussian = plan["gaussian"]
    assert calibrated.sigma < gaussian.noise_stddev <= calibrated.sigma * (1 + 2 * math.sqrt(2) * 2.0**-19 * calibrated.sigma / calibrated.sensitivity)
    assert math.isclose(plan["laplace"].noise_stddev, math.sqrt(2) * plan["laplace"].noise)


@pytest.mark.parametrize("quantum", [2.0**-20, 1.0, 2.0])
@pytest.mark.parametrize("noise", [2.0**-3, 5.0, 3.0e6])  # grid steps 2**-23, 2**-17, 4
@pytest.mark.parametrize("norm", [1, 2])
def test_planner_and_mechanism_agree_on_when_sums_are_rounded(quantum, noise, norm):
    """Sums are int64 units of the quantum: no rounding allowance exactly when the grid step is at most the
    quantum (for quantum 1: the former integral-counts rule), and the run's sensitivity is the planned one."""
    sensitivity = 3000.0
    planned, effective = grid_noise(noise, sensitivity, quantum, changed=2, norm=norm)
    mechanism = mechanisms.laplace if norm == 1 else mechanisms.gaussian
    release = mechanism(np.array([5, -7], dtype=np.int64), planned, SecureRandom(1), sensitivity=sensitivity,
                        max_partitions=2, quantum=quantum)
    assert release.event.sensitivity == effective and effective / planned <= sensitivity / noise
    step = granularity(planned)  # both norms always add a step per changed cell in their norm for discreteness
    assert (rounded_sensitivity(sensitivity, step, step <= quantum, 2, norm) == sensitivity) == (step <= quantum)
    assert effective == grid_sensitivity(sensitivity, step, step <= quantum, 2, norm) > sensitivity


def test_peak_and_svt_plan_the_rounding_of_their_division():
    releases = (PeakSpec("peak", period=7 * DAY, maximum=1100.0),
                SvtSpec("alerts", metric="count", maximum=500.0, threshold=0.5, sigma_threshold=0.2))
    plan = plan_job(releases, ContributionBounds(max_partitions=2), WINDOW, 2.0, 1e-6)
    assert plan["peak"].sensitivity == normalised_sensitivity(2.0, 1100.0) > 2.0 / 1100.0
    assert plan["alerts"].sensitivity == normalised_sensitivity(2.0, 500.0) > 2.0 / 500.0


def test_more_budget_means_less_noise():
    bounds = ContributionBounds(max_partitions=2)
    small, large = (plan_job(RELEASES, bounds, WINDOW, e, 1e-6) for e in (0.5, 2.0))
    for name in ("laplace", "gaussian", "unknown", "truncated"):
        assert large[name].noise < small[name].noise
    assert large["top"].epsilon > small["top"].epsilon and large["peak"].sigma < small["peak"].sigma


@pytest.mark.parametrize("bounds, expected", [
    (ContributionBounds(max_partitions=2), (0.0, math.inf)),
    (ContributionBounds(max_partitions=2, min_value=-0.5, max_value=2.5), (-math.inf, math.inf)),
    (ContributionBounds(max_partitions=2, min_value=-3.0, max_value=0.0), (-math.inf, 0.0)),
])
def test_histograms_clamp_to_the_range_bounded_sums_can_take(bounds, expected):
    releases = RELEASES[:3] + (dataclasses.replace(RELEASES[1], name="raw", clamp=False),)
    plan = plan_job(releases, bounds, WINDOW, 1.0, 1e-6)
    assert [plan[name].value_range for name in ("laplace", "gaussian", "unknown")] == [expected] * 3
    assert plan["raw"].value_range == (-math.inf, math.inf) and "clamped" not in plan["raw"].describe()
    assert ("clamped" in plan["gaussian"].describe()) == (expected != (-math.inf, math.inf))


def test_clamped_rows_are_the_unclamped_rows_clamped():
    """Same seed, same window: the clamped release equals max(unclamped, 0) row by row, and does clamp some."""
    bounds = ContributionBounds(max_partitions=2)
    plan = plan_job(RELEASES[1:2], bounds, WINDOW, 0.5, 1e-6)["gaussian"]
    raw = dataclasses.replace(plan, value_range=(-math.inf, math.inf))
    sums = _sums(np.zeros(len(LETTERS), dtype=np.int64), LETTERS)  # empty partitions: half the noise is negative
    for index in range(5):
        clamped_rows = list(_HistogramMechanism(plan, WINDOW, 3, bounds.quantum).process((index, sums)))
        raw_rows = list(_HistogramMechanism(raw, WINDOW, 3, bounds.quantum).process((index, sums)))
        assert [r["value"] for r in clamped_rows] == [max(r["value"], 0.0) for r in raw_rows]
    assert any(r["value"] < 0 for r in raw_rows)


@pytest.mark.parametrize("fields, message", [
    ({"k": 2, "partitions": None}, "release 't': topk needs a public partitions list"),
    ({"k": 4, "partitions": ("a", "b")}, "release 't': k must be at most the 2 listed partitions, got 4"),
])
def test_topk_spec_errors_name_the_release(fields, message):
    with pytest.raises(SpecError, match=message):
        TopKSpec("t", **fields)


@pytest.mark.parametrize("release, message", [
    (PeakSpec("p", period=1.5 * DAY, maximum=100.0), "multiple of the window step"),
    (PeakSpec("p", period=7 * DAY, maximum=1.0), "maximum must be at least the L1 sensitivity 2"),
    (SvtSpec("s", maximum=1.0, threshold=0.5, sigma_threshold=0.2), "maximum must be at least the sensitivity 2"),
])
def test_plan_errors_name_the_release(release, message):
    with pytest.raises(PlanningError, match=message):
        plan_job((release,), ContributionBounds(max_partitions=2), WINDOW, 1.0, 1e-6)


def test_peak_spec_needs_a_public_maximum():
    with pytest.raises(SpecError, match="release 'p': maximum must be a positive number"):
        PeakSpec("p", period=7 * DAY, maximum=None)


def test_grid_noise_settles_where_float_rounding_leaves_the_ratio_one_ulp_high():
    """An input on which the update stalled at 1 ulp above the planned ratio (adversarial review)."""
    planned, effective = grid_noise(4346724586328.1147, 1124146872320.0, 2097152.0, 1, 1)
    assert effective / planned <= 1124146872320.0 / 4346724586328.1147


@pytest.mark.parametrize("l0, m, value, total", [(4948, 31, 3.0, None), (238, 17, 0.1, 166), (7, 3, 2.5, 10)])
def test_l2_sensitivities_are_rounded_up(l0, m, value, total):
    """sqrt(L0) Linf and the mass bound are at or above their exact values (exact rationals), and within one ulp."""
    from fractions import Fraction

    bounds = ContributionBounds(max_partitions=l0, max_contributions=m, min_value=-value, max_value=value,
                                max_contributions_total=total)
    k = max(abs(u) for u in bounds.value_units)
    exact_l2 = Fraction(l0 * (m * k) ** 2) * Fraction(bounds.quantum) ** 2
    assert Fraction(bounds.l2) ** 2 >= exact_l2 > Fraction(math.nextafter(bounds.l2, 0.0)) ** 2
    if total is not None:
        full, rest = divmod(total, m)
        exact_mass = Fraction((full * m * m + rest * rest) * k * k) * Fraction(bounds.quantum) ** 2
        assert Fraction(bounds.mass_l2) ** 2 >= exact_mass > Fraction(math.nextafter(bounds.mass_l2, 0.0)) ** 2


WINDOW_EVENT_RELEASES = {
    "gaussian known": (HistogramSpec("h", partitions=("a", "b", "c")),),
    "gaussian unknown": (HistogramSpec("h"),),
    "laplace known": (HistogramSpec("h", partitions=("a", "b"), noise="laplace"),),
    "top-k and counts": (HistogramSpec("h", partitions=("a", "b", "c")), TopKSpec("t", k=2, partitions=("a", "b", "c"))),
}


@pytest.mark.parametrize("name", sorted(WINDOW_EVENT_RELEASES))
def test_one_window_event_run_once_per_window_is_exactly_the_whole_plan(name):
    """A plain-scope stream pays `window_event` per window: W of them must be the plan's events, leaf for leaf,
    so an additive filter charges W windows exactly what it charges the whole plan."""
    from dpstream.accounting.composition import leaf_counts
    from dpstream.accounting.events import Composed

    window = WindowSpec(size=3600, start=0, end=24 * 3600)
    plan = plan_job(WINDOW_EVENT_RELEASES[name], ContributionBounds(max_partitions=2), window, 1.0, 1e-6)
    event = plan.window_event()
    assert event is not None
    assert dict(leaf_counts(SelfComposed(event, window.count))) == dict(leaf_counts(Composed(plan.events())))


@pytest.mark.parametrize("bounds, releases, unit_period", [
    (ContributionBounds(max_windows=2), (HistogramSpec("h", partitions=("a",)),), None),
    (ContributionBounds(), (PeakSpec("p", period=7200, maximum=10.0),), None),
    (ContributionBounds(), (HistogramSpec("h", partitions=("a",)),), 7200),
])
def test_windows_that_share_state_or_budget_have_no_window_event(bounds, releases, unit_period):
    window = WindowSpec(size=3600, start=0, end=24 * 3600)
    assert plan_job(releases, bounds, window, 1.0, 1e-6, unit_period).window_event() is None


@pytest.mark.parametrize("releases", [
    (SvtSpec("s", metric="count", maximum=500.0, threshold=0.5, sigma_threshold=0.2),),
    (HistogramSpec("h", partitions=("a", "b"), noise="laplace"),
     SvtSpec("s", metric="count", maximum=500.0, threshold=0.5, sigma_threshold=0.2)),
])
def test_a_stream_with_monitors_pays_their_opening_once_and_the_rest_per_window(releases):
    """The opening (the new monitors' budgets) plus W window events are the plan's events, leaf for leaf; a
    continued monitor opens nothing and its plan's events are the W windows alone."""
    from dpstream.accounting.composition import leaf_counts
    from dpstream.accounting.events import Composed

    window = WindowSpec(size=3600, start=0, end=24 * 3600)
    plan = plan_job(releases, ContributionBounds(max_partitions=2), window, 1.0, 1e-6)
    event, opening = plan.window_event(), plan.opening_event()
    assert event is not None and opening is not None
    assert (dict(leaf_counts(Composed((opening, SelfComposed(event, window.count)))))
            == dict(leaf_counts(Composed(plan.events()))))
    assert plan.opening_event(frozenset({"s"})) is None
    assert (dict(leaf_counts(SelfComposed(event, window.count)))
            == dict(leaf_counts(Composed(plan.events(frozenset({"s"}))))))
