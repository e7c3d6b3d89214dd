"""Inputs through Beam's FileSystems: a glob of Parquet, CSV or JSONL files under a URL (a test filesystem
with its own scheme, as gs:// is on Dataflow, serving ranged-read streams) is listed, checked and read as
the same files on the local disk are, by the readers, by `ReadEvents` on the DirectRunner and by a whole
run; errors name the URL, row and column."""
import dataclasses
import gzip
import json
import re

import apache_beam as beam
import pyarrow as pa
import pyarrow.json as pajson
import pytest
from apache_beam.testing.util import assert_that, equal_to

from dpstream.accounting.ledger import Ledger
from dpstream.connectors import readers
from dpstream.connectors.beam_io import ReadEvents
from dpstream.connectors.errors import InputError
from dpstream.connectors.readers import InputSpec, check_input, list_chunks
from dpstream.connectors.schema import EVENT_SCHEMA
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.run import runner
from tests.connectors.test_readers import EXPECTED, ROWS, _read, _spec, _write
from tests.connectors.url_filesystem import SCHEME, url_root  # noqa: F401 (url_root is a fixture)
from tests.pipelines.test_runner import JOB, _events

FORMATS = ["parquet", "csv", "jsonl"]
LATER = [dict(row, tailnum=row["tailnum"] + "x") for row in ROWS]  # the second file's rows


def _two_files(directory, fmt):
    """events/a.FMT (ROWS) and events/b.FMT (LATER), plus files the glob must skip."""
    directory.mkdir(parents=True, exist_ok=True)
    _write(directory, fmt, LATER, name="b")
    _write(directory, fmt, ROWS, name="a")
    _write(directory, fmt, ROWS, name=".a")  # hidden: a wildcard does not match a leading dot
    (directory / "notes.txt").write_text("not events\n")
    (directory / "nested").mkdir(exist_ok=True)
    _write(directory / "nested", fmt, ROWS, name="c")  # one level down: * stays within a segment
    return directory


def _expected_two_files():
    later = {key: list(values) for key, values in EXPECTED.items()}
    later["user"] = [user + "x" for user in later["user"]]
    return {key: EXPECTED[key] + later[key] for key in EXPECTED}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_url_glob_reads_the_files_a_local_glob_reads(tmp_path, url_root, fmt):
    _two_files(url_root / "events", fmt)
    local = _two_files(tmp_path / "local", fmt)
    remote = _spec(f"{SCHEME}://events/*.{fmt}", fmt)
    assert readers.files(remote) == [f"{SCHEME}://events/a.{fmt}", f"{SCHEME}://events/b.{fmt}"]
    assert check_input(remote) == readers.files(remote)
    assert readers.files(_spec(local / f"*.{fmt}", fmt)) == [str(local / f"a.{fmt}"), str(local / f"b.{fmt}")]
    chunks = list_chunks(remote)
    assert [c.path for c in chunks] == [f"{SCHEME}://events/{name}.{fmt}" for name in "ab" for _ in range(2 if fmt == "parquet" else 1)]
    if fmt == "parquet":  # one chunk per row group, as for a local file
        local_chunks = list_chunks(_spec(local / f"*.{fmt}", fmt))
        assert [(c.row_group, c.first_row) for c in chunks] == [(c.row_group, c.first_row) for c in local_chunks]
    assert _read(remote) == _read(_spec(local / f"*.{fmt}", fmt)) == _expected_two_files()
    assert _read(_spec(f"{SCHEME}://events/**/c.{fmt}", fmt)) == EXPECTED  # ** crosses directories


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_bad_row_under_a_url_names_the_url_row_and_column(url_root, fmt):
    rows = [dict(r) for r in LATER]
    rows[2]["dep_delay"] = "late"
    if fmt == "parquet":
        rows = [dict(r, dep_delay=str(r["dep_delay"])) for r in rows]
    _two_files(url_root / "events", fmt)
    _write(url_root / "events", fmt, rows, name="b")
    row = {"csv": 4, "jsonl": 3, "parquet": 3}[fmt]
    with pytest.raises(InputError, match=rf"^{SCHEME}://events/b\.{fmt}:{row}: column 'dep_delay': not a number$"):
        _read(_spec(f"{SCHEME}://events/*.{fmt}", fmt))


