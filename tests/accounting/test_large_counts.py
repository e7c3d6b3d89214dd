"""A composition of 10^9 events (`budget spend --count 1000000000`) is answered in bounded memory: theorems
evaluated in O(k) (`Bound.max_events`) step aside and the others answer, never above basic composition and
never below the exact optimum for fewer events."""
from __future__ import annotations

import tracemalloc

import pytest

from dpstream.accounting import Accountant
from dpstream.accounting.bounds.pure_dp import MAX_ENUMERATED, kov_epsilon
from dpstream.accounting.events import Laplace, PureDP

LIMIT_BYTES = 200 * 2**20  # 10^9 enumerated atoms would take 8 GB


@pytest.mark.parametrize("event", [PureDP(1e-7), Laplace(scale=1e9, sensitivity=1.0)], ids=["pure", "laplace"])
def test_a_billion_events_take_bounded_memory(event):
    tracemalloc.start()
    try:
        epsilon = Accountant().compose(event, count=10**9).epsilon(1e-6)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < LIMIT_BYTES, peak
    assert 0 < epsilon <= 10**9 * 1e-7 + 1e-12  # never above basic composition


def test_the_theorems_that_step_aside_were_tighter_only_below_the_cap():
    """At the cap the exact optimum still answers; above it the bound is valid but may be looser."""
    at_cap = Accountant().compose(PureDP(1e-4), count=MAX_ENUMERATED)
    assert "kairouz_oh_viswanath" in {b.name for b in at_cap.valid_bounds()}
    above = Accountant().compose(PureDP(1e-4), count=MAX_ENUMERATED + 1)
    assert "kairouz_oh_viswanath" not in {b.name for b in above.valid_bounds()}
    assert above.epsilon(1e-6) >= kov_epsilon(MAX_ENUMERATED, 1e-4, 1e-6)  # more events never cost less
