"""Composition through Rényi DP curves, with the tightest known conversion to (epsilon, delta).

Privacy: add/remove neighbours of one privacy unit; measure Rényi DP
(Mironov 2017): D_alpha(M(x) || M(x')) <= R(alpha) for both orders of
every neighbouring pair and every alpha > 1. Curves add under adaptive
composition (Mironov 2017, Prop 1). Per event, with a = alpha - 1:
    Gaussian(sigma, sensitivity), ZCDP(rho, 0)   R = alpha rho, rho = mu^2 / 2 for the Gaussian
                                                 (Mironov 2017, Prop 7; Bun–Steinke 2016, Def 1.1)
    Laplace(scale, sensitivity), eps = sens/scale
        R = (1/a) log( alpha/(2 alpha - 1) e^{a eps} + a/(2 alpha - 1) e^{-alpha eps} )
                                                 (Mironov 2017, Prop 6; exact)
    PureDP(eps)   the RDP of randomized response RR_eps (p = e^eps / (1 + e^eps)):
        R = (1/a) log( p e^{a eps} + (1 - p) e^{-a eps} )
        Every eps-DP pair is a post-processing of RR_eps (Kairouz–Oh–Viswanath 2017;
        Chourasia–Javaid–Sikdar Thm 4.5), so this bounds every eps-DP mechanism and is
        attained by RR_eps itself (Chourasia–Javaid–Sikdar eq. (61); Mironov 2017, Prop 5).
    BoundedRange(eps)   sup over t in [0, eps] of the RDP of RR_{eps,t}
        (Dong–Durfee–Rogers Lemma 4.1: every eps-BR pair is a post-processing of some
        RR_{eps,t}); the supremum has a closed-form maximiser, and the reversed pair is
        RR_{eps, eps - t}, so one supremum covers both orders (proof note). Capped by
        alpha eps^2 / 8 (Cesar–Rogers, BR -> zCDP after Lemma 3.4).
The composed curve is converted by Canonne–Kamath–Steinke 2020, Prop 12 /
Balle et al. 2020, Thm 21 (`rdp_conversion`), minimised over the order.
ZCDP(rho, delta) with delta > 0 (e.g. truncated-Gaussian partition selection,
Cesar–Rogers Lemma 6.4) enters in the mixture form of approximate zCDP: with
probability 1 - delta its law is Rényi-bounded by alpha rho. Composing such
mixtures, the all-good component has probability prod(1 - delta_i) >= 1 - sum
delta_i and Rényi curve the sum of the curves, so the composition is
(eps, delta_rdp(eps) + sum delta_i)-DP (proof note, "Approximate events").
ApproxDP events have no Rényi-bounded mixture component in general, so
`applies` is False for compositions holding them.
Proof: the papers above; the bounded-range supremum, the approximate events and
the rewritten formulas used for accuracy are in docs/proofs/accounting.bounds.rdp.RDPComposition.md.
Checks: events are validated when built; `applies` rejects unsupported events.
Caller must ensure: every event's parameters were fixed before any mechanism
ran (composition, not a filter).
Numerics: every curve is evaluated at gaps a = alpha - 1 (no digits lost near
alpha = 1) in a form without cancellation: e^x - 1 - x by its series near 0
(`accounting.numerics.expm1_minus_x`) and log1p of the excess over 1 while
a eps <= 30, the log-space form above that; the bounded-range divergence is
written as a sum of non-negative terms (proof note). Relative error is below
1e-13 in tests against mpmath. The conversion inflates each order's value by
1e-11 relative, so no answer undershoots.
Runtime: per query, 145 orders times the number of distinct
non-Gaussian events (numpy, in blocks of 512 events); Gaussian and zCDP events
collapse into one coefficient.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, log_expit

from dpstream.accounting.bounds import Bound
from dpstream.accounting.bounds.basic import pure_epsilon
from dpstream.accounting.bounds.generalized_rr import log_one_minus_q, log_q
from dpstream.accounting.bounds.rdp_conversion import renyi_epsilon, renyi_log_delta
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import ZCDP, BoundedRange, Gaussian, Laplace, PureDP
from dpstream.accounting.numerics import expm1_minus_x

_LOG_FORM_ABOVE = 30.0  # a * eps above which curves use the log-space form (no cancellation there)
_BLOCK = 512


def _broadcast(epsilon, gap):
    eps, a = np.broadcast_arrays(np.asarray(epsilon, dtype=float), np.asarray(gap, dtype=float))
    return eps, a


def laplace_rdp(epsilon, gap):
    """Rényi divergence of order 1 + gap between Lap(0, b) and Lap(Delta, b), epsilon = Delta / b (exact).

    Accepts numpy arrays and broadcasts `epsilon` against `gap`.
    """
    eps, a = _broadcast(epsilon, gap)
    x = a * eps
    small = x <= _LOG_FORM_ABOVE
    with np.errstate(over="ignore", invalid="ignore"):
        # E - 1 = [(1+a) g(a eps) + a g(-(1+a) eps)] / (1 + 2a), g(x) = e^x - 1 - x, both terms >= 0.
        excess = ((1.0 + a) * expm1_minus_x(np.where(small, x, 0.0)) + a * expm1_minus_x(-(1.0 + a) * eps)) / (
            1.0 + 2.0 * a
        )
        near = np.log1p(excess) / a
        far = eps + (np.log1p(a) - np.log1p(2.0 * a) + np.log1p(a / (1.0 + a) * np.exp(-(1.0 + 2.0 * a) * eps))) / a
    return np.where(small, near, far)


def randomized_response_rdp(epsilon, gap):
    """Rényi divergence of order 1 + gap of eps-randomized response: the largest over all eps-DP pairs."""
    eps, a = _broadcast(epsilon, gap)
    x = a * eps
    small = x <= _LOG_FORM_ABOVE
    p = expit(eps)
    with np.errstate(over="ignore", invalid="ignore"):
        # E - 1 = p g(a eps) + (1 - p) g(-a eps) + a eps tanh(eps / 2), every term >= 0.
        xs = np.where(small, x, 0.0)
        excess = p * expm1_minus_x(xs) + (1.0 - p) * expm1_minus_x(-xs) + xs * np.tanh(eps / 2.0)
        near = np.log1p(excess) / a
        far = eps + (log_expit(eps) + np.log1p(np.exp(-eps * (1.0 + 2.0 * a)))) / a
    return np.where(small, near, far)


def bounded_range_worst_t(epsilon, gap):
    """The t in [0, eps] maximising the Rényi divergence of order 1 + gap of RR_{eps,t} (closed form)."""
    eps, a = _broadcast(epsilon, gap)
    # Stationary point of t + log(q_t + (1 - q_t) e^{-a eps}) / a:
    # e^t = (a / (1 + a)) (1 + (e^eps - 1) / (1 - e^{-a eps})), i.e. with g(x) = e^x - 1 - x
    # e^t - 1 = (a g(eps) + g(-a eps)) / ((1 + a)(1 - e^{-a eps})), a sum of non-negative terms
    # (used for eps <= 1, where the log form below would lose the digits of a small t).
    tiny = eps <= 1.0
    e1 = np.where(tiny, eps, 1.0)
    with np.errstate(divide="ignore"):
        near = np.log1p((a * expm1_minus_x(e1) + expm1_minus_x(-a * e1)) / ((1.0 + a) * -np.expm1(-a * e1)))
        log_ratio = eps + np.log(-np.expm1(-eps)) - np.log(-np.expm1(-a * eps))  # log((e^eps - 1)/(1 - e^{-a eps}))
        far = np.log(a) - np.log1p(a) + np.logaddexp(0.0, log_ratio)
    return np.clip(np.where(tiny, near, far), 0.0, eps)


def generalized_rr_rdp(epsilon, t, gap):
    """Rényi divergence of order 1 + gap between RR_{eps,t}(0) and RR_{eps,t}(1), for t in [0, eps]."""
    eps, a = _broadcast(epsilon, gap)
    t = np.broadcast_to(np.asarray(t, dtype=float), eps.shape)
    x = a * eps
    small = x <= _LOG_FORM_ABOVE
    log_one_minus = log_one_minus_q(eps, t)
    q_log = log_q(eps, t)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        # E = q e^{a t} + (1 - q) e^{a (t - eps)}; with g(x) = e^x - 1 - x and
        # KL = t - eps (1 - q) = (t g(eps) - eps g(t)) / (e^eps - 1) >= 0:
        # E - 1 = q g(a t) + (1 - q) g(a (t - eps)) + a KL, every term >= 0.
        # The KL difference form avoids cancellation for eps <= 1; above, the direct form has none.
        tiny = eps <= 1.0
        t1, e1 = np.where(tiny, t, 0.5), np.where(tiny, eps, 1.0)
        kl = np.where(
            tiny,
            (t1 * expm1_minus_x(e1) - e1 * expm1_minus_x(t1)) / np.expm1(e1),
            t - eps * np.exp(log_one_minus),
        )
        ts, es = np.where(small, t, 0.0), np.where(small, eps, 0.0)
        excess = (
            np.exp(q_log) * expm1_minus_x(a * ts)
            + np.exp(log_one_minus) * expm1_minus_x(a * (ts - es))
            + a * np.maximum(kl, 0.0)
        )
        near = np.log1p(excess) / a
        far = t + np.logaddexp(q_log, log_one_minus - x) / a
    return np.maximum(np.where(small, near, far), 0.0)


def bounded_range_rdp(epsilon, gap):
    """Largest Rényi divergence of order 1 + gap over all eps-bounded-range pairs (both orders)."""
    eps, a = _broadcast(epsilon, gap)
    exact = generalized_rr_rdp(eps, bounded_range_worst_t(eps, a), a)
    return np.minimum(exact, (1.0 + a) * eps * eps / 8.0)


@dataclass(frozen=True)
class RenyiCurve:
    """The composed Rényi curve: alpha * linear plus count-weighted sums of event curves."""

    linear: float
    laplace: tuple[np.ndarray, np.ndarray]  # (distinct epsilons, counts)
    pure: tuple[np.ndarray, np.ndarray]
    bounded_range: tuple[np.ndarray, np.ndarray]

    def __call__(self, gaps: np.ndarray) -> np.ndarray:
        gaps = np.asarray(gaps, dtype=float)
        total = (1.0 + gaps) * self.linear
        for curve, (epsilons, counts) in (
            (laplace_rdp, self.laplace),
            (randomized_response_rdp, self.pure),
            (bounded_range_rdp, self.bounded_range),
        ):
            for start in range(0, len(epsilons), _BLOCK):
                block = slice(start, start + _BLOCK)
                total = total + counts[block] @ curve(epsilons[block, None], gaps[None, :])
        return total


def _grouped(values: dict[float, int]) -> tuple[np.ndarray, np.ndarray]:
    return np.fromiter(values.keys(), dtype=float, count=len(values)), np.fromiter(
        values.values(), dtype=float, count=len(values)
    )


def renyi_curve(composition: Composition) -> RenyiCurve:
    """The Rényi curve of the adaptive composition (every event must be RDP-representable)."""
    linear: list[float] = []
    by_kind: dict[type, dict[float, int]] = {Laplace: {}, PureDP: {}, BoundedRange: {}}
    for event, count in composition:
        if type(event) is Gaussian:
            linear.append(count * (event.sensitivity / event.sigma) ** 2 / 2.0)
        elif type(event) is ZCDP:
            linear.append(count * float(event.rho))
        elif type(event) in by_kind:
            merged = by_kind[type(event)]
            epsilon = pure_epsilon(event)
            merged[epsilon] = merged.get(epsilon, 0) + count
        else:
            raise TypeError(
                f"no Rényi curve for event {event!r}; "
                "allowed: Gaussian, Laplace, PureDP, BoundedRange, ZCDP"
            )
    total = math.fsum(linear)
    return RenyiCurve(
        linear=math.nextafter(total, math.inf) if total > 0 else 0.0,
        laplace=_grouped(by_kind[Laplace]),
        pure=_grouped(by_kind[PureDP]),
        bounded_range=_grouped(by_kind[BoundedRange]),
    )


class RDPComposition(Bound):
    name = "rdp"
    reference = (
        "Mironov 2017, Prop 1/5/6/7; Dong–Durfee–Rogers Lemma 4.1 (BR worst case); "
        "Canonne–Kamath–Steinke 2020, Prop 12 / Balle et al. 2020, Thm 21 (conversion)"
    )

    def applies(self, composition: Composition) -> bool:
        return composition.only(Gaussian, Laplace, PureDP, BoundedRange, ZCDP)

    def delta(self, composition: Composition, epsilon: float) -> float:
        approximate = approximate_delta(composition)
        total = approximate + math.exp(renyi_log_delta(renyi_curve(composition), epsilon))
        return min(1.0, math.nextafter(total, math.inf) if approximate > 0 else total)

    def epsilon(self, composition: Composition, delta: float) -> float:
        approximate = approximate_delta(composition)
        remaining = math.nextafter(delta - approximate, 0.0) if approximate > 0 else delta
        if remaining <= 0.0:
            return math.inf
        return renyi_epsilon(renyi_curve(composition), remaining)


def approximate_delta(composition: Composition) -> float:
    """Sum of count * delta over the ZCDP events, rounded up one ulp (0 when there is none)."""
    total = math.fsum(count * float(event.delta) for event, count in composition.select(ZCDP))
    return math.nextafter(total, math.inf) if total > 0 else 0.0
