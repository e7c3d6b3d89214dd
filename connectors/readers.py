"""Read events from Parquet, CSV and JSONL files as Arrow record batches in `EVENT_SCHEMA`.

Batch-first: a file is cut into chunks (Parquet row groups; CSV blocks; a whole
JSONL file), each chunk is converted column by column with vectorised code,
and rows exist only as positions for error messages. `check_input` looks at
file names and headers only (no records), so a job can run it before its
ledger debit; `list_chunks` and `read_chunk` touch data and run after.

Column mapping: `user`, `timestamp` and `partition` name required input
columns; `value` is optional (each event counts 1.0 without it). User and
partition values are turned into strings; a missing value anywhere is an
error naming file, row and column. No error quotes a row's value, only where it
is (file, row or line, column) and what kind of problem it has (not a number,
not an ISO 8601 time, missing value, ...): row values are data, and the reason a
run failed is stored in the ledger and shown by `dpstream budget history`.
Errors about a file's header (`check_input`, before any run is admitted) may
name its columns.

CSV is read strictly, so that no row is merged into another or lost unseen:
each non-blank line of a CSV file is one row, and a file that breaks this line
rule is refused, naming the first line that does. Lines end in \\n or \\r\\n (a
carriage return anywhere else is refused) and a blank line (nothing before its
line end) is skipped. A quote is special only where pyarrow and Python's csv
module both take it to be: one that starts a field (first on its line, or right
after a comma) opens a quoted field, in which quotes are doubled, and which a
lone quote closes on the same line (no event column can hold a line break),
followed by a comma or the line end. A quote anywhere else is a character of an
unquoted field, as both parsers read it (`O"Brien`, `5'10"`, `b""c` and ` "x"`,
a space before the quote, are read as written). So an unterminated quote, a
line break inside quotes and text after a closing quote (`"a"b`: the csv module
refuses it, pyarrow reads `ab`) are refused, and a line passes exactly when the
strict csv module reads it, on its own, as one record. The rule is checked with
numpy on each block of lines (CSV_BLOCK_BYTES) before pyarrow parses it, and
pyarrow's row count against the block's non-blank lines after, which also
gives each row the line number its errors name. Line 1 is the header:
`check_input` refuses an empty (or blank) file; a file holding only a header
has no events. A UTF-8 byte-order mark at the start of a CSV or JSONL file is
skipped; anywhere else it is a character of its field (CSV, as the csv module
reads it, though pyarrow would drop one that starts a block) or refused
(JSONL: not valid JSON).

JSONL holds one JSON object per non-blank line (blank: JSON whitespace only).
pyarrow also reads an object spread over several lines or several objects on
one line; its row count is held to the non-blank lines, and a file that breaks
the rule is refused naming the first line that is not one whole object, so
every error names the right line. Ids that pyarrow reads as floats (a column
mixing integers and numbers with a point or exponent) are refused from 2^53 in
magnitude on, where two ids could round to one float.

Files are listed and read only through Apache Beam's `FileSystems` (`match`,
`open`), so `input.path` may be a local path or a URL of any scheme the Beam
installation supports (`gs://` with `apache-beam[gcp]`, `s3://` with
`apache-beam[aws]`, `hdfs://`). `check_input` runs on the launcher and
`list_chunks` / `read_chunk` inside the pipeline, on workers that may share no
disk with it; both reach the files the same way. Errors name a file as given
or as matched (a path or a URL). A glob uses Beam's pattern syntax (`*`, `?`,
`[...]` within one path segment, `**` across segments) and, as with the
shell, a wildcard does not match a name starting with a dot; on a local disk
Beam walks the tree under the pattern's fixed directory and does not follow
symbolic links to directories below it. Parquet is read from a seekable
stream (footer, then the row group's column chunks); CSV and JSONL files named
.gz, .bz2, .lz4 or .zst are decompressed, as pyarrow does for local paths; a
truncated or corrupt stream is refused naming the file.
Beam is imported when the first file is listed or read, not when this module is.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from dpstream.accounting.text import first_line
from dpstream.connectors import timestamps
from dpstream.connectors.errors import InputError, RowError
from dpstream.connectors.files import filesystems, is_local, open_file
from dpstream.connectors.schema import EVENT_SCHEMA, EventColumns

FORMATS = ("parquet", "csv", "jsonl")
CSV_BLOCK_BYTES = 1 << 22


@dataclass(frozen=True)
class InputSpec:
    """Where events come from and which columns hold the event fields.

    path: a file or a glob pattern, local or a URL (matches are read in sorted order).
    """

    format: str
    path: str
    user: str
    timestamp: str
    partition: str
    value: str | None = None
    timestamp_format: str = "auto"
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"input.format must be one of {list(FORMATS)}, got {self.format!r}")
        if not isinstance(self.path, str) or not self.path:
            raise ValueError(f"input.path must be a non-empty string, got {self.path!r}")
        self.event_columns  # checks the columns and the timestamp format

    @property
    def event_columns(self) -> EventColumns:
        return EventColumns(self.user, self.timestamp, self.partition, self.value, self.timestamp_format, self.timezone)

    @property
    def columns(self) -> dict[str, str]:
        """Event field -> input column."""
        return self.event_columns.columns


@dataclass(frozen=True)
class Chunk:
    """A unit of reading: one Parquet row group, or a whole CSV / JSONL file (path: local or a URL)."""

    path: str
    row_group: int | None = None
    first_row: int = 0


def files(spec: InputSpec) -> list[str]:
    """The input files (paths or URLs, as `FileSystems.match` names them), sorted; an error when none exist."""
    pattern = spec.path
    magic = _MAGIC.search(pattern)
    local = filesystems().get_scheme(pattern) in (None, "file")
    # Beam lists nothing when the part before the first wildcard names no directory (*.csv, */x.csv): match ./PATTERN
    here = local and magic is not None and "/" not in pattern[:magic.start()]
    try:
        if magic is None and pattern.endswith("/"):
            matches = []  # a directory, not a file (Beam would match everything under it)
        else:
            [result] = filesystems().match(["./" + pattern if here else pattern])
            matches = [m.path[2:] if here else m.path for m in result.metadata_list]
    except ValueError as err:  # no filesystem for the scheme, e.g. gs:// without apache-beam[gcp]
        raise InputError(f"input.path {pattern!r}: {err}") from err
    except OSError as err:  # BeamIOError: the listing failed
        raise InputError(f"input.path {pattern!r}: cannot list the files: {err}") from err
    if magic is not None:
        matches = [path for path in matches if _glob_compatible(path, pattern)]
    elif local:
        matches = [path for path in matches if not os.path.isdir(path)]
    if not matches:
        raise InputError(f"input.path {pattern!r}: no such file")
    return sorted(matches)


_MAGIC = re.compile(r"[*?[]")


def _glob_compatible(path: str, pattern: str) -> bool:
    """Whether Python's `glob` would also match: no wildcard matching a name that starts with a dot, and (no
    `**` in the pattern) one path segment per pattern segment, since Beam's `?` and `[!...]` also match '/'."""
    path_parts, pattern_parts = path.split("/"), pattern.split("/")
    if "**" in pattern:
        first = next(i for i, part in enumerate(pattern_parts) if _MAGIC.search(part))
        dotted = any(part.startswith(".") for part in pattern_parts[first:])
        return dotted or not any(part.startswith(".") for part in path_parts[first:])
    if len(path_parts) != len(pattern_parts):
        return False
    return not any(
        name.startswith(".") and not part.startswith(".") and _MAGIC.search(part)
        for name, part in zip(path_parts, pattern_parts)
    )


