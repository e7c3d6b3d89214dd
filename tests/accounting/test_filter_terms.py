"""`cost_terms` and `left_terms` of every scope filter (what refusals and `budget show` print), against the
filters' own arithmetic: after an admitted spend, what is left shrinks by exactly the stated cost (GDP: in
squares), and an event is admitted iff its cost fits what is left."""
from __future__ import annotations

import math

import pytest

from dpstream.accounting.events import ApproxDP, Gaussian, Laplace, PureDP
from dpstream.accounting.filters import SCOPE_FILTERS, scope_filter
from dpstream.accounting.filters.base import terms_text

EVENTS = {"pure": Laplace(4.0, 1.0), "approx": ApproxDP(0.5, 1e-7)}


@pytest.mark.parametrize("kind", SCOPE_FILTERS)
def test_left_shrinks_by_the_cost(kind):
    budget = scope_filter(kind, 2.0, 0.0 if kind == "pure" else 1e-6)
    event = EVENTS.get(kind, Gaussian(5.0, 1.0))
    before, cost = budget.left_terms(), budget.cost_terms(event)
    assert set(before) == set(cost) and min(cost.values()) >= 0 and max(cost.values()) > 0
    assert budget.try_spend(event)
    after = budget.left_terms()
    for name in before:
        if name == "mu":
            assert after[name] ** 2 == pytest.approx(before[name] ** 2 - cost[name] ** 2, rel=1e-9)
        else:
            assert after[name] == pytest.approx(before[name] - cost[name], rel=1e-12, abs=1e-18)


@pytest.mark.parametrize("kind", ["pure", "approx", "zcdp", "gdp"])
def test_an_event_is_admitted_iff_its_cost_fits(kind):
    budget = scope_filter(kind, 1.0, 0.0 if kind == "pure" else 1e-6)
    for scale in (0.5, 0.9, 1.1, 2.0):
        event = PureDP(scale) if kind in ("pure", "approx") else Gaussian(1.0 / scale, 1.0)
        cost, left = budget.cost_terms(event), budget.left_terms()
        fits = all(cost[name] <= left[name] for name in cost)
        assert budget.admits(event) == fits, (kind, scale, terms_text(cost), terms_text(left))


def test_terms_text():
    assert terms_text({"epsilon": 0.5, "delta": 1e-7}) == "epsilon=0.5, delta=1e-07"
    assert terms_text({"epsilon": math.inf}) == "epsilon=inf"
