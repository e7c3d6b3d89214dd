"""The job file's grammar of durations ("1d", "6h", "30m", "90s", "2w" or seconds) and instants (ISO 8601 dates or
date-times; without an offset, local time in a time zone), shared by job files and the Python API."""
from __future__ import annotations

import math
import re
from datetime import date, datetime, time
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