HEADER_BYTES = 1 << 20  # a header (CSV) or first record (JSONL) longer than this is refused
_HEADER_BLOCK = 1 << 16


def check_input(spec: InputSpec) -> list[str]:
    """Check that the files exist, are regular files, and name every mapped column once (CSV header, Parquet
    schema, first JSONL record), parsed as the readers parse them (an empty CSV file, which has no header, is
    refused); reads at most HEADER_BYTES of each file's text and no other record."""
    paths = files(spec)
    for path in paths:
        if is_local(path) and not os.path.isfile(path):
            raise InputError(f"{path}: not a regular file (a device, FIFO or socket cannot be an input)")
        available = _column_names(spec.format, path)
        if available is None:
            continue  # an empty JSONL file: no events
        for field, column in spec.columns.items():
            if column not in available:
                raise InputError(
                    f"{path}: input.{field} names column {column!r}, which the file does not have; "
                    f"columns: {', '.join(available)}"
                )
            if available.count(column) > 1:
                raise InputError(f"{path}: column {column!r} (input.{field}) appears {available.count(column)} "
                                 f"times in the header")
    return paths


def _column_names(fmt: str, path: str) -> list[str] | None:
    """The columns a reader will see: the Parquet schema, the CSV header (names stripped of spaces), the keys of
    the first JSONL record (None for a JSONL file without records)."""
    try:
        if fmt == "parquet":
            with open_file(path) as raw:
                return list(pq.read_schema(_seekable(raw)).names)
        if fmt == "csv":
            return _csv_header(path)
        line = _first_line(path, skip_blank=True)
        if not line.strip():
            return None
        record = json.loads(line)
        if not isinstance(record, dict):
            raise InputError(f"{path}:1: expected a JSON object per line, got {type(record).__name__}")
        return list(record)
    except InputError:
        raise
    except UnicodeDecodeError as err:  # its message quotes the bytes
        raise InputError(f"{path}: cannot read the {fmt} header: not UTF-8 text (byte {err.start + 1} of the "
                         f"first line)") from err
    except (OSError, pa.ArrowException, ValueError) as err:
        raise InputError(f"{path}: cannot read the {fmt} header: {first_line(err)}") from err


