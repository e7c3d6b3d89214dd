"""Noise calibration: the smallest noise per release that meets a job's (epsilon, delta).

A plan lists releases, each a kind of mechanism with a sensitivity, a relative
weight and how many times it runs (e.g. once per window). Weights are shares
of privacy cost measured in one common unit, zero-concentrated DP: a release
of weight w gets rho_i = s * w / sum(w) per run-set, i.e. each of its runs is
    Laplace:      epsilon = sqrt(2 rho_run)       (epsilon-DP => epsilon^2/2-zCDP)
    Gaussian:     mu = sens/sigma = sqrt(2 rho_run)
    exponential:  epsilon = sqrt(8 rho_run)       (epsilon-BR => epsilon^2/8-zCDP)
    pure:         epsilon = sqrt(2 rho_run)
with rho_run = rho_i / count, so equal weights mean roughly equal cost whatever
the mechanism. The scalar s is then pushed as high as the `Accountant` allows:
the whole plan is composed and its tightest valid epsilon at the target delta
is compared with the target. zCDP is only the unit of the weights; the bound
that decides is whichever of the accountant's bounds is tightest.

Privacy: the returned events are exactly what the mechanisms must be run
with; the plan's epsilon at delta is the accountant's (an upper bound on the
optimum), checked to be <= the target before returning.
Caller must ensure: the sensitivities are those the contribution bounds give,
and parameters are fixed before any data is read (adaptive composition of
mechanisms with fixed parameters); `adaptive=False` only if the mechanisms
themselves are fixed too.
Numerics: bisection on log s; the answer is the lower end of the final
bracket (less privacy spent, more noise), never the midpoint.
Runtime: about 45 accountant evaluations.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from dpstream.accounting.accountant import Accountant, Explanation
from dpstream.accounting.events import BoundedRange, Event, Gaussian, Laplace, PureDP, SelfComposed

_ZCDP_TO_PARAMETER = {  # parameter of one run as a function of its zCDP share rho
    "laplace": lambda rho: math.sqrt(2 * rho),
    "gaussian": lambda rho: math.sqrt(2 * rho),
    "exponential": lambda rho: math.sqrt(8 * rho),
    "pure": lambda rho: math.sqrt(2 * rho),
}
KINDS = tuple(_ZCDP_TO_PARAMETER)


class CalibrationError(ValueError):
    """The plan is malformed or cannot meet the target."""


@dataclass(frozen=True)
class Release:
    """One planned release: `kind` of mechanism run `count` times with the given sensitivity.

    sensitivity is L1 for laplace, L2 for gaussian, the score range for exponential,
    and unused for pure (a mechanism calibrated directly in epsilon).
    """

    name: str
    kind: str
    weight: float = 1.0
    sensitivity: float = 1.0
    count: int = 1

    def __post_init__(self) -> None:
        if self.kind not in _ZCDP_TO_PARAMETER:
            raise CalibrationError(f"release {self.name!r}: kind must be one of {list(KINDS)}, got {self.kind!r}")
        for name in ("weight", "sensitivity"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise CalibrationError(f"release {self.name!r}: {name} must be a positive finite number, got {value!r}")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise CalibrationError(f"release {self.name!r}: count must be a positive integer, got {self.count!r}")

    def event(self, rho_share: float) -> Event:
        """The event of one run when this release's total zCDP share is rho_share."""
        parameter = _ZCDP_TO_PARAMETER[self.kind](rho_share / self.count)
        if self.kind == "laplace":
            return Laplace(scale=self.sensitivity / parameter, sensitivity=self.sensitivity)
        if self.kind == "gaussian":
            return Gaussian(sigma=self.sensitivity / parameter, sensitivity=self.sensitivity)
        if self.kind == "exponential":
            return BoundedRange(parameter)
        return PureDP(parameter)


@dataclass(frozen=True)
class CalibratedRelease:
    release: Release
    event: Event  # the event of one run

    @property
    def noise(self) -> float:
        """Noise parameter of one run: Laplace scale, Gaussian sigma, or epsilon for exponential/pure.

        TypeError for an event of another class (a `Release` subclass may build one).
        """
        event = self.event
        if isinstance(event, Laplace):
            return event.scale
        if isinstance(event, Gaussian):
            return event.sigma
        if isinstance(event, (BoundedRange, PureDP)):
            return event.epsilon
        raise TypeError(f"release {self.release.name!r}: no noise parameter for event {event!r}")


