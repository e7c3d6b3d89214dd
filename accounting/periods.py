"""Period scopes' periods: a grid of absolute periods (`PeriodGrid`), and runs of them (`Periods`).

A grid is either fixed, period k = [k P, (k+1) P) seconds since 1970-01-01T00:00:00Z, or calendar, period k = the
k-th block of `count` local days, ISO weeks, months or years since 1970 in a time zone (`accounting.calendar`).
Either way every process computes the same periods from the grid alone.

Proof that per-period budgets are sound: docs/proofs/accounting.ledger.periods.md. The grids live outside the
ledger package so that planning can use them without loading the ledger's SQL toolkit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpstream.accounting.calendar import (
    calendar_length,
    calendar_spelling,
    calendar_text,
    check_timezone,
    local_day,
    local_midnight,
    unit_first_day,
    unit_number,
)
from dpstream.accounting.errors import LedgerError
from dpstream.accounting.text import duration_text, instant_text

MAX_PERIODS_PER_SPEND = 100_000  # one spend touches at most this many periods (one row each)


def check_unit_period(value: Any) -> int:
    """A fixed period length: a positive whole number of seconds (as int)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not (ok and value >= 1 and float(value).is_integer()):
        raise LedgerError(f"unit period must be a positive whole number of seconds, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class PeriodGrid:
    """How a period scope (and a user x period privacy unit) cuts time into periods.

    Fixed (`seconds`): period k is [k seconds, (k+1) seconds) since the UTC epoch.
    Calendar (`calendar` = (count, unit), unit a day, week, month or year, in `timezone`): period k runs from local
    midnight of the first day of unit k * count (numbered from 1970, `calendar.unit_number`) to that of unit
    (k+1) * count, e.g. New York days of 23, 24 or 25 hours.
    """

    seconds: int | None = None
    calendar: tuple[int, str] | None = None
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if (self.seconds is None) == (self.calendar is None):
            raise LedgerError("a period grid is either fixed (seconds) or calendar (count, unit), not both or neither")
        if self.seconds is not None:
            object.__setattr__(self, "seconds", check_unit_period(self.seconds))
            object.__setattr__(self, "timezone", "UTC")
        elif calendar_length(calendar_spelling(self._length)) != self.calendar:
            raise LedgerError(f"a calendar period is a count of days, weeks, months or years, got {self.calendar!r}")
        try:
            check_timezone(self.timezone)
        except ValueError as err:
            raise LedgerError(f"period time zone {err}") from None

    @classmethod
    def of(cls, length: "PeriodGrid | str | float", timezone: str = "UTC") -> "PeriodGrid":
        """A grid from seconds, or from a calendar length such as "1day" or "1month" in `timezone`
        (`PeriodGrid.of("1day", "America/New_York")`); a grid is returned as it is."""
        if isinstance(length, PeriodGrid):
            return length
        calendar = calendar_length(length)
        if calendar is not None:
            return cls(calendar=calendar, timezone=timezone)
        if isinstance(length, str):
            raise LedgerError(f"unit period must be whole seconds or a calendar length such as \"1day\", "
                              f"\"1week\", \"1month\" or \"1year\", got {length!r}")
        return cls(seconds=check_unit_period(length))

    @property
    def _length(self) -> tuple[int, str]:
        """(count, unit) of a calendar grid."""
        if self.calendar is None:
            raise LedgerError(f"{self!r} is a fixed grid, not a calendar one")
        return self.calendar

    def index(self, instant: float) -> int:
        """The period holding `instant` (seconds since the epoch): the k with start(k) <= instant < start(k+1).

        Calendar grids start from the local date's period and step to the one `start` brackets: local dates are
        not monotone in time where clocks fall back across midnight (St John's, 1987-2010), and a midnight in a
        daylight-saving gap starts its day where `local_midnight` puts it, so periods are exactly the intervals
        between consecutive starts (an empty one for a day a zone skipped, e.g. Apia on 2011-12-30)."""
        if self.seconds is not None:
            return math.floor(Fraction(instant) / self.seconds)
        count, unit = self._length
        index = unit_number(local_day(instant, self.timezone), unit) // count
        while self.start(index) > instant:
            index -= 1
        while self.start(index + 1) <= instant:
            index += 1
        return index

    def start(self, index: int) -> float:
        """Where period `index` starts (seconds since the epoch)."""
        if self.seconds is not None:
            return index * self.seconds
        count, unit = self._length
        return local_midnight(unit_first_day(index * count, unit), self.timezone)

    def is_boundary(self, instant: float) -> bool:
        """Whether `instant` starts a period."""
        return self.start(self.index(instant)) == instant

    @property
    def text(self) -> str:
        """e.g. "1d" or "1 day (America/New_York)"."""
        if self.seconds is not None:
            return duration_text(self.seconds)
        return f"{calendar_text(self._length)} ({self.timezone})"

    @property
    def options(self) -> str:
        """The `dpstream budget init` options that create this grid, e.g. "--unit-period 1day --timezone X"."""
        if self.seconds is not None:
            return f"--unit-period {duration_text(self.seconds)}"
        return f"--unit-period {calendar_spelling(self._length)} --timezone {self.timezone}"

    def to_dict(self) -> dict[str, Any]:
        """{"period_s": seconds} or {"period": "1day", "timezone": ...}, as stored in the ledger."""
        if self.seconds is not None:
            return {"period_s": self.seconds}
        return {"period": calendar_spelling(self._length), "timezone": self.timezone}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PeriodGrid":
        if "period_s" in data:
            return cls(seconds=int(data["period_s"]))
        return cls(calendar=calendar_length(data["period"]), timezone=data["timezone"])


@dataclass(frozen=True)
class Periods:
    """The contiguous periods first..last (inclusive) of `grid` (a `PeriodGrid`, or whole seconds for a fixed one).

    Checks: first <= last, at most MAX_PERIODS_PER_SPEND periods.
    """

    grid: PeriodGrid
    first: int
    last: int

    def __post_init__(self) -> None:
        if isinstance(self.grid, str) or not isinstance(self.grid, (PeriodGrid, int, float)):
            raise LedgerError(f"periods need a PeriodGrid or whole seconds, got {self.grid!r}")
        object.__setattr__(self, "grid", PeriodGrid.of(self.grid))
        if not (isinstance(self.first, int) and isinstance(self.last, int) and self.first <= self.last):
            raise LedgerError(f"periods need whole indices first <= last, got {self.first!r}..{self.last!r}")
        if self.count > MAX_PERIODS_PER_SPEND:
            raise LedgerError(f"one release may touch at most {MAX_PERIODS_PER_SPEND} periods, got {self.count} "
                              f"({self.describe()})")

    @classmethod
    def overlapping(cls, start: float, end: float, grid: PeriodGrid | int) -> "Periods":
        """The periods that overlap the time range [start, end) (seconds since the epoch, start < end)."""
        if not (math.isfinite(start) and math.isfinite(end) and start < end):
            raise LedgerError(f"a period range needs start < end, got {start!r} and {end!r}")
        grid = PeriodGrid.of(grid)
        last = grid.index(end)
        return cls(grid, grid.index(start), last - 1 if grid.start(last) == end else last)

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    def indices(self) -> range:
        return range(self.first, self.last + 1)

    def start(self) -> float:
        return self.grid.start(self.first)

    def end(self) -> float:
        return self.grid.start(self.last + 1)

    def describe(self) -> str:
        """e.g. "2013-01-01T00:00:00Z..2013-01-03T00:00:00Z (2 periods of 1d)"."""
        plural = "period" if self.count == 1 else "periods"
        return (f"{instant_text(self.start())}..{instant_text(self.end())} "
                f"({self.count} {plural} of {self.grid.text})")

    def to_dict(self) -> dict[str, Any]:
        return {**self.grid.to_dict(), "start": instant_text(self.start()), "end": instant_text(self.end()),
                "count": self.count}

    def to_json(self) -> list[Any]:
        """[grid, first, last] as the runs table stores it (`from_json`)."""
        return [self.grid.to_dict(), self.first, self.last]

    @classmethod
    def from_json(cls, data: list[Any]) -> "Periods":
        grid, first, last = data
        return cls(PeriodGrid.from_dict(grid), first, last)


def period_runs(grid: PeriodGrid, periods: list[int]) -> list[Periods]:
    """Sorted period indices as maximal contiguous runs."""
    runs: list[Periods] = []
    for period in sorted(periods):
        if runs and runs[-1].last == period - 1:
            runs[-1] = Periods(grid, runs[-1].first, period)
        else:
            runs.append(Periods(grid, period, period))
    return runs
