"""Regressions from an adversarial review of the input readers: inputs are read exactly as written or refused with a
one-line InputError naming the file (and line, column), never quoting a value.

1. a byte-order mark at the start of a CSV block after the header (pyarrow strips one at the start of any buffer)
   is a character of the field, as Python's csv module reads it: `\\ufeffu1` and `u1` stay two users;
2. a byte-order mark at the start of the file (before a CSV header or the first JSONL record) is skipped;
3. a truncated or corrupt compressed input is an InputError naming the file, not a bare OSError;
4. a JSONL object spread over several lines (or two on one line) is refused at its line, not read with every later
   line number off;
5. JSONL ids beyond 2^53 in a column of floats (pyarrow reads ints and floats mixed as float64) are refused, not
   rounded into another user's id."""
from __future__ import annotations

import bz2
import csv
import gzip
import io
import json

import numpy as np
import pyarrow as pa
import pytest

from dpstream.connectors import readers
from dpstream.connectors.errors import InputError, RowError
from dpstream.connectors.readers import InputSpec, check_input, read_events
from dpstream.connectors.schema import EVENT_SCHEMA

BOM = b"\xef\xbb\xbf"
SECRET = "s3cr3t"


def _read(spec: InputSpec) -> dict:
    check_input(spec)
    return pa.Table.from_batches(list(read_events(spec)), schema=EVENT_SCHEMA).to_pydict()


def _csv_spec(path) -> InputSpec:
    return InputSpec("csv", str(path), "user", "time", "dest", timestamp_format="epoch_s")


def _jsonl_spec(path) -> InputSpec:
    return InputSpec("jsonl", str(path), "user", "time", "dest", timestamp_format="epoch_s")


def _csv_reference(path) -> list[str]:
    """The users after the header as Python's csv module reads the file (utf-8-sig: a BOM before the header is
    skipped, one anywhere else is a character)."""
    data = path.read_bytes()
    text = (gzip.decompress(data) if str(path).endswith(".gz") else data).decode("utf-8-sig")
    header, *rows = (row for row in csv.reader(io.StringIO(text, newline=""), strict=True) if row)
    return [row[header.index("user")] for row in rows]


def _one_line(err: InputError, path) -> str:
    text = str(err)
    assert "\n" not in text and text.startswith(f"{path}"), text
    return text


# -- 1, 2: byte-order marks in CSV -------------------------------------------------------------------


@pytest.mark.parametrize("block_bytes", [32, readers.CSV_BLOCK_BYTES])
def test_a_csv_bom_at_the_start_of_a_data_row_is_kept_as_the_csv_module_reads_it(tmp_path, monkeypatch,
                                                                                  block_bytes):
    monkeypatch.setattr(readers, "CSV_BLOCK_BYTES", block_bytes)
    path = tmp_path / "events.csv"
    path.write_bytes(b"user,time,dest\n" + BOM + b"u1,1357000000,A\nu1,1357000001,A\n")
    assert _read(_csv_spec(path))["user"] == ["\ufeffu1", "u1"] == _csv_reference(path)


@pytest.mark.parametrize("block_bytes", [32, 64, readers.CSV_BLOCK_BYTES])
@pytest.mark.parametrize("name", ["events.csv", "events.csv.gz"])
def test_a_csv_bom_at_any_block_start_changes_no_key(tmp_path, monkeypatch, block_bytes, name):
    """Rows starting with a BOM fall on block boundaries for small blocks: each reads as the csv module reads it,
    whether quoted after the BOM (then the quote is a character: it does not start the field) or not."""
    monkeypatch.setattr(readers, "CSV_BLOCK_BYTES", block_bytes)
    rows = [b"u1,1357000000,A", BOM + b"u1,1357000001,A", BOM + b'"u2",1357000002,A', b"u2,1357000003,A"] * 4
    text = b"\n".join([b"user,time,dest"] + rows) + b"\n"
    path = tmp_path / name
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    plain = tmp_path / "reference.csv"
    plain.write_bytes(text)
    users = _read(_csv_spec(path))["user"]
    assert users == _csv_reference(plain)
    assert users[:4] == ["u1", "\ufeffu1", '\ufeff"u2"', "u2"]


@pytest.mark.parametrize("name", ["events.csv", "events.csv.gz"])
def test_a_bom_before_the_csv_header_is_skipped(tmp_path, name):
    text = BOM + b"user,time,dest\nu1,1357000000,A\n"
    path = tmp_path / name
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    assert check_input(_csv_spec(path)) == [str(path)]
    assert _read(_csv_spec(path))["user"] == ["u1"] == _csv_reference(path)


