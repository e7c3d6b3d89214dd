import math

import pytest

from dpstream.accounting import Accountant
from dpstream.accounting.bounds.gaussian import gdp_epsilon
from dpstream.accounting.calibrate import CalibrationError, FixedEvent, Release, calibrate
from dpstream.accounting.events import Gaussian, Laplace


def test_single_gaussian_matches_analytic_gaussian():
    plan = calibrate([Release("counts", "gaussian", sensitivity=2.0)], epsilon=1.0, delta=1e-5)
    sigma = plan.by_name()["counts"].noise
    # Balle–Wang analytic Gaussian for eps=1, delta=1e-5: sigma/sens ~ 3.73
    assert gdp_epsilon(2.0 / sigma, 1e-5) <= 1.0
    assert gdp_epsilon(2.0 / (sigma * (1 - 1e-5)), 1e-5) > 1.0 - 1e-4
    assert sigma / 2.0 == pytest.approx(3.7305, rel=1e-3)


def test_plan_meets_target_and_is_tight():
    releases = [
        Release("hist", "gaussian", weight=2.0, sensitivity=1.0, count=30),
        Release("lap", "laplace", weight=1.0, sensitivity=1.0, count=30),
    ]
    plan = calibrate(releases, epsilon=2.0, delta=1e-6)
    accountant = Accountant()
    for event in plan.events():
        accountant.compose(event)
    assert accountant.epsilon(1e-6) == pytest.approx(plan.epsilon)
    assert plan.epsilon <= 2.0
    assert plan.epsilon >= 2.0 * (1 - 1e-4)


def test_weights_shift_noise():
    even = calibrate([Release("a", "gaussian"), Release("b", "gaussian")], 1.0, 1e-6).by_name()
    skew = calibrate([Release("a", "gaussian", weight=4.0), Release("b", "gaussian")], 1.0, 1e-6).by_name()
    assert even["a"].noise == pytest.approx(even["b"].noise)
    assert skew["a"].noise < even["a"].noise < skew["b"].noise


def test_more_runs_need_more_noise():
    one = calibrate([Release("a", "laplace", count=1)], 1.0, 1e-6).by_name()["a"].noise
    many = calibrate([Release("a", "laplace", count=10)], 1.0, 1e-6).by_name()["a"].noise
    assert many > one
    assert isinstance(calibrate([Release("a", "laplace")], 1.0, 1e-6).by_name()["a"].event, Laplace)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Release("x", "poisson"), "kind must be one of"),
        (lambda: Release("x", "gaussian", weight=0), "weight must be a positive finite number, got 0"),
        (lambda: Release("x", "gaussian", sensitivity=math.nan), "sensitivity must be a positive finite number"),
        (lambda: Release("x", "gaussian", count=0), "count must be a positive integer, got 0"),
        (lambda: calibrate([], 1.0, 1e-6), "at least one release or fixed event"),
        (lambda: calibrate([Release("a", "gaussian")] * 2, 1.0, 1e-6), "names must be unique"),
        (lambda: calibrate([Release("a", "gaussian")], -1.0, 1e-6), "target epsilon must be a positive"),
        (lambda: calibrate([Release("a", "gaussian")], 1.0, 0.0), r"target delta must lie in \(0, 1\)"),
    ],
)
def test_calibration_errors(build, message):
    with pytest.raises(CalibrationError, match=message):
        build()


def test_gaussian_event_sensitivity_carried():
    plan = calibrate([Release("a", "gaussian", sensitivity=3.0)], 1.0, 1e-6)
    event = plan.by_name()["a"].event
    assert isinstance(event, Gaussian) and event.sensitivity == 3.0


def test_fixed_events_take_their_share_first():
    from dpstream.accounting.events import ApproxDP

    free = calibrate([Release("a", "gaussian")], 1.0, 1e-6).by_name()["a"].noise
    plan = calibrate([Release("a", "gaussian")], 1.0, 1e-6, fixed=(FixedEvent("m", ApproxDP(0.2, 0.0 + 1e-7)),))
    assert plan.by_name()["a"].noise > free
    accountant = Accountant()
    for event in plan.events():
        accountant.compose(event)
    assert accountant.epsilon(1e-6) <= 1.0
    assert plan.events(without=frozenset({"m"})) == plan.events()[:1]


def test_fixed_events_are_told_apart_by_name_and_checked_without_releases():
    from dpstream.accounting.events import ApproxDP

    event = ApproxDP(0.2, 1e-7)  # two monitors with equal parameters: equal events, distinct names
    plan = calibrate([], 1.0, 1e-6, fixed=(FixedEvent("a", event), FixedEvent("b", event)))
    assert plan.events() == (event, event) and plan.releases == ()
    assert plan.events(without=frozenset({"a"})) == (event,) and plan.events(without=frozenset({"a", "b"})) == ()
    assert 0.39 < plan.epsilon <= 0.4  # the accountant composes both: at most basic composition
    with pytest.raises(CalibrationError, match="no fixed events named \\['c'\\]"):
        plan.events(without=frozenset({"c"}))
    with pytest.raises(CalibrationError, match="does not meet epsilon=0.3"):
        calibrate([], 0.3, 1e-6, fixed=(FixedEvent("a", event), FixedEvent("b", event)))
    with pytest.raises(CalibrationError, match="names must be unique"):
        calibrate([Release("a", "gaussian")], 1.0, 1e-6, fixed=(FixedEvent("a", event),))
