"""Period scopes' periods: absolute periods [k P, (k+1) P) seconds since the epoch, and runs of them.

Proof that per-period budgets are sound: docs/proofs/accounting.ledger.periods.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpstream.accounting.ledger.errors import LedgerError
from dpstream.accounting.text import duration_text, instant_text

MAX_PERIODS_PER_SPEND = 100_000  # one spend touches at most this many periods (one row each)


def check_unit_period(value: Any) -> int:
    """A period scope's period length: a positive whole number of seconds (as int)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not (ok and value >= 1 and float(value).is_integer()):
        raise LedgerError(f"unit period must be a positive whole number of seconds, got {value!r}")
    return int(value)


def on_period_boundary(instant: float, seconds: int) -> bool:
    """Whether `instant` (seconds since the epoch) starts a period of length `seconds`."""
    return Fraction(instant) % seconds == 0


@dataclass(frozen=True)
class Periods:
    """The contiguous periods first..last (inclusive) of length `seconds`.

    Period k covers [k * seconds, (k+1) * seconds) seconds since 1970-01-01T00:00:00Z (UTC).
    Checks: seconds a positive whole number, first <= last, at most MAX_PERIODS_PER_SPEND periods.
    """

    seconds: int
    first: int
    last: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", check_unit_period(self.seconds))
        if not (isinstance(self.first, int) and isinstance(self.last, int) and self.first <= self.last):
            raise LedgerError(f"periods need whole indices first <= last, got {self.first!r}..{self.last!r}")
        if self.count > MAX_PERIODS_PER_SPEND:
            raise LedgerError(f"one release may touch at most {MAX_PERIODS_PER_SPEND} periods, got {self.count} "
                              f"({self.describe()})")

    @classmethod
    def overlapping(cls, start: float, end: float, seconds: int) -> "Periods":
        """The periods that overlap the time range [start, end) (seconds since the epoch, start < end)."""
        if not (math.isfinite(start) and math.isfinite(end) and start < end):
            raise LedgerError(f"a period range needs start < end, got {start!r} and {end!r}")
        seconds = check_unit_period(seconds)
        first = math.floor(Fraction(start) / seconds)
        last = math.ceil(Fraction(end) / seconds) - 1
        return cls(seconds, first, last)

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    def indices(self) -> range:
        return range(self.first, self.last + 1)

    def start(self) -> int:
        return self.first * self.seconds

    def end(self) -> int:
        return (self.last + 1) * self.seconds

    def describe(self) -> str:
        """e.g. "2013-01-01T00:00:00Z..2013-01-03T00:00:00Z (2 periods of 1d)"."""
        plural = "period" if self.count == 1 else "periods"
        return (f"{instant_text(self.start())}..{instant_text(self.end())} "
                f"({self.count} {plural} of {duration_text(self.seconds)})")

    def to_dict(self) -> dict[str, Any]:
        return {"period_s": self.seconds, "start": instant_text(self.start()), "end": instant_text(self.end()),
                "count": self.count}


def period_runs(seconds: int, periods: list[int]) -> list[Periods]:
    """Sorted period indices as maximal contiguous runs."""
    runs: list[Periods] = []
    for period in sorted(periods):
        if runs and runs[-1].last == period - 1:
            runs[-1] = Periods(seconds, runs[-1].first, period)
        else:
            runs.append(Periods(seconds, period, period))
    return runs