def _csv_header(path: str) -> list[str]:
    """The names in a CSV file's line 1, stripped of spaces. InputError when the file is empty (nothing but
    whitespace: no header), line 1 is blank, or it breaks the line rule (`_csv_line_numbers`)."""
    line = _first_line(path, skip_blank=False)
    if not line.strip():
        raise InputError(f"{path}: the file is empty (no header line)" if _is_blank(path) else
                         f"{path}:1: the header line is blank")
    _csv_line_numbers(path, line, 1)
    return [name.strip() for name in next(csv.reader([line.decode("utf-8")]))]


def _is_blank(path: str) -> bool:
    """Whether the file's text is nothing but whitespace (in its first HEADER_BYTES: a header check reads no
    more)."""
    with open_file(path) as raw:
        return not _without_bom(_text_stream(path, raw).read(HEADER_BYTES)).strip()


def _first_line(path: str, skip_blank: bool) -> bytes:
    """The file's first (non-blank, when skip_blank) line of text, reading blocks until it is complete and at
    most HEADER_BYTES in all; a byte-order mark at the start of the file is not part of it (`_without_bom`)."""
    data = b""
    with open_file(path) as raw:
        stream = _text_stream(path, raw)  # compressed streams have no readline
        while len(data) < HEADER_BYTES:
            block = stream.read(min(_HEADER_BLOCK, HEADER_BYTES - len(data)))
            data += block
            complete = _without_bom(data).split(b"\n")[:-1]
            if not block or (any(line.strip() for line in complete) if skip_blank else complete):
                break
    lines = _without_bom(data).split(b"\n")
    chosen = next((line for line in lines if line.strip()), b"") if skip_blank else lines[0]
    if chosen is lines[-1] and len(data) == HEADER_BYTES:
        raise InputError(f"{path}: the first line is longer than {HEADER_BYTES} bytes")
    return chosen.rstrip(b"\r")


_BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark


def _without_bom(text: bytes) -> bytes:
    """`text` (the start of a file) without a leading UTF-8 byte-order mark, which editors and spreadsheet exports
    write and pyarrow and `check_input` skip: only there is it not a character of the data."""
    return text[len(_BOM):] if text.startswith(_BOM) else text


def list_chunks(spec: InputSpec) -> list[Chunk]:
    """Every chunk of every input file (reads Parquet footers)."""
    chunks: list[Chunk] = []
    for path in files(spec):
        if spec.format != "parquet":
            chunks.append(Chunk(path))
            continue
        try:
            with open_file(path) as raw:
                metadata = pq.ParquetFile(_seekable(raw)).metadata
        except (OSError, pa.ArrowException) as err:
            raise InputError(f"{path}: not a readable Parquet file: {err}") from err
        first = 0
        for group in range(metadata.num_row_groups):
            chunks.append(Chunk(path, group, first))
            first += metadata.row_group(group).num_rows
    return chunks


def read_chunk(spec: InputSpec, chunk: Chunk) -> Iterator[pa.RecordBatch]:
    """The chunk's events as record batches in EVENT_SCHEMA."""
    if spec.format == "parquet":
        yield from _read_parquet(spec, chunk)
    elif spec.format == "csv":
        yield from _read_csv(spec, chunk)
    else:
        yield from _read_jsonl(spec, chunk)


def read_events(spec: InputSpec) -> Iterator[pa.RecordBatch]:
    """All events of the input, chunk after chunk (outside Beam: tests, notebooks)."""
    for chunk in list_chunks(spec):
        yield from read_chunk(spec, chunk)


# -- files -----------------------------------------------------------------------------------------






def _seekable(raw) -> pa.NativeFile:
    """What pyarrow's Parquet reader needs: random access. Local files and Beam's object-store streams
    (gs://, s3://, hdfs://) seek; any other stream is read into memory first."""
    if raw.seekable():
        return pa.PythonFile(raw, mode="r")
    return pa.BufferReader(raw.read())


