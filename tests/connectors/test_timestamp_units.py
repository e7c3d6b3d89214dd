"""Epoch timestamps are read in the unit they are written in, or refused (issue 33).

Oracles are Python integer arithmetic: a value v in seconds is v * 10**6 microseconds, in milliseconds v * 1000,
in microseconds v, in nanoseconds v // 1000 (floored). The magnitude bands of `connectors.timestamps` (|t| below
10^10: seconds, below 10^13: milliseconds, below 10^16: microseconds, below 2^63: nanoseconds) are written out
here as literal boundary values, not recomputed from the module's constants."""
from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpstream.connectors import readers
from dpstream.connectors.errors import InputError, RowError
from dpstream.connectors.readers import InputSpec, read_events
from dpstream.connectors.timestamps import FORMATS, to_micros

UNITS = ("epoch_s", "epoch_ms", "epoch_us", "epoch_ns")
NAMES = dict(zip(UNITS, ("seconds", "milliseconds", "microseconds", "nanoseconds")))
SCALE = {"epoch_s": 10**6, "epoch_ms": 10**3, "epoch_us": 1}
INSTANT = 1357034400123456  # 2013-01-01T10:00:00.123456Z in microseconds
WRITTEN = {"epoch_s": 1357034400, "epoch_ms": 1357034400123, "epoch_us": INSTANT, "epoch_ns": INSTANT * 1000 + 789}


def micros(value: int, unit: str) -> int:
    """The oracle: `value` in `unit` as microseconds, by Python integer arithmetic (nanoseconds floored)."""
    return value // 1000 if unit == "epoch_ns" else value * SCALE[unit]


def refusal(values, fmt: str) -> RowError:
    with pytest.raises(RowError) as caught:
        to_micros(values, fmt)
    return caught.value


def test_the_new_formats_are_formats():
    assert {"epoch_us", "epoch_ns"} <= set(FORMATS)


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("as_text", [False, True], ids=["int64", "text"])
def test_known_values_in_each_unit_give_exact_microseconds(unit, as_text):
    written = [WRITTEN[unit], -WRITTEN[unit], WRITTEN[unit] + 1, -WRITTEN[unit] - 1]
    values = pa.array([str(v) for v in written]) if as_text else pa.array(written, pa.int64())
    assert to_micros(values, unit).tolist() == [micros(v, unit) for v in written]


