"""`PrivateQuantiles`: per window and partition, quantiles of the bounded values by the exponential mechanism.

Steps: bound contributions per user and window as for a sum (`BoundContributions`: at most L0 partitions per
user, m records each, values clipped to [min_value, max_value]), count the kept records per value bucket of
the public grid (`ValueGrid`), and per window draw each quantile of every partition
(`mechanisms.exponential_quantiles`). Over unknown partitions a second bounding pass counts each partition's
distinct users (`metric_bounds(users)`), Gaussian thresholding of those counts selects the partitions
(`mechanisms.gaussian_threshold`), and only the selected ones get quantiles.

Privacy: per window the plan's SelfComposed(BoundedRange(epsilon), L0 x quantiles), plus over unknown
partitions its GaussianThreshold selection event; windows compose in the plan.
Proof: docs/proofs/pipelines.mechanisms.quantiles.exponential_quantiles.md (the draws and the selection);
bucket counts are exact per-record counts of `BoundContributions`' kept records
(docs/proofs/pipelines.transforms.bounding.BoundContributions.md).
Caller must ensure: the partition list (if any) is public; `seed` only in tests.
Runtime: one vectorised draw per window, O(partitions x buckets x quantiles).
"""
from __future__ import annotations

import apache_beam as beam
import numpy as np
import pandas as pd

from dpstream.pipelines import mechanisms
from dpstream.pipelines.config.specs import WindowSpec
from dpstream.pipelines.planning.quantiles import QuantilesPlan
from dpstream.pipelines.transforms.aggregation import WindowedRelease
from dpstream.pipelines.transforms.selection import selected_by_users
from dpstream.pipelines.transforms.windowing import release_rng, window_bounds_iso


def bucket_matrix(counts: pd.Series, partitions: list[str], buckets: int) -> np.ndarray:
    """(partitions, buckets) int64 matrix of one window's bucket counts (a Series indexed by (partition, bucket));
    partitions not listed are dropped, listed ones without records are rows of zeros."""
    matrix = np.zeros((len(partitions), buckets), dtype=np.int64)
    if len(counts):
        rows = pd.Index(partitions).get_indexer(counts.index.get_level_values(0))
        listed = rows >= 0
        np.add.at(matrix, (rows[listed], counts.index.get_level_values(1).to_numpy()[listed]),
                  counts.to_numpy()[listed])
    return matrix


CHUNK_CELLS = 1 << 22
"""Partitions are drawn in blocks of at most this many (partition, bucket) cells (32 MB of scores each), so a
window's memory does not grow with partitions x buckets."""


def quantiles_release(plan: QuantilesPlan, partitions: list[str], counts: pd.Series, rng) -> np.ndarray:
    """The released quantile values of one window: (partitions, quantiles), each row in increasing order; drawn in
    blocks of partitions (`CHUNK_CELLS`; each draw is independent, so blocks change nothing but memory)."""
    grid, buckets = plan.grid, plan.spec.buckets
    step = max(1, CHUNK_CELLS // (buckets + 1))
    blocks = [mechanisms.exponential_quantiles(
        bucket_matrix(counts, partitions[first:first + step], buckets), plan.spec.quantiles, plan.epsilon, rng,
        max_contributions=plan.max_contributions, max_partitions=plan.max_partitions).value
        for first in range(0, len(partitions), step)]
    return grid.points(np.concatenate(blocks)) if blocks else np.empty((0, len(plan.spec.quantiles)))


class _QuantilesMechanism(beam.DoFn):
    def __init__(self, plan: QuantilesPlan, window: WindowSpec, seed: int | None):
        self._plan = plan
        self._window = window
        self._seed = seed

    def process(self, element):
        index, parts = element
        by_kind = dict(parts)  # 0: bucket counts; 1: distinct users per partition (unknown partitions)
        rng = release_rng(self._seed, self._plan.name, index)
        if self._plan.selection is not None:
            partitions = selected_by_users(by_kind[1], self._plan.selection, self._plan.max_partitions, rng)
        else:
            partitions = list(self._plan.spec.partitions or ())
        values = quantiles_release(self._plan, partitions, by_kind[0], rng)
        start, end = window_bounds_iso(self._window, index)
        for partition, row in zip(partitions, values):
            for quantile, value in zip(self._plan.spec.quantiles, row):
                yield {"release": self._plan.name, "window_start": start, "window_end": end, "partition": partition,
                       "quantile": float(quantile), "value": float(value)}


class PrivateQuantiles(WindowedRelease):
    """Record batches -> dict rows (release, window_start, window_end, partition, quantile, value)."""

    @classmethod
    def columns(cls, plan) -> tuple[str, ...]:
        return ("release", "window_start", "window_end", "partition", "quantile", "value")

    def default_label(self) -> str:
        return f"PrivateQuantiles({self._plan.name}, {list(self._plan.spec.quantiles)})"

    def display_data(self):
        return {"release": self._plan.name, "quantiles": str(list(self._plan.spec.quantiles)),
                "epsilon_per_draw": self._plan.epsilon, "buckets": self._plan.spec.buckets, "windows": self._plan.runs}

    def expand(self, batches):
        plan = self._plan
        parts = [self._window_sums(batches, plan.spec.partitions, buckets=plan.grid, label="Values: ")
                 | "Tag buckets" >> beam.MapTuple(lambda index, part: (index, (0, part)))]
        if plan.selects:
            parts.append(self._window_users(batches) | "Tag users" >> beam.MapTuple(lambda index, part: (index, (1, part))))
        return (
            tuple(parts)
            | "Both" >> beam.Flatten()
            | "Per window" >> beam.GroupByKey()
            | "Draw quantiles" >> beam.ParDo(_QuantilesMechanism(plan, self._window, self._seed))
        )
