"""What every release planner reads, and what it hands back: the planning context and a release's draft.

Planning has two steps (`job.plan_job`): each release's planner turns its spec into a `Draft` (the calibration
entries whose noise scales together, and the fixed events whose cost does not), one calibration sizes every
entry's noise for the whole job, and each draft then finishes its plan from the calibrated events. Everything
here is public: specs, bounds, the window range and the job's budget.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Generic, Mapping, TypeVar

from dpstream.accounting.calibrate import CalibratedRelease, FixedEvent, Release
from dpstream.accounting.periods import PeriodGrid
from dpstream.pipelines.config.specs import ContributionBounds, ReleaseSpec, WindowSpec
from dpstream.pipelines.planning.windows import composed_windows


@dataclass(frozen=True)
class PlanningContext:
    """The job's public values: its releases (all of them: shares depend on the others), bounds, window range,
    budget and privacy unit (`unit_period`: the period grid of a user x period unit, None for a user over the
    whole range)."""

    releases: tuple[ReleaseSpec, ...]
    bounds: ContributionBounds
    window: WindowSpec
    epsilon: float
    delta: float
    unit_period: PeriodGrid | None = None

    @cached_property
    def windows(self) -> int:
        """How many windows one privacy unit can reach (`windows.composed_windows`): each window-release composes
        this often."""
        return composed_windows(self.window, self.unit_period, self.bounds)

    @property
    def total_cells(self) -> int | None:
        """The (window, partition) cells one unit can change over the whole release when `max_partitions_total`
        binds (fewer than `windows` x max_partitions), else None: then per-window composition is as tight."""
        total, per_window = self.bounds.max_partitions_total, self.windows * self.bounds.max_partitions
        return total if total is not None and total < per_window else None

    @property
    def whole_l2(self) -> float | None:
        """The L2 sensitivity of the whole release vector of public-partition sums when a cap across windows makes
        it smaller than per-window composition gives (sqrt(windows L0) Linf), else None: sqrt(T) Linf under
        `max_partitions_total` T, or `ContributionBounds.mass_l2` under `max_contributions_total`, the smaller
        (docs/proofs/pipelines.transforms.bounding.max_windows.md)."""
        bounds, cells = self.bounds, self.total_cells
        composed = dataclasses.replace(bounds, max_partitions=self.windows * bounds.max_partitions).l2
        candidates = [dataclasses.replace(bounds, max_partitions=cells).l2] if cells is not None else []
        if bounds.mass_l2 is not None:
            candidates.append(bounds.mass_l2)
        best = min(candidates, default=None)
        return best if best is not None and best < composed else None

    @property
    def total_weight(self) -> float:
        return math.fsum(r.weight for r in self.releases)


PlanT = TypeVar("PlanT", covariant=True)


@dataclass(frozen=True)
class Draft(Generic[PlanT]):
    """A release before calibration: its calibration entries, its fixed events, and how to finish its plan
    from the calibrated entries (by name)."""

    entries: tuple[Release, ...]
    fixed: tuple[FixedEvent, ...]
    finish: Callable[[Mapping[str, CalibratedRelease]], PlanT]
