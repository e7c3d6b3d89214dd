"""The interface every privacy filter shares, and the exact arithmetic the additive filters use.

A privacy filter decides, before a mechanism runs, whether the mechanism's
declared privacy cost still fits the budget, given every cost admitted so far.
Costs may be chosen after earlier outputs were seen (fully adaptive
composition); each filter's docstring names the theorem that makes its rule
valid in that setting.

Refusal semantics. A filter whose theorem stops the interaction at the first
refusal (`halts_on_refusal = True`) stays halted afterwards and refuses
everything. The other filters are residue filters (Regehr et al., Alg. 1 and
Thm 1) and keep serving smaller requests after a refusal: the refusal is a
function of the public state and the declared cost only, so it is the same as
the analyst issuing the free query Id, which every privacy rule allows
(Regehr et al., Def 10); see docs/proofs/accounting.filters.base.refusal.md.
"""
from __future__ import annotations

import abc
import math
from fractions import Fraction
from typing import Any, ClassVar, Mapping

from dpstream.accounting.composition import leaf_counts
from dpstream.accounting.events import Composed, Event, InvalidEventError, SelfComposed


class UnsupportedByFilterError(ValueError):
    """The filter has no valid rule for one of the event's leaves; names the leaf and the allowed kinds."""


def exact_decimal(value: float) -> Fraction:
    """The exact rational of the shortest decimal that round-trips to `value` (0.1 -> 1/10).

    Privacy parameters are declared in decimal (job files, the CLI); reading
    them back as that decimal keeps sums such as ten times 0.1 exactly equal
    to 1, where binary floats would drift either way.
    """
    if not (isinstance(value, (int, float, Fraction)) and math.isfinite(value)):
        raise InvalidEventError(f"privacy parameter must be a finite number, got {value!r}")
    if isinstance(value, Fraction):
        return value
    return Fraction(repr(float(value)))


