"""Strict CSV (issue 33): a CSV file is read exactly as a strict parser reads it, or refused with a one-line error
naming the file; rows are never merged, lost or invented silently, and errors name the right line.

The first fuzzer writes CSV text of hostile cells (quoted and unquoted commas, quotes and line breaks, unterminated
quotes, text after a closing quote, quotes inside unquoted fields, \\r\\n, blank lines, ragged rows, a missing final
newline) and compares the reader with Python's csv module (strict=True, newline=""), which refuses an unterminated
quote. The reader may refuse more than the reference (a quoted line break, a lone \\r, a bad value), but whatever
it returns is exactly the reference's rows.

The second fuzzer guards against refusing too much: text in which every line is one record the strict csv module
reads, with the header's field count, and no lone \\r, is read as that module reads it, whatever quotes its
unmapped column and partition strings hold (`O"Brien`, `5'10"`, `b""c`, ` "x"`, quoted fields with doubled quotes);
only a value of a mapped column may be refused."""
from __future__ import annotations

import csv
import gzip
import io
import os
import re

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from dpstream.connectors import readers
from dpstream.connectors.errors import InputError
from dpstream.connectors.readers import InputSpec, check_input, read_events
from dpstream.connectors.schema import EVENT_SCHEMA

LONG = os.environ.get("DPSTREAM_CSV_FUZZ_EXAMPLES")
SETTINGS = settings(max_examples=int(LONG or 200), deadline=None, derandomize=LONG is None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
"""CI: the same 200 examples on every run (derandomized); DPSTREAM_CSV_FUZZ_EXAMPLES asks for a longer, randomised
run."""

COLUMNS = ["user", "time", "dest", "value"]
HEADERS = st.sampled_from([COLUMNS, COLUMNS + ["note"]])  # note: a column the reader does not map (bug 1's genre)
RAW = st.text(alphabet='ab ,"\n\r', max_size=6)
HOSTILE = st.one_of(
    RAW,  # as written: stray quotes, commas that split it, line breaks that end the row
    RAW.map(lambda s: '"' + s.replace('"', '""') + '"'),  # quoted as RFC 4180 says (line breaks too)
    RAW.map(lambda s: '"' + s),  # an unterminated quote
    st.tuples(RAW, RAW).map(lambda p: f'"{p[0]}"{p[1]}'),  # text after the closing quote
    st.tuples(st.text(alphabet='a"', max_size=2), st.text(alphabet='a "', min_size=1, max_size=2)).map(
        lambda p: f'"{p[0]}"{p[1]}'),  # the same, no comma or line break (only the quote rule refuses it)
    st.tuples(st.sampled_from("a "), RAW).map("".join),  # a quote inside an unquoted field (literal in both parsers)
    RAW.map(lambda s: "\ufeff" + s),  # a byte-order mark first in a field: a line's (and a block's) first for user
)


def _rarely(good: st.SearchStrategy, bad: st.SearchStrategy, odds: int) -> st.SearchStrategy:
    """`good`, or `bad` about once in `odds` draws (shrinking towards `good`): most rows must be readable for a
    lost or merged row to show."""
    return st.sampled_from([False] * (odds - 1) + [True]).flatmap(lambda hostile: bad if hostile else good)


TEXT_CELL = _rarely(st.text(alphabet="abc", min_size=1, max_size=3), HOSTILE, 6)
USER_CELL = _rarely(TEXT_CELL, st.text(alphabet="abc", min_size=1, max_size=3).map(lambda s: "\ufeff" + s), 6)
"""A byte-order mark first on a line that may start a block (line 2 always does), where pyarrow would drop it."""
TIME_CELL = _rarely(st.integers(10**8, 2 * 10**9).map(str), HOSTILE, 20)  # epoch seconds
VALUE_CELL = _rarely(st.sampled_from(["0", "-3", "2.5", "1e3"]), HOSTILE, 20)
ENDINGS = st.sampled_from(["\n", "\r\n"])
BLOCK_BYTES = st.sampled_from([64, 256, readers.CSV_BLOCK_BYTES])  # small blocks put rows on block boundaries


@st.composite
def _row(draw, width: int) -> list[str]:
    """One row's cells: mostly `width` of them, as a readable row needs, sometimes one more or fewer."""
    cells = [draw(USER_CELL), draw(TIME_CELL), draw(TEXT_CELL), draw(VALUE_CELL)]
    cells += [draw(TEXT_CELL) for _ in range(width - len(cells))]
    change = draw(_rarely(st.just(0), st.sampled_from([1, -1, -3]), 12))
    return cells + [draw(TEXT_CELL)] if change > 0 else cells[:width + change]


@st.composite
def _csv_text(draw) -> str:
    """A header line, then rows and blank lines, each line ended by \\n or \\r\\n, the last one maybe by nothing."""
    header = draw(HEADERS)
    rows = draw(st.lists(st.one_of(_row(len(header)), st.just([])), max_size=10))
    lines = [",".join(header)] + [",".join(cells) for cells in rows]
    text = "".join(line + draw(ENDINGS) for line in lines)
    text = draw(_rarely(st.just(""), st.just("\ufeff"), 4)) + text  # a byte-order mark before the header: skipped
    return text if draw(st.booleans()) else text.rstrip("\r\n")


def _strict_rows(path) -> list[list[str]] | None:
    """The file's rows after the header as Python's csv module reads them strictly (it gives [] for a blank line:
    skipped), or None when it refuses the file or a row's field count differs from the header's. A byte-order mark
    at the start of the file is skipped (utf-8-sig), one anywhere else is a character of its field."""
    with open(path, newline="", encoding="utf-8-sig") as handle:
        try:
            header, *rows = (row for row in csv.reader(handle, strict=True) if row)
        except csv.Error:
            return None
    if any(len(row) != len(header) for row in rows):
        return None
    return [[row[header.index("user")], row[header.index("dest")]] for row in rows]


def _events(path) -> pa.Table:
    spec = InputSpec("csv", str(path), "user", "time", "dest", "value")
    check_input(spec)
    return pa.Table.from_batches(list(read_events(spec)), schema=EVENT_SCHEMA)


@SETTINGS
@given(text=_csv_text(), block_bytes=BLOCK_BYTES)
def test_csv_reads_as_the_strict_reference_or_fails_with_one_line(tmp_path, monkeypatch, text, block_bytes):
    monkeypatch.setattr(readers, "CSV_BLOCK_BYTES", block_bytes)
    path = tmp_path / "events.csv"
    path.write_bytes(text.encode())
    try:
        table = _events(path)
    except InputError as err:
        event("refused")
        assert "\n" not in str(err) and str(err).startswith(f"{path}:"), str(err)
        return
    event("read")
    expected = _strict_rows(path)
    assert expected is not None, f"read {table.num_rows} rows of a file the strict parser refuses: {text!r}"
    read = [list(pair) for pair in zip(table.column("user").to_pylist(), table.column("partition").to_pylist())]
    assert read == expected, text


# -- not refusing too much -------------------------------------------------------------------------

INNER_QUOTE = st.tuples(st.sampled_from("aO5 "), st.text(alphabet="ab '\"", max_size=3),
                        st.text(alphabet="ab '\"", max_size=3)).map(lambda p: f'{p[0]}{p[1]}"{p[2]}')
"""An unquoted field holding a quote (not first): O"Brien, 5'10", b""c, ` "x"` (a space before a quote)."""
QUOTED = st.text(alphabet='ab ,"\'', max_size=6).map(lambda s: '"' + s.replace('"', '""') + '"')
LINE_RAW = st.text(alphabet='ab ,"', max_size=6)  # no line break, but maybe a line the csv module refuses or splits
QUOTY_CELL = st.sampled_from(["inner"] * 4 + ["quoted"] * 2 + ["plain", "raw"]).flatmap(lambda kind: {
    "inner": INNER_QUOTE, "quoted": QUOTED, "plain": st.text(alphabet="abc", min_size=1, max_size=3),
    "raw": _rarely(LINE_RAW, HOSTILE, 4)}[kind])
"""A cell of the unmapped note column or the partition column: mostly a quote inside an unquoted field or a quoted
field, sometimes text that breaks its line (the property then says nothing of the file)."""
NOTE_HEADERS = st.sampled_from([COLUMNS, COLUMNS + ["note"], ["note"] + COLUMNS, ["user", "time", "note", "dest",
                                                                                   "value"]])


@st.composite
def _quoty_csv_text(draw) -> str:
    """Like `_csv_text`, with valid user, time and value cells and `QUOTY_CELL`s in the partition and note columns."""
    header = draw(NOTE_HEADERS)
    cells = {"user": st.text(alphabet="abc", min_size=1, max_size=3), "time": st.integers(10**8, 2 * 10**9).map(str),
             "value": st.sampled_from(["0", "-3", "2.5", "1e3"]), "dest": QUOTY_CELL, "note": QUOTY_CELL}
    rows = draw(st.lists(st.one_of(st.tuples(*(cells[name] for name in header)).map(list), st.just([])), max_size=10))
    lines = [",".join(header)] + [",".join(row) for row in rows]
    text = "".join(line + draw(ENDINGS) for line in lines)
    return text if draw(st.booleans()) else text.rstrip("\r\n")


def _one_record_per_line(text: str) -> dict[int, list[str]] | None:
    """Line number -> the record the strict csv module reads from that non-blank line alone, when every line is one
    record it reads (no quoted field spans lines, no line it refuses) with the header's field count and the text has
    no lone \\r; None otherwise."""
    if re.search("\r(?!\n)", text):
        return None
    records: dict[int, list[str]] = {}
    for number, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if not line:
            continue
        try:
            rows = list(csv.reader(io.StringIO(line + "\n", newline=""), strict=True))
        except csv.Error:
            return None
        if len(rows) != 1 or (records and len(rows[0]) != len(records[1])):  # line 1: the header
            return None
        records[number] = rows[0]
    return records


@SETTINGS
@given(text=_quoty_csv_text(), block_bytes=BLOCK_BYTES)
def test_csv_both_parsers_read_alike_is_not_refused(tmp_path, monkeypatch, text, block_bytes):
    """The guard against over-strictness: a quote inside an unquoted field is a character in pyarrow and in the csv
    module alike, so it is no reason to refuse a file. Only a missing partition (an empty unquoted field) may be."""
    records = _one_record_per_line(text)
    event("every line one record" if records is not None else "a line breaks the rule (nothing to check)")
    if records is None:
        return
    header = records.pop(1)
    if any(re.search(r'(^|,)[^",\r\n]+"', line) for line in text.splitlines()[1:]):
        event("a quote inside an unquoted field")
    monkeypatch.setattr(readers, "CSV_BLOCK_BYTES", block_bytes)
    path = tmp_path / "events.csv"
    path.write_bytes(text.encode())
    note(repr(text))
    try:
        table = _events(path)
    except InputError as err:
        missing = re.fullmatch(rf"{re.escape(str(path))}:(\d+): column 'dest': missing value", str(err))
        assert missing and records[int(missing[1])][header.index("dest")] == "", f"refused: {err}"
        return
    expected = [[row[header.index("user")], row[header.index("dest")]] for row in records.values()]
    read = [list(pair) for pair in zip(table.column("user").to_pylist(), table.column("partition").to_pylist())]
    assert read == expected


# -- regressions -----------------------------------------------------------------------------------

MOVIELENS = "userId,movieId,rating,timestamp,genre"


def _ratings(path, lines: int, line: int, row: str):
    """A ratings file of `lines` lines (header included) whose line `line` is `row`; gzipped when PATH ends in .gz."""
    rows = [f"{n % 671 + 1},{n % 9066 + 1},{n % 10 / 2 + 0.5},{1260759144 + n},Comedy" for n in range(2, lines + 1)]
    rows[line - 2] = row
    text = "\n".join([MOVIELENS, *rows]).encode() + b"\n"
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    return InputSpec("csv", str(path), "userId", "timestamp", "movieId", "rating")


@pytest.mark.parametrize("name", ["ratings.csv", "ratings.csv.gz"])
def test_an_unterminated_quote_is_refused_at_its_line(tmp_path, name):
    """Bug 1: the old reader returned 50,000 of the 100,003 rows, the last one's genre holding every later line."""
    path = tmp_path / name
    spec = _ratings(path, 100_004, 50_001, '17,555,4.0,1260759144,"Drama')
    check_input(spec)
    with pytest.raises(InputError) as caught:
        list(read_events(spec))
    assert str(caught.value) == (f"{path}:50001: a quoted field not closed on its line (an unterminated quote, or a "
                                 f"line break inside quotes)")


def test_a_quoted_line_break_is_refused_at_the_line_it_opens(tmp_path):
    path = tmp_path / "f.csv"
    path.write_text('user,time,dest,value\na,1357034400,x,1\nb,1357034400,"Dra\nma",1\nc,1357034400,y,1\n')
    with pytest.raises(InputError, match=r"f\.csv:3: a quoted field not closed on its line") as caught:
        _events(path)
    assert "Dra" not in str(caught.value)


BLANK_LINES = "user,time,dest,value\r\na,1357034400,x,1\r\n\r\n\nb,1357034400,y,2\n\n"  # lines 1 to 6


@pytest.mark.parametrize("block_bytes", [32, readers.CSV_BLOCK_BYTES])
@pytest.mark.parametrize("bad, message", [("c,1357034400,z,SECRET", "column 'value': not a number"),
                                          ("c,1357034400,SECRET", "expected 4 fields, got 3"),
                                          ('c,1357034400,"zSECRET,1', "a quoted field not closed on its line"),
                                          ('c,1357034400,"z"SECRET,1', "text after a closing quote"),
                                          ("c,1357034400,z,1\rSECRET", "a carriage return that does not")])
def test_errors_after_blank_lines_name_their_line(tmp_path, monkeypatch, block_bytes, bad, message):
    """Bug 2: pyarrow skips blank lines, so a row's line is not its index plus 2; small blocks put rows and blank
    lines on block boundaries."""
    monkeypatch.setattr(readers, "CSV_BLOCK_BYTES", block_bytes)
    path = tmp_path / "f.csv"
    path.write_text(BLANK_LINES + bad + "\n", newline="")
    with pytest.raises(InputError) as caught:
        _events(path)
    assert str(caught.value).startswith(f"{path}:7: {message}") and "SECRET" not in str(caught.value), caught.value


@pytest.mark.parametrize("block_bytes", [32, readers.CSV_BLOCK_BYTES])
def test_blank_lines_crlf_rfc_quotes_and_a_missing_final_newline_read_as_written(tmp_path, monkeypatch, block_bytes):
    monkeypatch.setattr(readers, "CSV_BLOCK_BYTES", block_bytes)
    path = tmp_path / "f.csv"
    path.write_text(BLANK_LINES + '"c,d",1357034400,"say ""hi""",3', newline="")
    table = _events(path)
    assert table.column("user").to_pylist() == ["a", "b", "c,d"]
    assert table.column("partition").to_pylist() == ["x", "y", 'say "hi"']
    assert table.column("value").to_pylist() == [1.0, 2.0, 3.0]


QUOTES_INSIDE = ['O"Brien', "5'10\"", 'b""c', ' "x"', 'a"b"c', 'x"""']  # a quote inside an unquoted field


@pytest.mark.parametrize("block_bytes", [64, readers.CSV_BLOCK_BYTES])
@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_a_quote_inside_an_unquoted_field_is_a_character(tmp_path, monkeypatch, block_bytes, ending):
    """pyarrow and Python's csv module (strict or not) read a quote that does not start its field as a character,
    in a column the job maps (the partition) and in one it does not (note): O"Brien, 5'10", b""c, a space before a
    quote. The old rule refused these files."""
    monkeypatch.setattr(readers, "CSV_BLOCK_BYTES", block_bytes)
    lines = ["user,time,dest,value,note"] + [f"u{n},1357034400,{cell},1,{cell}" for n, cell in enumerate(QUOTES_INSIDE)]
    lines.append('v,1357034400,"Movie, ""x"" (1)",2,"5\'10"""')  # quoted as RFC 4180 says, beside them
    path = tmp_path / "f.csv"
    path.write_text(ending.join(lines) + ending, newline="")
    table = _events(path)
    assert table.column("partition").to_pylist() == QUOTES_INSIDE + ['Movie, "x" (1)']
    assert table.column("user").to_pylist() == [f"u{n}" for n in range(len(QUOTES_INSIDE))] + ["v"]
    with open(path, newline="") as handle:  # as both parsers read them
        assert [row[2] for row in csv.reader(handle, strict=True)][1:] == QUOTES_INSIDE + ['Movie, "x" (1)']


UNCLOSED, AFTER = "a quoted field not closed on its line", "text after a closing quote"


@pytest.mark.parametrize("block_bytes", [32, readers.CSV_BLOCK_BYTES])
@pytest.mark.parametrize("row, message", [('c,1357034400,"Drama,1,n', UNCLOSED),  # unterminated at a field start
                                          ('c,1357034400,x,1,"O"Brien', AFTER),  # an opening quote wherever it closes
                                          ('c,1357034400,"Dra,1,n\nO"Brien,1357034400,x,1,n', UNCLOSED),  # a line on
                                          ('c,1357034400,x,1,"a"b', AFTER),  # text after a closing quote
                                          ('c,1357034400,x,1,"a" ', AFTER),  # a space after it
                                          ('c,1357034400,x,1,""b', AFTER),  # an empty quoted field, then text
                                          ('c,1357034400,x,1,"a""', UNCLOSED)])  # its last quote doubled: still open
def test_a_quote_that_opens_a_field_still_closes_it_on_its_line(tmp_path, monkeypatch, block_bytes, row, message):
    """A quote first in its field opens a quoted field whatever quotes inside unquoted fields came before (here
    O"Brien and 5'10" on lines 2 and 3): it must close on its line and be followed by a comma or the line end. Text
    after a closing quote is refused: Python's strict csv module refuses it ("',' expected after '\"'") and
    pyarrow appends it to the field ("a"b reads ab), so they disagree."""
    monkeypatch.setattr(readers, "CSV_BLOCK_BYTES", block_bytes)
    path = tmp_path / "f.csv"
    path.write_text(f'user,time,dest,value,note\na,1357034400,O"Brien,1,n\nb,1357034400,x,1,5\'10"\n{row}\n'
                    f"d,1357034400,y,1,n\n")
    with pytest.raises(InputError) as caught:
        _events(path)
    assert str(caught.value).startswith(f"{path}:4: {message}"), caught.value


def _both_parsers(line: str) -> tuple[list[str] | str, list[str]]:
    """The fields of `line` as Python's strict csv module reads them (or its error) and as pyarrow does."""
    try:
        strict = next(csv.reader(io.StringIO(line + "\n", newline=""), strict=True))
    except csv.Error as err:
        strict = str(err)
    names = [f"c{i}" for i in range(line.count(",") + 1)]  # no comma is quoted in these lines
    table = readers.pacsv.read_csv(
        pa.py_buffer(line.encode() + b"\n"), read_options=readers.pacsv.ReadOptions(column_names=names),
        convert_options=readers.pacsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string())))
    return strict, [table.column(name)[0].as_py() for name in names]


