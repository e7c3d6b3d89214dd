"""How big a job's run is, from its plan alone: the rows its releases write and the memory to hold them.

A run is refused before its debit when the estimate is above the limit (`pipelines.run.preflight.check_memory`),
so a job that would exhaust the machine fails in a second instead of after an hour and a debit.

Rows per release: a histogram over public partitions writes one row per partition and window; one over partitions
selected privately writes a data-dependent number (at most one per input (window, partition) cell), which no
plan can know; top-k writes k per window; peak one per period; svt one per window.

Memory, measured on the DirectRunner in-process (python -m pytest tests/pipelines/test_plan_size.py -s prints a
measurement; Python 3.11, Beam 2.x): a process that imported Beam holds about 230 MB; a known-partition histogram
job then grew by 2.1-2.2 KB per output row (2,000 x 50 and 8,000 x 50 windows x partitions) and by about 6 KB per
window; a job of all five release kinds over 1,000 windows x 50 partitions peaked at 539 MB against an estimate of
634 MB. The constants round those up, so the estimate is meant as an upper bound, not a tight one; a
privately selected histogram adds rows the estimate cannot count.
"""
from __future__ import annotations

from dataclasses import dataclass

from dpstream.pipelines.planning.histogram import HistogramPlan
from dpstream.pipelines.planning.job import JobPlan, ReleasePlan
from dpstream.pipelines.planning.peak import PeakPlan
from dpstream.pipelines.planning.quantiles import QuantilesPlan
from dpstream.pipelines.planning.topk import TopKPlan

BASE_BYTES = 480 * 2**20
"""A Python process with Beam and a pipeline, before any row. 400 MB measured, raised after the test job
(tests/pipelines/test_plan_size.py) peaked between 471 and 549 MB in runs of the same code, against an
estimate of 548 MB: peak RSS varies by about 15% between runs."""
ROW_BYTES = 3 * 2**10
"""Per output row held by the DirectRunner (measured: about 2.2 KB)."""
WINDOW_BYTES = 16 * 2**10
"""Per window and release (measured: about 6 KB for one histogram, more for a job of several release kinds)."""


@dataclass(frozen=True)
class PlanSize:
    """The output rows of each release (None: data-dependent) and the run's estimated memory on the DirectRunner."""

    windows: int
    rows: dict[str, int | None]

    @property
    def known_rows(self) -> int:
        return sum(r for r in self.rows.values() if r is not None)

    @property
    def memory_bytes(self) -> int:
        """Upper estimate of the DirectRunner's memory for the rows the plan fixes (module docstring)."""
        return BASE_BYTES + ROW_BYTES * self.known_rows + WINDOW_BYTES * self.windows * len(self.rows)

    def describe(self) -> str:
        """e.g. "100,000 output rows (about 0.7 GB on the DirectRunner)", naming data-dependent releases."""
        text = f"{self.known_rows:,} output rows (about {self.memory_bytes / 2**30:.1f} GB on the DirectRunner)"
        selected = [name for name, rows in self.rows.items() if rows is None]
        if selected:
            text += f", plus the privately selected partitions of {', '.join(selected)}"
        return text


def _rows(release: ReleasePlan, windows: int) -> int | None:
    if isinstance(release, HistogramPlan):
        return None if release.selects else windows * len(release.listed)
    if isinstance(release, TopKPlan):
        return windows * release.spec.k
    if isinstance(release, PeakPlan):
        return len(release.period_sizes)
    if isinstance(release, QuantilesPlan):
        return None if release.selects else windows * len(release.spec.partitions or ()) * len(release.spec.quantiles)
    return windows  # svt: one row per window


def plan_size(plan: JobPlan) -> PlanSize:
    """The size of a run of `plan` over its whole window range."""
    windows = plan.window.count
    return PlanSize(windows, {release.name: _rows(release, windows) for release in plan.releases})
