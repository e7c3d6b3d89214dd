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
