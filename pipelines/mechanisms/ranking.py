"""Index mechanisms on bounded scores: the exponential mechanism for top-k (`exponential_top_k`), Gaussian
report-noisy-max (`report_noisy_max`), and the Gaussian counts of chosen keys made consistent with their ranking
(`count_mle`). Only indices (and, for `count_mle`, grid noisy counts) are released; the continuous noisy scores
never are, so their low bits cannot leak."""
from __future__ import annotations

import functools
import math

import numpy as np

from dpstream.accounting import selection
from dpstream.accounting.events import BoundedRange, PureDP, SelfComposed
from dpstream.pipelines.mechanisms.additive import clamp_to_range, gaussian
from dpstream.pipelines.mechanisms.noise import SecureRandom
from dpstream.pipelines.mechanisms.release import Release, bounded_vector, checked_rng, count, positive, release, vector

TOP_K_METHODS = ("gumbel", "peel")


def exponential_top_k(
    scores, k: int, epsilon: float, sensitivity: float, rng: SecureRandom, method: str = "gumbel"
) -> Release:
    """The k highest-scoring indices, in order, by k peeled exponential mechanisms.

    Each pick samples index i among the remaining ones with probability
    proportional to exp(epsilon * score_i / sensitivity). `method="gumbel"`
    adds Gumbel(sensitivity / epsilon) noise once and sorts (one pass, O(n));
    `method="peel"` samples k times from the stable softmax (O(k n)). Both
    have the same output distribution (Durfee–Rogers 2019, Sec. 4: one-shot
    Gumbel top-k equals peeling; checked by tests/test_mechanisms.py).
    Privacy: `sensitivity` is the range of score changes Delta-tilde
    (Dong–Durfee–Rogers 2019); for monotone scores such as counts it equals the
    Linf sensitivity. Each pick is epsilon-BR (Dong–Durfee–Rogers Prop 2 /
    Cesar–Rogers Def 2.3), and the k picks are adaptive: event
    `SelfComposed(BoundedRange(epsilon), k)`.
    Proof: Dong–Durfee–Rogers 2019 Prop 2 per pick; the adaptive composition
    of the k picks is the accountant's (bounded-range bounds).
    Checks: k in [1, len(scores)]; epsilon, sensitivity positive; method known.
    Caller must ensure: the candidate set is public or fixed by an earlier private selection.
    Numerics: idealised float (scores and noise in float64); only indices are released.
    Runtime: gumbel O(n + k log k); peel O(k n).
    """
    owner = "exponential_top_k"
    array = vector(owner, "scores", scores)
    k = count(owner, "k", k)
    if k > array.size:
        raise ValueError(f"{owner}: k must be at most the number of scores {array.size}, got {k}")
    epsilon = positive(owner, "epsilon", epsilon)
    sensitivity = positive(owner, "sensitivity", sensitivity)
    if method not in TOP_K_METHODS:
        raise ValueError(f"{owner}: method must be one of {TOP_K_METHODS}, got {method!r}")
    rng = checked_rng(owner, rng)
    logits = array.astype(np.float64) * (epsilon / sensitivity)
    if method == "gumbel":
        chosen = _top_indices(logits + rng.gumbel(array.size), k)
    else:
        chosen = _peel(logits, k, rng)
    event = SelfComposed(BoundedRange(epsilon), k)
    return release(owner, chosen, event, k=k, epsilon=epsilon, sensitivity=sensitivity, method=method)