@pytest.mark.parametrize("cell", QUOTES_INSIDE)
def test_both_parsers_read_a_quote_inside_an_unquoted_field_as_a_character(cell):
    """Why the reader accepts these (measured, pyarrow 25 and Python 3.11): both parsers read them as written."""
    assert _both_parsers(f"x,{cell},y") == (["x", cell, "y"], ["x", cell, "y"])


@pytest.mark.parametrize("cell, arrow", [('"a"b', "ab"), ('"a" ', "a "), ('""b', "b")])
def test_the_parsers_disagree_on_text_after_a_closing_quote(cell, arrow):
    """Why the reader refuses these: the strict csv module refuses the line, pyarrow appends the text to the field."""
    assert _both_parsers(f"x,{cell},y") == ("',' expected after '\"'", ["x", arrow, "y"])


@pytest.mark.parametrize("name, contents", [("f.csv", b""), ("f.csv", b"\n"), ("f.csv", b" \r\n\t\n"),
                                            ("f.csv.gz", gzip.compress(b"", mtime=0))])
def test_an_empty_file_says_so_before_any_run(tmp_path, name, contents):
    """Bug 3: it said `input.user names column 'user', which the file does not have; columns: `."""
    path = tmp_path / name
    path.write_bytes(contents)
    with pytest.raises(InputError) as caught:
        check_input(InputSpec("csv", str(path), "user", "time", "dest", "value"))
    assert str(caught.value) == f"{path}: the file is empty (no header line)"


