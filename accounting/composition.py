"""A canonical composition: the multiset of leaf events a plan or ledger holds.

Composition order does not change any bound the accountant uses (each bound is
symmetric in its events), so a composition is a sorted tuple of
(leaf event, count) pairs with equal leaves merged. Building it from
`compose(e, count=k)`, k calls of `compose(e)`, `SelfComposed(e, k)` or any
nesting of `Composed` gives the same value, which is what makes every answer
independent of how the plan was written.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, fields
from typing import Iterable, Iterator, TypeVar, overload

from dpstream.accounting.events import LEAF_EVENTS, Composed, Event, InvalidEventError, SelfComposed

E = TypeVar("E", bound=Event)
F = TypeVar("F", bound=Event)


def _sort_key(event: Event) -> tuple:
    return (type(event).__name__, tuple(getattr(event, f.name) for f in fields(event)))


def leaf_counts(event: Event, count: int = 1) -> Counter:
    """The leaf events inside `event`, each with how many times it runs."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InvalidEventError(f"count must be an integer >= 0, got {count!r}")
    counts: Counter = Counter()
    stack: list[tuple[Event, int]] = [(event, count)]
    while stack:
        node, times = stack.pop()
        if times == 0:
            continue
        if isinstance(node, SelfComposed):
            stack.append((node.event, times * node.count))
        elif isinstance(node, Composed):
            stack.extend((child, times) for child in node.events)
        elif isinstance(node, LEAF_EVENTS):
            counts[node] += times
        else:
            raise InvalidEventError(f"not a privacy event: {node!r}")
    return counts


@dataclass(frozen=True)
class Composition:
    """Leaf events with their counts, canonically ordered; immutable and hashable."""

    items: tuple[tuple[Event, int], ...] = ()

    @classmethod
    def from_counts(cls, counts: Counter) -> "Composition":
        ordered = sorted(((e, c) for e, c in counts.items() if c > 0), key=lambda item: _sort_key(item[0]))
        return cls(tuple(ordered))

    @classmethod
    def of(cls, *events: Event) -> "Composition":
        return cls.from_counts(leaf_counts(Composed(tuple(events))))

    def plus(self, event: Event, count: int = 1) -> "Composition":
        counts = Counter(dict(self.items))
        counts.update(leaf_counts(event, count))
        return Composition.from_counts(counts)

    def __iter__(self) -> Iterator[tuple[Event, int]]:
        return iter(self.items)

    def __len__(self) -> int:
        return sum(count for _, count in self.items)

    def kinds(self) -> frozenset[type]:
        return frozenset(type(event) for event, _ in self.items)

    def only(self, *classes: type) -> bool:
        """True when every leaf is an instance of one of `classes` (and there is at least one)."""
        return bool(self.items) and all(isinstance(event, classes) for event, _ in self.items)

    @overload
    def select(self, cls: type[E], /) -> list[tuple[E, int]]: ...

    @overload
    def select(self, first: type[E], second: type[F], /) -> list[tuple[E | F, int]]: ...

    @overload
    def select(self, *classes: type[Event]) -> list[tuple[Event, int]]: ...

    def select(self, *classes: type[E]) -> list[tuple[E, int]]:
        """The (leaf, count) pairs whose leaf is an instance of one of `classes`, typed as those classes."""
        return [(event, count) for event, count in self.items if isinstance(event, classes)]

    def relaxed(self) -> "Composition":
        """Each leaf that has a weaker standard form (`Event.relaxed`) replaced by it; self if none has."""
        if not any(event.relaxed() is not None for event, _ in self.items):
            return self
        counts: Counter = Counter()
        for event, count in self.items:
            counts[event.relaxed() or event] += count
        return Composition.from_counts(counts)

    def expanded(self) -> Iterable[Event]:
        """Every leaf run, one by one (count times each)."""
        for event, count in self.items:
            for _ in range(count):
                yield event

    def to_dict(self) -> list[dict]:
        return [{"count": count, **event.to_dict()} for event, count in self.items]
