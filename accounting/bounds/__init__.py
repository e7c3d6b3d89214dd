"""Composition bounds: one module per theorem, each a `Bound` the accountant may pick.

A bound states which compositions it is valid for (`applies`) and gives a
privacy curve: `delta(composition, epsilon)` and `epsilon(composition, delta)`.
Each returned value is an upper bound on the true optimum for every
mechanism the composition's events describe; the accountant reports the
smallest among the bounds that apply.
"""
from __future__ import annotations

import abc
import math
from typing import ClassVar

from dpstream.accounting.composition import Composition
from dpstream.accounting.numerics import epsilon_from_delta_curve, expanding_upper


class Bound(abc.ABC):
    """One composition theorem.

    `nonadaptive_only` marks theorems valid only when every mechanism (not
    just its privacy parameters) was fixed before any ran; the accountant
    uses them only when told `adaptive=False`. `max_events` bounds the events
    a theorem whose evaluation grows with their number is asked about (memory
    and time stay bounded; the other theorems still answer).
    """

    name: ClassVar[str]
    reference: ClassVar[str]
    nonadaptive_only: ClassVar[bool] = False
    max_events: ClassVar[int | None] = None  # theorems evaluated in O(k) apply to at most this many events

    @abc.abstractmethod
    def applies(self, composition: Composition) -> bool:
        """True when this theorem covers every event in `composition`."""

    def is_exact(self, composition: Composition) -> bool:
        """True when this bound equals the optimum for every mechanism class the events describe.

        No valid bound can then be smaller, so the accountant may answer from
        this bound alone. Default: False.
        """
        return False

    @abc.abstractmethod
    def delta(self, composition: Composition, epsilon: float) -> float:
        """An upper bound on the smallest delta for which the composition is (epsilon, delta)-DP."""

    def epsilon(self, composition: Composition, delta: float) -> float:
        """An upper bound on the smallest epsilon for which the composition is (epsilon, delta)-DP.

        Default: invert `delta` by bisection, rounding up. Subclasses with a
        closed form or a faster inversion override this.
        """
        curve = lambda eps: self.delta(composition, eps)  # noqa: E731
        upper = expanding_upper(curve, delta, start=1.0)
        if math.isinf(upper):
            return math.inf
        return epsilon_from_delta_curve(curve, delta, upper)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
