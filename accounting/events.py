"""Privacy events: what a release costs, stated as the guarantee or mechanism it is.

An event holds only what accounting needs. Events are immutable, hashable and
validated when built, so an accountant can never hold a half-checked event.
Composition is itself an event (`Composed`, `SelfComposed`), so a job's plan is
a tree that accountants flatten.

Compatibility contract: an event class or field is never removed and its
meaning never changes; new guarantees get new classes, new options get optional
fields. The ledger stores events by class name and fields (`to_dict` /
`from_dict`), so old ledgers stay readable.

Neighbouring relation throughout: add or remove all records of one privacy unit.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping


class InvalidEventError(ValueError):
    """An event was built with parameters outside its allowed range."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidEventError(message)


def _positive_finite(owner: str, name: str, value: float) -> None:
    _require(
        isinstance(value, (int, float)) and math.isfinite(value) and value > 0,
        f"{owner}.{name} must be a positive finite number, got {value!r}",
    )


def _delta(owner: str, value: float) -> None:
    _require(
        isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value < 1,
        f"{owner}.delta must lie in [0, 1), got {value!r}",
    )


class Event:
    """Base class of all privacy events."""

    kind: ClassVar[str] = ""
    if TYPE_CHECKING:
        # Every event class is a dataclass, and @dataclass sets this table on each one. Declaring it
        # for the type checker lets `dataclasses.fields` take any event or event class.
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def relaxed(self) -> "Event | None":
        """A weaker event this one implies, for bounds that do not know this class; None if there is none."""
        return None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description: the class name and the fields."""
        fields = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, Event):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = [item.to_dict() for item in value]
            fields[field.name] = value
        return {"type": type(self).__name__, **fields}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> "Event":
        """Rebuild an event written by `to_dict`."""
        data = dict(data)
        name = data.pop("type", None)
        cls = EVENT_CLASSES.get(name)
        if cls is None:
            raise InvalidEventError(f"unknown event class {name!r}; known: {sorted(EVENT_CLASSES)}")
        if cls is Composed:
            return Composed(tuple(Event.from_dict(item) for item in data["events"]))
        if cls is SelfComposed:
            return SelfComposed(Event.from_dict(data["event"]), int(data["count"]))
        return cls(**data)


@dataclass(frozen=True, slots=True)
class PureDP(Event):
    """A mechanism known only to be epsilon-DP: Pr[M(x) in S] <= e^eps Pr[M(x') in S].

    Its worst case under composition is randomized response with parameter
    epsilon (Kairouz–Oh–Viswanath 2017, Thm 3.3).
    """

    epsilon: float
    kind: ClassVar[str] = "pure"

    def __post_init__(self) -> None:
        _positive_finite("PureDP", "epsilon", self.epsilon)


@dataclass(frozen=True, slots=True)
class ApproxDP(Event):
    """A mechanism known only to be (epsilon, delta)-DP.

    Its worst case is the randomized-response pair RR(epsilon, delta)
    (Chourasia–Javaid–Sikdar, Thm 4.5). epsilon may be 0 when delta > 0.
    """

    epsilon: float
    delta: float
    kind: ClassVar[str] = "approx"

    def __post_init__(self) -> None:
        _require(
            isinstance(self.epsilon, (int, float)) and math.isfinite(self.epsilon) and self.epsilon >= 0,
            f"ApproxDP.epsilon must be a finite number >= 0, got {self.epsilon!r}",
        )
        _delta("ApproxDP", self.delta)
        _require(self.epsilon > 0 or self.delta > 0, "ApproxDP needs epsilon > 0 or delta > 0, got both 0")


@dataclass(frozen=True, slots=True)
class BoundedRange(Event):
    """An epsilon-bounded-range mechanism (Durfee–Rogers 2019, Def 2.2).

    For neighbours x, x' there is t in [0, epsilon] with
    t - epsilon <= ln(Pr[M(x)=y] / Pr[M(x')=y]) <= t for every output y.
    The exponential mechanism sampling prop. to exp(epsilon * u / range(u)) is
    epsilon-BR (Dong–Durfee–Rogers, Prop 2); with a monotone score the range
    equals the sensitivity.
    """

    epsilon: float
    kind: ClassVar[str] = "exponential"

    def __post_init__(self) -> None:
        _positive_finite("BoundedRange", "epsilon", self.epsilon)


@dataclass(frozen=True, slots=True)
class Laplace(Event):
    """Laplace noise of `scale` b on a query of L1 sensitivity `sensitivity`.

    Its privacy loss is that of the pair (Lap(0, b), Lap(sensitivity, b)); it is
    epsilon-DP with epsilon = sensitivity / scale.
    """

    scale: float
    sensitivity: float = 1.0
    kind: ClassVar[str] = "laplace"

    def __post_init__(self) -> None:
        _positive_finite("Laplace", "scale", self.scale)
        _positive_finite("Laplace", "sensitivity", self.sensitivity)

    @property
    def epsilon(self) -> float:
        return self.sensitivity / self.scale


@dataclass(frozen=True, slots=True)
class Gaussian(Event):
    """Gaussian noise of standard deviation `sigma` on a query of L2 sensitivity `sensitivity`.

    Exactly mu-GDP with mu = sensitivity / sigma (Dong–Roth–Su 2019), and
    rho-zCDP with rho = mu^2 / 2.
    """

    sigma: float
    sensitivity: float = 1.0
    kind: ClassVar[str] = "gaussian"

    def __post_init__(self) -> None:
        _positive_finite("Gaussian", "sigma", self.sigma)
        _positive_finite("Gaussian", "sensitivity", self.sensitivity)

    @property
    def mu(self) -> float:
        return self.sensitivity / self.sigma


@dataclass(frozen=True, slots=True)
class ZCDP(Event):
    """A delta-approximate rho-zCDP mechanism (Bun–Steinke 2016, Def 8)."""

    rho: float
    delta: float = 0.0
    kind: ClassVar[str] = "zcdp"

    def __post_init__(self) -> None:
        _positive_finite("ZCDP", "rho", self.rho)
        _delta("ZCDP", self.delta)


@dataclass(frozen=True, slots=True)
class GaussianThreshold(Event):
    """Gaussian thresholding of a sparse histogram: Gaussian noise on shared keys, new keys rarely released.

    For every neighbouring pair (x holds the privacy unit, x' does not) the
    mechanism's laws are dominated, in every hockey-stick divergence, by the pair
        P = (1 - delta) N(mu, 1) + delta * bottom,   Q = N(0, 1),   mu = sensitivity / sigma:
    H_a(M(x) || M(x')) <= H_a(P || Q) and H_a(M(x') || M(x)) <= H_a(Q || P) for every a >= 0.
    This holds when the keys present in both x and x' get Gaussian noise of
    standard deviation `sigma` with L2 sensitivity `sensitivity`, and the keys
    present only in x are, all together, released with probability at most `delta`
    (independently of the rest); docs/proofs/accounting.events.GaussianThreshold.md.
    It implies `ZCDP(mu^2 / 2, delta)` (`relaxed`).
    """

    sigma: float
    sensitivity: float
    delta: float
    kind: ClassVar[str] = "gaussian_threshold"

    def __post_init__(self) -> None:
        _positive_finite("GaussianThreshold", "sigma", self.sigma)
        _positive_finite("GaussianThreshold", "sensitivity", self.sensitivity)
        _delta("GaussianThreshold", self.delta)

    @property
    def mu(self) -> float:
        return self.sensitivity / self.sigma

    def relaxed(self) -> "ZCDP":
        """delta-approximate rho-zCDP in the mixture form, rho = mu^2 / 2 rounded up (proof note)."""
        rho = self.sensitivity * self.sensitivity / (2.0 * self.sigma * self.sigma)
        for _ in range(4):  # covers the three roundings of the product and the quotient
            rho = math.nextafter(rho, math.inf)
        return ZCDP(rho=rho, delta=self.delta)


@dataclass(frozen=True, slots=True)
class SelfComposed(Event):
    """`event` run `count` times (each run may depend on earlier outputs)."""

    event: Event
    count: int

    def __post_init__(self) -> None:
        _require(isinstance(self.event, Event), f"SelfComposed.event must be an Event, got {self.event!r}")
        _require(
            isinstance(self.count, int) and not isinstance(self.count, bool) and self.count >= 0,
            f"SelfComposed.count must be an integer >= 0, got {self.count!r}",
        )


@dataclass(frozen=True, slots=True)
class Composed(Event):
    """The events run one after another (each may depend on earlier outputs)."""

    events: tuple[Event, ...]

    def __post_init__(self) -> None:
        _require(isinstance(self.events, tuple), f"Composed.events must be a tuple, got {type(self.events).__name__}")
        for event in self.events:
            _require(isinstance(event, Event), f"Composed.events holds a non-event {event!r}")


LEAF_EVENTS: tuple[type[Event], ...] = (PureDP, ApproxDP, BoundedRange, Laplace, Gaussian, ZCDP, GaussianThreshold)

EVENT_CLASSES: dict[str, type[Event]] = {
    cls.__name__: cls for cls in (*LEAF_EVENTS, SelfComposed, Composed)
}