_CODECS = {".bz2": "bz2", ".gz": "gzip", ".lz4": "lz4", ".zst": "zstd"}  # what pyarrow detects on a local path


def _text_stream(path: str, raw) -> pa.NativeFile | _Decompressed:
    """A CSV or JSONL file's text bytes, decompressed when its name ends in a compression extension."""
    stream = pa.PythonFile(raw, mode="r")
    codec = next((codec for ext, codec in _CODECS.items() if path.endswith(ext)), None)
    return _Decompressed(path, pa.CompressedInputStream(stream, codec), codec) if codec else stream


_DECOMPRESSION_FAILED = re.compile(r"truncated compressed stream|decompress|inflate", re.IGNORECASE)


class _Decompressed:
    """A compressed file's text: `read` as pyarrow's stream reads it, a truncated or corrupt stream an InputError
    naming the file (pyarrow raises a bare OSError that names neither the file nor its format)."""

    def __init__(self, path: str, stream: pa.NativeFile, codec: str) -> None:
        self._path, self._stream, self._codec = path, stream, codec

    def read(self, size: int | None = None) -> bytes:
        try:
            return self._stream.read(size)
        except OSError as err:
            if not _DECOMPRESSION_FAILED.search(str(err)):
                raise  # not the codec's: the file could not be read (the filesystem's own error)
            raise InputError(f"{self._path}: cannot decompress: truncated or corrupt {self._codec} stream") from err


def _read_text(path: str) -> bytes:
    with open_file(path) as raw:
        return _text_stream(path, raw).read()


# -- formats ---------------------------------------------------------------------------------------


def _read_parquet(spec: InputSpec, chunk: Chunk) -> Iterator[pa.RecordBatch]:
    columns = list(dict.fromkeys(spec.columns.values()))
    try:
        with open_file(chunk.path) as raw:
            parquet = pq.ParquetFile(_seekable(raw))
            _require_columns(spec, chunk.path, parquet.schema_arrow.names)  # a missing one would be left out
            table = parquet.read_row_group(chunk.row_group, columns=columns)
    except (OSError, pa.ArrowException) as err:
        raise InputError(f"{chunk.path}: row group {chunk.row_group}: cannot read: {err}") from err
    yield to_events(table, spec.event_columns, chunk.path, lambda i: chunk.first_row + i + 1)


def _require_columns(spec: InputSpec, path: str, available: list[str]) -> None:
    """InputError unless the file read now still has every mapped column: `check_input` looked at the headers
    before the run was admitted, and a file can be replaced (or a new one match a glob) since. The message names
    the column but not the file's header, whose text a run's failure reason (stored in the ledger) must not carry."""
    for field, column in spec.columns.items():
        if column not in available:
            raise InputError(f"{path}: input.{field} names column {column!r}, which the file does not have (it "
                             f"changed or appeared after the run checked the input)")


def _read_csv(spec: InputSpec, chunk: Chunk) -> Iterator[pa.RecordBatch]:
    """One batch per block of lines: each block is held to the line rule (`_csv_line_numbers`) before pyarrow
    parses it, and pyarrow's rows to one per non-blank line after (`_check_row_count`)."""
    columns = list(dict.fromkeys(spec.columns.values()))
    header = _column_names("csv", chunk.path) or []  # stripped, as the header check reads them
    _require_columns(spec, chunk.path, header)
    options = _csv_options(header, columns)
    with open_file(chunk.path) as raw:
        for first, block in _csv_blocks(chunk.path, _text_stream(chunk.path, raw)):
            lines = _csv_line_numbers(chunk.path, block, first)
            if not lines.size:
                continue
            try:
                table = pacsv.read_csv(pa.py_buffer(_keep_bom(block)), **options)
            except pa.ArrowInvalid as err:
                raise _locate_csv_error(chunk.path, block, first, err, header, columns) from err
            _check_row_count(chunk.path, table, lines)
            yield to_events(table, spec.event_columns, chunk.path, lambda i: int(lines[i]))


def _keep_bom(block: bytes) -> bytes:
    """`block` as pyarrow must parse it to keep a byte-order mark that starts it: pyarrow skips one at the start of
    any buffer, but within the file (a block starts at a line after the header) it is a character of the field, as
    Python's csv module reads it, and dropping it could make two keys one. A blank line before it (which pyarrow
    skips) keeps it; the copy is made only for such a block."""
    return b"\n" + block if block.startswith(_BOM) else block


