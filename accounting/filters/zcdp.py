"""zCDP filters: the zCDP filter and the approximate-DP filter of Whitehouse et al.

Both price every leaf event as (approximate) zCDP and add the rho's:
Gaussian (sigma, sensitivity s): rho = s^2 / (2 sigma^2) (Bun–Steinke 2016, Prop 1.6);
an epsilon-DP leaf (PureDP, Laplace): epsilon^2 / 2 (Bun–Steinke Prop 1.4);
an epsilon-BR leaf: epsilon^2 / 8 (Cesar–Rogers, conversion after Lemma 3.4; xi <= 0 is dropped);
ZCDP(rho, delta): rho with delta; ApproxDP(epsilon, delta): epsilon^2 / 2 with delta
(the (epsilon_t, delta_t) form of Whitehouse et al., as restated in Lebensold–Precup–Balle Thm 20);
a leaf with a relaxation (`Event.relaxed`, e.g. GaussianThreshold -> ZCDP(mu^2 / 2, delta)) at that of its relaxation.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Mapping

from dpstream.accounting.events import ZCDP, ApproxDP, BoundedRange, Event, Gaussian, Laplace, PureDP
from dpstream.accounting.filters.base import (
    EventFilter,
    check_budget,
    check_delta,
    exact_decimal,
    float_down,
    float_up,
    fraction_from_json,
    fraction_to_json,
)


def zcdp_cost(leaf: Event) -> tuple[Fraction, Fraction] | None:
    """(rho, delta) of one run of `leaf` as delta-approximate rho-zCDP, exact in the declared decimals; None if unknown."""
    if isinstance(leaf, Gaussian):
        return exact_decimal(leaf.sensitivity) ** 2 / (2 * exact_decimal(leaf.sigma) ** 2), Fraction(0)
    if isinstance(leaf, PureDP):
        return exact_decimal(leaf.epsilon) ** 2 / 2, Fraction(0)
    if isinstance(leaf, Laplace):
        return (exact_decimal(leaf.sensitivity) / exact_decimal(leaf.scale)) ** 2 / 2, Fraction(0)
    if isinstance(leaf, BoundedRange):
        return exact_decimal(leaf.epsilon) ** 2 / 8, Fraction(0)
    if isinstance(leaf, ZCDP):
        return exact_decimal(leaf.rho), exact_decimal(leaf.delta)
    if isinstance(leaf, ApproxDP):
        return exact_decimal(leaf.epsilon) ** 2 / 2, exact_decimal(leaf.delta)
    relaxed = leaf.relaxed()  # e.g. GaussianThreshold -> ZCDP(mu^2 / 2, delta)
    return None if relaxed is None else zcdp_cost(relaxed)


def zcdp_rho_for(epsilon: float, delta: float) -> float:
    """Largest rho with rho + 2 sqrt(rho ln(1/delta)) <= epsilon, rounded down.

    rho-zCDP implies (rho + 2 sqrt(rho ln(1/delta)), delta)-DP (Bun–Steinke
    2016, Prop 1.3); solving for rho gives (sqrt(L + eps) - sqrt(L))^2 with
    L = ln(1/delta), computed as eps^2 / (sqrt(L + eps) + sqrt(L))^2 to avoid
    cancellation.
    """
    check_budget("zcdp_rho_for", "epsilon", epsilon)
    check_delta("zcdp_rho_for", delta, allow_zero=False)
    log_inv = -math.log(delta)
    rho = epsilon**2 / (math.sqrt(log_inv + epsilon) + math.sqrt(log_inv)) ** 2
    for _ in range(8):  # a few ulps below: covers the rounding of log, sqrt and the divisions
        rho = math.nextafter(rho, 0.0)
    return rho


class _ZCDPSum(EventFilter):
    """Shared rule: admit while the rho's sum to at most the rho budget and the deltas to at most the delta budget."""

    allowed: str

    def _init_sums(self, rho_budget: float, delta_budget: float) -> None:
        self._rho_budget = Fraction(rho_budget)
        self._delta_budget = Fraction(delta_budget)
        self._spent_rho = Fraction(0)
        self._spent_delta = Fraction(0)

    @property
    def rho_budget(self) -> float:
        return float(self._rho_budget)

    def _accepts_delta(self) -> bool:
        return True

    def _state(self) -> dict[str, Any]:
        return {"spent_rho": fraction_to_json(self._spent_rho), "spent_delta": fraction_to_json(self._spent_delta)}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._spent_rho = fraction_from_json(state["spent_rho"])
        self._spent_delta = fraction_from_json(state["spent_delta"])

    def cost_terms(self, event: Event) -> dict[str, float]:
        rho = delta = Fraction(0)
        for leaf, count in self._leaves(event).items():
            cost = zcdp_cost(leaf)
            if cost is None:
                return {"rho": math.inf, "delta": math.inf}
            rho, delta = rho + count * cost[0], delta + count * cost[1]
        terms = {"rho": float_up(rho), "delta": float_up(delta)}
        return terms if self._accepts_delta() else {"rho": terms["rho"]}

    def left_terms(self) -> dict[str, float]:
        terms = {"rho": float_down(self._rho_budget - self._spent_rho),
                 "delta": float_down(self._delta_budget - self._spent_delta)}
        return terms if self._accepts_delta() else {"rho": terms["rho"]}

    def _charge(self, leaves: Mapping[Event, int]) -> tuple[Fraction, Fraction] | None:
        rho, delta = self._spent_rho, self._spent_delta
        for leaf, count in leaves.items():
            cost = zcdp_cost(leaf)
            if cost is None or (cost[1] > 0 and not self._accepts_delta()):
                raise self._unsupported(leaf, self.allowed)
            rho += count * cost[0]
            delta += count * cost[1]
        return (rho, delta) if rho <= self._rho_budget and delta <= self._delta_budget else None

    def _apply(self, new_state: tuple[Fraction, Fraction]) -> None:
        self._spent_rho, self._spent_delta = new_state