def test_a_csv_file_holding_only_a_bom_is_empty(tmp_path):
    path = tmp_path / "events.csv"
    path.write_bytes(BOM)
    with pytest.raises(InputError, match=r"the file is empty \(no header line\)$"):
        check_input(_csv_spec(path))


# -- 2: byte-order marks in JSONL --------------------------------------------------------------------


@pytest.mark.parametrize("start", [b"", b"\n", b"  \n\r\n"])
def test_a_bom_before_the_first_jsonl_record_is_skipped(tmp_path, start):
    """Also with blank lines between it and the first record; line numbers still count from the file's start."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(BOM + start + b'{"user": "u1", "time": 1357000000, "dest": "A"}\n'
                     b'{"user": "u2", "time": "x", "dest": "A"}\n')
    check_input(_jsonl_spec(path))
    line = 2 + start.count(b"\n")
    with pytest.raises(InputError, match=rf"events\.jsonl:{line}: column 'time': "):
        _read(_jsonl_spec(path))
    path.write_bytes(BOM + start + b'{"user": "u1", "time": 1357000000, "dest": "A"}\n')
    assert _read(_jsonl_spec(path))["user"] == ["u1"]


def test_a_bom_before_mixed_jsonl_key_types_is_skipped(tmp_path):
    """The line-by-line path (a key whose JSON type changes) skips it too."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(BOM + b'{"user": 1, "time": 1357000000, "dest": "A"}\n{"user": "u2", "time": 1357000001, '
                     b'"dest": "A"}\n')
    assert _read(_jsonl_spec(path))["user"] == ["1", "u2"]


def test_a_jsonl_file_holding_only_a_bom_has_no_events(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(BOM + b"\n")
    assert _read(_jsonl_spec(path))["user"] == []


def test_a_bom_inside_a_jsonl_file_is_refused_at_its_line(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"user": "u1", "time": 1357000000, "dest": "A"}\n' + BOM +
                     b'{"user": "u1", "time": 1357000001, "dest": "A"}\n')
    with pytest.raises(InputError, match=r"events\.jsonl:2: not valid JSON"):
        _read(_jsonl_spec(path))


# -- 3: truncated or corrupt compressed input --------------------------------------------------------


def _compress(codec: str, data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, codec) as stream:
        stream.write(data)
    return sink.getvalue().to_pybytes()


CODECS = {"gz": "gzip", "bz2": "bz2", "zst": "zstd", "lz4": "lz4"}


def _csv_text(rows: int) -> bytes:
    return b"user,time,dest\n" + b"".join(b"u%d,%d,A\n" % (i, 1357000000 + i) for i in range(rows))


def _jsonl_text(rows: int) -> bytes:
    return b"".join(json.dumps({"user": f"u{i}", "time": 1357000000 + i, "dest": "A"}).encode() + b"\n"
                    for i in range(rows))


