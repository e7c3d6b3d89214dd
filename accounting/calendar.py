"""Calendar lengths in a time zone: local days, ISO weeks (Monday to Monday), months and years.

A calendar length such as "1day", "1week", "1month" (or "1mo") and "1year" (or "1y") follows local time: a day is
23, 24 or 25 hours across daylight-saving changes, a week starts on a Monday (ISO 8601), a month on the 1st and a
year on January 1st, each at local midnight. The fixed units of the job file (s, m, h, d, w) are exact numbers of
seconds and are not calendar lengths.

Units are numbered from 1970 (`unit_number`): days from 1970-01-01, weeks from Monday 1969-12-29, months from
January 1970 and years from 1970, so that blocks of `count` units (period scopes' calendar periods) have one grid
that does not depend on any job.

It lives in `accounting`, the lowest layer, because period scopes in the ledger and windows in the pipelines
share it.
"""
from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

UNITS = ("day", "week", "month", "year")
_CALENDAR = re.compile(r"^\s*(\d+)\s*(day|week|month|mo|year|y)\s*$")
_SPELLINGS = {"day": "day", "week": "week", "month": "month", "mo": "month", "year": "year", "y": "year"}
_EPOCH_DAY = date(1970, 1, 1)
_EPOCH_MONDAY = date(1969, 12, 29)


def calendar_length(value: object) -> tuple[int, str] | None:
    """(count, unit) of a calendar length such as "1month", "3mo", "1y", "1week", "1day"; None for anything else."""
    if not isinstance(value, str) or not (match := _CALENDAR.match(value)) or int(match.group(1)) < 1:
        return None
    return int(match.group(1)), _SPELLINGS[match.group(2)]


def calendar_text(length: tuple[int, str]) -> str:
    """e.g. (1, "day") -> "1 day", (3, "month") -> "3 months"."""
    count, unit = length
    return f"{count} {unit}" + ("s" if count > 1 else "")


def calendar_spelling(length: tuple[int, str]) -> str:
    """The job file's spelling, e.g. (1, "day") -> "1day", (3, "month") -> "3month"."""
    count, unit = length
    return f"{count}{unit}"


def is_boundary(day: date, unit: str) -> bool:
    """Whether local midnight of `day` starts a `unit`: any day, a Monday, a 1st, a January 1st."""
    return {"day": True, "week": day.weekday() == 0, "month": day.day == 1,
            "year": (day.month, day.day) == (1, 1)}[unit]


def advance(day: date, count: int, unit: str) -> date:
    """The day `count` units after `day` (which must be on a boundary of `unit`)."""
    if unit == "day":
        return day + timedelta(days=count)
    if unit == "week":
        return day + timedelta(weeks=count)
    months = day.month - 1 + count * (12 if unit == "year" else 1)
    return day.replace(year=day.year + months // 12, month=months % 12 + 1)


def unit_number(day: date, unit: str) -> int:
    """Which `unit` since 1970 holds `day`: days since 1970-01-01, weeks since Monday 1969-12-29, months since
    January 1970, years since 1970 (negative before)."""
    if unit == "day":
        return (day - _EPOCH_DAY).days
    if unit == "week":
        return (day - _EPOCH_MONDAY).days // 7
    if unit == "month":
        return (day.year - 1970) * 12 + day.month - 1
    return day.year - 1970


def unit_first_day(number: int, unit: str) -> date:
    """The first day of unit `number` (`unit_number`'s inverse on boundaries)."""
    if unit == "day":
        return _EPOCH_DAY + timedelta(days=number)
    if unit == "week":
        return _EPOCH_MONDAY + timedelta(weeks=number)
    months = number * (12 if unit == "year" else 1)
    return date(1970 + months // 12, months % 12 + 1, 1)


def local_midnight(day: date, timezone: str) -> float:
    """Seconds since the epoch of local midnight of `day` in `timezone`, the first one where midnight happens
    twice (fold 0). Where midnight falls in a daylight-saving gap (Toronto, 1919-03-31: 23:30 -> 00:30), it is
    midnight read with the offset before the change, half an hour after the jump there; calendar periods and
    windows use these instants as their boundaries, whatever the local date says between them."""
    return datetime.combine(day, time(), tzinfo=ZoneInfo(timezone)).timestamp()


def local_day(instant: float, timezone: str) -> date:
    """The local date in `timezone` at `instant` (seconds since the epoch)."""
    return datetime.fromtimestamp(instant, ZoneInfo(timezone)).date()


def check_timezone(timezone: object) -> str:
    """`timezone` when it names an IANA time zone; ValueError otherwise."""
    try:
        ZoneInfo(str(timezone))
    except (ValueError, KeyError, OSError):
        raise ValueError(f"must be an IANA time zone name such as 'UTC' or 'America/New_York', got {timezone!r}") \
            from None
    return str(timezone)
