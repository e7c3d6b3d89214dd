"""The job plan: every release's mechanism and noise, fixed before any data is read.

`plan_job` turns the job's releases, contribution bounds and public window range into one
`dpstream.accounting.calibrate` problem, so a single scalar sets the noise of every release and the
accountant's tightest valid epsilon over the whole job (all releases, all windows) is at most the target.
Each release kind has its own planner module (`histogram`, `topk`, `peak`, `svt`, `quantiles`), which states what the
release costs; `PLANNERS` maps a spec class to its planner. The transforms then receive plain numbers from the
returned `JobPlan`; they never compute an epsilon.

Privacy: add/remove all records of one privacy unit (`dpstream.pipelines.config.specs`). Contribution
bounding per window gives the sensitivities of `ContributionBounds`. The unit is a user, or with
`unit_period` a user x period (e.g. aircraft-day): then only the windows and peak periods that overlap one
unit period are composed (`windows.unit_runs`), and the job's (epsilon, delta) holds per user and period.
Proof: docs/proofs/pipelines.planning.job.plan_job.md; composition is the accountant's
(`dpstream.accounting.accountant`); calibration is `dpstream.accounting.calibrate`. Sensitivities are those of
the quantised bounds, which the exact int64 sums of bounding attain (`ContributionBounds`); the sums reach the
grid unrounded when its step is at most the value quantum, and otherwise the rounding is covered by enlarging
the noise so that the grid sensitivity over the noise never exceeds the planned ratio (`grid.grid_noise`,
`noise.grid_sensitivity`). Peak and svt queries divide exact totals once; their sensitivities include that
rounding (`grid.normalised_sensitivity`).
Caller must ensure: the window range and partition lists are public.
Runtime: one calibration (about 45 accountant evaluations), plus one bisection of the report-noisy-max epsilon
per peak release.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Union

from dpstream.accounting.calibrate import CalibratedPlan, calibrate
from dpstream.accounting.errors import LedgerError
from dpstream.accounting.events import Composed, Event, SelfComposed
from dpstream.accounting.periods import PeriodGrid
from dpstream.pipelines.config.specs import (
    ContributionBounds,
    HistogramSpec,
    PeakSpec,
    QuantilesSpec,
    ReleaseSpec,
    SpecError,
    SvtSpec,
    TopKSpec,
    WindowSpec,
)
from dpstream.pipelines.planning import histogram, peak, quantiles, svt, topk
from dpstream.pipelines.planning.context import Draft, PlanningContext
from dpstream.pipelines.planning.errors import PlanningError
from dpstream.pipelines.planning.histogram import HistogramPlan
from dpstream.pipelines.planning.peak import PeakPlan
from dpstream.pipelines.planning.quantiles import QuantilesPlan
from dpstream.pipelines.planning.svt import SvtPlan
from dpstream.pipelines.planning.topk import TopKPlan
from dpstream.pipelines.planning.windows import WindowCap, composed_windows, unit_runs, window_cap

ReleasePlan = Union[HistogramPlan, TopKPlan, PeakPlan, SvtPlan, QuantilesPlan]

PLANNERS: dict[type, Callable[[Any, PlanningContext], Draft[ReleasePlan]]] = {
    HistogramSpec: histogram.draft,
    TopKSpec: topk.draft,
    PeakSpec: peak.draft,
    SvtSpec: svt.draft,
    QuantilesSpec: quantiles.draft,
}
"""The planner of each release spec class: spec, context -> its draft (`context.Draft`)."""


@dataclass(frozen=True)
class JobPlan:
    """Every release's parameters and the calibration that justifies them; immutable."""

    releases: tuple[ReleasePlan, ...]
    calibrated: CalibratedPlan
    bounds: ContributionBounds
    window: WindowSpec
    unit_period: PeriodGrid | None = None  # None: the privacy unit is a user over the whole range

    def __getitem__(self, name: str) -> ReleasePlan:
        for release in self.releases:
            if release.name == name:
                return release
        raise KeyError(f"no release named {name!r}; planned: {[r.name for r in self.releases]}")

    @property
    def epsilon(self) -> float:
        """The accountant's epsilon for the whole job at the target delta (<= the target)."""
        return self.calibrated.epsilon

    @property
    def delta(self) -> float:
        return self.calibrated.target_delta

    def events(self, continued: frozenset[str] = frozenset()) -> tuple[Event, ...]:
        """The job's events, as debited from the budget scope; `continued`: names of the svt monitors already
        open on the scope, whose budgets are not debited again. Monitors are told apart by name, never by event
        (two monitors with equal parameters have equal events)."""
        return self.calibrated.events(without=frozenset(continued))

    def window_event(self) -> Event | None:
        """What one window of the range costs on its own, svt monitors aside, when the plan is the same mechanism
        run once per window: each release's event run count / W times (W windows). A stream on a plain scope may
        then pay window by window, each window one round of the scope's filter, and each new svt monitor's
        budget once, when the stream opens it (`opening_event`; docs/proofs/pipelines.run.stream.md).
        Composed(()) for a plan of svt releases only (its windows cost nothing beyond the monitors).

        None when the windows are not independent rounds of one mechanism: a user x period unit (its budget is per
        period), caps across windows (a unit's windows share its caps: the plan composes fewer than W), peaks
        (a row reads a period of windows), or a release whose count is not a multiple of W.
        Privacy: per window, contribution bounding bounds each unit's effect on that window alone by the planned
        sensitivities, so window i's releases are this event's mechanisms, given any earlier windows' outputs; a
        monitor's alerts are its own mechanism, covered by its budget whatever windows it answers."""
        windows = self.window.count
        counts = [r.release.count for r in self.calibrated.releases]
        if (self.unit_period is not None or self.window_cap is not None
                or any(isinstance(r, PeakPlan) for r in self.releases) or any(c % windows for c in counts)):
            return None
        return Composed(tuple(SelfComposed(r.event, r.release.count // windows) for r in self.calibrated.releases))

    def opening_event(self, continued: frozenset[str] = frozenset()) -> Event | None:
        """The budgets of the svt monitors this plan opens (all but `continued`, already open on the scope),
        composed; None when it opens none. With `window_event`, W times, it makes up `events(continued)`."""
        opened = tuple(f.event for f in self.calibrated.fixed if f.name not in continued)
        return Composed(opened) if opened else None

    @cached_property
    def window_cap(self) -> WindowCap | None:
        """The cross-window caps bounding applies (`[privacy] max_windows`, `max_partitions_total`), or None when
        there are none or none can bind."""
        return window_cap(self.window, self.unit_period, self.bounds)

    def window_cap_text(self) -> str | None:
        """What `[privacy] max_windows` and `max_partitions_total` do to this plan, in words (None without them)."""
        bounds, touched = self.bounds, unit_runs(self.window, self.unit_period)
        caps = [f"{name} = {value}" for name, value in (("max_windows", bounds.max_windows),
                                                         ("max_partitions_total", bounds.max_partitions_total),
                                                         ("max_contributions_total", bounds.max_contributions_total))
                if value is not None]
        if not caps:
            return None
        where = "in one unit period" if self.unit_period is not None else "in the range"
        cap = self.window_cap
        if cap is None:
            return (f"{', '.join(caps)}: a privacy unit can touch only {touched} windows and "
                    f"{touched * bounds.max_partitions} (window, partition) cells {where}, holding at most "
                    f"{touched * bounds.max_partitions * bounds.max_contributions} records, so nothing is capped")
        kept = ([f"in at most {cap.max_windows} of the {touched} windows it can touch (chosen uniformly at random)"]
                if cap.max_windows else [])
        kept += [f"in at most {cap.max_cells} (window, partition) cells (its heaviest)"] if cap.max_cells else []
        kept += ([f"in its heaviest cells up to {cap.max_records} records' worth of value"]
                 if cap.max_records else [])
        composed = composed_windows(self.window, self.unit_period, bounds)
        return (f"{', '.join(caps)}: each privacy unit's records are kept {' and '.join(kept)} {where}, so "
                f"histograms, top-k and peaks compose {composed} windows instead of {touched}"
                + (", and Gaussian histograms over public partitions are calibrated to the whole release"
                   if cap.max_cells or cap.max_records else "")
                + " (svt releases read every window: their filter is charged the same)")

    def monitors(self) -> tuple[SvtPlan, ...]:
        return tuple(r for r in self.releases if isinstance(r, SvtPlan))

    def describe(self) -> dict[str, str]:
        """Plain-words text per release, in plan order."""
        return {release.name: release.describe() for release in self.releases}


def plan_job(
    releases: tuple[ReleaseSpec, ...],
    bounds: ContributionBounds,
    window: WindowSpec,
    epsilon: float,
    delta: float,
    unit_period: PeriodGrid | float | None = None,
) -> JobPlan:
    """Calibrate every release of a job so that the whole job is (epsilon, delta)-DP.

    unit_period: None when the privacy unit is a user over the whole window range; else the period grid of a
    user x period unit (seconds, counted from window.start, or a calendar `PeriodGrid` such as local days), whose
    periods each hold whole windows: the budget then holds per user and period, and only the runs that one unit
    period can touch are composed (`windows.unit_runs`).

    Checks: at least one release; names unique; 0 < delta < 1; each planner's own checks (topk: at most as many
    picks as partitions; peak: period a multiple of the window step, L1 <= maximum; svt: sensitivity at most 1
    and a budget share that admits at least one AboveThreshold instance).
    """
    releases = tuple(releases)
    if not releases:
        raise PlanningError("a job needs at least one release, got none")
    names = [r.name for r in releases]
    if len(set(names)) != len(names):
        raise PlanningError(f"release names must be unique, got {names}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise PlanningError(f"privacy.delta must lie in (0, 1), got {delta!r}")
    unknown = [r for r in releases if type(r) not in PLANNERS]
    if unknown:
        raise PlanningError(f"no planner for {unknown[0]!r}; release specs: {', '.join(c.__name__ for c in PLANNERS)}")
    try:
        grid = None if unit_period is None else PeriodGrid.of(unit_period)
    except LedgerError as err:
        raise PlanningError(f"privacy.unit_period: {err}") from None
    context = PlanningContext(releases, bounds, window, epsilon, delta, grid)
    drafts = [PLANNERS[type(spec)](spec, context) for spec in releases]
    try:
        calibrated = calibrate([e for d in drafts for e in d.entries], epsilon, delta,
                               fixed=tuple(f for d in drafts for f in d.fixed))
    except (ValueError, SpecError) as err:
        raise PlanningError(f"cannot calibrate the job to epsilon={epsilon!r}, delta={delta!r}: {err}") from err
    by_name = calibrated.by_name()
    return JobPlan(tuple(d.finish(by_name) for d in drafts), calibrated, bounds, window, grid)
