"""Event timestamps -> int64 microseconds since the Unix epoch, UTC, vectorised over Arrow arrays.

Formats (`timestamp_format` in a job file):
    epoch_s   numbers (or numeric strings) of seconds since the epoch; fractions kept to the microsecond
    epoch_ms  numbers (or numeric strings) of milliseconds since the epoch
    iso8601   strings such as 2013-01-01, 2013-01-01T05:15, 2013-01-01 05:15:00.25+02:00, ...Z
    auto      Arrow timestamp and date columns as they are, numbers as epoch_s, strings as iso8601 unless every
              one is a plain decimal number (CSV columns arrive as strings): then epoch_s
Timestamps without an offset (naive Arrow timestamps, dates, ISO strings without Z or
+HH:MM) are local times in `timezone` (an IANA name, default UTC); a local time that
does not exist or is ambiguous there (daylight-saving changes) is an error.
Errors (`RowError`) name the row and the kind of problem, never the value: row values are data, and a run's
failure reason is stored in the ledger and shown by `dpstream budget history`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from dpstream.connectors.errors import RowError

FORMATS = ("auto", "epoch_s", "epoch_ms", "iso8601")
_EPOCH_FACTOR = {"epoch_s": 1_000_000, "epoch_ms": 1_000}
_OFFSET = r"[Tt ]\d{2}(?::?\d{2}){0,2}(?:[.,]\d+)?\s*(?:[Zz]|[+-]\d{2}(?::?\d{2})?)$"  # a time, then Z or +-HH[:MM]
_DECIMAL = r"^\s*[+-]?(\d+\.?\d*|\.\d+)\s*$"  # a plain decimal number: epoch seconds under "auto"
_MAX_ABS_MICROS = 2**62  # about 146,000 years: anything beyond is not a time


def check_format(timestamp_format: str, timezone: str) -> None:
    """Raise ValueError when the format or the time zone is unknown (called at job load)."""
    if timestamp_format not in FORMATS:
        raise ValueError(f"timestamp_format must be one of {list(FORMATS)}, got {timestamp_format!r}")
    try:
        pd.Timestamp(0).tz_localize(timezone)
    except Exception as err:  # pandas raises several types for unknown zones
        raise ValueError(f"timezone must be an IANA time zone name such as 'UTC' or 'America/New_York', got {timezone!r}") from err


def to_micros(values: pa.Array | pa.ChunkedArray, timestamp_format: str = "auto", timezone: str = "UTC") -> np.ndarray:
    """The timestamps as int64 microseconds UTC; raises RowError at the first bad value (nulls included)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    _reject_nulls(values)
    kind = values.type
    if timestamp_format == "auto":
        if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
            return _temporal(values, timezone)
        numeric = not _is_text(kind) or bool(pc.all(pc.match_substring_regex(values, _DECIMAL)).as_py())
        timestamp_format = "epoch_s" if numeric else "iso8601"
    if timestamp_format == "iso8601":
        if not _is_text(kind):
            raise RowError(0, f"expected ISO 8601 strings, got a column of type {kind}")
        return _iso8601(values, timezone)
    return _epoch(values, _EPOCH_FACTOR[timestamp_format], timestamp_format)


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _reject_nulls(values: pa.Array) -> None:
    if values.null_count:
        raise RowError(_first(pc.is_null(values)), "missing value")


def _first(mask) -> int:
    return int(np.flatnonzero(np.asarray(mask, dtype=bool))[0])


def _temporal(values: pa.Array, timezone: str) -> np.ndarray:
    if pa.types.is_date(values.type):
        values = values.cast(pa.timestamp("us"))
    series = pd.Series(values.cast(pa.timestamp("us", values.type.tz)).to_pandas())
    if series.dt.tz is None:
        series = _localize(series, timezone)
    return series.dt.tz_convert("UTC").dt.as_unit("us").astype("int64").to_numpy()


def _localize(series: pd.Series, timezone: str) -> pd.Series:
    localized = series.dt.tz_localize(timezone, ambiguous="NaT", nonexistent="NaT")
    missing = localized.isna().to_numpy()
    if missing.any():
        index = int(np.flatnonzero(missing)[0])
        raise RowError(index, _no_such_local_time(timezone))
    return localized


def _no_such_local_time(timezone: str) -> str:
    return f"a local time that does not exist or is ambiguous in time zone {timezone} (a daylight-saving change)"


_NOT_ISO = "not an ISO 8601 time"


def _iso8601(values: pa.Array, timezone: str) -> np.ndarray:
    text = pd.Series(values.to_pylist(), dtype=object).str.strip()
    has_offset = text.str.contains(_OFFSET, regex=True).to_numpy()
    result = np.empty(len(text), dtype=np.int64)
    if has_offset.any():
        part = text[has_offset]
        parsed = pd.to_datetime(part, format="ISO8601", errors="coerce", utc=True)
        _reject_unparsed(parsed, has_offset)
        result[has_offset] = parsed.dt.as_unit("us").astype("int64").to_numpy()
    naive = ~has_offset
    if naive.any():
        part = text[naive]
        parsed = pd.to_datetime(part, format="ISO8601", errors="coerce")
        _reject_unparsed(parsed, naive)
        positions = np.flatnonzero(naive)
        try:
            localized = parsed.dt.tz_localize(timezone, ambiguous="NaT", nonexistent="NaT")
        except TypeError as err:  # mixed offsets slipped past the regex
            raise RowError(int(positions[0]), _NOT_ISO) from err
        missing = localized.isna().to_numpy()
        if missing.any():
            where = int(np.flatnonzero(missing)[0])
            raise RowError(int(positions[where]), _no_such_local_time(timezone))
        result[naive] = localized.dt.tz_convert("UTC").dt.as_unit("us").astype("int64").to_numpy()
    return result


def _reject_unparsed(parsed: pd.Series, mask: np.ndarray) -> None:
    bad = parsed.isna().to_numpy()
    if bad.any():
        where = int(np.flatnonzero(bad)[0])
        raise RowError(int(np.flatnonzero(mask)[where]), _NOT_ISO)


def _epoch(values: pa.Array, factor: int, name: str) -> np.ndarray:
    if _is_text(values.type):
        text = pd.Series(values.to_pylist(), dtype=object)
        numbers = pd.to_numeric(text.str.strip(), errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(numbers)
        if bad.any():
            index = int(np.flatnonzero(bad)[0])
            raise RowError(index, f"not a finite number (timestamp_format {name})")
        values = pa.array(numbers)
    elif not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        raise RowError(0, f"expected numbers for {name}, got a column of type {values.type}")
    if pa.types.is_integer(values.type):
        numbers = values.to_numpy(zero_copy_only=False).astype(np.int64)
        micros = numbers * factor
        overflow = np.abs(numbers) > _MAX_ABS_MICROS // factor
    else:
        numbers = values.to_numpy(zero_copy_only=False).astype(np.float64)
        scaled = np.round(numbers * factor)
        overflow = ~np.isfinite(scaled) | (np.abs(scaled) > _MAX_ABS_MICROS)
        micros = np.where(overflow, 0, scaled).astype(np.int64)
    if overflow.any():
        index = int(np.flatnonzero(overflow)[0])
        raise RowError(index, f"a number out of range for timestamp_format {name} (beyond about 146,000 years "
                              f"from 1970)")
    return micros