def _csv_options(header: list[str], columns: list[str]) -> dict:
    """pyarrow's options for one block of lines: the header's names, the mapped columns as text, the whole block
    parsed at once (it is no longer than CSV_BLOCK_BYTES), no line break inside quotes."""
    return {
        "read_options": pacsv.ReadOptions(column_names=header, block_size=CSV_BLOCK_BYTES),
        "parse_options": pacsv.ParseOptions(newlines_in_values=False),
        "convert_options": pacsv.ConvertOptions(
            include_columns=columns,
            column_types={name: pa.string() for name in columns},
            null_values=[""],  # only an empty field is missing: NA, null, None, ... are values (user ids, partitions)
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        ),
    }


def _csv_blocks(path: str, stream: pa.NativeFile) -> Iterator[tuple[int, bytes]]:
    """The lines after the header (line 1) in blocks of whole lines (`_line_blocks`), each with the number of its
    first line."""
    blocks = _line_blocks(path, stream)
    _, head = next(blocks, (1, b""))
    yield 2, head[head.find(b"\n") + 1 or len(head):]
    yield from blocks


def _line_blocks(path: str, stream: pa.NativeFile) -> Iterator[tuple[int, bytes]]:
    """The text in blocks of whole lines of at most CSV_BLOCK_BYTES, each with the number of its first line; a
    block ends with a line feed, the last one maybe with the end of the file. InputError for a longer line."""
    number, rest = 1, b""
    while more := stream.read(CSV_BLOCK_BYTES - len(rest)):
        data = rest + more
        cut = data.rfind(b"\n") + 1
        if not cut and len(data) == CSV_BLOCK_BYTES:
            raise InputError(f"{path}:{number}: a line longer than {CSV_BLOCK_BYTES} bytes (the read block)")
        if cut:
            yield number, data[:cut]
            number += int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8, count=cut) == _LF))
        rest = data[cut:]
    if rest:
        yield number, rest


_LF, _CR, _QUOTE, _COMMA = b"\n\r\","
_LONE_RETURN = "a carriage return that does not end its line (lines end in \\n or \\r\\n)"
_AFTER_CLOSE = ("text after a closing quote (a field that starts with a quote is quoted whole: its quotes doubled, "
                "a comma or the line end after the closing one)")
_OPEN_QUOTE = "a quoted field not closed on its line (an unterminated quote, or a line break inside quotes)"


def _csv_line_numbers(path: str, block: bytes, first: int) -> np.ndarray:
    """The numbers of the non-blank lines of `block` (whole lines of a CSV file, the first numbered `first`): the
    rows pyarrow parses from it, in order, when the block keeps the line rule. InputError naming the first line
    that breaks it: a carriage return not ending its line (`_lone_return`), a quoted field not closed on its line
    or followed by text (`_misplaced_quote`)."""
    text = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(text == _LF)
    position, problem = min(_lone_return(text), _misplaced_quote(text, ends))
    if position < text.size:
        raise InputError(f"{path}:{first + int(np.searchsorted(ends, position))}: {problem}")
    starts = np.concatenate(([0], ends + 1))
    starts = starts[starts < text.size]  # every line from a start on holds at least one byte
    filled = (text[starts] != _LF) & (text[starts] != _CR)  # a blank line has nothing before its \n or \r\n
    return first + np.flatnonzero(filled)


def _lone_return(text: np.ndarray) -> tuple[int, str]:
    """The position of the first carriage return that is not part of a \\r\\n line end (pyarrow and Python's csv
    module end a line there, so the file's lines would not be its rows), or len(text) when there is none."""
    returns = np.flatnonzero(text == _CR)
    lone = returns[text[np.minimum(returns + 1, text.size - 1)] != _LF]  # a \r last in the text is followed by itself
    return (int(lone[0]) if lone.size else text.size), _LONE_RETURN


