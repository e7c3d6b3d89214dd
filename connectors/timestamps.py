"""Event timestamps -> int64 microseconds since the Unix epoch, UTC, vectorised over Arrow arrays.

Formats (`timestamp_format` in a job file):
    epoch_s   numbers (or numeric strings) of seconds since the epoch; fractions kept to the microsecond
    epoch_ms  numbers (or numeric strings) of milliseconds since the epoch
    epoch_us  numbers (or numeric strings) of microseconds since the epoch
    epoch_ns  numbers (or numeric strings) of nanoseconds since the epoch, floored to the microsecond
    iso8601   strings such as 2013-01-01, 2013-01-01T05:15, 2013-01-01 05:15:00.25+02:00, ...Z
    auto      Arrow timestamp and date columns as they are (nanoseconds floored), numbers as epoch_s; a text
              column (CSV columns arrive as text) as epoch_s when more than half of its values are plain
              decimal numbers, its other values then refused ("not a number of seconds like most of the
              column's values"), else as iso8601, where a number is "not an ISO 8601 time" (unless it is
              an ISO 8601 basic date such as 20130101). The majority is counted in each chunk (CSV block,
              Parquet row group, JSONL file), so in a column that truly mixes the two kinds which row is
              refused can depend on where chunks end; a stray value among many is always the one named.
Timestamps without an offset (naive Arrow timestamps, dates, ISO strings without Z or
+HH:MM) are local times in `timezone` (an IANA name, default UTC); a local time that
does not exist or is ambiguous there (daylight-saving changes) is an error.

Epoch units are checked by magnitude, value by value. The events a job counts lie within a few centuries
of today, and their seconds since 1970 within |t| < 10^10 (1653-02-10 to 2286-11-20). So each epoch
number's magnitude names its unit: below 10^10 seconds, [10^10, 10^13) milliseconds, [10^13, 10^16)
microseconds, [10^16, 2^63) nanoseconds (int64 nanoseconds end in 1677 and 2262); 2^63 and beyond is out
of range in every unit. Read in its own unit each band spans the same years, except that only the seconds
band reaches the 116 days around 1970. A value whose band is not the declared unit (seconds under auto)
is refused with the unit it looks like and the setting to use, e.g. `not epoch seconds: the value looks
like milliseconds since 1970; set input.timestamp_format = "epoch_ms"`, in both directions: milliseconds
read as seconds put an event some 50,000 years after 1970, seconds read as milliseconds put it in January
1970, where no window of the job sees it, and the run would publish noise alone and be charged for it.
The cost: an epoch time within 116 days of 1970 must be written in seconds (fractions allowed) or as
ISO 8601. As the check is per value, an error names the first offending row whatever the chunk size.

Integer columns and integer strings are converted with integer arithmetic, so 19-digit nanoseconds keep
every digit (integer strings beyond int64 are out of range); nanoseconds are floored toward -inf to the
microsecond that holds the instant. Fractional numbers (float columns, strings with a point or an exponent)
are float64: fractional seconds, milliseconds and microseconds are rounded to the nearest microsecond,
which gives back the written microseconds of epoch seconds within 2^32 s of 1970 (late 1833 to early 2106,
where float64 holds them to 0.24 us); fractional nanoseconds are floored like whole ones.

Errors (`RowError`) name the row and the kind of problem, never the value: row values are data, and a run's
failure reason is stored in the ledger and shown by `dpstream budget history`. The row named is the chunk's
first bad one, whatever the problems of later rows (a missing value, a bad number, a bad time).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from dpstream.connectors.errors import RowError

_UNITS = ("epoch_s", "epoch_ms", "epoch_us", "epoch_ns")  # in the order of the magnitude bands
FORMATS = ("auto", *_UNITS, "iso8601")
_UNIT_NAMES = ("seconds", "milliseconds", "microseconds", "nanoseconds")
_BAND_LIMITS = (10**10, 10**13, 10**16, 2**63)  # |t| below the first: seconds; then ms, us, ns; beyond: no unit
_OUT_OF_RANGE = len(_BAND_LIMITS)
_NOT_FINITE = _OUT_OF_RANGE + 1
_OFFSET = r"[Tt ]\d{2}(?::?\d{2}){0,2}(?:[.,]\d+)?\s*(?:[Zz]|[+-]\d{2}(?::?\d{2})?)$"  # a time, then Z or +-HH[:MM]
_DECIMAL = r"^\s*[+-]?(\d+\.?\d*|\.\d+)\s*$"  # a plain decimal number: epoch seconds under "auto"
_INTEGER = r"^[+-]?\d+$"  # after trimming: parsed as int64, not float64, so that 19-digit nanoseconds stay exact
_NOT_SECONDS_LIKE_THE_REST = "not a number of seconds like most of the column's values (timestamp_format auto)"


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
    if values.null_count:
        _refuse_after(values, _first(pc.is_null(values)), "missing value",
                      lambda head: to_micros(head, timestamp_format, timezone))
    kind = values.type
    if timestamp_format == "auto":
        if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
            return _temporal(values, timezone)
        if _is_text(kind):
            return _auto_text(values, timezone)
        return _epoch(values, "epoch_s", auto=True)
    if timestamp_format == "iso8601":
        if not _is_text(kind):
            raise RowError(0, f"expected ISO 8601 strings, got a column of type {kind}")
        return _iso8601(values, timezone)
    return _epoch(values, timestamp_format)


def _refuse_after(values: pa.Array, index: int, problem: str, convert) -> None:
    """Raise RowError(index, problem), unless `convert` finds a bad value in the rows before `index` (it raises
    for the first of those): an error names the first bad row, whatever its kind of problem."""
    convert(values.slice(0, index))
    raise RowError(index, problem)


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _first(mask) -> int:
    return int(np.flatnonzero(np.asarray(mask, dtype=bool))[0])


def _auto_text(values: pa.Array, timezone: str) -> np.ndarray:
    """A text column under auto: epoch seconds when more than half of the values are plain decimal numbers (the
    other values are refused), else ISO 8601."""
    decimal = pc.match_substring_regex(values, _DECIMAL).to_numpy(zero_copy_only=False)
    if 2 * np.count_nonzero(decimal) <= len(decimal):
        return _iso8601(values, timezone)
    if not decimal.all():
        _refuse_after(values, _first(~decimal), _NOT_SECONDS_LIKE_THE_REST,
                      lambda head: _epoch(head, "epoch_s", auto=True))
    return _epoch(values, "epoch_s", auto=True)


# -- Arrow timestamps and dates ----------------------------------------------------------------------


def _temporal(values: pa.Array, timezone: str) -> np.ndarray:
    """Arrow timestamps and dates as they are; nanoseconds floored like epoch_ns (Arrow's cast would refuse
    sub-microsecond digits, quoting the value)."""
    if pa.types.is_date(values.type):
        values = values.cast(pa.timestamp("us"))
    elif values.type.unit == "ns":
        micros = np.floor_divide(values.cast(pa.int64()).to_numpy(), 1_000)
        values = pa.array(micros, pa.timestamp("us", values.type.tz))
    series = pd.Series(values.cast(pa.timestamp("us", values.type.tz)).to_pandas())
    if series.dt.tz is None:
        series = _localize(series, timezone)
    return series.dt.tz_convert("UTC").dt.as_unit("us").astype("int64").to_numpy()


def _localize(series: pd.Series, timezone: str) -> pd.Series:
    localized = series.dt.tz_localize(timezone, ambiguous="NaT", nonexistent="NaT")
    missing = localized.isna().to_numpy()
    if missing.any():
        raise RowError(_first(missing), _no_such_local_time(timezone))
    return localized


def _no_such_local_time(timezone: str) -> str:
    return f"a local time that does not exist or is ambiguous in time zone {timezone} (a daylight-saving change)"


# -- ISO 8601 strings --------------------------------------------------------------------------------


_NOT_ISO = "not an ISO 8601 time"


def _iso8601(values: pa.Array, timezone: str) -> np.ndarray:
    """Strings with an offset are parsed as UTC instants, the others as local times in `timezone`; the first bad
    row of either kind is the one refused."""
    text = pd.Series(values.to_pylist(), dtype=object).str.strip()
    has_offset = text.str.contains(_OFFSET, regex=True).to_numpy()
    result = np.empty(len(text), dtype=np.int64)
    errors = []
    for part, convert in ((has_offset, _iso_with_offset), (~has_offset, lambda t: _iso_local(t, timezone))):
        if part.any():
            rows = np.flatnonzero(part)
            try:
                result[part] = convert(text[part])
            except RowError as err:
                errors.append(RowError(int(rows[err.index]), err.problem))
    if errors:
        raise min(errors, key=lambda err: err.index)
    return result


def _iso_with_offset(text: pd.Series) -> np.ndarray:
    parsed = pd.to_datetime(text, format="ISO8601", errors="coerce", utc=True)
    unparsed = parsed.isna().to_numpy()
    if unparsed.any():
        raise RowError(_first(unparsed), _NOT_ISO)
    return parsed.dt.as_unit("us").astype("int64").to_numpy()


def _iso_local(text: pd.Series, timezone: str) -> np.ndarray:
    parsed = pd.to_datetime(text, format="ISO8601", errors="coerce")
    try:
        localized = parsed.dt.tz_localize(timezone, ambiguous="NaT", nonexistent="NaT")
    except TypeError as err:  # every string had an offset the regex missed (pandas parsed them tz-aware)
        raise RowError(0, _NOT_ISO) from err
    missing = localized.isna().to_numpy()
    if missing.any():
        index = _first(missing)
        raise RowError(index, _NOT_ISO if pd.isna(parsed.iloc[index]) else _no_such_local_time(timezone))
    return localized.dt.tz_convert("UTC").dt.as_unit("us").astype("int64").to_numpy()


# -- epoch numbers -----------------------------------------------------------------------------------


def _epoch(values: pa.Array, unit: str, auto: bool = False) -> np.ndarray:
    """Epoch numbers in `unit` -> microseconds, refusing at the first value whose magnitude says another unit
    (`auto`: the unit came from timestamp_format auto, which the message says)."""
    whole, exact, approx = _numbers(values, unit)
    band = np.where(whole, _band(exact), _band(approx))
    band[~whole & ~np.isfinite(approx)] = _NOT_FINITE
    expected = _UNITS.index(unit)
    bad = band != expected
    if bad.any():
        index = _first(bad)
        raise RowError(index, _unit_problem(unit, int(band[index]), auto))
    return np.where(whole, _whole_micros(exact, expected), _fraction_micros(approx, expected))


def _numbers(values: pa.Array, unit: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(whole, exact, approx): where `whole`, the value is the int64 `exact`; elsewhere it is the float64
    `approx` (NaN for text that is not a number). `approx` holds every value, as far as float64 can."""
    kind = values.type
    if _is_text(kind):
        text = pc.utf8_trim_whitespace(values)
        approx = pd.to_numeric(pd.Series(text.to_pylist(), dtype=object), errors="coerce").to_numpy(np.float64)
        whole = pc.match_substring_regex(text, _INTEGER).to_numpy(zero_copy_only=False)
        exact, fits = _integers(pc.if_else(whole, pc.replace_substring_regex(text, r"^\+", ""), "0"))
        return whole & fits, exact, approx
    if pa.types.is_integer(kind):
        numbers = values.to_numpy(zero_copy_only=False)
        fits = numbers < 2**63 if numbers.dtype == np.uint64 else np.ones(len(numbers), dtype=bool)
        return fits, np.where(fits, numbers, 0).astype(np.int64), numbers.astype(np.float64)
    if pa.types.is_floating(kind):
        approx = values.to_numpy(zero_copy_only=False).astype(np.float64)
        return np.zeros(len(approx), dtype=bool), np.zeros(len(approx), dtype=np.int64), approx
    raise RowError(0, f"expected numbers for {unit}, got a column of type {kind}")


