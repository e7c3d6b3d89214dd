"""Properties every answer of the accountant must have, for every event type and mixes of them.

Equivalent compositions give identical answers; epsilon(delta) and delta(epsilon)
are inverse; answers are monotone in the number of events, the noise and delta.
"""
import math

import pytest

from dpstream.accounting import Accountant
from dpstream.accounting.events import ZCDP, ApproxDP, BoundedRange, Composed, Gaussian, Laplace, PureDP, SelfComposed

EVENTS = {
    "pure": PureDP(0.3),
    "approx": ApproxDP(0.3, 1e-11),
    "exponential": BoundedRange(0.5),
    "laplace": Laplace(4.0, 1.0),
    "gaussian": Gaussian(3.0, 1.0),
    "zcdp": ZCDP(0.02),
}
PLANS = {name: [event] for name, event in EVENTS.items()}
PLANS["laplace+gaussian+exponential"] = [EVENTS["laplace"], EVENTS["gaussian"], EVENTS["exponential"]]
PLANS["pure+exponential"] = [EVENTS["pure"], EVENTS["exponential"]]
PLANS["gaussian+zcdp"] = [EVENTS["gaussian"], EVENTS["zcdp"]]

K = 6
DELTA = 1e-6


def answer(build, adaptive=True):
    accountant = Accountant(adaptive=adaptive)
    build(accountant)
    return accountant.epsilon(DELTA), accountant.delta(1.0)


@pytest.mark.parametrize("adaptive", [True, False])
@pytest.mark.parametrize("plan", sorted(PLANS))
def test_equivalent_compositions_agree(plan, adaptive):
    events = PLANS[plan]
    ways = {
        "count=k": lambda a: [a.compose(e, count=K) for e in events],
        "k calls": lambda a: [a.compose(e) for _ in range(K) for e in events],
        "SelfComposed": lambda a: [a.compose(SelfComposed(e, K)) for e in events],
        "SelfComposed x count": lambda a: [a.compose(SelfComposed(e, 2), count=3) for e in events],
        "Composed": lambda a: a.compose(Composed(tuple(events) * K)),
        "nested": lambda a: a.compose(
            Composed((SelfComposed(Composed(tuple(events)), 2), Composed((SelfComposed(Composed(tuple(events)), 4),))))
        ),
    }
    results = {name: answer(build, adaptive) for name, build in ways.items()}
    first = next(iter(results.values()))
    for name, result in results.items():
        assert result == first, f"{name}: {result} != {first}"


# Both directions round conservatively (epsilon up, delta up) and numerical bounds optimise over a
# grid (Renyi orders, privacy-loss bins), so a round trip may land up to that resolution away from
# where it started. 0.1% is far below any change a user would act on; each bound's own tests check
# it against exact values much more tightly.
ROUND_TRIP_RTOL = 1e-3


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_epsilon_and_delta_are_inverse(plan):
    accountant = Accountant()
    for event in PLANS[plan]:
        accountant.compose(event, count=K)
    for delta in (1e-9, 1e-6, 1e-3):
        eps = accountant.epsilon(delta)
        assert math.isfinite(eps)
        assert accountant.delta(eps) <= delta * (1 + ROUND_TRIP_RTOL)
        if eps > 1e-6:
            assert accountant.delta(eps * (1 - ROUND_TRIP_RTOL)) >= delta


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_monotone_in_count_and_delta(plan):
    previous = 0.0
    for k in (1, 2, 5, 20):
        accountant = Accountant()
        for event in PLANS[plan]:
            accountant.compose(event, count=k)
        eps = accountant.epsilon(DELTA)
        assert eps >= previous
        previous = eps
        assert accountant.epsilon(1e-3) <= eps <= accountant.epsilon(1e-9)


@pytest.mark.parametrize(
    "event_at",
    [
        lambda s: Gaussian(s),
        lambda s: Laplace(s),
        lambda s: PureDP(1.0 / s),
        lambda s: BoundedRange(1.0 / s),
        lambda s: ZCDP(0.5 / s**2),
    ],
)
def test_monotone_in_noise(event_at):
    values = [Accountant().compose(event_at(s), count=K).epsilon(DELTA) for s in (1.0, 2.0, 4.0, 8.0)]
    assert values == sorted(values, reverse=True)


def test_nonadaptive_never_larger_than_adaptive():
    for plan in PLANS.values():
        adaptive, nonadaptive = Accountant(adaptive=True), Accountant(adaptive=False)
        for event in plan:
            adaptive.compose(event, count=K)
            nonadaptive.compose(event, count=K)
        assert nonadaptive.epsilon(DELTA) <= adaptive.epsilon(DELTA)


def test_empty_accountant_costs_nothing():
    accountant = Accountant()
    assert accountant.epsilon(1e-6) == 0.0
    assert accountant.delta(0.0) == 0.0


def test_explain_names_the_winner():
    explanation = Accountant().compose(Gaussian(2.0), count=10).explain(1e-6)
    assert explanation.winner in {c.name for c in explanation.candidates}
    assert explanation.value == min(c.value for c in explanation.candidates)
    assert "winner" in str(explanation)