def _misplaced_quote(text: np.ndarray, ends: np.ndarray) -> tuple[int, str]:
    """The position of the first quote that breaks the quote rule, each line a record of its own, or len(text)
    when there is none. A quote that starts a field (first in the text or after a \\n or a comma) opens a quoted
    field, in which quotes are doubled and which a lone quote closes; the closing quote must be followed by a
    comma or the line end (`ends`: the positions of the \\n), on its line. Any other quote is a character of an
    unquoted field, as pyarrow and Python's csv module both read it.

    One numpy pass over the bytes finds the quotes; the rest works on runs of adjacent quotes. A run keeps the
    state (a quoted field open or not) when it is even: doubled quotes inside a quoted field, characters of an
    unquoted one, or a quoted field opened and closed at a field start. An odd run at a field start flips it (it
    opens a field, or closes one open since before the comma), an odd run elsewhere resets it to closed (it
    closes an open field, or is characters of an unquoted one). So the state before a run is the parity of the
    flips since the last reset; line ends need no reset, since up to the first line that breaks the rule every
    line ends with no field open. A run ends a quoted field when it is odd inside one or even at a field start
    outside one, and must then be followed by a comma or a line end; no field may be open after the last run
    before a line end."""
    quotes = np.flatnonzero(text == _QUOTE).astype(np.int32)  # a block is shorter than 2**31 bytes
    if not quotes.size:
        return text.size, ""
    breaks = np.flatnonzero(np.diff(quotes) != 1)  # the last quote of each run but the last run
    first = np.empty(breaks.size + 1, dtype=np.int32)
    last = np.empty(breaks.size + 1, dtype=np.int32)
    first[0], first[1:], last[:-1], last[-1] = quotes[0], quotes[breaks + 1], quotes[breaks], quotes[-1]
    odd = (last - first) & 1 == 0
    before = text[first - 1]  # for a quote first in the text, its last byte: overruled below
    at_start = (before == _COMMA) | (before == _LF)
    at_start[0] |= first[0] == 0
    after = text[np.minimum(last + 1, text.size - 1)]  # for a quote last in the text, itself: overruled below
    at_end = (after == _COMMA) | (after == _LF) | (after == _CR)
    at_end[-1] |= last[-1] == text.size - 1
    flips = at_start & odd
    flipped = np.cumsum(flips, dtype=np.int32) - flips  # flips before each run
    reset = np.empty(first.size, dtype=bool)
    reset[0] = True
    np.greater(odd[:-1], at_start[:-1], out=reset[1:])  # the run before was odd and not at a field start
    inside = (flipped - np.maximum.accumulate(np.where(reset, flipped, 0))) & 1 == 1  # a field is open before it
    unended = ~at_end & np.where(inside, odd, at_start > odd)  # ends a quoted field, then no comma or line end
    problems = [(int(first[np.argmax(unended)]), _AFTER_CLOSE)] if unended.any() else []
    line_last = np.searchsorted(first, np.append(ends, text.size)) - 1  # the last run before each line end
    line_last = line_last[line_last >= 0]
    left_open = np.where(inside[line_last], ~odd[line_last], flips[line_last])
    problems += [(int(first[line_last[np.argmax(left_open)]]), _OPEN_QUOTE)] if left_open.any() else []
    return min(problems, default=(text.size, ""))


def _check_row_count(path: str, table: pa.Table, lines: np.ndarray) -> None:
    """InputError unless pyarrow parsed one row per non-blank line of the block: the line rule makes it so, and
    the line numbers of errors and the completeness of the events rest on it."""
    if table.num_rows != lines.size:
        raise InputError(f"{path}:{lines[0]}: {table.num_rows} rows parsed from the {lines.size} non-blank lines "
                         f"from here to line {lines[-1]}")


_UNDECODABLE = re.compile("[\udc80-\udcff]")  # bytes that are not UTF-8, as errors="surrogateescape" decodes them


def _locate_csv_error(path: str, block: bytes, first: int, err: Exception, header: list[str],
                      columns: list[str]) -> InputError:
    """Find the first line of `block` (whole lines of a CSV file from line `first` on, one record each: quotes and
    line ends were checked before pyarrow ran, `_csv_line_numbers`) whose field count differs from the header's,
    or whose field in one of `columns` (the mapped ones, which pyarrow converts) is not UTF-8 (error path only).
    pyarrow's own message can quote the row ("Expected 3 columns, got 4: <the row>"), so only its kind is passed
    on (`_csv_problem`)."""
    text = io.StringIO(block.decode("utf-8", errors="surrogateescape"), newline="")
    reader = csv.reader(text)
    mapped = [(i, name) for i, name in enumerate(header) if name in columns]
    try:
        for fields in reader:
            line = first + reader.line_num - 1
            if not fields:
                continue
            if len(fields) != len(header):
                return InputError(f"{path}:{line}: expected {len(header)} fields, got {len(fields)}")
            for i, name in mapped:
                if _UNDECODABLE.search(fields[i]):
                    return InputError(f"{path}:{line}: column {name!r}: not UTF-8 text")
    except csv.Error as bad:  # the csv module's messages name the problem, never the field
        return InputError(f"{path}:{first + reader.line_num - 1}: {bad}")
    return InputError(f"{path}: cannot read as CSV: {_csv_problem(err)}")