class ZCDPFilter(_ZCDPSum):
    """zCDP filter: admit while rho_1 + ... + rho_t <= rho.

    Privacy: add/remove one privacy unit; the whole interaction is rho-zCDP
    for rho_t chosen adaptively. With `ZCDPFilter.for_budget(epsilon, delta)`
    rho is the largest value that converts to (epsilon, delta)-DP (Bun–Steinke
    Prop 1.3).
    Proof: the Rényi filter of Feldman–Zrnic 2021 (Regehr et al. Remark 4)
    applied at every order alpha at once, since (alpha, alpha rho_t)-RDP
    costs add with the same rule for every alpha; see
    docs/proofs/accounting.filters.zcdp.ZCDPFilter.md.
    Checks: rho positive and finite; leaves Gaussian, PureDP, Laplace,
    BoundedRange or ZCDP with delta 0.
    Caller must ensure: each mechanism is rho_t-zCDP given past outputs.
    Numerics: exact rationals of the declared decimals; the rho budget from
    (epsilon, delta) is rounded down.
    Runtime: O(number of distinct leaves) per spend.
    After a refusal the filter keeps admitting smaller spends (residue filter).
    """

    kind = "zcdp"
    halts_on_refusal = False
    allowed = "Gaussian, PureDP, Laplace, BoundedRange, ZCDP with delta=0"

    def __init__(self, rho: float) -> None:
        super().__init__()
        self.rho = check_budget("ZCDPFilter", "rho", rho)
        self._init_sums(self.rho, 0.0)

    @classmethod
    def for_budget(cls, epsilon: float, delta: float) -> "ZCDPFilter":
        return cls(zcdp_rho_for(epsilon, delta))

    def _accepts_delta(self) -> bool:
        return False

    def describe(self) -> str:
        return f"zCDP filter: rho of admitted releases adds up to at most {self.rho:.6g}; the scope is {self.rho:.6g}-zCDP"

    def _parameters(self) -> dict[str, Any]:
        return {"rho": self.rho}


class WhitehouseFilter(_ZCDPSum):
    """Approximate-DP filter of Whitehouse–Ramdas–Rogers–Wu 2023.

    Rule: with delta = conversion_delta + event_delta, admit while
        sqrt(2 ln(1/conversion_delta) sum eps_m^2) + (1/2) sum eps_m^2 <= epsilon
        and sum delta_m <= event_delta,
    and HALT at the first refusal, as the theorem's stopping time does. With
    rho_m = eps_m^2 / 2 the first condition is sum rho_m <= rho*, rho* =
    `zcdp_rho_for(epsilon, conversion_delta)`; Gaussian and zCDP leaves
    enter with their own rho (the approximate-zCDP filter the theorem rests on).
    Privacy: add/remove one privacy unit; the interaction is (epsilon, delta)-DP
    for (epsilon_t, delta_t) chosen adaptively.
    Proof: Whitehouse et al. 2023 (approximate-zCDP filter; (eps, delta) form
    restated in Lebensold–Precup–Balle Thm 20); the rho pricing is listed in
    this module's docstring.
    Checks: epsilon > 0; 0 < conversion_delta < delta < 1 (default half of delta).
    Caller must ensure: each mechanism is (epsilon_t, delta_t)-DP (or
    delta_t-approximate rho_t-zCDP) given past outputs.
    Numerics: exact rationals; rho* rounded down.
    Runtime: O(number of distinct leaves) per spend.
    """

    kind = "whitehouse"
    halts_on_refusal = True
    allowed = "Gaussian, PureDP, Laplace, BoundedRange, ZCDP, ApproxDP, GaussianThreshold"

    def __init__(self, epsilon: float, delta: float, conversion_delta: float | None = None) -> None:
        super().__init__()
        self.epsilon = check_budget("WhitehouseFilter", "epsilon", epsilon)
        self.delta = check_delta("WhitehouseFilter", delta, allow_zero=False)
        if conversion_delta is None:
            conversion_delta = self.delta / 2
        if not (isinstance(conversion_delta, (int, float)) and 0 < conversion_delta < self.delta):
            raise ValueError(
                f"WhitehouseFilter.conversion_delta must lie in (0, delta={self.delta!r}), got {conversion_delta!r}"
            )
        self.conversion_delta = float(conversion_delta)
        event_delta = exact_decimal(self.delta) - exact_decimal(self.conversion_delta)
        self._init_sums(zcdp_rho_for(self.epsilon, self.conversion_delta), 0.0)
        self._delta_budget = event_delta

    @classmethod
    def for_budget(cls, epsilon: float, delta: float, conversion_delta: float | None = None) -> "WhitehouseFilter":
        return cls(epsilon, delta, conversion_delta)

    def describe(self) -> str:
        return (
            f"Whitehouse et al. filter: releases are priced in zCDP; admitted while their rho stays within "
            f"{self.rho_budget:.6g} (epsilon {self.epsilon:g} at delta {self.conversion_delta:g}) and their own "
            f"deltas within {float(self._delta_budget):g}; halts for good at the first refusal"
        )

    def _parameters(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta, "conversion_delta": self.conversion_delta}