def test_a_blank_first_line_is_not_a_header(tmp_path):
    path = tmp_path / "f.csv"
    path.write_text("\nuser,time,dest,value\na,1357034400,x,1\n")
    with pytest.raises(InputError, match=r"f\.csv:1: the header line is blank$"):
        check_input(InputSpec("csv", str(path), "user", "time", "dest", "value"))


@pytest.mark.parametrize("contents", ["user,time,dest,value\n", "user,time,dest,value", "user,time,dest,value\r\n\n"])
def test_a_header_only_file_has_no_events(tmp_path, contents):
    path = tmp_path / "f.csv"
    path.write_text(contents, newline="")
    assert _events(path).num_rows == 0


def test_a_row_count_that_disagrees_with_the_lines_is_refused(tmp_path, monkeypatch):
    """The last guard: were pyarrow to parse a block into other rows than its non-blank lines, no event of it is
    read (here pyarrow is made to lose the first row)."""
    parse = readers.pacsv.read_csv
    monkeypatch.setattr(readers.pacsv, "read_csv", lambda *args, **kwargs: parse(*args, **kwargs).slice(1))
    path = tmp_path / "f.csv"
    path.write_text(BLANK_LINES)
    with pytest.raises(InputError, match=r"f\.csv:2: 1 rows parsed from the 2 non-blank lines from here to line 5$"):
        _events(path)


def test_a_line_longer_than_the_read_block_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "CSV_BLOCK_BYTES", 64)
    path = tmp_path / "f.csv"
    path.write_text(f"user,time,dest,value\na,1357034400,x,1\nb,1357034400,{'y' * 64},1\n")
    with pytest.raises(InputError, match=r"f\.csv:3: a line longer than 64 bytes \(the read block\)$"):
        _events(path)
