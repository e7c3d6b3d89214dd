"""Which windows and periods one privacy unit can touch: the counts every planner composes over.

Proof for user x period units: docs/proofs/pipelines.planning.windows.unit_runs.md.
"""
from __future__ import annotations

import math

from dpstream.pipelines.config.specs import WindowSpec
from dpstream.pipelines.planning.errors import PlanningError


def _fixed(window: WindowSpec, what: str) -> None:
    if window.calendar is not None:
        raise PlanningError(f"{what} needs windows of a fixed length, got calendar windows of {window.length_text}")


def period_sizes(window: WindowSpec, period: float) -> tuple[int, ...]:
    """Windows per period: window i belongs to period floor(i * step / period); period must be a multiple of step."""
    _fixed(window, "a peak period")
    ratio = period / window.step
    per_period = round(ratio)
    if per_period < 1 or abs(ratio - per_period) > 1e-9 * ratio:
        raise PlanningError(f"peak period must be a positive multiple of the window step {window.step}, got {period!r}")
    total = window.count
    return tuple(min(per_period, total - start) for start in range(0, total, per_period))


def check_unit_period(window: WindowSpec, unit_period: float) -> int:
    """Windows per unit period; the unit period must be a whole number of fixed windows (counted from window.start)."""
    _fixed(window, "privacy.unit_period")
    if window.period is not None:
        raise PlanningError(f"privacy.unit_period needs fixed windows (no window.period), got window.period={window.period!r}")
    ratio = unit_period / window.size
    per_period = round(ratio)
    if not (math.isfinite(unit_period) and per_period >= 1 and abs(ratio - per_period) <= 1e-9 * ratio):
        raise PlanningError(f"privacy.unit_period must be a positive multiple of window.size={window.size}, got {unit_period!r}")
    return per_period


def unit_runs(window: WindowSpec, unit_period: float | None, group: int = 1) -> int:
    """How many groups of `group` consecutive windows (group 1: windows) one privacy unit can touch.

    Without a unit period a user may appear in every window: all groups of the range.
    With one, unit period p covers fixed windows [p m, (p+1) m), m = windows per period,
    and touches only the groups that overlap that range; the maximum over all periods is returned.
    """
    total = window.count
    if unit_period is None:
        return math.ceil(total / group)
    per_period = check_unit_period(window, unit_period)
    return max(len(range(first // group, (min(first + per_period, total) - 1) // group + 1))
               for first in range(0, total, per_period))
