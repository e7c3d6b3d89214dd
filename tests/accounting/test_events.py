import dataclasses
import math

import pytest

from dpstream.accounting.event_spec import format_event, parse_event
from dpstream.accounting.events import (
    ZCDP,
    ApproxDP,
    BoundedRange,
    Composed,
    Event,
    Gaussian,
    InvalidEventError,
    Laplace,
    PureDP,
    SelfComposed,
)

LEAVES = [PureDP(0.5), ApproxDP(0.1, 1e-7), BoundedRange(1.0), Laplace(2.0, 3.0), Gaussian(4.0, 0.5), ZCDP(0.2, 1e-9)]


@pytest.mark.parametrize("event", LEAVES)
def test_leaf_events_are_frozen_hashable_and_round_trip(event):
    names = [f.name for f in dataclasses.fields(event)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(event, names[0], 9.0)
    assert hash(event) == hash(type(event)(**{k: getattr(event, k) for k in names}))
    assert Event.from_dict(event.to_dict()) == event
    assert parse_event(format_event(event)) == event


def test_nested_events_round_trip():
    nested = Composed((SelfComposed(Gaussian(2.0), 3), Composed((PureDP(0.1), BoundedRange(0.3)))))
    assert Event.from_dict(nested.to_dict()) == nested


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: PureDP(0.0), "PureDP.epsilon must be a positive finite number, got 0.0"),
        (lambda: PureDP(math.nan), "PureDP.epsilon"),
        (lambda: Gaussian(-1.0), "Gaussian.sigma must be a positive finite number, got -1.0"),
        (lambda: Laplace(1.0, math.inf), "Laplace.sensitivity"),
        (lambda: ApproxDP(0.1, 1.0), r"ApproxDP.delta must lie in \[0, 1\), got 1.0"),
        (lambda: ApproxDP(0.0, 0.0), "ApproxDP needs epsilon > 0 or delta > 0"),
        (lambda: ZCDP(0.1, -1e-9), "ZCDP.delta"),
        (lambda: SelfComposed(PureDP(1.0), -1), "SelfComposed.count must be an integer >= 0, got -1"),
        (lambda: Composed([PureDP(1.0)]), "Composed.events must be a tuple, got list"),
    ],
)
def test_invalid_events_are_rejected_at_construction(build, message):
    with pytest.raises(InvalidEventError, match=message):
        build()


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("pure:epsilon=0.1", PureDP(0.1)),
        ("gaussian:sigma=2,sensitivity=1", Gaussian(2.0, 1.0)),
        ("laplace:scale=10", Laplace(10.0)),
        ("exponential:epsilon=0.5", BoundedRange(0.5)),
        ("approx:epsilon=0.1,delta=1e-7", ApproxDP(0.1, 1e-7)),
        ("zcdp:rho=0.25", ZCDP(0.25)),
    ],
)
def test_parse_event(spec, expected):
    assert parse_event(spec) == expected


@pytest.mark.parametrize(
    "spec, message",
    [
        ("poisson:lam=1", "unknown kind 'poisson'"),
        ("pure:eps=0.1", "expected NAME=VALUE with NAME in"),
        ("pure:epsilon=abc", "epsilon must be a number, got 'abc'"),
        ("pure:epsilon=nan", "got NaN"),
        ("pure:epsilon=-1", "must be a positive finite number, got -1.0"),
        ("gaussian:sensitivity=1", "gaussian needs"),
    ],
)
def test_parse_event_errors(spec, message):
    with pytest.raises(InvalidEventError, match=message):
        parse_event(spec)
