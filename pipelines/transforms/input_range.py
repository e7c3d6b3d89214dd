"""Where the input's rows fall against the job's public window range: inside some window, before the range's
start, or after its end (windows tile the range: `WindowSpec` allows no gaps).

For the operator only: these numbers depend on the data, so they are told on the operator's terminal and never
written into an output, a report or the ledger (docs/proofs/pipelines.run.budget.Budget.md, A1 and A2). Counted
two ways: `CountRange`, a side branch of the run's pipeline that adds per-batch counts to Beam metrics (read by
`counts_of` after the run), and `range_counts`, the same vectorised rule for a scan outside Beam.
"""
from __future__ import annotations

from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

from dpstream.pipelines.config.specs import WindowSpec
from dpstream.pipelines.transforms.windowing import window_indices, window_start_micros

NAMESPACE = "dpstream.input"
_FIELDS = ("inside", "before", "after")


@dataclass(frozen=True)
class RangeCounts:
    """Rows by where their timestamps fall (see the module docstring)."""

    inside: int = 0
    before: int = 0
    after: int = 0

    @property
    def rows(self) -> int:
        return self.inside + self.before + self.after

    def __add__(self, other: "RangeCounts") -> "RangeCounts":
        return RangeCounts(self.inside + other.inside, self.before + other.before, self.after + other.after)

    def text(self) -> str:
        """e.g. '1,000 rows read: 990 inside the window range, 4 before it, 6 after it'."""
        return (f"{self.rows:,} rows read: {self.inside:,} inside the window range, {self.before:,} before it, "
                f"{self.after:,} after it")


def range_counts(timestamps: np.ndarray, window: WindowSpec) -> RangeCounts:
    """Where int64 microsecond `timestamps` fall against `window`'s range (a row in several sliding windows counts
    once)."""
    rows, _ = window_indices(timestamps, window)
    inside = int(np.unique(rows).size)
    before = int(np.count_nonzero(timestamps < window_start_micros(window)))
    return RangeCounts(inside, before, int(timestamps.size) - inside - before)


class _CountBatch(beam.DoFn):
    def __init__(self, window: WindowSpec) -> None:
        self.window = window
        self.counters = {name: Metrics.counter(NAMESPACE, name) for name in _FIELDS}

    def process(self, batch: pa.RecordBatch):
        counts = range_counts(batch.column("timestamp").to_numpy(zero_copy_only=False), self.window)
        for name in _FIELDS:
            self.counters[name].inc(getattr(counts, name))
        return ()


class CountRange(beam.PTransform):
    """EVENT_SCHEMA record batches -> nothing; their `RangeCounts` go to Beam metrics (`counts_of`)."""

    def __init__(self, window: WindowSpec, label: str | None = None) -> None:
        super().__init__(label)
        self.window = window

    def expand(self, batches):
        return batches | "Count" >> beam.ParDo(_CountBatch(self.window))


def counts_of(result) -> RangeCounts | None:
    """The `CountRange` counts of a finished pipeline; None when the runner reports no metrics for them."""
    found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    values: dict[str, int] = {}
    for counter in found:
        value = counter.committed if counter.committed is not None else counter.attempted
        values[counter.key.metric.name] = values.get(counter.key.metric.name, 0) + int(value or 0)
    if not values:
        return None
    return RangeCounts(*(values.get(name, 0) for name in _FIELDS))
