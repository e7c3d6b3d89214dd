"""Additive (epsilon, delta) filters: epsilons add up, deltas add up, in exact rational arithmetic.

`PureDPFilter(epsilon)` admits epsilon_t-DP mechanisms while the epsilons sum
to at most epsilon. `ApproxDPFilter(epsilon, delta, release_delta)` admits
(epsilon_t, delta_t)-DP releases while both sums stay within the budget; a
release of several events is priced by the tight `Accountant` at the
per-release delta share.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Mapping

from dpstream.accounting.accountant import Accountant
from dpstream.accounting.events import ApproxDP, BoundedRange, Composed, Event, Laplace, PureDP, SelfComposed
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

PURE_KINDS = "PureDP, Laplace, BoundedRange"


def pure_epsilon_exact(leaf: Event) -> Fraction | None:
    """The exact epsilon of a leaf that is epsilon-DP, from its declared decimals; None for other leaves.

    Laplace(scale b, sensitivity s) is s/b-DP; an epsilon-BR mechanism is epsilon-DP.
    """
    if isinstance(leaf, (PureDP, BoundedRange)):
        return exact_decimal(leaf.epsilon)
    if isinstance(leaf, Laplace):
        return exact_decimal(leaf.sensitivity) / exact_decimal(leaf.scale)
    return None


def pure_total(leaves: Mapping[Event, int]) -> Fraction | None:
    """Sum of count * epsilon over the leaves when every leaf is pure DP, else None."""
    total = Fraction(0)
    for leaf, count in leaves.items():
        epsilon = pure_epsilon_exact(leaf)
        if epsilon is None:
            return None
        total += count * epsilon
    return total


def basic_total(leaves: Mapping[Event, int]) -> tuple[Fraction, Fraction] | None:
    """(sum of epsilons, sum of deltas) when every leaf is pure DP or ApproxDP, else None."""
    epsilon, delta = Fraction(0), Fraction(0)
    for leaf, count in leaves.items():
        if isinstance(leaf, ApproxDP):
            epsilon += count * exact_decimal(leaf.epsilon)
            delta += count * exact_decimal(leaf.delta)
            continue
        leaf_epsilon = pure_epsilon_exact(leaf)
        if leaf_epsilon is None:
            return None
        epsilon += count * leaf_epsilon
    return epsilon, delta


class PureDPFilter(EventFilter):
    """Pure-DP filter: admit while epsilon_1 + ... + epsilon_t <= epsilon.

    Privacy: add/remove one privacy unit; the whole interaction is epsilon-DP,
    for epsilon_t chosen adaptively from earlier outputs.
    Proof: Regehr et al. 2026, Remark 3 (the pure-DP filter of Rogers et al.
    2016 as a residue filter with U(R_eps, L) = R_{eps - eps_L}) and Thm 1.
    A release of several pure events costs the sum of their epsilons: at
    delta = 0 basic composition is exact for randomized response.
    Checks: epsilon positive and finite; events must be PureDP, Laplace or
    BoundedRange (epsilon-BR implies epsilon-DP).
    Caller must ensure: each mechanism is epsilon_t-DP given the past outputs,
    and asks the filter before it touches data.
    Numerics: exact rationals of the declared decimals, so ten spends of 0.1
    exactly fill a budget of 1.
    Runtime: O(number of distinct leaves) per spend.
    After a refusal the filter keeps admitting smaller spends (residue filter).
    """

    kind = "pure"
    halts_on_refusal = False

    def __init__(self, epsilon: float) -> None:
        super().__init__()
        self.epsilon = check_budget("PureDPFilter", "epsilon", epsilon)
        self._budget = exact_decimal(self.epsilon)
        self._spent = Fraction(0)

    @property
    def spent(self) -> Fraction:
        return self._spent

    @property
    def remaining(self) -> Fraction:
        return self._budget - self._spent

    def describe(self) -> str:
        return (
            f"pure-DP filter: epsilons of admitted releases add up to at most {self.epsilon:g}; "
            f"the scope is {self.epsilon:g}-DP (Regehr et al. Remark 3)"
        )

    def _parameters(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon}

    def _state(self) -> dict[str, Any]:
        return {"spent_epsilon": fraction_to_json(self._spent)}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._spent = fraction_from_json(state["spent_epsilon"])

    def cost_terms(self, event: Event) -> dict[str, float]:
        total = pure_total(self._leaves(event))
        return {"epsilon": math.inf if total is None else float_up(total)}

    def left_terms(self) -> dict[str, float]:
        return {"epsilon": float_down(self.remaining)}

    def _charge(self, leaves: Mapping[Event, int]) -> Fraction | None:
        total = pure_total(leaves)
        if total is None:
            raise self._unsupported(next(leaf for leaf in leaves if pure_epsilon_exact(leaf) is None), PURE_KINDS)
        spent = self._spent + total
        return spent if spent <= self._budget else None

    def _apply(self, new_state: Fraction) -> None:
        self._spent = new_state


class ApproxDPFilter(EventFilter):
    """Basic-composition (epsilon, delta) filter: admit while sum epsilon_t <= epsilon and sum delta_t <= delta.

    Privacy: add/remove one privacy unit; the whole interaction is
    (epsilon, delta)-DP for (epsilon_t, delta_t) chosen adaptively.
    Proof: residue filter (Regehr et al. Alg. 1, Thm 1) with budgets
    R_{eps, del}; R_{eps,del} = R_{0,del} (+) R_eps and the composition facts
    of Regehr et al. Def 5-6 give the residue condition; see
    docs/proofs/accounting.filters.pure.ApproxDPFilter.md.
    Release price: a release of pure-DP and ApproxDP events costs (sum of
    epsilons, sum of deltas) (basic composition, Dwork–Rothblum–Vadhan 2010
    Thm III.1). Any other release costs
    (Accountant().epsilon(release_delta), release_delta): the
    tight composition of the release's own events, whose parameters are fixed
    before the release runs, at the scope's per-release delta share. A release
    the accountant cannot bound at that delta (epsilon = inf) is refused.
    Checks: epsilon > 0, delta in [0, 1), release_delta in (0, delta] when delta > 0.
    Caller must ensure: each release's events are fixed before it runs.
    Numerics: exact rationals; the accountant's epsilon is already rounded up.
    Runtime: one accountant query per non-pure release.
    After a refusal the filter keeps admitting smaller spends (residue filter).
    """

    kind = "approx"
    halts_on_refusal = False

    def __init__(self, epsilon: float, delta: float, release_delta: float | None = None) -> None:
        super().__init__()
        self.epsilon = check_budget("ApproxDPFilter", "epsilon", epsilon)
        self.delta = check_delta("ApproxDPFilter", delta)
        if release_delta is None:
            release_delta = self.delta / 10
        ok = isinstance(release_delta, (int, float)) and math.isfinite(release_delta)
        ok = ok and (release_delta == 0 if self.delta == 0 else 0 < release_delta <= self.delta)
        if not ok:
            raise ValueError(
                f"ApproxDPFilter.release_delta must lie in (0, delta={self.delta!r}] (0 when delta is 0), "
                f"got {release_delta!r}"
            )
        self.release_delta = float(release_delta)
        self._spent_epsilon = Fraction(0)
        self._spent_delta = Fraction(0)

    def describe(self) -> str:
        return (
            f"basic (epsilon, delta) filter: each release costs the accountant's epsilon at delta "
            f"{self.release_delta:g} (releases of pure and approx events cost their summed epsilon and delta); "
            f"epsilons add up to at "
            f"most {self.epsilon:g} and deltas to at most {self.delta:g}"
        )

    def _parameters(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta, "release_delta": self.release_delta}

    def _state(self) -> dict[str, Any]:
        return {
            "spent_epsilon": fraction_to_json(self._spent_epsilon),
            "spent_delta": fraction_to_json(self._spent_delta),
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._spent_epsilon = fraction_from_json(state["spent_epsilon"])
        self._spent_delta = fraction_from_json(state["spent_delta"])

    def price(self, leaves: Mapping[Event, int]) -> tuple[Fraction | None, Fraction]:
        """(epsilon, delta) charged for a release with these leaves; epsilon None when no finite bound exists.

        Every release has at most two valid prices: basic composition, (sum of
        epsilons, sum of deltas), when all leaves are pure or ApproxDP; and the
        accountant's tight epsilon at `release_delta`. Both are (epsilon, delta)
        guarantees of the release fixed before it runs, so the filter may charge
        either; it charges the one using the smaller share of the scope,
        epsilon / epsilon_budget + delta / delta_budget (basic on a tie).
        """
        candidates = []
        basic = basic_total(leaves)
        if basic is not None:
            candidates.append(basic)
        if self.release_delta > 0:
            release = Composed(tuple(SelfComposed(leaf, count) for leaf, count in leaves.items()))
            epsilon = Accountant().compose(release).epsilon(self.release_delta)
            if math.isfinite(epsilon):
                candidates.append((Fraction(epsilon), exact_decimal(self.release_delta)))  # exact binary value
        if not candidates:
            return None, exact_decimal(self.release_delta)
        budget_epsilon, budget_delta = exact_decimal(self.epsilon), exact_decimal(self.delta)

        def share(price: tuple[Fraction, Fraction]) -> Fraction:
            delta_share = price[1] / budget_delta if budget_delta > 0 else (0 if price[1] == 0 else Fraction(10**9))
            return price[0] / budget_epsilon + delta_share

        return min(candidates, key=share)

    def charges_evenly(self, part: Event, times: int, opening: Event | None = None) -> bool:
        """`EventFilter.charges_evenly` from two prices: the basic one must be charged for `opening`, for `part`
        and for the composition of `opening` and `times` of `part` (then the rounds add up to exactly the
        composition's price), and the composition must fit. A release priced by the accountant composes below
        the sum of its parts, so splitting it into rounds would cost more: False."""
        part_leaves = self._leaves(part)
        opened = {} if opening is None else self._leaves(opening)
        part_price, opening_price = basic_total(part_leaves), basic_total(opened)
        if (times < 1 or part_price is None or opening_price is None or self.price(part_leaves) != part_price
                or (opened and self.price(opened) != opening_price)):
            return False
        whole = {leaf: count * times for leaf, count in part_leaves.items()}
        for leaf, count in opened.items():
            whole[leaf] = whole.get(leaf, 0) + count
        total = (part_price[0] * times + opening_price[0], part_price[1] * times + opening_price[1])
        return self.price(whole) == total and self._charge(whole) is not None

    def cost_terms(self, event: Event) -> dict[str, float]:
        epsilon, delta = self.price(self._leaves(event))
        return {"epsilon": math.inf if epsilon is None else float_up(epsilon), "delta": float_up(delta)}

    def left_terms(self) -> dict[str, float]:
        return {"epsilon": float_down(exact_decimal(self.epsilon) - self._spent_epsilon),
                "delta": float_down(exact_decimal(self.delta) - self._spent_delta)}

    def _charge(self, leaves: Mapping[Event, int]) -> tuple[Fraction, Fraction] | None:
        epsilon, delta = self.price(leaves)
        if epsilon is None:
            return None
        spent = (self._spent_epsilon + epsilon, self._spent_delta + delta)
        if spent[0] <= exact_decimal(self.epsilon) and spent[1] <= exact_decimal(self.delta):
            return spent
        return None

    def _apply(self, new_state: tuple[Fraction, Fraction]) -> None:
        self._spent_epsilon, self._spent_delta = new_state