def test_nineteen_digit_nanosecond_strings_keep_every_digit():
    """float64 would round 1357034400123456999 to ...457024 (the next microsecond); int64 parsing does not."""
    written = [1357034400123456999, -1357034400123456999, 2**63 - 1, -(2**63) + 1, 7258118399999999999]
    assert int(float(written[0])) // 1000 != written[0] // 1000  # the case float parsing gets wrong
    text = pa.array([f" {v} " if v > 0 else str(v) for v in written])
    expected = [v // 1000 for v in written]  # floors toward -inf: -1357034400123456999 -> ...457 negative
    assert expected[1] == -1357034400123457
    assert to_micros(text, "epoch_ns").tolist() == expected
    assert to_micros(pa.array(written, pa.int64()), "epoch_ns").tolist() == expected


@pytest.mark.parametrize(("values", "unit", "expected"), [
    (pa.array(["+1357034400", "1357034400.123456", "-1.5", " 0.000001 "]), "epoch_s",
     [1357034400000000, 1357034400123456, -1500000, 1]),
    (pa.array(["1357034400123.456", "1.357034400123e12"]), "epoch_ms", [1357034400123456, 1357034400123000]),
    (pa.array([1357034400.5, -1357034400.25]), "epoch_s", [1357034400500000, -1357034400250000]),
    (pa.array([1357034400123456.25]), "epoch_us", [1357034400123456]),
    (pa.array([1357034400123456000.0, -1357034400123456000.0]), "epoch_ns", [1357034400123456, -1357034400123456]),
    (pa.array([1357034400, 2**31], pa.uint32()), "epoch_s", [1357034400000000, 2**31 * 10**6]),
    (pa.array([1357034400123456789], pa.uint64()), "epoch_ns", [1357034400123456]),
    (pa.array([1357034400], pa.int32()), "auto", [1357034400000000]),
    (pa.array(["1357034400", " 1357034400.5"]), "auto", [1357034400000000, 1357034400500000]),
])
def test_fractions_and_column_types(values, unit, expected):
    assert to_micros(values, unit).tolist() == expected


# (value, the unit its magnitude says, or None: no unit) just below and at each band limit, both signs
BOUNDARIES = [
    (0, "epoch_s"), (10**10 - 1, "epoch_s"), (-(10**10 - 1), "epoch_s"),
    (10**10, "epoch_ms"), (-(10**10), "epoch_ms"), (10**13 - 1, "epoch_ms"), (-(10**13 - 1), "epoch_ms"),
    (10**13, "epoch_us"), (-(10**13), "epoch_us"), (10**16 - 1, "epoch_us"), (-(10**16 - 1), "epoch_us"),
    (10**16, "epoch_ns"), (-(10**16), "epoch_ns"), (2**63 - 1, "epoch_ns"), (-(2**63) + 1, "epoch_ns"),
    (-(2**63), None), (2**63, None), (10**20, None),
]


@pytest.mark.parametrize("declared", UNITS + ("auto",))
@pytest.mark.parametrize(("value", "looks_like"), BOUNDARIES, ids=[str(v) for v, _ in BOUNDARIES])
def test_band_boundaries(value, looks_like, declared):
    """The boundary value comes third, after two good values of the declared unit: the refusal names index 2."""
    unit = "epoch_s" if declared == "auto" else declared
    text = pa.array([str(WRITTEN[unit]), str(WRITTEN[unit]), str(value)])
    if looks_like == unit:
        assert to_micros(text, declared).tolist()[2] == micros(value, unit)
        return
    error = refusal(text, declared)
    assert error.index == 2
    if looks_like is None:
        assert error.problem.startswith(f"a number out of range for timestamp_format {unit} ")
    else:
        assert f'looks like {NAMES[looks_like]} since 1970; set input.timestamp_format = "{looks_like}"' in \
            error.problem
    if abs(value) >= 10:
        assert str(value) not in error.problem


@pytest.mark.parametrize(("value", "looks_like"), [(9999999999.5, "epoch_s"), (1e10, "epoch_ms"), (1e13, "epoch_us"),
                                                   (1e16, "epoch_ns"), (-1e16, "epoch_ns"), (9.2e18, "epoch_ns")])
def test_band_boundaries_of_float_columns(value, looks_like):
    for unit in UNITS:
        if unit == looks_like:
            to_micros(pa.array([value]), unit)
        else:
            assert f'set input.timestamp_format = "{looks_like}"' in refusal(pa.array([value]), unit).problem
    assert "out of range" in refusal(pa.array([2.0**63]), "epoch_ns").problem


def test_refusal_messages_are_one_line_with_the_unit_and_the_key_to_set():
    ms = pa.array([1357034400, 1357034400123])
    assert refusal(ms, "epoch_s").problem == \
        'not epoch seconds: the value looks like milliseconds since 1970; set input.timestamp_format = "epoch_ms"'
    assert refusal(ms, "auto").problem == (
        'not epoch seconds (timestamp_format auto reads numbers as seconds): the value looks like milliseconds '
        'since 1970; set input.timestamp_format = "epoch_ms"')
    assert refusal(pa.array(["1357034400"]), "epoch_ms").problem == (
        'not epoch milliseconds: the value looks like seconds since 1970; set input.timestamp_format = "epoch_s" '
        '(a time within about 116 days of 1970 must be written in seconds)')
    assert refusal(pa.array(["1357034400123456"]), "epoch_ns").problem.startswith(
        'not epoch nanoseconds: the value looks like microseconds since 1970; set input.timestamp_format = "epoch_us"')
    assert refusal(pa.array([str(WRITTEN["epoch_us"]), "nan"]), "epoch_us").problem == ("not a finite number (text that is no number, "
                                                                                            "NaN or infinity; timestamp_format epoch_us)")
    assert refusal(pa.array([np.inf]), "epoch_ns").problem == ("not a finite number (text that is no number, NaN or "
                                                                         "infinity; timestamp_format epoch_ns)")


def test_the_first_bad_row_is_named_whatever_its_problem():
    """A unit refusal before a missing value, a missing value before a unit refusal, a bad ISO time without an
    offset before one with an offset, a nonexistent local time before an unparsable one."""
    assert refusal(pa.array(["1", "1357034400123", None]), "epoch_s").index == 1
    assert refusal(pa.array(["1", None, "1357034400123"]), "epoch_s").index == 1
    assert refusal(pa.array(["1", "1357034400123", "x", "2"]), "auto").index == 1
    iso = refusal(pa.array(["2013-01-01", "2013-13-01", "2013-01-01T10:00:00+25:00"]), "iso8601")
    assert (iso.index, iso.problem) == (1, "not an ISO 8601 time")
    with pytest.raises(RowError) as caught:
        to_micros(pa.array(["2013-01-01", "2013-03-10T02:30:00", "2013-13-01"]), "iso8601", "America/New_York")
    assert caught.value.index == 1 and "does not exist or is ambiguous" in caught.value.problem


def test_auto_text_takes_the_kind_most_values_have():
    """More than half plain decimal numbers: epoch seconds, the first other value refused; else ISO 8601."""
    seconds = ["1357034400"] * 5
    error = refusal(pa.array(seconds[:2] + ["2013-01-01T10:00:00Z"] + seconds[2:]), "auto")
    assert (error.index, error.problem) == (
        2, "not a number of seconds like most of the column's values (timestamp_format auto)")
    assert refusal(pa.array(["notatime"] + seconds), "auto").index == 0
    iso = ["2013-01-01T10:00:00Z"] * 3
    error = refusal(pa.array(["1357034400"] + iso), "auto")
    assert (error.index, error.problem) == (0, "not an ISO 8601 time")
    assert refusal(pa.array(iso + ["1357034400", "1357034400", "1357034400"]), "auto").index == 3  # a tie: ISO


# -- through the readers -------------------------------------------------------------------------------


def _read(spec: InputSpec) -> list[int]:
    return [t for batch in read_events(spec) for t in batch.column("timestamp").to_pylist()]


def _csv(tmp_path, times: list[str]):
    path = tmp_path / "events.csv"
    path.write_text("u,t,p\n" + "".join(f"u{i % 7},{t},x\n" for i, t in enumerate(times)))
    return path


@pytest.mark.parametrize("block", [1 << 22, 1 << 12], ids=["one block", "4 KiB blocks"])
def test_csv_late_rows_are_named_by_their_line_whatever_the_block_size(tmp_path, monkeypatch, block):
    """Bug A: a millisecond value at line 50,001 of a column of seconds. Bug B: `notatime` there, which `auto`
    used to report at the first line of its block as not ISO 8601."""
    monkeypatch.setattr(readers, "CSV_BLOCK_BYTES", block)
    seconds = [str(1357034400 + i) for i in range(60_000)]
    for odd, fmt, problem in [
        ("1357084399123", "auto", r"not epoch seconds \(timestamp_format auto reads numbers as seconds\): the value "
                                  r'looks like milliseconds since 1970; set input\.timestamp_format = "epoch_ms"'),
        ("1357084399123", "epoch_s", "not epoch seconds: the value looks like milliseconds"),
        ("notatime", "auto", r"not a number of seconds like most of the column's values \(timestamp_format auto\)"),
    ]:
        path = _csv(tmp_path, seconds[:49_999] + [odd] + seconds[50_000:])
        with pytest.raises(InputError) as caught:
            _read(InputSpec("csv", str(path), "u", "t", "p", timestamp_format=fmt))
        assert re.fullmatch(rf"{re.escape(str(path))}:50001: column 't': {problem}.*", str(caught.value))
        assert odd not in str(caught.value)


@pytest.mark.parametrize("unit", ["epoch_ms", "epoch_us", "epoch_ns"])
def test_csv_in_each_declared_unit_reads_exactly(tmp_path, unit):
    written = [WRITTEN[unit] + i * 86_400 * 1000 ** UNITS.index(unit) for i in range(3)]  # a day apart
    path = _csv(tmp_path, [str(v) for v in written])
    assert _read(InputSpec("csv", str(path), "u", "t", "p", timestamp_format=unit)) == [micros(v, unit) for v in written]


def test_parquet_int64_milliseconds_under_auto_are_refused_at_their_row(tmp_path):
    path = tmp_path / "events.parquet"
    times = [1357034400123 + i for i in range(10)]
    pq.write_table(pa.table({"u": ["a"] * 10, "t": pa.array(times, pa.int64()), "p": ["x"] * 10}), path,
                   row_group_size=4)
    with pytest.raises(InputError, match=r"events\.parquet:1: column 't': not epoch seconds \(timestamp_format auto "
                                         r'reads numbers as seconds\): the value looks like milliseconds since 1970; '
                                         r'set input\.timestamp_format = "epoch_ms"$'):
        _read(InputSpec("parquet", str(path), "u", "t", "p"))
    assert _read(InputSpec("parquet", str(path), "u", "t", "p", timestamp_format="epoch_ms")) == \
        [t * 1000 for t in times]
    pq.write_table(pa.table({"u": ["a"] * 10, "t": pa.array([1357034400] * 9 + [1357034400123], pa.int64()),
                             "p": ["x"] * 10}), path, row_group_size=4)
    with pytest.raises(InputError, match=r"events\.parquet:10: column 't': not epoch seconds"):
        _read(InputSpec("parquet", str(path), "u", "t", "p"))


def test_parquet_nanosecond_timestamp_columns_are_floored_not_refused_quoting_the_value(tmp_path):
    """Arrow's ns -> us cast refuses sub-microsecond digits with a message that quotes the value."""
    path = tmp_path / "events.parquet"
    written = [WRITTEN["epoch_ns"], -WRITTEN["epoch_ns"]]
    pq.write_table(pa.table({"u": ["a", "b"], "t": pa.array(written, pa.timestamp("ns", "UTC")), "p": ["x", "x"]}),
                   path)
    assert _read(InputSpec("parquet", str(path), "u", "t", "p")) == [v // 1000 for v in written]


def test_jsonl_nanosecond_numbers(tmp_path):
    path = tmp_path / "events.jsonl"
    written = (WRITTEN["epoch_ns"], -WRITTEN["epoch_ns"])
    path.write_text("".join(json.dumps({"u": "a", "t": t, "p": "x"}) + "\n" for t in written))
    assert _read(InputSpec("jsonl", str(path), "u", "t", "p", timestamp_format="epoch_ns")) == [INSTANT, -INSTANT - 1]
    with pytest.raises(InputError, match=r"events\.jsonl:1: column 't': not epoch seconds .*looks like nanoseconds"):
        _read(InputSpec("jsonl", str(path), "u", "t", "p"))


# -- property ------------------------------------------------------------------------------------------

YEAR_1900, YEAR_2200 = -2208988800 * 10**6, 7258118400 * 10**6
SPAN = st.integers(0, YEAR_2200 - YEAR_1900)  # hypothesis favours small integers: counted from both ends too
INSTANTS = st.one_of(SPAN.map(lambda x: YEAR_1900 + x), SPAN.map(lambda x: YEAR_2200 - x),
                     st.integers(YEAR_1900, YEAR_2200),  # and near 1970, where the units' magnitudes meet:
                     *(st.integers(-(10**e), 10**e) for e in (8, 11, 14)))  # 10^14 us: about 3 years
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _written(instant: int, unit: str, nanos: int) -> int:
    """The instant in `unit`, floored for the coarser units; `nanos` below the microsecond for nanoseconds."""
    return instant * 1000 + nanos if unit == "epoch_ns" else instant // SCALE[unit]


@SETTINGS
@given(instant=INSTANTS, unit=st.sampled_from(UNITS), nanos=st.integers(0, 999), as_text=st.booleans())
def test_instants_written_in_a_unit_read_back_in_that_unit_or_are_refused_as_another(instant, unit, nanos, as_text):
    """Declared as written: the instant comes back to the unit's precision. Written in ms, us or ns and read as
    epoch_s or auto: refused, naming the written unit. Only within about 116 days of 1970 (10^13 us), where the
    written value is small enough to look like a coarser unit, are both refused or read as that unit."""
    value = _written(instant, unit, nanos)
    values = pa.array([str(value)]) if as_text else pa.array([value], pa.int64())
    looks_like = UNITS[sum(abs(value) >= limit for limit in (10**10, 10**13, 10**16))]
    assert looks_like == unit or abs(instant) < 10**13
    for fmt in (unit, "epoch_s", "auto"):
        read_as = "epoch_s" if fmt == "auto" else fmt
        if looks_like == read_as:
            assert to_micros(values, fmt).tolist() == [micros(value, read_as)]
        else:
            assert f'set input.timestamp_format = "{looks_like}"' in refusal(values, fmt).problem
    if looks_like == unit:
        assert micros(value, unit) <= instant < micros(value, unit) + SCALE.get(unit, 1)  # to the unit's precision


@SETTINGS
@given(instant=st.integers(YEAR_1900, 4102444800 * 10**6 - 1))
def test_epoch_seconds_with_six_decimals_are_exact_to_the_microsecond(instant):
    """1900 to 2100: within 2^32 s of 1970, where float64 holds epoch seconds to 0.24 us."""
    sign, size = ("-" if instant < 0 else ""), abs(instant)
    text = f"{sign}{size // 10**6}.{size % 10**6:06d}"
    assert to_micros(pa.array([text]), "epoch_s").tolist() == [instant]
