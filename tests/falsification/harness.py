"""A DP-falsification harness: a statistically sound lower bound on epsilon from samples.

Setting. A mechanism M is run many times on two neighbouring inputs x and x'.
If M is (epsilon, delta)-DP then for every set S of outputs
    P[M(x) in S] <= e^epsilon P[M(x') in S] + delta    (and with x, x' swapped).
So for any S fixed before looking at the estimation samples,
    epsilon >= log((p - delta) / q),  p = P[M(x) in S], q = P[M(x') in S].

Procedure (two phases, in the spirit of Google's stochastic tester and
DP-Auditorium's histogram tester):
1. Search: `n_search` outputs per side. Candidate sets are every single
   output value when there are few distinct outputs, plus the half-lines
   {y >= c} and {y <= c} at quantiles of the pooled search outputs. The set and
   direction with the largest smoothed empirical log((p - delta) / q) wins.
2. Estimate: `n_estimate` fresh outputs per side. With one-sided
   Clopper–Pearson bounds at level alpha/2 each, p_low <= p and q_high >= q
   hold together with probability >= 1 - alpha, and then
       epsilon_lower = log((p_low - delta) / q_high) <= log((p - delta) / q) <= epsilon.
So the reported lower bound exceeds the true epsilon(delta) with probability
at most alpha: a correct mechanism is falsely flagged at most that often
(the false-alarm rate). Seeds are fixed, so each test is deterministic.

Outputs are encoded as float arrays (an index as its value, "nothing
released" or None as -inf), so one harness covers noisy values and selections.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import stats

Sampler = Callable[[object, int], np.ndarray]
"""sample(input, n) -> n independent outputs of the mechanism on `input`, encoded as floats."""

MAX_SINGLETONS = 64
QUANTILES = 99


@dataclass(frozen=True)
class Audit:
    """The result of one audit: epsilon_lower <= epsilon(delta) with probability >= 1 - alpha."""

    epsilon_lower: float
    delta: float
    alpha: float
    witness: str  # the distinguishing set, e.g. "P[M(x) == 3] vs P[M(x') == 3]"
    p_low: float
    q_high: float

    def __str__(self) -> str:
        return (f"epsilon >= {self.epsilon_lower:.4f} at delta={self.delta:g} (confidence {1 - self.alpha:g}); "
                f"witness {self.witness}: p_low={self.p_low:.5g}, q_high={self.q_high:.5g}")


def clopper_pearson_lower(successes: int, trials: int, alpha: float) -> float:
    """One-sided (1 - alpha) lower confidence bound on a binomial proportion."""
    return 0.0 if successes == 0 else float(stats.beta.ppf(alpha, successes, trials - successes + 1))


def clopper_pearson_upper(successes: int, trials: int, alpha: float) -> float:
    """One-sided (1 - alpha) upper confidence bound on a binomial proportion."""
    return 1.0 if successes == trials else float(stats.beta.ppf(1 - alpha, successes + 1, trials - successes))


@dataclass(frozen=True)
class _Set:
    kind: str  # "==", ">=", "<="
    cut: float

    def contains(self, outputs: np.ndarray) -> np.ndarray:
        if self.kind == "==":
            return outputs == self.cut
        return outputs >= self.cut if self.kind == ">=" else outputs <= self.cut

    def describe(self, side: str) -> str:
        return f"P[M({side}) {self.kind} {self.cut:g}]"


def _candidates(first: np.ndarray, second: np.ndarray) -> list[_Set]:
    pooled = np.concatenate([first, second])
    distinct = np.unique(pooled)
    sets: list[_Set] = []
    if distinct.size <= MAX_SINGLETONS:
        sets += [_Set("==", float(v)) for v in distinct]
        cuts = distinct
    else:
        cuts = np.unique(np.quantile(pooled[np.isfinite(pooled)], np.linspace(0.005, 0.995, QUANTILES)))
        if not np.all(np.isfinite(pooled)):
            sets.append(_Set("==", -math.inf))
    sets += [_Set(kind, float(c)) for c in cuts for kind in (">=", "<=")]
    return sets


def _smoothed_log_ratio(p_hits: int, q_hits: int, n: int, delta: float) -> float:
    p = (p_hits + 0.5) / (n + 1)
    q = (q_hits + 0.5) / (n + 1)
    return -math.inf if p <= delta else math.log((p - delta) / q)


def audit(
    sample: Sampler,
    x: object,
    x_prime: object,
    *,
    n_search: int,
    n_estimate: int,
    delta: float = 0.0,
    alpha: float = 1e-3,
    min_hits: int = 0,
) -> Audit:
    """A (1 - alpha)-confidence lower bound on epsilon(delta) of the mechanism behind `sample` (module docstring).

    `min_hits`: the search only considers sets that at least this many search outputs of the larger side fall
    in (sets of a few outputs win the search by chance and then lose the estimate)."""
    search = {"x": sample(x, n_search), "x'": sample(x_prime, n_search)}
    best = (-math.inf, None, None)
    for candidate in _candidates(search["x"], search["x'"]):
        hits = {side: int(np.count_nonzero(candidate.contains(out))) for side, out in search.items()}
        for p_side, q_side in (("x", "x'"), ("x'", "x")):
            if hits[p_side] < min_hits:
                continue
            score = _smoothed_log_ratio(hits[p_side], hits[q_side], n_search, delta)
            if score > best[0]:
                best = (score, candidate, (p_side, q_side))
    _, chosen, (p_side, q_side) = best
    fresh = {"x": sample(x, n_estimate), "x'": sample(x_prime, n_estimate)}
    p_low = clopper_pearson_lower(int(np.count_nonzero(chosen.contains(fresh[p_side]))), n_estimate, alpha / 2)
    q_high = clopper_pearson_upper(int(np.count_nonzero(chosen.contains(fresh[q_side]))), n_estimate, alpha / 2)
    epsilon_lower = max(0.0, math.log((p_low - delta) / q_high)) if p_low > delta else 0.0
    witness = f"{chosen.describe(p_side)} vs {chosen.describe(q_side)}"
    return Audit(epsilon_lower, delta, alpha, witness, p_low, q_high)


def audit_outcome(sample: Sampler, x: object, x_prime: object, outcome: float, *, n: int, alpha: float = 1e-3) -> Audit:
    """A (1 - alpha)-confidence lower bound on max |log P[M(x) = o] / P[M(x') = o]| for one fixed outcome o.

    This tests a per-outcome (ex-post) claim. Four one-sided Clopper–Pearson
    bounds at alpha/4 cover both directions at once.
    """
    single = _Set("==", float(outcome))
    hits = {"x": int(np.count_nonzero(single.contains(sample(x, n)))),
            "x'": int(np.count_nonzero(single.contains(sample(x_prime, n))))}
    best = Audit(0.0, 0.0, alpha, single.describe("x"), 0.0, 1.0)
    for p_side, q_side in (("x", "x'"), ("x'", "x")):
        p_low = clopper_pearson_lower(hits[p_side], n, alpha / 4)
        q_high = clopper_pearson_upper(hits[q_side], n, alpha / 4)
        if p_low > 0 and math.log(p_low / q_high) > best.epsilon_lower:
            witness = f"{single.describe(p_side)} vs {single.describe(q_side)}"
            best = Audit(math.log(p_low / q_high), 0.0, alpha, witness, p_low, q_high)
    return best
