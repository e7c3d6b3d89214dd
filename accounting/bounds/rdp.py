"""Composition through Rényi DP curves, with the tightest known conversion to (epsilon, delta).

Privacy: add/remove neighbours of one privacy unit; measure Rényi DP
(Mironov 2017, Def 4): D_alpha(M(x) || M(x')) <= R(alpha) for both orders of
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
ApproxDP events and ZCDP events with delta > 0 have no finite Rényi curve, so
`applies` is False for compositions holding them.
Proof: the papers above; the bounded-range supremum and the rewritten
formulas used for accuracy are in docs/proofs/accounting.bounds.rdp.RDPComposition.md.
Checks: events are validated when built; `applies` rejects unsupported events.
Caller must ensure: every event's parameters were fixed before any mechanism
ran (composition, not a filter).
Numerics: every curve is evaluated at gaps a = alpha - 1 (no digits lost near
alpha = 1) in a form without cancellation: e^x - 1 - x by its series near 0
(`accounting.numerics.expm1_minus_x`) and log1p of the excess over 1 while
a eps <= 30, the log-space form above that. Relative error is below 1e-12
except for the bounded-range supremum with alpha eps <= 1e-4, where the cap
alpha eps^2 / 8 (larger than the supremum by a relative 1e-8 at most) is used
instead of a formula that would cancel. The conversion inflates each order's
value by 1e-11 relative, so no answer undershoots.
Runtime: per query, about 350 orders times the number of distinct
non-Gaussian events (numpy, in blocks of 512 events); Gaussian and zCDP events
collapse into one coefficient.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, log_expit

from accounting.bounds import Bound
from accounting.bounds.generalized_rr import log_one_minus_q, log_q
from accounting.bounds.rdp_conversion import renyi_epsilon, renyi_log_delta
from accounting.composition import Composition
from accounting.events import ZCDP, BoundedRange, Gaussian, Laplace, PureDP
from accounting.numerics import expm1_minus_x

_LOG_FORM_ABOVE = 30.0  # a * eps above which curves use the log-space form (no cancellation there)
_BR_CAP_BELOW = 1e-4  # alpha * eps at or below which the BR supremum is replaced by its cap
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
    # e^t = (a / (1 + a)) (1 + (e^eps - 1) / (1 - e^{-a eps})).
    with np.errstate(divide="ignore"):
        log_ratio = eps + np.log(-np.expm1(-eps)) - np.log(-np.expm1(-a * eps))  # log((e^eps - 1)/(1 - e^{-a eps}))
        t = np.log(a) - np.log1p(a) + np.logaddexp(0.0, log_ratio)
    return np.clip(t, 0.0, eps)


def generalized_rr_rdp(epsilon, t, gap):
    """Rényi divergence of order 1 + gap between RR_{eps,t}(0) and RR_{eps,t}(1), for t in [0, eps]."""
    eps, a = _broadcast(epsilon, gap)
    t = np.broadcast_to(np.asarray(t, dtype=float), eps.shape)
    x = a * eps
    log_one_minus = log_one_minus_q(eps, t)
    with np.errstate(divide="ignore", invalid="ignore"):
        # D = t + log(q + (1 - q) e^{-a eps}) / a.
        near = t + np.log1p(-np.exp(log_one_minus + np.log(-np.expm1(-x)))) / a
        far = t + np.logaddexp(log_q(eps, t), log_one_minus - x) / a
    value = np.where(x <= 1.0, near, far)
    return np.maximum(value, 0.0)


def bounded_range_rdp(epsilon, gap):
    """Largest Rényi divergence of order 1 + gap over all eps-bounded-range pairs (both orders)."""
    eps, a = _broadcast(epsilon, gap)
    cap = (1.0 + a) * eps * eps / 8.0
    exact = generalized_rr_rdp(eps, bounded_range_worst_t(eps, a), a)
    use_cap = (1.0 + a) * eps <= _BR_CAP_BELOW
    return np.where(use_cap, cap, np.minimum(exact, cap))


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


def _grouped(values: list[tuple[float, int]]) -> tuple[np.ndarray, np.ndarray]:
    merged: dict[float, int] = {}
    for value, count in values:
        merged[value] = merged.get(value, 0) + count
    return np.array(list(merged), dtype=float), np.array(list(merged.values()), dtype=float)


def renyi_curve(composition: Composition) -> RenyiCurve:
    """The Rényi curve of the adaptive composition (every event must be RDP-representable)."""
    linear, laplace, pure, bounded = [], [], [], []
    for event, count in composition:
        if isinstance(event, Gaussian):
            linear.append(count * event.mu**2 / 2.0)
        elif isinstance(event, ZCDP) and event.delta == 0:
            linear.append(count * float(event.rho))
        elif isinstance(event, Laplace):
            laplace.append((event.epsilon, count))
        elif isinstance(event, PureDP):
            pure.append((float(event.epsilon), count))
        elif isinstance(event, BoundedRange):
            bounded.append((float(event.epsilon), count))
        else:
            raise TypeError(
                f"no Rényi curve for event {event!r}; allowed: Gaussian, Laplace, PureDP, BoundedRange, ZCDP with delta 0"
            )
    total = math.fsum(linear)
    return RenyiCurve(
        linear=math.nextafter(total, math.inf) if total > 0 else 0.0,
        laplace=_grouped(laplace),
        pure=_grouped(pure),
        bounded_range=_grouped(bounded),
    )


class RDPComposition(Bound):
    name = "rdp"
    reference = (
        "Mironov 2017, Prop 1/5/6/7; Dong–Durfee–Rogers Lemma 4.1 (BR worst case); "
        "Canonne–Kamath–Steinke 2020, Prop 12 / Balle et al. 2020, Thm 21 (conversion)"
    )

    def applies(self, composition: Composition) -> bool:
        return composition.only(Gaussian, Laplace, PureDP, BoundedRange, ZCDP) and all(
            event.delta == 0 for event, _ in composition.select(ZCDP)
        )

    def delta(self, composition: Composition, epsilon: float) -> float:
        return math.exp(renyi_log_delta(renyi_curve(composition), epsilon))

    def epsilon(self, composition: Composition, delta: float) -> float:
        return renyi_epsilon(renyi_curve(composition), delta)
