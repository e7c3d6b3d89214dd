"""The filter of Filtered Self-Reporting Composition, corrected: an epsilon budget for ex-post losses and a delta
budget that the admitted instances' deltas add up in (Lebensold–Precup–Balle Alg. 4; erratum to their Thm 11).

Why a delta budget. Lebensold–Precup–Balle (LPB) Thm 11 (appendix Thm 19) claims (epsilon, delta)-DP when every
mechanism is (eps_max_t, delta)-pDP, charging delta once for the whole run. The proof applies the pDP tail bound
to the last admitted mechanism, whose index is a stopping time that depends on that mechanism's own output, and
the claim is false: mechanisms that output "bad" with probability delta (ex-post loss B) and "ok" otherwise
(ex-post loss about delta) pass the filter about epsilon/delta times, and one of them outputs "bad" with
probability about 1 - e^-epsilon. The sound statement is a union bound over the admitted instances, so the deltas
add up: docs/proofs/accounting.filters.fsrc.FSRCFilter.md states the erratum, the counterexample and the proof, and
tests/falsification/test_fsrc_erratum.py computes both rules' exact privacy profiles on the counterexample.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Mapping

from dpstream.accounting.filters.base import (
    PrivacyFilter,
    check_budget,
    check_delta,
    fraction_from_json,
    fraction_to_json,
)

_BASEL = Fraction("0.6079271018540266")
"""6 / pi^2 = 0.60792710185402662866... truncated: a rational a hair below 1 / zeta(2), so that the weights
_BASEL / t^2 sum to less than 1 over t = 1, 2, ..."""


def basel_delta(delta: float, instance: int) -> float:
    """The delta of the `instance`-th mechanism (from 1) under the schedule delta_t = delta * 6 / (pi^2 t^2).

    The schedule depends on the instance index only, so the deltas of any number of instances sum to less than
    delta and the filter's delta budget never refuses: how long the filter runs is left to the epsilon budget.
    Numerics: delta * 6/(pi^2 t^2) with 6/pi^2 truncated to 16 digits, computed as an exact rational and
    rounded down to a double, so every term is at most the exact one.
    """
    if isinstance(instance, bool) or not isinstance(instance, int) or instance < 1:
        raise ValueError(f"basel_delta: instance must be an integer >= 1, got {instance!r}")
    exact = Fraction(check_delta("basel_delta", delta)) * _BASEL / (instance * instance)
    rounded = float(exact)
    return math.nextafter(rounded, 0.0) if Fraction(rounded) > exact else rounded


class FSRCFilter(PrivacyFilter):
    """FSRC with a delta budget: start mechanism t only if sum_{i<t} eps_i + eps_max_t < epsilon and
    sum_{i<=t} delta_i <= delta; then charge its ex-post loss eps_t.

    Rule: before mechanism t runs, `admits(eps_max_t, delta_t)` HALTs for good when the realised ex-post
    losses so far plus eps_max_t reach epsilon, or when the deltas admitted so far plus delta_t exceed delta;
    after it runs, `charge(eps_post_t)` adds the ex-post loss of its actual output.
    Privacy: add/remove one privacy unit; the whole run is (epsilon, delta)-DP when every mechanism t is
    (eps_max_t, delta_t)-pDP and eps_post_t-ex-post-DP given past outputs; eps_max_t, delta_t and the
    mechanisms may be chosen adaptively (from past outputs).
    Proof: LPB Alg. 4 with a union bound over the admitted mechanisms in place of LPB Thm 11's single delta
    (Thm 11 as printed is false); docs/proofs/accounting.filters.fsrc.FSRCFilter.md.
    Checks: epsilon > 0, delta in [0, 1); eps_max, eps_post finite and >= 0; delta_t in [0, 1); `charge` only
    after an admitted, not yet charged mechanism; a sealed state written before the delta budget existed is
    refused.
    Caller must ensure: eps_max_t is a valid pDP bound at delta_t; eps_post_t is the ex-post loss of the
    output actually released.
    Sealed state: the realised epsilon spend is data-dependent and must not be published; `public_dict` shows
    the budget, the number of admitted mechanisms and their deltas (functions of how many ran, which the
    outputs show), and whether it halted.
    Numerics: the realised epsilon sum is rounded up one ulp per charge; deltas add up as exact rationals.
    Runtime: O(1).
    """

    kind = "fsrc"
    halts_on_refusal = True

    def __init__(self, epsilon: float, delta: float) -> None:
        super().__init__()
        self.epsilon = check_budget("FSRCFilter", "epsilon", epsilon)
        self.delta = check_delta("FSRCFilter", delta)
        self._spent = 0.0
        self._spent_delta = Fraction(0)
        self._instances = 0
        self._open = False

    @property
    def instances(self) -> int:
        """How many mechanisms were admitted so far."""
        return self._instances

    @property
    def delta_used(self) -> float:
        """The sum of the admitted mechanisms' deltas (rounded up)."""
        return _round_up(self._spent_delta)

    def describe(self) -> str:
        return (
            f"FSRC filter with a delta budget (Lebensold–Precup–Balle Alg. 4, deltas of admitted mechanisms adding "
            f"up): a mechanism starts only while realised ex-post losses plus its pDP epsilon stay below "
            f"{self.epsilon:g} and the admitted deltas within {self.delta:g}; the run is "
            f"({self.epsilon:g}, {self.delta:g})-DP"
        )

    def admits(self, eps_max: float, delta: float) -> bool:
        """Whether a mechanism that is (eps_max, delta)-pDP may start; a refusal halts the filter for good."""
        check_budget("FSRCFilter.admits", "eps_max", eps_max, allow_zero=True)
        instance_delta = Fraction(check_delta("FSRCFilter.admits", delta))
        if self._open:
            raise ValueError("FSRCFilter.admits called while an admitted mechanism is not yet charged")
        if self._halted:
            return False
        if self._spent + eps_max >= self.epsilon or self._spent_delta + instance_delta > Fraction(self.delta):
            self._halted = True
            return False
        self._spent_delta += instance_delta
        self._instances += 1
        self._open = True
        return True

    def charge(self, eps_post: float) -> None:
        """Add the ex-post loss of the admitted mechanism's realised output."""
        check_budget("FSRCFilter.charge", "eps_post", eps_post, allow_zero=True)
        if not self._open:
            raise ValueError("FSRCFilter.charge needs an admitted mechanism: call admits(eps_max, delta) first")
        total = self._spent + eps_post
        self._spent = math.nextafter(total, math.inf) if total > 0 else total
        self._open = False

    def public_dict(self) -> dict[str, Any]:
        return {"filter": self.kind, **self._parameters(), "instances": self._instances,
                "delta_used": self.delta_used, "halted": self._halted}

    def _parameters(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta}

    def _state(self) -> dict[str, Any]:
        return {"spent_epsilon": self._spent, "spent_delta": fraction_to_json(self._spent_delta),
                "instances": self._instances, "open": self._open}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        if "spent_delta" not in state or "instances" not in state:
            raise ValueError(
                "FSRCFilter: this sealed state predates the filter's delta budget (it was kept under the rule of "
                "Lebensold–Precup–Balle Thm 11 as printed, which charges delta once and is not sound); it cannot be "
                "resumed"
            )
        self._spent = float(state["spent_epsilon"])
        self._spent_delta = fraction_from_json(state["spent_delta"])
        self._instances = int(state["instances"])
        self._open = bool(state["open"])


def _round_up(value: Fraction) -> float:
    """The smallest float >= value."""
    rounded = float(value)
    return math.nextafter(rounded, math.inf) if Fraction(rounded) < value else rounded
