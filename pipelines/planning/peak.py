"""Planning a peak release: per period, the window with the largest total by Gaussian report-noisy-max.

What it costs: `PureDP(epsilon)` once per period of at least two windows that a unit can touch
(Lebensold–Precup–Balle Thm 8); sigma is solved from epsilon by bisection on the exact bound.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from dpstream.accounting.calendar import calendar_length, calendar_text
from dpstream.accounting.calibrate import Release
from dpstream.accounting.events import Event, PureDP
from dpstream.accounting.numerics import epsilon_from_delta_curve, expanding_upper
from dpstream.accounting.periods import PeriodGrid
from dpstream.accounting.selection import report_noisy_max_epsilon
from dpstream.pipelines.config.specs import PeakSpec, WindowSpec
from dpstream.pipelines.planning.context import Draft, PlanningContext
from dpstream.pipelines.planning.errors import PlanningError
from dpstream.pipelines.planning.grid import normalised_sensitivity
from dpstream.pipelines.planning.windows import PeakPeriods, groups_per_unit, peak_groups

MAX_RANGE_RATIO = 2e4
"""maximum / L1 sensitivity above which `_peak_sigma`'s quadrature blows up (1e5: 26 s and 2 GB; 1e6: over 120 s
and 18 GB); refused until the calibration handles wide ranges."""


def _peak_sigma(sizes: tuple[int, ...], epsilon: float, sensitivity: float) -> float:
    """The smallest sigma (rounded up) with report_noisy_max_epsilon(d, sigma, sensitivity) <= epsilon for all d."""
    sigma = 0.0
    for d in sorted({d for d in sizes if d >= 2}):
        def spent(s: float, d: int = d) -> float:
            return float(report_noisy_max_epsilon(d, s, sensitivity, 0.0, 1.0))

        upper = expanding_upper(spent, epsilon, start=sensitivity / epsilon, limit=1e12)
        while upper / 2 > 1e-3 * sensitivity and spent(upper / 2) <= epsilon:
            upper /= 2
        sigma = max(sigma, epsilon_from_delta_curve(spent, epsilon, upper, lower=upper / 2, rtol=1e-9, atol=0.0))
    if not math.isfinite(sigma) or sigma <= 0:
        raise PlanningError(f"no report-noisy-max sigma meets epsilon={epsilon!r} for period sizes {sorted(set(sizes))}")
    return sigma


def _peak_runs(window: WindowSpec, unit_period: PeriodGrid | None, sizes: tuple[int, ...]) -> int:
    """Report-noisy-max runs one unit can touch: peak periods of at least two windows that hold a window of its
    unit period (a one-window period releases its window without looking at the data)."""
    return max(sum(1 for q in groups if sizes[q] >= 2) for groups in groups_per_unit(window, unit_period, sizes))


@dataclass(frozen=True)
class PeakPlan:
    """Per period, the window with the largest total by Gaussian report-noisy-max on totals / maximum in [0, 1].

    sigma is in normalised units; epsilon is the planned per-period bound, which
    `report_noisy_max_epsilon(d, sigma, sensitivity)` meets for every period size d in `period_sizes`.
    """

    spec: PeakSpec
    runs: int  # periods with at least two windows
    period_sizes: tuple[int, ...]  # windows in each period, in order
    period_bounds: tuple[tuple[float, float], ...]  # each period's [start, end), seconds
    sigma: float
    sensitivity: float  # L1 / maximum, plus the division's rounding (normalised_sensitivity)
    epsilon: float
    event: Event

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def last_windows(self) -> tuple[int, ...]:
        """The last window of each period (where its release is emitted)."""
        return tuple(itertools.accumulate(self.period_sizes, initial=-1))[1:]

    @property
    def period_text(self) -> str:
        """e.g. "7 windows" or "1 month (UTC)"."""
        calendar = calendar_length(self.spec.period)
        if calendar is not None:
            return calendar_text(calendar)
        return f"{max(self.period_sizes)} windows"

    def describe(self) -> str:
        return (
            f"Peak window {self.name!r}: for each of {len(self.period_sizes)} periods of {self.period_text}, "
            f"the window with the largest total, by Gaussian report-noisy-max on totals divided by the public maximum "
            f"{self.spec.maximum:g} and clipped to [0, 1] (sigma={self.sigma:.6g} in those units, sensitivity "
            f"{self.sensitivity:.6g}); pure epsilon={self.epsilon:.6g} per period (Lebensold–Precup–Balle Thm 8)."
        )


def draft(spec: PeakSpec, context: PlanningContext) -> Draft[PeakPlan]:
    """One pure-DP report-noisy-max per period of at least two windows that a unit can touch."""
    where = f"release {spec.name!r}"
    bounds, window = context.bounds, context.window
    if bounds.l1 > spec.maximum:
        raise PlanningError(f"{where}: maximum must be at least the L1 sensitivity {bounds.l1:g} of a window total, "
                            f"got {spec.maximum!r}")
    if spec.maximum > MAX_RANGE_RATIO * bounds.l1:
        raise PlanningError(f"{where}: maximum may be at most {MAX_RANGE_RATIO:g} times the L1 sensitivity {bounds.l1:g} "
                            f"of a window total, got {spec.maximum!r}: beyond that, calibrating report-noisy-max takes "
                            f"minutes and gigabytes (a known limitation)")
    periods = peak_groups(window, spec.period)
    # a unit whose records reach at most context.windows windows (max_windows, max_partitions_total) reaches at
    # most that many periods
    runs = min(_peak_runs(window, context.unit_period, periods[0]), context.windows)
    if runs == 0:
        raise PlanningError(f"{where}: every period holds a single window; period must cover at least 2 windows")
    entry = Release(spec.name, "pure", spec.weight, 1.0, runs)
    return Draft((entry,), (), lambda calibrated: _plan(spec, context, periods, runs,
                                                                  calibrated[spec.name].event))


def _plan(spec: PeakSpec, context: PlanningContext, periods: PeakPeriods, runs: int, event: Event) -> PeakPlan:
    if not isinstance(event, PureDP):
        raise TypeError(f"peak {spec.name!r} was calibrated to {event!r}, not pure DP")
    sensitivity = normalised_sensitivity(context.bounds.l1, spec.maximum)
    sizes, bounds = periods
    sigma = _peak_sigma(sizes, event.epsilon, sensitivity)
    return PeakPlan(spec, runs, sizes, bounds, sigma, sensitivity, event.epsilon, event)
