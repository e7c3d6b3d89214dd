"""The accountant: composes privacy events and reports the tightest valid (epsilon, delta).

Privacy: for a composition whose privacy parameters were all fixed before any
mechanism ran (the mechanisms themselves may be chosen adaptively), the
reported epsilon(delta) is an upper bound on the optimal epsilon, because it is
the minimum over theorems each of which is valid for that composition. With
`adaptive=False` the caller also guarantees that every mechanism was fixed in
advance, which admits the non-adaptive theorems (Dong–Durfee–Rogers Thm 3 and
Cesar–Rogers Thm 3).
A bound that does not cover an event may still answer for the composition in
which such events are replaced by the weaker events they imply
(`Event.relaxed`, e.g. Gaussian thresholding as approximate zCDP); its
candidate is then named "<bound> (relaxed)" and is never treated as exact.
Caller must ensure: parameters are not chosen from earlier outputs. When they
are (a ledger across jobs, an SVT monitor), use a privacy filter from
`accounting.filters` instead (Regehr et al.: composing exact curves and
stopping at the budget is not a valid filter).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from dpstream.accounting.bounds import Bound
from dpstream.accounting.bounds.registry import default_bounds
from dpstream.accounting.composition import Composition, leaf_counts
from dpstream.accounting.events import Event


class UnsupportedEventError(ValueError):
    """No valid bound covers the composition; names the events involved."""


@dataclass(frozen=True)
class Candidate:
    name: str
    reference: str
    value: float


@dataclass(frozen=True)
class Explanation:
    """Which bound won and every candidate's value, for one query."""

    query: str  # "epsilon" or "delta"
    at: float  # the delta (or epsilon) the query was asked at
    value: float
    winner: str
    candidates: tuple[Candidate, ...]
    not_applicable: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {
            "query": self.query,
            "at": self.at,
            "value": self.value,
            "winner": self.winner,
            "candidates": {c.name: c.value for c in self.candidates},
            "references": {c.name: c.reference for c in self.candidates},
            "not_applicable": list(self.not_applicable),
        }

    def __str__(self) -> str:
        lines = [f"{self.query} at {self.at:g}: {self.value:.6g} (winner: {self.winner})"]
        for c in sorted(self.candidates, key=lambda c: c.value):
            lines.append(f"  {c.name:<28} {c.value:.6g}   [{c.reference}]")
        return "\n".join(lines)


class Accountant:
    """Composes events; answers epsilon(delta), delta(epsilon) and explain(delta).

    `compose(event, count=1)` returns the accountant, so calls chain. The
    composition is kept as a canonical multiset, so `compose(e, count=k)`,
    k calls and any nesting of `Composed`/`SelfComposed` give the same answers.
    """

    def __init__(self, adaptive: bool = True, bounds: Iterable[Bound] | None = None):
        self.adaptive = bool(adaptive)
        self._bounds = tuple(default_bounds() if bounds is None else bounds)
        self._counts: Counter = Counter()
        self._canonical: Composition | None = Composition()

    @property
    def composition(self) -> Composition:
        """The canonical composition so far (built once per change, then cached)."""
        if self._canonical is None:
            self._canonical = Composition.from_counts(self._counts)
        return self._canonical

    def compose(self, event: Event, count: int = 1) -> "Accountant":
        self._counts.update(leaf_counts(event, count))  # leaf_counts validates first: all or nothing
        self._canonical = None
        return self

    def valid_bounds(self) -> list[Bound]:
        """The bounds valid for the composition as it is."""
        return [bound for bound, composition in self._valid() if composition is self.composition]

    def _valid(self) -> list[tuple[Bound, Composition]]:
        """Every usable bound with the composition it answers for: the composition itself or its relaxation."""
        composition = self.composition
        relaxed = composition.relaxed()
        valid = []
        for bound in self._bounds:
            if bound.nonadaptive_only and self.adaptive:
                continue
            if bound.max_events is not None and len(composition) > bound.max_events:
                continue
            if bound.applies(composition):
                valid.append((bound, composition))
            elif relaxed is not composition and bound.applies(relaxed):
                valid.append((bound, relaxed))
        return valid

    def _check_supported(self, valid: list) -> None:
        if not valid:
            kinds = sorted(t.__name__ for t in self.composition.kinds())
            raise UnsupportedEventError(f"no composition bound covers this mix of events: {kinds}")

    def exact_bound(self) -> Bound | None:
        """A valid bound that is exact for this composition, if any (then no other bound can be smaller)."""
        return next((b for b in self.valid_bounds() if b.is_exact(self.composition)), None)

    def epsilon(self, delta: float) -> float:
        """The smallest valid epsilon at `delta` (answered by an exact bound alone when one applies)."""
        exact = self.exact_bound() if self.composition.items else None
        if exact is not None:
            _check_probability("delta", delta)
            return float(exact.epsilon(self.composition, delta))
        return self.explain(delta).value

    def delta(self, epsilon: float) -> float:
        """The smallest valid delta at `epsilon`."""
        exact = self.exact_bound() if self.composition.items else None
        if exact is not None and isinstance(epsilon, (int, float)) and not math.isnan(epsilon):
            return float(exact.delta(self.composition, epsilon))
        return self.explain_delta(epsilon).value

    def explain(self, delta: float) -> Explanation:
        """epsilon at `delta`: every valid bound's value and the winner."""
        _check_probability("delta", delta)
        if not self.composition.items:
            return Explanation("epsilon", delta, 0.0, "empty", ())
        return self._explain("epsilon", delta, lambda b, c: b.epsilon(c, delta))

    def explain_delta(self, epsilon: float) -> Explanation:
        """delta at `epsilon`: every valid bound's value and the winner."""
        if not (isinstance(epsilon, (int, float)) and not math.isnan(epsilon)):
            raise ValueError(f"epsilon must be a number, got {epsilon!r}")
        if not self.composition.items:
            return Explanation("delta", epsilon, max(0.0, -math.expm1(epsilon)), "empty", ())
        return self._explain("delta", epsilon, lambda b, c: b.delta(c, epsilon))

    def _explain(self, query: str, at: float, evaluate) -> Explanation:
        valid = self._valid()
        self._check_supported(valid)
        candidates = tuple(
            Candidate(b.name if c is self.composition else f"{b.name} (relaxed)", b.reference, float(evaluate(b, c)))
            for b, c in valid
        )
        best = min(candidates, key=lambda c: c.value)
        used = {b for b, _ in valid}
        skipped = tuple(b.name for b in self._bounds if b not in used)
        return Explanation(query, at, best.value, best.name, candidates, skipped)


def _check_probability(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and 0 < value < 1):
        raise ValueError(f"{name} must lie in (0, 1), got {value!r}")
