"""The job file's grammar of durations ("1d", "6h", "30m", "90s", "2w" or seconds), calendar lengths ("1day",
"1week", "1month" or "1mo", "1year" or "1y": local days, ISO weeks from Monday, months and years in a time zone)
and instants (ISO 8601 dates or date-times; without an offset, local time in a time zone), shared by job files
and the Python API; and the relative instants of `dpstream run --start/--end` (`today`, `last-month`, ...)."""
from __future__ import annotations

import math
import re
from datetime import date, datetime, time, timedelta
from datetime import timezone as dt_timezone
from zoneinfo import ZoneInfo

from dpstream.accounting.calendar import advance, calendar_text, is_boundary, local_midnight

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def duration_seconds(value: object) -> float:
    """Seconds from a number or a string like "1d", "6h", "30m", "90s", "2w"; NaN when it is neither."""
    if isinstance(value, str) and (match := _DURATION.match(value)):
        return float(match.group(1)) * _UNITS[match.group(2)]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return math.nan


def instant_seconds(value: object, timezone: str = "UTC") -> float:
    """Seconds since the epoch from an ISO 8601 date or date-time (a string, date or datetime); without an
    offset it is local time in `timezone`. ValueError otherwise."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"must be an ISO 8601 date or date-time such as 2013-01-01, got {value!r}") from None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime.combine(value, time())
    else:
        raise ValueError(f"must be an ISO 8601 date or date-time such as 2013-01-01, got {value!r}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(timezone))
    return moment.astimezone(dt_timezone.utc).timestamp()


RELATIVE_INSTANTS = ("today", "yesterday", "this-week", "last-week", "this-month", "last-month", "this-year",
                     "last-year")
"""Local midnights: the start of today, this ISO week (Monday), this month or this year, or of the one before."""


def relative_instant(name: str, timezone: str = "UTC", now: datetime | None = None) -> float:
    """Seconds since the epoch of the local midnight `name` (one of RELATIVE_INSTANTS) in `timezone`, as of `now`
    (default: the current time). ValueError for another name."""
    if name not in RELATIVE_INSTANTS:
        raise ValueError(f"must be an ISO 8601 date or date-time such as 2013-01-01, or one of "
                         f"{', '.join(RELATIVE_INSTANTS)}, got {name!r}")
    zone = ZoneInfo(timezone)
    today = (now or datetime.now(dt_timezone.utc)).astimezone(zone).date()
    which, unit = ("this", "day") if name == "today" else ("last", "day") if name == "yesterday" else name.split("-")
    if unit == "day":
        day = today - timedelta(days=0 if which == "this" else 1)
    elif unit == "week":
        day = today - timedelta(days=today.weekday() + (0 if which == "this" else 7))
    elif unit == "month":
        first = today.replace(day=1)
        day = first if which == "this" else (first - timedelta(days=1)).replace(day=1)
    else:
        day = today.replace(month=1, day=1, year=today.year - (0 if which == "this" else 1))
    return local_midnight(day, timezone)


def range_instant(value: str, timezone: str = "UTC", now: datetime | None = None) -> float:
    """An instant of `--start/--end`: a relative one (`relative_instant`) or an ISO date or date-time."""
    if value in RELATIVE_INSTANTS:
        return relative_instant(value, timezone, now)
    try:
        return instant_seconds(value, timezone)
    except ValueError:
        return relative_instant(value, timezone, now)  # its message lists both forms


def calendar_edges(length: tuple[int, str], start: float, end: float, timezone: str, limit: int) -> tuple[float, ...]:
    """The window boundaries start = e_0 < e_1 < ... < e_n = end (seconds since the epoch) of calendar windows of
    `length` in `timezone`. ValueError when start is not a local midnight on a boundary of the unit (a Monday, a
    1st, a January 1st), when end is not one of the boundaries (naming the two nearest), or past `limit` windows."""
    count, unit = length
    zone = ZoneInfo(timezone)
    local = datetime.fromtimestamp(start, zone)
    if local.time() != time() or not is_boundary(local.date(), unit):
        first = {"day": "a midnight", "week": "a Monday midnight", "month": "midnight on the 1st of a month",
                 "year": "midnight on January 1st"}[unit]
        raise ValueError(f"window.start {local.isoformat()} must be {first} in {timezone} for windows of "
                         f"{calendar_text(length)}")

    edges, day = [start], local.date()
    while edges[-1] < end:
        if len(edges) > limit:
            raise ValueError(f"the window range holds more than window.max_count = {limit} windows")
        day = advance(day, count, unit)
        if (edge := local_midnight(day, timezone)) > edges[-1]:  # a day the zone skipped holds no window
            edges.append(edge)
    if edges[-1] != end:
        nearest = " or ".join(datetime.fromtimestamp(e, zone).isoformat() for e in edges[-2:] if e > start)
        raise ValueError(f"window.end {datetime.fromtimestamp(end, zone).isoformat()} is not a window boundary of "
                         f"{calendar_text(length)} windows from {local.isoformat()}; set window.end to {nearest}")
    return tuple(edges)