def _csv_problem(err: Exception) -> str:
    """The kind of problem pyarrow found in a CSV file, without the row text its message may quote."""
    text = first_line(err)
    counted = re.search(r"Expected (\d+) columns, got (\d+)", text)
    if counted:
        return f"expected {counted.group(1)} fields, got {counted.group(2)}"
    if "UTF8" in text or "UTF-8" in text:
        return "not UTF-8 text"
    return "malformed CSV"


def _read_jsonl(spec: InputSpec, chunk: Chunk) -> Iterator[pa.RecordBatch]:
    """One object per non-blank line: pyarrow parses the file, and its row count is held to the non-blank lines
    (`_jsonl_line_numbers`), since it also reads an object spread over several lines, or several on one, which
    would put every later error on the wrong line."""
    data = _read_text(chunk.path)  # read once: pyarrow parses it, line numbers and error paths look at it again
    if not _without_bom(data).strip(_JSON_SPACE):
        return  # no records: no events
    try:
        table = pajson.read_json(pa.BufferReader(data))
    except pa.ArrowInvalid as err:
        if "changed from" not in str(err):
            raise _locate_json_error(chunk.path, data, err) from err
        table = _read_jsonl_mixed(chunk.path, data, spec)
    lines = _jsonl_line_numbers(data)
    if table.num_rows != lines.size:
        raise _locate_json_error(chunk.path, data, None, table.num_rows, lines)
    missing = [column for column in spec.columns.values() if column not in table.column_names]
    if missing:
        raise InputError(f"{chunk.path}:1: column {missing[0]!r}: missing key (in every line of the file)")
    yield to_events(table, spec.event_columns, chunk.path, lambda i: int(lines[i]))


_JSON_SPACE = b" \t\n\r"  # JSON's whitespace: what pyarrow skips between records (not \x0b or \x0c)
_BLANK = np.zeros(256, dtype=bool)
_BLANK[list(_JSON_SPACE)] = True


def _jsonl_line_numbers(data: bytes) -> np.ndarray:
    """1-based numbers of the lines (ended by \\n) that are not blank (pyarrow skips blank lines, and a byte-order
    mark at the start of the file)."""
    text = np.frombuffer(data, dtype=np.uint8)
    starts = np.concatenate(([0], np.flatnonzero(text == ord("\n")) + 1))
    starts = starts[starts < text.size]  # every line from a start on holds at least one byte
    if not starts.size:
        return np.zeros(0, dtype=np.int64)
    printed = ~_BLANK[text]
    if data.startswith(_BOM):
        printed[:len(_BOM)] = False
    filled = np.logical_or.reduceat(printed, starts)
    return (np.flatnonzero(filled) + 1).astype(np.int64)


def _read_jsonl_mixed(path: str, data: bytes, spec: InputSpec) -> pa.Table:
    """Slow path, line by line, for a column whose JSON type changes between lines (ids as numbers and strings).

    A column of mixed types becomes text (JSON numbers in their JSON spelling), so the usual conversions
    report a value that still does not fit (e.g. "not a number"), naming its row and column.
    """
    records = list(_json_objects(path, data))
    arrays = {}
    for column in spec.columns.values():
        values = [record.get(column) for record in records]
        try:
            arrays[column] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # mixed types, or integers beyond int64
            arrays[column] = pa.array([v if v is None or isinstance(v, str) else json.dumps(v) for v in values], pa.string())
    return pa.table(arrays)


def _json_objects(path: str, data: bytes) -> Iterator[dict]:
    """The JSON object on each non-blank line (lines end in \\n, as `_jsonl_line_numbers` counts them; a
    byte-order mark at the start of the file is skipped); the first bad line raises InputError naming file and
    line."""
    with io.TextIOWrapper(io.BytesIO(_without_bom(data)), encoding="utf-8", errors="replace", newline="\n") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip(_JSON_SPACE.decode()):
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as bad:
                raise InputError(f"{path}:{number}: not valid JSON: {bad.msg}") from bad
            if not isinstance(record, dict):
                raise InputError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            yield record


def _locate_json_error(path: str, data: bytes, err: Exception | None, rows: int = 0,
                       lines: np.ndarray | None = None) -> InputError:
    """Find the first line that pyarrow refused (`err`), or that is not one whole JSON object when pyarrow read
    `rows` records from the non-blank `lines`, reading line by line (error path only)."""
    try:
        for _ in _json_objects(path, data):
            pass
    except InputError as located:
        return located
    if err is None and lines is not None and lines.size:
        return InputError(f"{path}:{lines[0]}: {rows} records parsed from the {lines.size} non-blank lines from here "
                          f"to line {lines[-1]} (one JSON object per line)")
    return InputError(f"{path}: cannot read as JSON lines: {_json_problem(err) if err else 'malformed JSON'}")


