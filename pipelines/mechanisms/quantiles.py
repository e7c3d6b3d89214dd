"""Quantiles of bounded values by the exponential mechanism on a public grid (`exponential_quantiles`).

The values of a partition are bucketed on the public grid a = g_0 < g_1 < ... < g_G = b (G equal buckets of
[a, b]); candidate j stands for the grid point g_j, and C_j, the number of records in buckets below j, is exactly
the number of records whose value lies below g_j. Only grid indices are released.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpstream.accounting.events import BoundedRange, SelfComposed
from dpstream.pipelines.mechanisms.noise import SecureRandom
from dpstream.pipelines.mechanisms.release import Release, checked_rng, count, positive, release


@dataclass(frozen=True)
class ValueGrid:
    """The public grid lower = g_0 < ... < g_G = upper of `buckets` (G) equal steps: values are counted per bucket
    [g_i, g_i+1) (the last one closed), quantiles are released as grid points."""

    lower: float
    upper: float
    buckets: int

    def __post_init__(self) -> None:
        if not (np.isfinite(self.lower) and np.isfinite(self.upper) and self.lower < self.upper):
            raise ValueError(f"ValueGrid: needs finite lower < upper, got [{self.lower!r}, {self.upper!r}]")
        count("ValueGrid", "buckets", self.buckets)

    def bucket(self, values) -> np.ndarray:
        """The bucket index in [0, G) of each value (values outside [lower, upper] count at the nearest end)."""
        scaled = (np.asarray(values, dtype=np.float64) - self.lower) * (self.buckets / (self.upper - self.lower))
        return np.clip(np.floor(scaled), 0, self.buckets - 1).astype(np.int64)

    def points(self, indices) -> np.ndarray:
        """The grid points g_j of indices j in [0, G]."""
        fraction = np.asarray(indices, dtype=np.float64) / self.buckets
        return np.clip(self.lower + (self.upper - self.lower) * fraction, self.lower, self.upper)


def quantile_score_range(quantile: float, max_contributions: int) -> float:
    """The range of score changes, 2 m max(q, 1 - q), of the rank score -|C_j - q n| when one privacy unit adds
    or removes at most m records of the partition.

    Adding m' <= m records moves n by m' and each C_j by some t_j in [0, m'], so C_j - q n moves by
    s_j = t_j - q m' in [-q m, (1 - q) m] and the score by at most |s_j| <= m max(q, 1 - q), up or down: the
    change over the candidates spans at most twice that (tests/test_quantiles.py finds pairs that span
    more than 1.9 m max(q, 1 - q), so halving it would be wrong).
    """
    return 2.0 * max_contributions * max(quantile, 1.0 - quantile)


def exponential_quantiles(bucket_counts, quantiles, epsilon: float, rng: SecureRandom, *, max_contributions: int,
                          max_partitions: int | None = None) -> Release:
    """Per partition (row of `bucket_counts`) and quantile q, a grid index j in [0, G] drawn with probability
    proportional to exp(epsilon (-|C_j - q n|) / range_q), range_q = `quantile_score_range(q, m)`.

    `bucket_counts`: (partitions, G) non-negative integer counts of the bounded records per value bucket, in
    which one privacy unit changes at most `max_partitions` rows (default all) by at most `max_contributions`
    records each. Each row's indices are released sorted, so quantiles never cross (post-processing).
    Privacy: each draw is epsilon-bounded-range (Dong–Durfee–Rogers 2019, Prop 2: the exponential mechanism
    with logits epsilon u / range(u)); the draws use independent noise, so one unit's change is the
    composition of L0 x len(quantiles) of them: event `SelfComposed(BoundedRange(epsilon), L0 len(quantiles))`,
    composed by the accountant's bounded-range bounds.
    Proof: docs/proofs/pipelines.mechanisms.quantiles.exponential_quantiles.md.
    Utility: with probability at least 1 - e^-t, a draw's rank error |C_j - q n| is at most
    range_q (ln(G + 1) + t) / epsilon, and the released point lies within one bucket of a value of that rank.
    Checks: counts a non-negative integer matrix with at least one bucket; each q in (0, 1); epsilon positive.
    Caller must ensure: the grid (a, b, G) and the partition rows are public.
    Numerics: idealised float (one-shot Gumbel argmax over float64 logits; counts below 2**53 are exact);
    only indices are released.
    Runtime: O(partitions x G x len(quantiles)).
    """
    owner = "exponential_quantiles"
    counts = np.asarray(bucket_counts)
    if counts.ndim != 2 or counts.shape[1] < 1 or counts.dtype.kind not in "iu" or (counts < 0).any():
        raise ValueError(f"{owner}: bucket_counts must be a 2-d array of non-negative integers with at least one "
                         f"bucket, got shape {counts.shape} and dtype {counts.dtype}")
    levels = _quantile_levels(owner, quantiles)
    epsilon = positive(owner, "epsilon", epsilon)
    m = count(owner, "max_contributions", max_contributions)
    rng = checked_rng(owner, rng)
    rows, buckets = counts.shape
    below = np.zeros((rows, buckets + 1), dtype=np.float64)
    np.cumsum(counts, axis=1, out=below[:, 1:])
    chosen = np.empty((rows, levels.size), dtype=np.int64)
    for column, q in enumerate(levels):
        logits = np.abs(below - q * below[:, -1:]) * (-epsilon / quantile_score_range(float(q), m))
        noisy = logits + rng.gumbel(logits.size).reshape(logits.shape)
        chosen[:, column] = np.argmax(noisy, axis=1)
    chosen.sort(axis=1)
    changed = rows if max_partitions is None else count(owner, "max_partitions", max_partitions)
    event = SelfComposed(BoundedRange(epsilon), changed * levels.size)
    return release(owner, chosen, event, epsilon=epsilon, quantiles=tuple(float(q) for q in levels),
                   max_contributions=m, buckets=buckets)


def _quantile_levels(owner: str, quantiles) -> np.ndarray:
    levels = np.asarray(quantiles, dtype=np.float64)
    if levels.ndim != 1 or levels.size < 1 or not np.all((levels > 0) & (levels < 1)):
        raise ValueError(f"{owner}: quantiles must be a non-empty list of numbers in (0, 1), got {quantiles!r}")
    return levels
