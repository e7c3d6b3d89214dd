"""The filter of Filtered Self-Reporting Composition (Lebensold–Precup–Balle, Alg. 4)."""
from __future__ import annotations

import math
from typing import Any, Mapping

from accounting.filters.base import PrivacyFilter, check_budget, check_delta


class FSRCFilter(PrivacyFilter):
    """FSRC filter: start mechanism t only if sum_{i<t} eps_i + eps_max_t < epsilon; then charge its ex-post eps_t.

    Rule (Lebensold–Precup–Balle Alg. 4): before mechanism t runs,
    `admits(eps_max_t)` HALTs for good when the realised ex-post losses so far
    plus eps_max_t reach epsilon; after it runs, `charge(eps_post_t)` adds the
    ex-post loss of its actual output.
    Privacy: add/remove one privacy unit; the whole run is (epsilon, delta)-DP
    when every mechanism t is (eps_max_t, delta)-pDP and eps_post_t-ex-post-DP
    given past outputs; eps_max_t and the mechanisms may be chosen adaptively.
    Proof: Lebensold–Precup–Balle Thm 11 (= Thm 19 in their appendix).
    Checks: epsilon > 0, delta in [0, 1); eps_max and eps_post finite and >= 0;
    `charge` only after an admitted, not yet charged mechanism.
    Caller must ensure: eps_max_t is a valid pDP bound at this filter's delta,
    eps_post_t is the ex-post loss of the output actually released.
    Sealed state: the realised spend is data-dependent and must not be
    published; `public_dict` shows only the budget and whether it halted.
    Numerics: the realised sum is rounded up one ulp per charge.
    Runtime: O(1).
    """

    kind = "fsrc"
    halts_on_refusal = True

    def __init__(self, epsilon: float, delta: float) -> None:
        super().__init__()
        self.epsilon = check_budget("FSRCFilter", "epsilon", epsilon)
        self.delta = check_delta("FSRCFilter", delta)
        self._spent = 0.0
        self._open = False

    def describe(self) -> str:
        return (
            f"FSRC filter (Lebensold–Precup–Balle Thm 11): a mechanism starts only while realised ex-post "
            f"losses plus its pDP bound stay below {self.epsilon:g}; the run is ({self.epsilon:g}, {self.delta:g})-DP"
        )

    def admits(self, eps_max: float) -> bool:
        """Whether a mechanism with pDP bound eps_max may start; a refusal halts the filter for good."""
        check_budget("FSRCFilter.admits", "eps_max", eps_max, allow_zero=True)
        if self._open:
            raise ValueError("FSRCFilter.admits called while an admitted mechanism is not yet charged")
        if self._halted:
            return False
        if self._spent + eps_max >= self.epsilon:
            self._halted = True
            return False
        self._open = True
        return True

    def charge(self, eps_post: float) -> None:
        """Add the ex-post loss of the admitted mechanism's realised output."""
        check_budget("FSRCFilter.charge", "eps_post", eps_post, allow_zero=True)
        if not self._open:
            raise ValueError("FSRCFilter.charge needs an admitted mechanism: call admits(eps_max) first")
        total = self._spent + eps_post
        self._spent = math.nextafter(total, math.inf) if total > 0 else total
        self._open = False

    def public_dict(self) -> dict[str, Any]:
        return {"filter": self.kind, **self._parameters(), "halted": self._halted}

    def _parameters(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta}

    def _state(self) -> dict[str, Any]:
        return {"spent_epsilon": self._spent, "open": self._open}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._spent = float(state["spent_epsilon"])
        self._open = bool(state["open"])
