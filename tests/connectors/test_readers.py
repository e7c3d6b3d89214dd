"""Readers: every format gives the same EVENT_SCHEMA batches; bad rows name file, row and column."""
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.connectors.errors import InputError
from dpstream.connectors.readers import InputSpec, check_input, list_chunks, read_events
from dpstream.connectors.schema import EVENT_SCHEMA
from dpstream.connectors.timestamps import to_micros

ROWS = [
    {"tailnum": "N1", "time_hour": "2013-01-01T10:00:00Z", "dest": "IAH", "dep_delay": 2.0},
    {"tailnum": "N2", "time_hour": "2013-01-01T05:30:00-05:00", "dest": "MIA", "dep_delay": -4.0},
    {"tailnum": "N1", "time_hour": "2013-01-02T10:00:00.250000Z", "dest": "IAH", "dep_delay": 0.0},
]
EXPECTED = {
    "user": ["N1", "N2", "N1"],
    "timestamp": [1357034400000000, 1357036200000000, 1357120800250000],
    "partition": ["IAH", "MIA", "IAH"],
    "value": [2.0, -4.0, 0.0],
}


def _write(tmp_path, fmt, rows, name="flights"):
    path = tmp_path / f"{name}.{fmt}"
    if fmt == "csv":
        columns = list(rows[0])
        lines = [",".join(columns)] + [",".join(str(r[c]) for c in columns) for r in rows]
        path.write_text("\n".join(lines) + "\n")
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=2)
    return path


def _spec(path, fmt, **kwargs):
    return InputSpec(fmt, str(path), "tailnum", "time_hour", "dest", kwargs.pop("value", "dep_delay"), **kwargs)


def _read(spec):
    return pa.Table.from_batches(list(read_events(spec)), schema=EVENT_SCHEMA).to_pydict()


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_every_format_reads_the_same_events(tmp_path, fmt):
    path = _write(tmp_path, fmt, ROWS)
    assert _read(_spec(path, fmt)) == EXPECTED


def test_parquet_is_read_one_row_group_per_chunk(tmp_path):
    path = _write(tmp_path, "parquet", ROWS)
    assert [(c.row_group, c.first_row) for c in list_chunks(_spec(path, "parquet"))] == [(0, 0), (1, 2)]


def test_without_a_value_column_every_event_counts_one(tmp_path):
    path = _write(tmp_path, "csv", ROWS)
    assert _read(_spec(path, "csv", value=None))["value"] == [1.0, 1.0, 1.0]


def test_parquet_timestamp_columns_and_naive_local_times(tmp_path):
    table = pa.table({
        "tailnum": ["N1", "N2"],
        "time_hour": pa.array([1357034400000000, 1357036200000000], pa.timestamp("us", tz="UTC")),
        "local": pa.array([1357034400000000, 1357036200000000], pa.timestamp("us")),
        "dest": ["A", "B"],
    })
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    assert _read(_spec(path, "parquet", value=None))["timestamp"] == [1357034400000000, 1357036200000000]
    local = InputSpec("parquet", str(path), "tailnum", "local", "dest", timezone="America/New_York")
    assert _read(local)["timestamp"] == [1357034400000000 + 5 * 3600 * 10**6, 1357036200000000 + 5 * 3600 * 10**6]


@pytest.mark.parametrize(
    ("values", "fmt", "zone", "expected"),
    [
        (pa.array([1357034400, 1357034401]), "epoch_s", "UTC", [1357034400000000, 1357034401000000]),
        (pa.array([1357034400.5]), "auto", "UTC", [1357034400500000]),
        (pa.array([1357034400123]), "epoch_ms", "UTC", [1357034400123000]),
        (pa.array(["1357034400123"]), "epoch_ms", "UTC", [1357034400123000]),
        (pa.array(["2013-01-01"]), "iso8601", "America/New_York", [1357016400000000]),
        (pa.array(["2013-07-01 12:00"]), "auto", "America/New_York", [1372694400000000]),
        (pa.array(["2013-01-01T00:00:00+01:00", "2013-01-01T00:00:00"]), "auto", "UTC", [1356994800000000, 1356998400000000]),
    ],
)
def test_timestamp_formats_and_time_zones(values, fmt, zone, expected):
    assert to_micros(values, fmt, zone).tolist() == expected


