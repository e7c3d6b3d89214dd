"""Release writers: Parquet, CSV and JSONL round trips; sorted, so the same rows give the same file."""
import pytest

from dpstream.connectors.writers import read_rows, release_path, write_rows

ROWS = [
    {"window_start": "2013-01-02T00:00:00+00:00", "partition": "MIA", "value": 3.5, "rank": 2},
    {"window_start": "2013-01-01T00:00:00+00:00", "partition": "IAH", "value": -1.0, "rank": 1},
]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_round_trip_sorted(tmp_path, fmt):
    path = release_path(str(tmp_path), "daily", fmt)
    assert path.endswith(f"daily.{'jsonl' if fmt == 'jsonl' else fmt}")
    assert write_rows(ROWS, path, fmt) == 2
    table = read_rows(path)
    assert table.column("partition").to_pylist() == ["IAH", "MIA"]
    assert table.column("value").to_pylist() == [-1.0, 3.5]
    assert table.column("rank").to_pylist() == [1, 2]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_same_rows_same_bytes_whatever_the_order(tmp_path, fmt):
    first, second = tmp_path / f"a.{fmt}", tmp_path / f"b.{fmt}"
    write_rows(ROWS, str(first), fmt)
    write_rows(list(reversed(ROWS)), str(second), fmt)
    assert first.read_bytes() == second.read_bytes()


def test_empty_release_and_unknown_format(tmp_path):
    assert write_rows([], str(tmp_path / "e.parquet")) == 0
    assert read_rows(str(tmp_path / "e.parquet")).num_rows == 0
    with pytest.raises(ValueError, match=r"output.format must be one of \['parquet', 'csv', 'jsonl'\], got 'xml'"):
        write_rows(ROWS, str(tmp_path / "e.xml"), "xml")
    assert not list(tmp_path.glob(".writing-*"))


def test_parquet_window_times_are_utc_timestamps(tmp_path):
    """The same instants as the rows' ISO text, to the microsecond; JSON lines keep the text."""
    from datetime import datetime, timezone

    import pyarrow as pa

    rows = [{"window_start": "2013-01-01T00:00:00+00:00", "window_end": "2013-01-01T00:01:30.250000+00:00",
             "period_start": "2012-12-31T00:00:00+00:00", "value": 1.0}]
    write_rows(rows, str(tmp_path / "a.parquet"), "parquet")
    table = read_rows(str(tmp_path / "a.parquet"))
    for name in ("window_start", "window_end", "period_start"):
        assert table.schema.field(name).type == pa.timestamp("us", tz="UTC")
        assert table.column(name)[0].as_py() == datetime.fromisoformat(rows[0][name]).astimezone(timezone.utc)
    write_rows(rows, str(tmp_path / "a.jsonl"), "jsonl")
    assert '"window_start": "2013-01-01T00:00:00+00:00"' in (tmp_path / "a.jsonl").read_text()