def _integers(digits: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Strings of digits (optionally signed) -> exact int64 and the mask of those that int64 holds (the others
    are 0)."""
    try:
        return pc.cast(digits, pa.int64()).to_numpy(), np.ones(len(digits), dtype=bool)
    except pa.ArrowInvalid:  # a value beyond int64, out of range in every unit: parse each (pyarrow's error quotes it)
        exact = [int(text) for text in digits.to_pylist()]
        fits = np.array([-(2**63) <= number < 2**63 for number in exact], dtype=bool)
        return np.array([n if ok else 0 for n, ok in zip(exact, fits)], dtype=np.int64), fits


def _band(numbers: np.ndarray) -> np.ndarray:
    """The unit each number's magnitude says: an index into _UNITS, or _OUT_OF_RANGE (NaN included)."""
    if numbers.dtype.kind == "f":
        magnitude, limits = np.abs(numbers), np.array(_BAND_LIMITS, dtype=np.float64)
    else:  # |int64 min| wraps to itself, which as uint64 is 2^63, its true magnitude
        magnitude, limits = np.abs(numbers).astype(np.uint64), np.array(_BAND_LIMITS, dtype=np.uint64)
    return np.searchsorted(limits, magnitude, side="right")


def _whole_micros(numbers: np.ndarray, unit: int) -> np.ndarray:
    """Exact integer conversion (no overflow: the band check bounds |numbers|); nanoseconds floor."""
    if unit == _UNITS.index("epoch_ns"):
        return np.floor_divide(numbers, 1_000)
    return numbers * 10 ** (6 - 3 * unit)


def _fraction_micros(numbers: np.ndarray, unit: int) -> np.ndarray:
    """Float conversion: to the nearest microsecond, nanoseconds floored."""
    if unit == _UNITS.index("epoch_ns"):
        return np.floor(numbers / 1_000).astype(np.int64)
    return np.round(numbers * 10.0 ** (6 - 3 * unit)).astype(np.int64)


def _unit_problem(unit: str, band: int, auto: bool) -> str:
    """The message for a value of `band` under `unit`: one line, without the value."""
    if band == _NOT_FINITE:
        return f"not a finite number (text that is no number, NaN or infinity; timestamp_format {unit})"
    if band == _OUT_OF_RANGE:
        return (f"a number out of range for timestamp_format {unit} (2^63 or more in magnitude: no time in seconds, "
                f"milliseconds, microseconds or nanoseconds)")
    declared = _UNITS.index(unit)
    reading = " (timestamp_format auto reads numbers as seconds)" if auto else ""
    near_1970 = " (a time within about 116 days of 1970 must be written in seconds)" if band < declared else ""
    return (f"not epoch {_UNIT_NAMES[declared]}{reading}: the value looks like {_UNIT_NAMES[band]} since 1970; "
            f'set input.timestamp_format = "{_UNITS[band]}"{near_1970}')