@dataclass(frozen=True)
class FixedEvent:
    """A named event whose cost does not scale with the noise (e.g. an svt monitor's whole budget).

    Events are values (two monitors with equal parameters have equal events); the name is the identity.
    """

    name: str
    event: Event


@dataclass(frozen=True)
class CalibratedPlan:
    releases: tuple[CalibratedRelease, ...]
    target_epsilon: float
    target_delta: float
    epsilon: float  # the accountant's epsilon at target_delta, <= target_epsilon
    explanation: Explanation
    adaptive: bool = True
    fixed: tuple[FixedEvent, ...] = ()

    def events(self, without: frozenset[str] = frozenset()) -> tuple[Event, ...]:
        """Every release's events (count times its per-run event), then the fixed events not named in `without`."""
        unknown = without - {f.name for f in self.fixed}
        if unknown:
            raise CalibrationError(f"no fixed events named {sorted(unknown)}; fixed: {[f.name for f in self.fixed]}")
        calibrated = tuple(SelfComposed(r.event, r.release.count) for r in self.releases)
        return calibrated + tuple(f.event for f in self.fixed if f.name not in without)

    def by_name(self) -> dict[str, CalibratedRelease]:
        return {r.release.name: r for r in self.releases}


def _compose(
    releases: tuple[Release, ...], scale: float, adaptive: bool, fixed: tuple[FixedEvent, ...]
) -> tuple[Accountant, list[Event]]:
    total_weight = math.fsum(r.weight for r in releases)
    events = [r.event(scale * r.weight / total_weight) for r in releases]
    accountant = Accountant(adaptive=adaptive)
    for named in fixed:
        accountant.compose(named.event)
    for release, event in zip(releases, events):
        accountant.compose(event, release.count)
    return accountant, events


def calibrate(
    releases: list[Release] | tuple[Release, ...],
    epsilon: float,
    delta: float,
    adaptive: bool = True,
    rtol: float = 1e-6,
    fixed: tuple[FixedEvent, ...] = (),
) -> CalibratedPlan:
    """The least noise for every release such that the whole plan is (epsilon, delta)-DP.

    `fixed` holds named events whose cost does not scale with the noise (an
    svt monitor's whole budget); they are composed with the plan as they are.
    A plan of fixed events only is checked against the target and returned.
    """
    releases, fixed = tuple(releases), tuple(fixed)
    if not releases and not fixed:
        raise CalibrationError("a plan needs at least one release or fixed event")
    names = [r.name for r in releases] + [f.name for f in fixed]
    if len(set(names)) != len(names):
        raise CalibrationError(f"release and fixed event names must be unique, got {names}")
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise CalibrationError(f"target epsilon must be a positive finite number, got {epsilon!r}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise CalibrationError(f"target delta must lie in (0, 1), got {delta!r}")

    def spent(scale: float) -> float:
        return _compose(releases, scale, adaptive, fixed)[0].epsilon(delta)

    if not releases:
        return _checked_plan(releases, 0.0, epsilon, delta, adaptive, fixed)
    # rho of a plan that meets the target lies below epsilon^2/2 * (something); start from a pure-DP guess.
    lo, hi = epsilon**2 / 1e6, epsilon**2
    while spent(lo) > epsilon:
        lo /= 16
        if lo < 1e-300:
            raise CalibrationError(f"no noise level meets epsilon={epsilon} at delta={delta}")
    while spent(hi) <= epsilon:
        lo, hi = hi, hi * 16
    while math.log(hi) - math.log(lo) > rtol:
        mid = math.sqrt(lo * hi)
        if spent(mid) <= epsilon:
            lo = mid
        else:
            hi = mid
    return _checked_plan(releases, lo, epsilon, delta, adaptive, fixed)


def _checked_plan(releases: tuple[Release, ...], scale: float, epsilon: float, delta: float, adaptive: bool,
                  fixed: tuple[FixedEvent, ...]) -> CalibratedPlan:
    """The plan at `scale`, after checking that the accountant's epsilon meets the target."""
    accountant, events = _compose(releases, scale, adaptive, fixed)
    explanation = accountant.explain(delta)
    if explanation.value > epsilon:  # bisection invariant: lo always meets the target
        raise CalibrationError(f"the plan does not meet epsilon={epsilon}: the accountant gives {explanation.value}")
    calibrated = tuple(CalibratedRelease(r, e) for r, e in zip(releases, events))
    return CalibratedPlan(calibrated, epsilon, delta, explanation.value, explanation, adaptive, fixed)
