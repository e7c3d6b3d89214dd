"""Composition through (delta-approximate) zero-concentrated DP, with the tight conversion.

Privacy: add/remove neighbours of one privacy unit; measure delta-approximate
rho-zCDP (Bun–Steinke 2016; Cesar–Rogers Def 2.7 with xi = 0), used in the
mixture form M(x) = (1 - delta) Y + delta Z, M(x') = (1 - delta) Y' + delta Z'
with D_alpha(Y || Y') and D_alpha(Y' || Y) at most alpha rho for every
alpha > 1 (the proof note shows the event form implies it). Each event is
mapped to (rho_i, delta_i):
    Gaussian(sigma, sensitivity)  rho = sensitivity^2 / (2 sigma^2)   (Bun–Steinke Prop 1.6)
    PureDP(eps), Laplace          rho = eps^2 / 2                     (Bun–Steinke Prop 1.4; Laplace is
                                                                       eps-DP with eps = sensitivity / scale)
    BoundedRange(eps)             rho = eps^2 / 8                     (Cesar–Rogers Lemma 3.2 and the conversion
                                                                       stated after Lemma 3.4)
    ApproxDP(eps, delta)          rho = eps^2 / 2, with its delta     (proof note)
    ZCDP(rho, delta)              as given
Adaptive composition adds the rhos (rho-zCDP is Rényi DP with R(alpha) = alpha rho
at every order, and Rényi curves add: Mironov 2017, Prop 1) and, for the
approximate part, the deltas (Cesar–Rogers Lemma 3.4 and its proof). The
composed (rho, delta_a) is converted with Canonne–Kamath–Steinke 2020, Prop 12
at R(alpha) = alpha rho (`rdp_conversion`), and the approximate part adds: the composition is
(epsilon, delta_a + delta_rho(epsilon))-DP (proof note).
Proof: the papers above; the ApproxDP mapping and the final delta sum are in
docs/proofs/accounting.bounds.zcdp.ZCDPComposition.md.
Checks: events are validated when built; nothing else is needed.
Caller must ensure: every event's parameters were fixed before any mechanism
ran (composition, not a filter).
Numerics: rho and the deltas are summed with math.fsum and rounded up one ulp;
the conversion is done in log space over orders alpha = 1 + g, g in
[1e-6, 1e6], and never undershoots the formula (see `rdp_conversion`).
Runtime: O(number of distinct events) to sum, then 145 closed-form
evaluations (vectorised) per query.
"""
from __future__ import annotations

import math

import numpy as np

from dpstream.accounting.bounds import Bound
from dpstream.accounting.bounds.rdp_conversion import renyi_epsilon, renyi_log_delta
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import ZCDP, ApproxDP, BoundedRange, Event, Gaussian, Laplace, PureDP


def event_zcdp(event: Event) -> tuple[float, float]:
    """(rho, delta) such that `event` is delta-approximate rho-zCDP."""
    if isinstance(event, Gaussian):
        return event.mu**2 / 2.0, 0.0
    if isinstance(event, (PureDP, Laplace)):
        return event.epsilon**2 / 2.0, 0.0
    if isinstance(event, BoundedRange):
        return event.epsilon**2 / 8.0, 0.0
    if isinstance(event, ApproxDP):
        return event.epsilon**2 / 2.0, float(event.delta)
    if isinstance(event, ZCDP):
        return float(event.rho), float(event.delta)
    raise TypeError(
        f"no zCDP mapping for event {event!r}; allowed: Gaussian, PureDP, Laplace, BoundedRange, ApproxDP, ZCDP"
    )


def composed_zcdp(composition: Composition) -> tuple[float, float]:
    """(rho, delta) of the adaptive composition: sums, each rounded up one ulp."""
    pairs = [(event_zcdp(event), count) for event, count in composition]
    rho = math.fsum(r * count for (r, _), count in pairs)
    delta = math.fsum(d * count for (_, d), count in pairs)
    return math.nextafter(rho, math.inf) if rho > 0 else 0.0, math.nextafter(delta, math.inf) if delta > 0 else 0.0


def _linear_curve(rho: float):
    return lambda gaps: (1.0 + gaps) * rho


def zcdp_epsilon(rho: float, delta: float) -> float:
    """Smallest epsilon at `delta` for a rho-zCDP mechanism by Canonne–Kamath–Steinke 2020, Prop 12."""
    if rho == 0.0:
        return 0.0
    return renyi_epsilon(_linear_curve(rho), delta)


def zcdp_delta(rho: float, epsilon: float) -> float:
    """delta at `epsilon` for a rho-zCDP mechanism by Canonne–Kamath–Steinke 2020, Prop 12."""
    if rho == 0.0:
        return 0.0 if epsilon >= 0 else -math.expm1(epsilon)
    return math.exp(renyi_log_delta(_linear_curve(rho), epsilon))


def zcdp_epsilon_classic(rho: float, delta: float) -> float:
    """The loose textbook conversion rho + 2 sqrt(rho log(1/delta)) (Bun–Steinke 2016, Prop 1.3).

    Kept only as a reference for tests and benchmarks; `zcdp_epsilon` is never larger.
    """
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


class ZCDPComposition(Bound):
    name = "zcdp"
    reference = (
        "Bun–Steinke 2016, Prop 1.4/1.6; Mironov 2017, Prop 1; Cesar–Rogers Lemma 3.2 (BR eps^2/8), "
        "Lemma 3.4 (deltas add); Canonne–Kamath–Steinke 2020, Prop 12 (conversion)"
    )

    def applies(self, composition: Composition) -> bool:
        return composition.only(Gaussian, PureDP, Laplace, BoundedRange, ApproxDP, ZCDP)

    def delta(self, composition: Composition, epsilon: float) -> float:
        rho, approximate = composed_zcdp(composition)
        total = approximate + zcdp_delta(rho, epsilon)
        return min(1.0, float(np.nextafter(total, math.inf)) if total > 0 else 0.0)

    def epsilon(self, composition: Composition, delta: float) -> float:
        rho, approximate = composed_zcdp(composition)
        remaining = math.nextafter(delta - approximate, 0.0)  # round the budget left for rho down
        if remaining <= 0.0:
            return math.inf
        return zcdp_epsilon(rho, remaining)
