"""Basic composition: epsilons add and deltas add.

Privacy: if M_i is (epsilon_i, delta_i)-DP then the adaptive composition of
M_1..M_k is (sum epsilon_i, sum delta_i)-DP under add/remove neighbours.
Proof: Dwork–McSherry–Nissim–Smith 2006 (pure); Dwork–Rothblum–Vadhan 2010,
Thm III.1 (approximate). Valid for adaptively chosen mechanisms with
parameters fixed in advance (and, for pure DP, even as a filter).
Numerics: sums are taken exactly (math.fsum) and rounded up one ulp.
Runtime: O(number of distinct events).
"""
from __future__ import annotations

import math

from dpstream.accounting.bounds import Bound
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import ApproxDP, BoundedRange, Event, Laplace, PureDP


def _round_up(value: float) -> float:
    return math.nextafter(value, math.inf) if value > 0 else value


def pure_epsilon(event: Event) -> float:
    """The epsilon of an epsilon-DP event (BoundedRange: epsilon-BR implies epsilon-DP), or of an ApproxDP event.

    TypeError for an event that has no epsilon.
    """
    if isinstance(event, (PureDP, ApproxDP, BoundedRange, Laplace)):
        return float(event.epsilon)
    raise TypeError(f"no epsilon for event {event!r}; allowed: PureDP, ApproxDP, BoundedRange, Laplace")


def basic_totals(composition: Composition) -> tuple[float, float]:
    """(sum of epsilons, sum of deltas) over the composition, rounded up."""
    eps = math.fsum(pure_epsilon(e) * c for e, c in composition)
    dlt = math.fsum(getattr(e, "delta", 0.0) * c for e, c in composition)
    return _round_up(eps), _round_up(dlt)


class BasicComposition(Bound):
    name = "basic"
    reference = "Dwork–Rothblum–Vadhan 2010, Thm III.1 (basic composition)"

    def applies(self, composition: Composition) -> bool:
        return composition.only(PureDP, ApproxDP, BoundedRange, Laplace)

    def delta(self, composition: Composition, epsilon: float) -> float:
        eps, dlt = basic_totals(composition)
        return min(dlt, 1.0) if epsilon >= eps else 1.0

    def epsilon(self, composition: Composition, delta: float) -> float:
        eps, dlt = basic_totals(composition)
        return eps if delta >= dlt else math.inf
