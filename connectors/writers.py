"""Write released rows to Parquet (default), CSV or JSONL, and read them back.

A release is small (one row per window and partition at most), so it is
written as one file. Rows are sorted on every column first, so the same
release always gives the same bytes. Rows are plain dicts of str, int, float
or bool values (None allowed); lists (e.g. a top-k list) are kept as lists in
Parquet and JSONL and written as JSON text in CSV. Window and period bounds
(ISO 8601 UTC strings in the rows) are timestamp[us, UTC] columns in Parquet.

Every file goes through `dpstream.connectors.files` (Apache Beam's `FileSystems`), so a path may be local or
any scheme the workers' Beam installation supports: the writers run inside Beam workers, which on a cluster
share no local disk with the submitting process.
"""
from __future__ import annotations

import io
import json
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from dpstream.connectors.errors import OutputError
from dpstream.connectors.files import join, read_bytes, write_bytes

FORMATS = ("parquet", "csv", "jsonl")
EXTENSIONS = {"parquet": ".parquet", "csv": ".csv", "jsonl": ".jsonl"}








def release_path(directory: str, name: str, fmt: str) -> str:
    """Where release `name` goes: DIRECTORY/NAME.EXT."""
    return join(directory, name + EXTENSIONS[fmt])






def _sort_key(row: dict[str, Any], columns: list[str]) -> tuple:
    return tuple((row.get(c) is None, json.dumps(row.get(c), sort_keys=True) if isinstance(row.get(c), (list, dict)) else row.get(c)) for c in columns)


def rows_to_table(rows: Iterable[dict[str, Any]]) -> pa.Table:
    """Rows -> an Arrow table with columns in first-seen order, sorted on every column."""
    rows = list(rows)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    rows.sort(key=lambda row: _sort_key(row, columns))
    return pa.Table.from_pylist(rows, schema=None) if rows else pa.table({})


def write_rows(rows: Iterable[dict[str, Any]], path: str, fmt: str = "parquet", columns: tuple[str, ...] = ()) -> int:
    """Write the rows to `path` (local or a URL) atomically (`write_bytes`); returns the row count. No rows give a
    file with the header `columns` (CSV, Parquet; JSON lines have no header). A local filesystem's refusal (full,
    read-only, not permitted) raises OutputError naming `path`."""
    if fmt not in FORMATS:
        raise ValueError(f"output.format must be one of {list(FORMATS)}, got {fmt!r}")
    table = rows_to_table(rows)
    if not table.num_rows and columns:
        table = pa.table({name: pa.array([], pa.string()) for name in columns})
    if fmt == "jsonl":
        data = "".join(json.dumps(row, sort_keys=False) + "\n" for row in table.to_pylist()).encode("utf-8")
    else:
        sink = pa.BufferOutputStream()
        if fmt == "parquet":
            pq.write_table(_times_as_timestamps(table), sink)
        else:
            pacsv.write_csv(_lists_as_json(table), sink)
        data = sink.getvalue().to_pybytes()
    try:
        write_bytes(path, data)
    except OSError as err:
        raise OutputError(f"{path}: cannot write: {err.strerror or err}") from err
    return table.num_rows


TIME_COLUMNS = ("window_start", "window_end", "period_start", "period_end")
"""Window and period bounds: ISO 8601 UTC strings in rows, JSON lines and CSV; timestamp[us, UTC] in Parquet."""


def _times_as_timestamps(table: pa.Table) -> pa.Table:
    for name in TIME_COLUMNS:
        if name in table.column_names and pa.types.is_string(table.schema.field(name).type):
            naive = pc.replace_substring_regex(table.column(name), r"\+00:00$", "")
            stamps = pc.cast(pc.cast(naive, pa.timestamp("us")), pa.timestamp("us", tz="UTC"))
            table = table.set_column(table.schema.get_field_index(name), name, stamps)
    return table


def _lists_as_json(table: pa.Table) -> pa.Table:
    for index, field in enumerate(table.schema):
        if pa.types.is_list(field.type) or pa.types.is_large_list(field.type) or pa.types.is_struct(field.type):
            text = pa.array([None if v is None else json.dumps(v) for v in table.column(index).to_pylist()], pa.string())
            table = table.set_column(index, field.name, text)
    return table


def read_rows(path: str, fmt: str | None = None) -> pa.Table:
    """A release file (local or a URL) back as an Arrow table (format from the extension unless given)."""
    fmt = fmt or next((f for f, ext in EXTENSIONS.items() if path.endswith(ext)), None)
    if fmt not in FORMATS:
        raise ValueError(f"cannot tell the format of {path!r}; expected one of {list(EXTENSIONS.values())}")
    data = read_bytes(path)
    if fmt == "parquet":
        return pq.read_table(pa.BufferReader(data))
    if not data:
        return pa.table({})
    if fmt == "csv":
        return pacsv.read_csv(io.BytesIO(data))
    return pajson.read_json(io.BytesIO(data))