def _json_problem(err: Exception) -> str:
    """The kind of problem pyarrow found in a JSON lines file, without any text of the file."""
    text = first_line(err)
    if "changed from" in text:
        return "a key whose JSON type changes between lines"
    return "malformed JSON"


# -- conversion ------------------------------------------------------------------------------------


def to_events(table: pa.Table, spec: EventColumns, path: str, row_of) -> pa.RecordBatch:
    """Mapped columns of `table` -> one EVENT_SCHEMA batch; `row_of(i)` gives the row (or element) to report.

    `path` names the input in errors (a file, a subscription, a PCollection)."""

    def convert(field: str, function):
        column = spec.columns[field]
        try:
            return function(table.column(column).combine_chunks())
        except RowError as err:
            raise InputError(f"{path}:{row_of(err.index)}: column {column!r}: {err.problem}") from err

    n = table.num_rows
    user = convert("user", _keys)
    partition = convert("partition", _keys)
    micros = convert("timestamp", lambda a: timestamps.to_micros(a, spec.timestamp_format, spec.timezone))
    value = convert("value", _values) if spec.value is not None else np.ones(n, dtype=np.float64)
    return pa.RecordBatch.from_arrays(
        [user, pa.array(micros, pa.int64()), partition, pa.array(value, pa.float64())], schema=EVENT_SCHEMA
    )


_EXACT_FLOAT = 2.0**53  # float64 holds every integer below it in magnitude, and not every one from it on


def _keys(values: pa.Array) -> pa.Array:
    if values.null_count:
        raise RowError(int(np.flatnonzero(pc.is_null(values).to_numpy(zero_copy_only=False))[0]), "missing value")
    if pa.types.is_floating(values.type):
        numbers = values.to_numpy(zero_copy_only=False)
        # a whole number below 2^53 in magnitude: every such integer has a float of its own, so no two ids merge
        # (JSON ids read as floats when the column also holds a number written with a point or exponent)
        exact = (numbers == np.floor(numbers)) & (np.abs(numbers) < _EXACT_FLOAT)
        if not exact.all():
            index = int(np.flatnonzero(~exact)[0])
            if np.isfinite(numbers[index]) and abs(numbers[index]) >= _EXACT_FLOAT:
                raise RowError(index, "not a key that can be read exactly: a number of 2^53 or more in magnitude in "
                                      "a column of floating-point numbers (write ids as strings)")
            raise RowError(index, "not a key: a number that is not a whole number within int64 (keys are strings or "
                                  "integers)")
        values = values.cast(pa.int64())
    try:
        return values.cast(pa.string())
    except pa.ArrowNotImplementedError as err:
        raise RowError(0, f"expected a key (string or integer), got a column of type {values.type}") from err
    except pa.ArrowInvalid as err:  # a binary column (Parquet) whose bytes are not UTF-8 text
        raise RowError(_first_not_utf8(values), "not UTF-8 text") from err


def _first_not_utf8(values: pa.Array) -> int:
    """The position of the first value that is not UTF-8 text (error path only)."""
    for index, value in enumerate(values.to_pylist()):
        try:
            value.decode("utf-8")
        except (AttributeError, UnicodeDecodeError):
            return index
    return 0


def _values(values: pa.Array) -> np.ndarray:
    if values.null_count:
        raise RowError(int(np.flatnonzero(pc.is_null(values).to_numpy(zero_copy_only=False))[0]), "missing value")
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        text = pd.Series(values.to_pylist(), dtype=object)
        numbers = pd.to_numeric(text.str.strip(), errors="coerce").to_numpy(dtype=np.float64)
        bad = np.isnan(numbers)
        if bad.any():
            index = int(np.flatnonzero(bad)[0])
            raise RowError(index, "not a number")
    elif pa.types.is_integer(values.type) or pa.types.is_floating(values.type) or pa.types.is_boolean(values.type):
        # integers beyond 2**53 round to the nearest float64; values are clamped to [min_value, max_value] anyway
        numbers = values.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)
    else:
        raise RowError(0, f"expected numbers, got a column of type {values.type}")
    finite = np.isfinite(numbers)
    if not finite.all():
        index = int(np.flatnonzero(~finite)[0])
        raise RowError(index, "not a finite number (NaN or infinity)")
    return numbers
