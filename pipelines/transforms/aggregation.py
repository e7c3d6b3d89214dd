"""Per-window aggregation: one per-partition sum vector per window of the public range, empty windows included.

Every window index in [0, WindowSpec.count) gets an element, even when no
record fell into it: the set of windows released is public and must not
depend on the data (a window that appears only when someone was active would
reveal that someone was). Sums of the user shards of a window are added here,
exactly: integer units of the value grid (`fixedpoint.label_sums` / `group_sums`:
int64, or Python ints for the sums beyond int64), so the result does not depend
on how users were sharded or in which order shards merge, and no input inside
the declared bounds makes it fail.
"""
from __future__ import annotations

import apache_beam as beam
import numpy as np
import pandas as pd

from dpstream.pipelines.config.specs import ContributionBounds, Metric, WindowSpec, metric_bounds
from dpstream.pipelines.mechanisms.fixedpoint import group_sums, label_sums
from dpstream.pipelines.mechanisms.quantiles import ValueGrid
from dpstream.pipelines.planning.windows import WindowCap
from dpstream.pipelines.transforms.bounding import BoundContributions
from dpstream.pipelines.transforms.windowing import PublicWindows, beam_windows


def empty_sums() -> pd.Series:
    return pd.Series([], dtype="int64", index=pd.Index([], dtype=object))


def empty_bucket_counts() -> pd.Series:
    return pd.Series([], dtype="int64", index=pd.MultiIndex.from_arrays([[], []], names=["partition", "bucket"]))


def empty_sums_and_units() -> pd.DataFrame:
    return pd.DataFrame({"sum": [], "units": []}, dtype="int64", index=pd.Index([], dtype=object))


class SumSeriesFn(beam.CombineFn):
    """Adds per-partition sum vectors (pandas Series or DataFrames indexed by partition); missing partitions count 0.

    Exact (`fixedpoint.label_sums`, or `group_sums` for DataFrames and (partition, bucket) labels): int64 where
    every sum fits, Python ints (object dtype) where one does not; never a wrap, never an error.
    Stateless; the accumulator is a list of parts, compacted on merge; `empty` makes the sum of no parts.
    """

    def __init__(self, empty=empty_sums):
        self._empty = empty

    def create_accumulator(self):
        return []

    def add_input(self, accumulator, element):
        return [*accumulator, element]

    def merge_accumulators(self, accumulators):
        parts = [series for accumulator in accumulators for series in accumulator]
        return [self.extract_output(parts)]

    def extract_output(self, accumulator):
        parts = [series for series in accumulator if len(series)]
        if not parts:
            return self._empty()
        if len(parts) == 1:
            return parts[0] if parts[0].index.is_monotonic_increasing else parts[0].sort_index()
        if all(isinstance(part, pd.Series) and part.index.nlevels == 1 for part in parts):  # without pandas grouping
            return label_sums(np.concatenate([part.index.to_numpy(dtype=object) for part in parts]),
                              np.concatenate([part.to_numpy() for part in parts]))
        return group_sums(pd.concat(parts))


class PerWindowSums(beam.PTransform):
    """(window index, partial sums) -> (window index, sums) for every window of the public range, in its Beam window."""

    def __init__(self, window: WindowSpec, empty=empty_sums):
        super().__init__()
        self._window = window
        self._empty = empty

    def expand(self, partials):
        every_window = (
            partials.pipeline
            | "Public windows" >> PublicWindows(self._window, lambda index, empty=self._empty: [(index, empty())])
            | "Window public windows" >> beam.WindowInto(beam_windows(self._window))
        )
        return (
            (partials, every_window)
            | "With empty windows" >> beam.Flatten()
            | "Sum per window" >> beam.CombinePerKey(SumSeriesFn(self._empty))
        )


class WindowedRelease(beam.PTransform):
    """Base of the release transforms: record batches -> one release's output, window by window.

    Holds what every release needs and nothing else: its plan, the job's
    contribution bounds and windows, the test-mode seed (None in production)
    and how many user shards bounding spreads over; `cap`, the plan's cross-window cap (`JobPlan.window_cap`).
    Every release starts from `_window_sums`.
    """

    def __init__(self, plan, bounds: ContributionBounds, window: WindowSpec, seed: int | None = None, shards: int = 1,
                 cap: WindowCap | None = None):
        super().__init__()
        self._cap = cap
        self._plan = plan
        self._bounds = bounds
        self._window = window
        self._seed = seed
        self._shards = shards

    @classmethod
    def columns(cls, plan) -> tuple[str, ...]:
        """The columns of the rows the release yields, in order (a release with no rows still has them)."""
        raise NotImplementedError(cls.__name__)

    def _window_sums(self, batches, partitions: tuple[str, ...] | None, bounds: ContributionBounds | None = None,
                     units: bool = False, label: str = "", buckets: ValueGrid | None = None):
        """Record batches -> (window index, bounded per-partition sums) for every window of the public range.

        Contributions are bounded by `bounds` (default: the job's) to
        `partitions` (None: every partition seen), then summed per window;
        with `units`, a DataFrame of sums and numbers of users; with `buckets`, the kept records' counts per
        (partition, value bucket) (`BoundContributions`). `label` prefixes the step names (a release that sums
        twice).
        """
        empty = empty_sums_and_units if units else empty_bucket_counts if buckets is not None else empty_sums
        return (
            batches
            | f"{label}Bound contributions" >> BoundContributions(self._bounds if bounds is None else bounds, self._window,
                                                          partitions, self._seed, self._shards, units, self._cap,
                                                          buckets)
            | f"{label}Sum per window" >> PerWindowSums(self._window, empty)
        )

    def _window_users(self, batches):
        """Record batches -> (window index, distinct users kept per partition) for every window: the input of a
        selection over unknown partitions (`selection.selected_by_users`), bounded under `metric_bounds(users)`."""
        return self._window_sums(batches, None, metric_bounds(Metric.USERS, self._bounds), label="Users: ")