@pytest.mark.parametrize("ext", list(CODECS))
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_compressed_input_names_the_file(tmp_path, ext, fmt, damage):
    """Truncated: a small file fails its header check, a large one its records (the header decompresses);
    corrupt: the stream does not start as the codec's does (corruption inside a zstd or lz4 block without a
    checksum decompresses to other bytes, which no reader can tell)."""
    text = (_csv_text if fmt == "csv" else _jsonl_text)(200_000)
    whole = _compress(CODECS[ext], text)
    broken = whole[:len(whole) // 2] if damage == "truncated" else bytes(8) + whole[8:]  # no codec's magic number
    spec = (_csv_spec if fmt == "csv" else _jsonl_spec)(tmp_path / f"big.{fmt}.{ext}")
    (tmp_path / f"big.{fmt}.{ext}").write_bytes(broken)
    expected = f"{spec.path}: cannot decompress: truncated or corrupt {CODECS[ext]} stream"
    with pytest.raises(InputError) as caught:
        _read(spec)
    assert _one_line(caught.value, spec.path) == expected
    small = _compress(CODECS[ext], (_csv_text if fmt == "csv" else _jsonl_text)(3))
    spec = (_csv_spec if fmt == "csv" else _jsonl_spec)(tmp_path / f"small.{fmt}.{ext}")
    (tmp_path / f"small.{fmt}.{ext}").write_bytes(small[:-4])
    with pytest.raises(InputError) as caught:
        check_input(spec)
    assert _one_line(caught.value, spec.path) == f"{spec.path}: cannot decompress: truncated or corrupt " \
                                                  f"{CODECS[ext]} stream"


def test_an_uncompressed_file_named_gz_names_the_file(tmp_path):
    path = tmp_path / "events.csv.gz"
    path.write_bytes(_csv_text(3))
    with pytest.raises(InputError, match=r"events\.csv\.gz: cannot decompress: truncated or corrupt gzip stream$"):
        check_input(_csv_spec(path))


def test_a_whole_bz2_file_still_reads(tmp_path):
    path = tmp_path / "events.csv.bz2"
    path.write_bytes(bz2.compress(_csv_text(3)))
    assert _read(_csv_spec(path))["user"] == ["u0", "u1", "u2"]


# -- 4: one JSON object per line ----------------------------------------------------------------------


@pytest.mark.parametrize("text, line", [
    # an object over lines 1-2: pyarrow reads it as one record, and the bad time of line 4 as line 2's
    (b'{"user": "a", "time": 1357000000,\n "dest": "A"}\n\n{"user": "b", "time": 1.2345678e300, "dest": "A"}\n', 1),
    (b'{"user": "a", "time": 1357000000, "dest": "A"}\n{"user": "b",\n"time": 1357000000, "dest": "A"}\n', 2),
    # two objects on one line (separated by nothing, a space or a lone carriage return)
    (b'{"user": "a", "time": 1357000000, "dest": "A"}\n{"user": "b", "time": 1357000000, "dest": "A"}'
     b'{"user": "c", "time": 1357000000, "dest": "A"}\n', 2),
    (b'{"user": "a", "time": 1357000000, "dest": "A"} {"user": "b", "time": 1357000000, "dest": "A"}\n', 1),
    (b'{"user": "a", "time": 1357000000, "dest": "A"}\r{"user": "b", "time": 1357000000, "dest": "A"}\n', 1),
])
def test_a_jsonl_record_that_is_not_one_line_is_refused_at_its_line(tmp_path, text, line):
    """By the reader (the pipeline's workers); the header check refuses a first line that is not one object."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(text)
    spec = _jsonl_spec(path)
    if line == 1:
        with pytest.raises(InputError) as caught:
            check_input(spec)
        assert _one_line(caught.value, path).startswith(f"{path}: cannot read the jsonl header: ")
    with pytest.raises(InputError) as caught:
        pa.Table.from_batches(list(read_events(spec)), schema=EVENT_SCHEMA)
    message = _one_line(caught.value, path)
    assert message.startswith(f"{path}:{line}: not valid JSON"), message
    assert SECRET not in message


def test_jsonl_line_numbers_skip_what_pyarrow_skips_and_no_more(tmp_path):
    """Blank lines of spaces, tabs and \\r\\n are skipped; a later error names its own line."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'\n {"user": "a", "time": 1357000000, "dest": "A"}\r\n \t\r\n\n'
                     b'{"user": "b", "time": "x", "dest": "A"}\n')
    with pytest.raises(InputError, match=r"events\.jsonl:5: column 'time': "):
        _read(_jsonl_spec(path))


# -- 5: JSON ids beyond 2^53 read as floats ---------------------------------------------------------


@pytest.mark.parametrize("big", [9007199254740993, 9007199254740992, -9007199254740993, 10**20])
def test_a_jsonl_id_beyond_2_53_among_floats_is_refused_not_rounded(tmp_path, big):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"user": 9007199254740992, "time": 1357000000, "dest": "A"}\n'.replace(
        b"9007199254740992", str(big).encode()) + b'{"user": 1.0, "time": 1357000001, "dest": "A"}\n')
    with pytest.raises(InputError) as caught:
        _read(_jsonl_spec(path))
    message = _one_line(caught.value, path)
    assert message == (f"{path}:1: column 'user': not a key that can be read exactly: a number of 2^53 or more in "
                       f"magnitude in a column of floating-point numbers (write ids as strings)")


def test_jsonl_ids_below_2_53_among_floats_read_as_whole_numbers(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"user": 9007199254740991, "time": 1357000000, "dest": "A"}\n'
                     b'{"user": 1.0, "time": 1357000001, "dest": "A"}\n'
                     b'{"user": 9007199254740991, "time": 1357000001, "dest": 2e3}\n')
    events = _read(_jsonl_spec(path))
    assert events["user"] == ["9007199254740991", "1", "9007199254740991"]


def test_all_integer_jsonl_ids_beyond_2_53_stay_exact(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"user": 9007199254740993, "time": 1357000000, "dest": "A"}\n'
                     b'{"user": 9007199254740992, "time": 1357000001, "dest": "A"}\n')
    assert _read(_jsonl_spec(path))["user"] == ["9007199254740993", "9007199254740992"]


def test_keys_refuse_floats_that_do_not_say_which_integer_they_were():
    with pytest.raises(RowError) as caught:
        readers._keys(pa.array([1.0, 2.0**53, 3.0]))
    assert caught.value.index == 1 and "2^53" in caught.value.problem
    with pytest.raises(RowError, match="not a whole number"):
        readers._keys(pa.array([1.0, np.nan]))
    assert readers._keys(pa.array([-(2.0**53) + 1, 0.0])).to_pylist() == ["-9007199254740991", "0"]