def fraction_to_json(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


def fraction_from_json(text: str) -> Fraction:
    return Fraction(text)


def check_budget(owner: str, name: str, value: float, allow_zero: bool = False) -> float:
    """A budget parameter: finite and positive (or >= 0); one-line error otherwise."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value >= 0 if allow_zero else value > 0)
    if not ok:
        allowed = "a finite number >= 0" if allow_zero else "a positive finite number"
        raise ValueError(f"{owner}.{name} must be {allowed}, got {value!r}")
    return float(value)


def check_delta(owner: str, value: float, allow_zero: bool = True) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (0 <= value < 1 if allow_zero else 0 < value < 1)
    if not ok:
        interval = "[0, 1)" if allow_zero else "(0, 1)"
        raise ValueError(f"{owner}.delta must lie in {interval}, got {value!r}")
    return float(value)


class PrivacyFilter(abc.ABC):
    """Common surface: `halted`, `describe()`, `to_dict()` and `PrivacyFilter.from_dict`.

    `to_dict` holds everything needed to resume the filter (the ledger stores
    it); `public_dict` holds only what may be shown to users.
    """

    kind: ClassVar[str]
    halts_on_refusal: ClassVar[bool]

    def __init__(self) -> None:
        self._halted = False

    @property
    def halted(self) -> bool:
        return self._halted

    @abc.abstractmethod
    def describe(self) -> str:
        """The rule and the guarantee in plain words."""

    @abc.abstractmethod
    def _parameters(self) -> dict[str, Any]:
        """Constructor arguments, JSON-ready."""

    @abc.abstractmethod
    def _state(self) -> dict[str, Any]:
        """Mutable state, JSON-ready."""

    @abc.abstractmethod
    def _load_state(self, state: Mapping[str, Any]) -> None:
        """Restore what `_state` wrote."""

    def public_dict(self) -> dict[str, Any]:
        """Parameters, state (exact sums shown as floats) and halted flag; filters with sealed state override this."""
        state = {
            name: float(fraction_from_json(value)) if isinstance(value, str) else value
            for name, value in self._state().items()
        }
        return {"filter": self.kind, **self._parameters(), **state, "halted": self._halted}

    def to_dict(self) -> dict[str, Any]:
        return {"filter": self.kind, "parameters": self._parameters(), "state": self._state(), "halted": self._halted}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> "PrivacyFilter":
        from dpstream.accounting.filters import FILTER_CLASSES

        kind = data.get("filter")
        cls = FILTER_CLASSES.get(kind) if isinstance(kind, str) else None
        if cls is None:
            raise ValueError(f"unknown filter {kind!r}; known: {', '.join(sorted(FILTER_CLASSES))}")
        instance = cls(**data["parameters"])
        instance._load_state(data["state"])
        instance._halted = bool(data["halted"])
        return instance


class EventFilter(PrivacyFilter):
    """A filter that takes privacy events: `admits(event)` and `try_spend(event)`.

    Subclasses implement `_charge(leaves)`, which returns the state after
    admitting the event's leaves or None when the budget does not allow it,
    and `_apply(new_state)`. `try_spend` changes nothing unless it admits,
    except that a halting filter records its halt.
    """

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> "EventFilter":
        """`PrivacyFilter.from_dict` for a filter that must take privacy events (a budget scope's filter)."""
        loaded = PrivacyFilter.from_dict(data)
        if not isinstance(loaded, EventFilter):
            raise ValueError(f"filter {loaded.kind!r} is not an event filter: it does not take privacy events")
        return loaded

    @abc.abstractmethod
    def _charge(self, leaves: Mapping[Event, int]) -> Any:
        """The state after admitting `leaves` ({leaf event: count}), or None when refused."""

    @abc.abstractmethod
    def _apply(self, new_state: Any) -> None:
        """Make `new_state` (returned by `_charge`) current."""

    def _leaves(self, event: Event) -> dict[Event, int]:
        if not isinstance(event, Event):
            raise InvalidEventError(f"{type(self).__name__} takes privacy events, got {event!r}")
        return dict(leaf_counts(event))

    def admits(self, event: Event) -> bool:
        """Whether `try_spend(event)` would admit the event now; changes nothing."""
        return not self._halted and self._charge(self._leaves(event)) is not None

    def try_spend(self, event: Event) -> bool:
        """Admit and debit `event`, or refuse it. Raises UnsupportedByFilterError for leaves the rule cannot price."""
        leaves = self._leaves(event)
        if self._halted:
            return False
        new_state = self._charge(leaves)
        if new_state is None:
            if self.halts_on_refusal:
                self._halted = True
            return False
        self._apply(new_state)
        return True

    def charges_evenly(self, part: Event, times: int, opening: Event | None = None) -> bool:
        """Whether `opening` (if any) and then `times` charges of `part`, one filter round each, are all admitted
        now and leave this filter where one charge of their composition would (to 1e-9 relative in every term
        of `left_terms`). Then a stream may pay its svt monitors' budgets when it opens them and its windows one
        by one at no more than the price of all of it at once (docs/proofs/pipelines.run.stream.md, plain
        scopes). Changes nothing.

        Tried on copies of the filter; a filter whose price is not additive over rounds (`_prices_additively`)
        answers False without trying, as does one that cannot price `part`. Runtime: `times` charges of `part`."""
        first = () if opening is None else (opening,)
        whole, split = EventFilter.from_dict(self.to_dict()), EventFilter.from_dict(self.to_dict())
        try:
            if times < 1 or not self._prices_additively(self._leaves(Composed(first + (part,)))):
                return False
            rounds = list(first) + [part] * times
            if not whole.try_spend(Composed(first + (SelfComposed(part, times),))) or not all(
                    split.try_spend(r) for r in rounds):
                return False
        except ValueError:  # leaves the filter cannot price (UnsupportedByFilterError): it admits neither way
            return False
        left_whole, left_split = whole.left_terms(), split.left_terms()
        return all(left_split[name] >= value - 1e-9 * max(1.0, abs(value)) for name, value in left_whole.items())

    def _prices_additively(self, leaves: Mapping[Event, int]) -> bool:
        """Whether the price of `leaves` can be additive over rounds (a cheap gate before `charges_evenly` tries)."""
        return True

    def cost_terms(self, event: Event) -> dict[str, float]:
        """What admitting `event` would take, in the filter's own units (e.g. {"epsilon": 0.5, "delta": 1e-7});
        infinite where no finite price exists. Public: a function of the event and the filter's parameters."""
        raise NotImplementedError(f"{type(self).__name__} does not state its costs")

    def left_terms(self) -> dict[str, float]:
        """What the filter has left, in the units of `cost_terms` (rounded down)."""
        raise NotImplementedError(f"{type(self).__name__} does not state what it has left")

    def _unsupported(self, leaf: Event, allowed: str) -> UnsupportedByFilterError:
        return UnsupportedByFilterError(
            f"{type(self).__name__} cannot price {type(leaf).__name__} events; allowed: {allowed}, got {leaf!r}"
        )


def terms_text(terms: dict[str, float]) -> str:
    """{"epsilon": 0.5, "delta": 1e-07} -> "epsilon=0.5, delta=1e-07" (6 significant digits)."""
    return ", ".join(f"{name}={value:.6g}" for name, value in terms.items())


def float_up(value: Fraction) -> float:
    """The float nearest to `value` at or above it."""
    rounded = float(value)
    return math.nextafter(rounded, math.inf) if Fraction(rounded) < value else rounded


def float_down(value: Fraction) -> float:
    """The float nearest to `value` at or below it."""
    rounded = float(value)
    return math.nextafter(rounded, -math.inf) if Fraction(rounded) > value else rounded