def test_url_headers_missing_files_and_unknown_schemes(url_root):
    _two_files(url_root / "events", "csv")
    _two_files(url_root / "events", "parquet")
    for fmt in ("csv", "parquet"):
        with pytest.raises(InputError, match=rf"^{SCHEME}://events/a\.{fmt}: input\.partition names column 'destination', "
                                             rf"which the file does not have; columns: tailnum, time_hour, dest, dep_delay$"):
            check_input(InputSpec(fmt, f"{SCHEME}://events/*.{fmt}", "tailnum", "time_hour", "destination"))
    for path in (f"{SCHEME}://events/*.tsv", f"{SCHEME}://events/a.tsv", f"{SCHEME}://nowhere/*.csv", f"{SCHEME}://events/"):
        with pytest.raises(InputError, match=rf"^input\.path '{re.escape(path)}': no such file$"):
            check_input(_spec(path, "csv"))
    with pytest.raises(InputError, match=r"^input\.path 'nosuch://b/\*\.csv': Unable to get filesystem from specified path"):
        check_input(_spec("nosuch://b/*.csv", "csv"))
    (url_root / "events" / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(InputError, match=rf"^{SCHEME}://events/bad\.parquet: cannot read the parquet header: "):
        check_input(_spec(f"{SCHEME}://events/bad.parquet", "parquet"))
    (url_root / "events" / "wide.csv").write_text("tailnum,time_hour,dest,dep_delay\nN1,1,A,1\nN2,2,B,2,extra\n")
    with pytest.raises(InputError, match=rf"^{SCHEME}://events/wide\.csv:3: expected 4 fields, got 5$"):
        _read(_spec(f"{SCHEME}://events/wide.csv", "csv", timestamp_format="epoch_s"))
    (url_root / "events" / "broken.jsonl").write_text(json.dumps(ROWS[0]) + "\n\n{\"tailnum\": \n")
    with pytest.raises(InputError, match=rf"^{SCHEME}://events/broken\.jsonl:3: not valid JSON"):
        _read(_spec(f"{SCHEME}://events/broken.jsonl", "jsonl"))


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_compressed_text_files_local_and_under_a_url(tmp_path, url_root, fmt):
    plain = _write(tmp_path, fmt, ROWS)
    for directory in (tmp_path, url_root):
        (directory / f"flights.{fmt}.gz").write_bytes(gzip.compress(plain.read_bytes()))
    assert _read(_spec(tmp_path / f"flights.{fmt}.gz", fmt)) == EXPECTED
    assert _read(_spec(f"{SCHEME}://flights.{fmt}.gz", fmt)) == EXPECTED
    assert check_input(_spec(f"{SCHEME}://*.{fmt}.gz", fmt)) == [f"{SCHEME}://flights.{fmt}.gz"]


def test_relative_local_globs_match_as_glob_does(tmp_path, monkeypatch):
    _two_files(tmp_path / "events", "csv")
    monkeypatch.chdir(tmp_path / "events")
    assert readers.files(_spec("*.csv", "csv")) == ["a.csv", "b.csv"]
    assert readers.files(_spec("*/c.csv", "csv")) == ["nested/c.csv"]
    assert readers.files(_spec(".*.csv", "csv")) == [".a.csv"]
    assert readers.files(_spec("?.csv", "csv")) == ["a.csv", "b.csv"]
    assert readers.files(_spec("a.csv", "csv")) == ["a.csv"]
    for path in ("nested", "nested/", "nested?c.csv"):  # a directory; ? matches no /
        with pytest.raises(InputError, match=r"no such file"):
            readers.files(_spec(path, "csv"))


def test_jsonl_line_numbers_skip_blank_lines_as_pyarrow_does():
    data = b'{"a": 1}\n\n  \t\r\n{"a": 2}\r\n \n{"a": 3}'
    assert readers._jsonl_line_numbers(data).tolist() == [1, 4, 6]
    assert readers._jsonl_line_numbers(b"").tolist() == []
    assert readers._jsonl_line_numbers(b"\n \n").tolist() == []
    assert pajson.read_json(pa.BufferReader(data)).num_rows == 3


@pytest.mark.parametrize("fmt", FORMATS)
def test_read_events_on_the_direct_runner_from_a_url_glob(url_root, fmt):
    _two_files(url_root / "events", fmt)
    spec = _spec(f"{SCHEME}://events/*.{fmt}", fmt)
    expected = _expected_two_files()
    with beam.Pipeline("DirectRunner") as pipeline:
        batches = pipeline | ReadEvents(spec)
        rows = batches | beam.FlatMap(lambda b: zip(*pa.Table.from_batches([b], schema=EVENT_SCHEMA).to_pydict().values()))
        assert_that(rows, equal_to(list(zip(*expected.values()))))


def test_a_run_reading_a_url_glob_releases_what_a_local_run_releases(tmp_path, url_root):
    events = _events(10).splitlines(keepends=True)
    half = 1 + (len(events) - 1) // 2
    for directory in (tmp_path / "in", url_root / "in"):
        directory.mkdir()
        (directory / "part-0.csv").write_text("".join(events[:half]))
        (directory / "part-1.csv").write_text("".join(events[:1] + events[half:]))
    (tmp_path / "job.toml").write_text(JOB)
    job = jobfile.load(str(tmp_path / "job.toml"))
    outcomes = {}
    for name, path in (("local", str(tmp_path / "in" / "part-*.csv")), ("url", f"{SCHEME}://in/part-*.csv")):
        ledger = f"sqlite:///{tmp_path / name}.db"
        with Ledger(ledger, create=True) as book:
            book.init_scope("test", 40.0, 1e-5, "approx:release_delta=1e-6")
        this_job = dataclasses.replace(job, input=dataclasses.replace(job.input, path=path))
        outcomes[name] = runner.run(this_job, str(tmp_path / name), ledger, log=lambda _: None)
    assert outcomes["url"].report["input"]["path"] == f"{SCHEME}://in/part-*.csv"
    assert outcomes["url"].report["releases"] == outcomes["local"].report["releases"]
    for name in ("daily.jsonl", "top.jsonl", "busiest.jsonl"):
        assert (tmp_path / "url" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name


def test_a_bad_row_under_a_url_fails_the_run_after_the_debit(tmp_path, url_root):
    (url_root / "in").mkdir()
    (url_root / "in" / "events.csv").write_text(_events(5).replace("2013-01-02T11", "2013-13-02T11", 1))
    (tmp_path / "job.toml").write_text(JOB)
    job = jobfile.load(str(tmp_path / "job.toml"))
    job = dataclasses.replace(job, input=dataclasses.replace(job.input, path=f"{SCHEME}://in/*.csv"))
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(ledger, create=True) as book:
        book.init_scope("test", 40.0, 1e-5, "approx:release_delta=1e-6")
    with pytest.raises(runner.RunError, match=rf"{SCHEME}://in/events\.csv:8: column 'time': not an ISO 8601 time"):
        runner.run(job, str(tmp_path / "out"), ledger, log=lambda _: None)


def test_a_job_file_keeps_an_input_url(tmp_path):
    (tmp_path / "job.toml").write_text(JOB.replace('path = "events.csv"', f'path = "{SCHEME}://in/*.csv"'))
    assert jobfile.load(str(tmp_path / "job.toml")).input.path == f"{SCHEME}://in/*.csv"

