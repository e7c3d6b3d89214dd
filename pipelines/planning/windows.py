"""Which windows and periods one privacy unit can touch: the counts every planner composes over.

Windows are grouped twice: into peak periods (`peak_groups`: each window by the period holding its start) and
into unit periods (`unit_periods`: each window inside one period of the privacy unit's grid, or refused). A grid
is a `PeriodGrid`: fixed periods are counted from window.start, calendar ones (local days, ISO weeks, months,
years in the job's time zone) are absolute.

Proof for user x period units: docs/proofs/pipelines.planning.windows.unit_runs.md.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from dpstream.accounting.calendar import calendar_length
from dpstream.accounting.periods import PeriodGrid
from dpstream.accounting.text import instant_text
from dpstream.pipelines.config.specs import ContributionBounds, WindowSpec
from dpstream.pipelines.planning.errors import PlanningError


def _origin(window: WindowSpec, grid: PeriodGrid) -> float:
    """Fixed periods count from window.start; calendar periods are absolute."""
    return window.start if grid.seconds is not None else 0.0


PeakPeriods = tuple[tuple[int, ...], tuple[tuple[float, float], ...]]


def peak_groups(window: WindowSpec, period: float | str) -> PeakPeriods:
    """(windows per peak period, each period's [start, end) in seconds), in order. A fixed `period` (seconds)
    must be a multiple of the window step and groups windows from window.start; a calendar one ("1month",
    "1year") groups windows by the local period holding their start, in the window's time zone."""
    calendar = calendar_length(period)
    if calendar is None:
        if window.calendar is not None:
            raise PlanningError(f"a peak period over calendar windows of {window.length_text} must be a calendar "
                                f"length such as \"1month\" or \"1year\", got {period!r}")
        seconds = float(period)
        ratio = seconds / window.step
        per_period = round(ratio)
        if per_period < 1 or abs(ratio - per_period) > 1e-9 * ratio:
            raise PlanningError(f"peak period must be a positive multiple of the window step {window.step}, got "
                                f"{period!r}")
        total = window.count
        firsts = range(0, total, per_period)
        return (tuple(min(per_period, total - first) for first in firsts),
                tuple((window.start + p * seconds, window.start + (p + 1) * seconds) for p in range(len(firsts))))
    grid = PeriodGrid(calendar=calendar, timezone=window.timezone)
    indices = [grid.index(window.bounds(i)[0]) for i in range(window.count)]
    distinct = [k for k, _ in itertools.groupby(indices)]
    return (tuple(len(list(run)) for _, run in itertools.groupby(indices)),
            tuple((grid.start(k), grid.start(k + 1)) for k in distinct))


@functools.lru_cache(maxsize=64)
def unit_periods(window: WindowSpec, grid: PeriodGrid) -> tuple[int, ...]:
    """The unit period of each window (fixed periods: counted from window.start, so the first is 0); cached,
    since a plan asks for it once per release and per cap (both arguments are frozen values).

    PlanningError for sliding windows, or when a window crosses a period boundary: a window must lie inside one
    period, so that all of a user's records in it belong to one unit."""
    if window.period is not None:
        raise PlanningError(f"privacy.unit_period needs fixed windows (no window.period), got window.period="
                            f"{window.period!r}")
    origin = _origin(window, grid)
    out = []
    for i in range(window.count):
        begin, end = window.bounds(i)
        period = grid.index(begin - origin)
        boundary = grid.start(period + 1) + origin
        if boundary < end:
            raise PlanningError(f"privacy.unit_period = {grid.text}: window {instant_text(begin)}..{instant_text(end)} "
                                f"crosses the period boundary {instant_text(boundary)}; every window must lie inside "
                                f"one period (windows of {window.length_text} that tile the periods)")
        out.append(period)
    return tuple(out)


def groups_per_unit(window: WindowSpec, grid: PeriodGrid | None,
                    groups: tuple[int, ...] | None = None) -> list[set[int]]:
    """For each unit period of the range, the groups of consecutive windows (`groups`: their sizes, as
    `peak_groups` gives them; None: every window its own group) that hold one of its windows. Without a unit
    period (grid None) a user may appear in every window: one set of all groups."""
    sizes = groups or (1,) * window.count
    if grid is None:
        return [set(range(len(sizes)))]
    group_of = [g for g, size in enumerate(sizes) for _ in range(size)]
    touched: dict[int, set[int]] = {}
    for index, period in enumerate(unit_periods(window, grid)):
        touched.setdefault(period, set()).add(group_of[index])
    return list(touched.values())


def unit_runs(window: WindowSpec, grid: PeriodGrid | None) -> int:
    """How many windows one privacy unit can touch: every window of the range without a unit period, else the
    most windows any one unit period holds."""
    return max(len(groups) for groups in groups_per_unit(window, grid))


@dataclass(frozen=True)
class WindowCap:
    """Caps across windows in force: bounding keeps each privacy unit's records in at most `max_windows` windows
    (`[privacy] max_windows`; None: no such cap) and at most `max_cells` (window, partition) cells
    (`[privacy] max_partitions_total`; None: no such cap), and of those its heaviest while they hold at most
    `max_records` records' worth of value (`[privacy] max_contributions_total`; None: no such cap; bounding
    turns it into units of its own bounds, `ContributionBounds.mass_units`). The unit is a user within one unit
    period: `unit_of_window[i]` is the unit period of window i (all 0 without a unit period), so the caps hold
    per user and period."""

    max_windows: int | None
    max_cells: int | None
    unit_of_window: tuple[int, ...]
    max_records: int | None = None


def composed_windows(window: WindowSpec, grid: PeriodGrid | None, bounds: ContributionBounds) -> int:
    """The windows one privacy unit's records can reach, which every window-release composes: `unit_runs`, at
    most `bounds.max_windows` and `bounds.max_partitions_total` (a unit kept in T cells reaches at most T
    windows)."""
    count = window.count
    return min(unit_runs(window, grid), bounds.max_windows or count, bounds.max_partitions_total or count)


def window_cap(window: WindowSpec, grid: PeriodGrid | None, bounds: ContributionBounds) -> WindowCap | None:
    """The caps bounding must apply, or None when there are none or none can bind: max_windows C binds below
    the windows a unit can touch (`unit_runs`), max_partitions_total T below min(C, that) x max_partitions,
    max_contributions_total K below the records those cells can hold (x max_contributions)."""
    touched = unit_runs(window, grid)
    windows = None if bounds.max_windows is None or bounds.max_windows >= touched else bounds.max_windows
    cells_possible = (windows or touched) * bounds.max_partitions
    total = bounds.max_partitions_total
    cells = None if total is None or total >= cells_possible else total
    records_possible = (cells or cells_possible) * bounds.max_contributions
    most = bounds.max_contributions_total
    records = None if most is None or most >= records_possible else most
    if windows is None and cells is None and records is None:
        return None
    return WindowCap(windows, cells, (0,) * window.count if grid is None else unit_periods(window, grid), records)