def test_bad_iso_date_in_csv_names_file_line_and_column(tmp_path):
    rows = [dict(ROWS[0]) for _ in range(15)] + [dict(ROWS[0], time_hour="2013-13-01")]
    path = _write(tmp_path, "csv", rows)
    with pytest.raises(InputError, match=r"flights\.csv:17: column 'time_hour': not an ISO 8601 time$"):
        _read(_spec(path, "csv"))


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_bad_value_names_row_and_column_in_every_format(tmp_path, fmt):
    rows = [dict(r) for r in ROWS]
    rows[2]["dep_delay"] = "late"
    if fmt == "parquet":
        rows = [dict(r, dep_delay=str(r["dep_delay"])) for r in rows]
    path = _write(tmp_path, fmt, rows)
    row = {"csv": 4, "jsonl": 3, "parquet": 3}[fmt]
    with pytest.raises(InputError, match=rf"flights\.{fmt}:{row}: column 'dep_delay': not a number$"):
        _read(_spec(path, fmt))


def test_missing_user_and_nonexistent_local_time(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"u": "a", "t": "2013-03-10T02:30:00", "p": "x"}\n\n{"u": null, "t": 1, "p": "x"}\n')
    with pytest.raises(InputError, match=r"x\.jsonl:3: column 'u': missing value"):
        _read(InputSpec("jsonl", str(path), "u", "t", "p", timestamp_format="epoch_s"))
    path.write_text('{"u": "a", "t": "2013-03-10T02:30:00", "p": "x"}\n')
    with pytest.raises(InputError, match=r"x\.jsonl:1: column 't': a local time that does not exist or is ambiguous in time zone "
                                         r"America/New_York \(a daylight-saving change\)$"):
        _read(InputSpec("jsonl", str(path), "u", "t", "p", timezone="America/New_York"))


def test_jsonl_mixed_key_types_and_broken_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"u": "a", "t": 1, "p": "x"}\n{"u": 7, "t": 2, "p": "x"}\n')
    assert _read(InputSpec("jsonl", str(path), "u", "t", "p"))["user"] == ["a", "7"]
    path.write_text('{"u": "a", "t": 1, "p": "x"}\n{"u": "b", "t": 2, "p": "x"\n')
    with pytest.raises(InputError, match=r"m\.jsonl:2: not valid JSON"):
        _read(InputSpec("jsonl", str(path), "u", "t", "p"))


def test_csv_row_with_too_many_fields(tmp_path):
    path = tmp_path / "f.csv"
    path.write_text("u,t,p\na,1,x\nb,2,x,extra\n")
    with pytest.raises(InputError, match=r"f\.csv:3: expected 3 fields, got 4"):
        _read(InputSpec("csv", str(path), "u", "t", "p"))


def test_check_input_reads_headers_only(tmp_path):
    path = _write(tmp_path, "csv", ROWS)
    with pytest.raises(InputError, match=r"input\.partition names column 'destination', which the file does not have"):
        check_input(InputSpec("csv", str(path), "tailnum", "time_hour", "destination"))
    with pytest.raises(InputError, match=r"input\.path '.*nothing\*\.csv': no such file"):
        check_input(InputSpec("csv", str(tmp_path / "nothing*.csv"), "u", "t", "p"))
    assert check_input(_spec(path, "csv")) == [str(path)]