def _top_indices(noisy: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries, largest first."""
    top = np.argpartition(-noisy, k - 1)[:k] if k < noisy.size else np.arange(noisy.size)
    return top[np.argsort(-noisy[top], kind="stable")]


def _peel(logits: np.ndarray, k: int, rng: SecureRandom) -> np.ndarray:
    remaining = np.arange(logits.size)
    chosen = np.empty(k, dtype=np.int64)
    for pick, u in enumerate(rng.uniform(k)):
        current = logits[remaining]
        cumulative = np.cumsum(np.exp(current - current.max()))
        position = min(int(np.searchsorted(cumulative, u * cumulative[-1], side="right")), remaining.size - 1)
        chosen[pick] = remaining[position]
        remaining = np.delete(remaining, position)
    return chosen



@functools.lru_cache(maxsize=256)
def _report_noisy_max_epsilon(d: int, sigma: float, sensitivity: float, lower: float, upper: float) -> float:
    """Memoised `accounting.selection.report_noisy_max_epsilon` (a pure function of public parameters)."""
    return float(selection.report_noisy_max_epsilon(d, sigma, sensitivity, lower, upper))


def report_noisy_max(
    values, sigma: float, rng: SecureRandom, *, sensitivity: float, lower: float, upper: float
) -> Release:
    """Gaussian report-noisy-max: the index of the largest value + N(0, sigma^2), on bounded queries.

    Values are clipped to [lower, upper] first (clipping keeps the sensitivity).
    Privacy: each value moves by at most `sensitivity` between neighbours.
    Pure DP, event `PureDP(epsilon)` with epsilon from
    `accounting.selection.report_noisy_max_epsilon` (Lebensold–Precup–Balle
    2024, Thm 8: the bounded range [lower, upper] is what makes it pure).
    Proof: LPB Thm 8 (= Thm 12) with the worst case of Lemma 16.
    Checks: at least 2 values; sigma, sensitivity positive; lower < upper.
    Caller must ensure: the number of values is public.
    Numerics: idealised float noise; only the index is released.
    Runtime: O(d) plus the epsilon quadrature (under 1 ms, memoised per parameter set).
    """
    owner = "report_noisy_max"
    sigma = positive(owner, "sigma", sigma)
    sensitivity = positive(owner, "sensitivity", sensitivity)
    array = bounded_vector(owner, values, lower, upper, minimum=2)
    rng = checked_rng(owner, rng)
    epsilon = _report_noisy_max_epsilon(array.size, sigma, sensitivity, float(lower), float(upper))
    index = int(np.argmax(array + sigma * rng.standard_normal(array.size)))
    return release(owner, index, PureDP(epsilon), sigma=sigma, sensitivity=sensitivity, lower=lower, upper=upper)


def order_consistent_counts(noisy_counts) -> np.ndarray:
    """The least-squares fit x_1 >= x_2 >= ... >= x_k >= 0 to noisy counts given in released order.

    Cesar–Rogers eq. (9): decreasing isotonic regression by pool-adjacent-
    violators, then clipping at 0 (equal to the constrained least-squares
    solution; the projection onto the monotone cone commutes with the
    non-negativity clip for a non-increasing fit). Pure post-processing.
    Runtime: O(k).
    """
    array = vector("order_consistent_counts", "noisy_counts", noisy_counts, minimum=0).astype(np.float64)
    sums: list[float] = []
    sizes: list[int] = []
    for value in array:
        sums.append(float(value))
        sizes.append(1)
        while len(sums) > 1 and sums[-2] / sizes[-2] < sums[-1] / sizes[-1]:
            total, size = sums.pop(), sizes.pop()
            sums[-1] += total
            sizes[-1] += size
    fitted = np.repeat([s / n for s, n in zip(sums, sizes)], sizes) if sums else np.empty(0)
    return clamp_to_range(fitted, 0.0, math.inf)


def count_mle(
    counts, sigma: float, rng: SecureRandom, *, sensitivity: float = 1.0, max_partitions: int | None = None,
    quantum: float = 1.0,
) -> Release:
    """Cesar–Rogers Algorithm 1 (CountMLE): Gaussian counts for keys in released order, made order-consistent.

    `counts` are the true counts of the selected keys in the order a top-k
    selection released them. Adds `gaussian` noise, then projects onto
    non-increasing, non-negative vectors (`order_consistent_counts`).
    Privacy: exactly that of `gaussian` with the same arguments (post-processing);
    event `Gaussian(sigma, sensitivity_grid)`. `sensitivity` is L2 over the k counts
    (Cesar–Rogers Sec 6: Linf * sqrt(min(k, L0)) for counts).
    Proof: Cesar–Rogers Sec 3.6 and Alg. 1 (post-processing of the Gaussian mechanism,
    Dwork–Roth 2014 Prop. 2.1).
    Checks and numerics: those of `gaussian`; outputs need not lie on the grid
    (they are functions of released grid values).
    Runtime: O(k).
    """
    noisy = gaussian(counts, sigma, rng, sensitivity=sensitivity, max_partitions=max_partitions, quantum=quantum)
    return release("count_mle", order_consistent_counts(noisy.value), noisy.event, **noisy.parameters)
