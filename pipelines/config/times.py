"""The job file's grammar of durations ("1d", "6h", "30m", "90s", "2w" or seconds) and instants (ISO 8601 dates or
date-times; without an offset, local time in a time zone), shared by job files and the Python API; and the
relative instants of `dpstream run --start/--end` (`today`, `last-month`, ...), calendar boundaries in a time
zone."""
from __future__ import annotations

import math
import re
from datetime import date, datetime, time, timedelta
from datetime import timezone as dt_timezone
from zoneinfo import ZoneInfo

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
    return datetime.combine(day, time(), tzinfo=zone).astimezone(dt_timezone.utc).timestamp()


def range_instant(value: str, timezone: str = "UTC", now: datetime | None = None) -> float:
    """An instant of `--start/--end`: a relative one (`relative_instant`) or an ISO date or date-time."""
    if value in RELATIVE_INSTANTS:
        return relative_instant(value, timezone, now)
    try:
        return instant_seconds(value, timezone)
    except ValueError:
        return relative_instant(value, timezone, now)  # its message lists both forms