SECRET = "SECRET-ROW-VALUE"
GOOD = "a,2013-01-01T10:00:00Z,x,1\n"
RAW_VALUE_CASES = [
    # (case, format, file contents, InputSpec keywords, the message after "FILE:", the raw text it must not hold)
    ("value not a number", "csv", f"u,t,p,v\n{GOOD}b,2013-01-01T10:00:00Z,x,{SECRET}\n", {},
     r"3: column 'v': not a number$", SECRET),
    ("time not ISO 8601", "csv", f"u,t,p,v\n{GOOD}b,{SECRET},x,1\n", {}, r"3: column 't': not an ISO 8601 time$", SECRET),
    ("epoch seconds under iso8601", "csv", f"u,t,p,v\n{GOOD}b,1260759144,x,1\n", {"timestamp_format": "iso8601"},
     r"3: column 't': not an ISO 8601 time$", "1260759144"),
    ("epoch time not a number", "csv", f"u,t,p,v\nb,{SECRET},x,1\n", {"timestamp_format": "epoch_s"},
     r"2: column 't': not a finite number \(text that is no number, NaN or infinity; timestamp_format epoch_s\)$", SECRET),
    ("epoch time out of range", "jsonl", '{"u": "b", "t": 1.2345678e300, "p": "x", "v": 1}\n', {},
     r"1: column 't': a number out of range for timestamp_format epoch_s", "2345678"),
    ("local time that does not exist", "jsonl", '{"u": "b", "t": "2013-03-10T02:31:17", "p": "x", "v": 1}\n',
     {"timezone": "America/New_York"}, r"1: column 't': a local time that does not exist or is ambiguous", "31:17"),
    ("key with a fraction", "jsonl", '{"u": 1234.5678, "t": 1, "p": "x", "v": 1}\n', {},
     r"1: column 'u': not a key: a number that is not a whole number within int64", "1234.5678"),
    ("value not finite", "csv", "u,t,p,v\nb,1,x,-inf\n", {}, r"2: column 'v': not a finite number \(NaN or infinity\)$",
     "-inf"),
    ("ragged CSV row", "csv", f"u,t,p,v\n{GOOD}b,1,x,1,{SECRET}\n", {}, r"3: expected 4 fields, got 5$", SECRET),
    ("CSV field not UTF-8", "csv", f"u,t,p,v\n{GOOD}".encode() + SECRET.encode() + b"\xff,1,x,1\n", {},
     r"3: column 'u': not UTF-8 text$", SECRET),
    ("JSON line not JSON", "jsonl", f'{{"u": "a", "t": 1, "p": "x", "v": 1}}\n{{"u": {SECRET}}}\n', {},
     r"2: not valid JSON: Expecting value$", SECRET),
]


@pytest.mark.parametrize("case, fmt, contents, options, message, raw", RAW_VALUE_CASES,
                         ids=[case[0] for case in RAW_VALUE_CASES])
def test_bad_rows_are_named_by_row_column_and_kind_never_by_their_raw_value(tmp_path, case, fmt, contents, options,
                                                                             message, raw):
    """Issue 32: a run's failure reason is stored in the ledger and shown by `budget history`, so an input error
    names file, row and column and the kind of problem, never the value itself."""
    path = tmp_path / f"f.{fmt}"
    path.write_bytes(contents if isinstance(contents, bytes) else contents.encode())
    with pytest.raises(InputError) as caught:
        _read(InputSpec(fmt, str(path), "u", "t", "p", "v", **options))
    text = str(caught.value)
    assert text.startswith(f"{path}:") and re.search(message, text[len(str(path)) + 1:]), text
    assert raw not in text, text


def test_pyarrow_and_pubsub_messages_that_quote_data_are_not_passed_on():
    """pyarrow's CSV parse error quotes the row ("Expected 3 columns, got 1: <row>"): only its kind is kept; a Pub/Sub
    message that is not JSON or not UTF-8 is named by its id and the position, not its text."""
    from dpstream.connectors.pubsub import PubSubSource, messages_to_events
    from dpstream.connectors.readers import _csv_problem, _json_problem

    assert _csv_problem(pa.ArrowInvalid(f"CSV parse error: Expected 3 columns, got 1: {SECRET},2013")) == \
        "expected 3 fields, got 1"
    for error in (f"CSV parse error: {SECRET}", f"In CSV column #0: CSV conversion error to string: invalid UTF8 {SECRET}"):
        assert SECRET not in _csv_problem(pa.ArrowInvalid(error))
    assert SECRET not in _json_problem(pa.ArrowInvalid(f"JSON parse error: {SECRET}"))
    source = PubSubSource(user="u", partition="d", subscription="projects/p/subscriptions/s", timestamp_attribute="ts")
    for data in (f'{{"u": {SECRET}}}'.encode(), b"\xff" + SECRET.encode()):
        with pytest.raises(InputError, match=r"^projects/p/subscriptions/s: message 42: not valid JSON") as caught:
            messages_to_events(source, [(data, 0, "42")])
        assert SECRET not in str(caught.value) and "xff" not in str(caught.value)
