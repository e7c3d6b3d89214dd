"""Plain-text forms shared by every layer of dpstream: durations, instants, an error's first line, the version.

It lives in `accounting`, the lowest layer, so that the ledger, the connectors and the pipelines use one
definition each.
"""
from __future__ import annotations

from datetime import datetime, timezone
from importlib import metadata


def duration_text(seconds: float) -> str:
    """A period length in the job file's units: 86400 -> "1d", 21600 -> "6h", 90 -> "90s"."""
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def instant_text(seconds: float) -> str:
    """Seconds since the epoch as ISO 8601 UTC, e.g. 2013-01-01T00:00:00Z."""
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    spec = "seconds" if moment.microsecond == 0 else "microseconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def first_line(err: BaseException) -> str:
    """The first line of an error's message ("" when it has none)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else ""


def version() -> str:
    """The installed dpstream version, as `--version` and the reports print it ("unknown" when not installed)."""
    try:
        return metadata.version("dpstream")
    except metadata.PackageNotFoundError:
        return "unknown"
