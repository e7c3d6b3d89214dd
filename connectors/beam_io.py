"""Beam transforms over the connectors: `ReadEvents` reads files and `ToEvents` converts a PCollection of the user's
own events, both into EVENT_SCHEMA record batches; `WriteRelease` writes a release's rows as one file."""
from __future__ import annotations

import apache_beam as beam
import pyarrow as pa
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from dpstream.connectors.readers import InputSpec, list_chunks, read_chunk, to_events
from dpstream.connectors.schema import EventColumns
from dpstream.connectors.writers import write_rows


class _ReadChunk(beam.DoFn):
    """Reads one chunk (a Parquet row group or a text file) into record batches."""

    def __init__(self, spec: InputSpec) -> None:
        self.spec = spec
        self.batches = Metrics.counter("dpstream", "input_batches")

    def process(self, chunk):
        for batch in read_chunk(self.spec, chunk):
            self.batches.inc()
            yield batch


class ReadEvents(beam.PTransform):
    """Events of an input as a PCollection of `pyarrow.RecordBatch` in `dpstream.connectors.schema.EVENT_SCHEMA`.

    Building the transform reads nothing: the chunks (Parquet row groups, text
    files) are listed when the pipeline runs, spread over workers, and each is
    read and converted in one vectorised call. Files are listed and opened
    through Beam's `FileSystems`, so the input path may be local or a URL
    (gs://, s3://, hdfs://) the workers' Beam installation reads. Bad rows fail
    the pipeline with a message naming file (or URL), row and column
    (`connectors.errors.InputError`).
    """

    def __init__(self, spec: InputSpec, label: str | None = None) -> None:
        super().__init__(label)
        self.spec = spec

    def default_label(self) -> str:
        return f"ReadEvents({self.spec.format})"

    def display_data(self) -> dict:
        return {"format": self.spec.format, "path": self.spec.path}

    def expand(self, pbegin):
        return (
            pbegin
            | "Input" >> beam.Create([self.spec])
            | "List chunks" >> beam.FlatMap(list_chunks)
            | "Spread chunks" >> beam.Reshuffle()
            | "Read batches" >> beam.ParDo(_ReadChunk(self.spec)).with_output_types(pa.RecordBatch)
        )


class _ElementsToEvents(beam.DoFn):
    """A batch of elements (dicts, or Beam rows) or a pyarrow Table / RecordBatch -> one EVENT_SCHEMA batch."""

    def __init__(self, columns: EventColumns, label: str) -> None:
        self.columns, self.label = columns, label

    def process(self, element):
        if isinstance(element, (pa.Table, pa.RecordBatch)):
            table = element if isinstance(element, pa.Table) else pa.Table.from_batches([element])
        else:
            rows = [row._asdict() if hasattr(row, "_asdict") else row for row in element]
            keys = list(self.columns.columns.values())
            table = pa.table({key: pa.array([row.get(key) for row in rows]) for key in keys})
        if table.num_rows:
            yield to_events(table, self.columns, self.label, lambda i: f"element {i} of a batch")


class ToEvents(beam.PTransform):
    """A PCollection of the user's events -> `pyarrow.RecordBatch` in `dpstream.connectors.schema.EVENT_SCHEMA`,
    the input every private transform takes.

    Elements are dicts (or Beam rows / named tuples) holding the mapped keys, batched here
    (`beam.BatchElements`) and converted in one vectorised call per batch; with `tables=True` each element is
    already a pyarrow Table or RecordBatch (e.g. from `beam.io.ReadFromParquetBatched`) and is converted as it
    is. Keys and timestamps are read exactly as the file readers read them (`readers.to_events`): user and
    partition as strings (integers allowed), timestamps by `timestamp_format` in `timezone`, value as a finite
    number (1.0 for every event when `value` is None). A missing or bad value fails the pipeline with one line.
    """

    def __init__(self, user: str, timestamp: str, partition: str, value: str | None = None,
                 timestamp_format: str = "auto", timezone: str = "UTC", tables: bool = False) -> None:
        super().__init__()
        self.columns = EventColumns(user, timestamp, partition, value, timestamp_format, timezone)
        self.tables = tables

    def expand(self, elements):
        batches = elements if self.tables else elements | "Batch" >> beam.BatchElements(min_batch_size=1024,
                                                                                         max_batch_size=65536)
        return batches | "To events" >> beam.ParDo(_ElementsToEvents(self.columns, self.label)).with_output_types(
            pa.RecordBatch)


class WriteRelease(beam.PTransform):
    """A bounded release's rows (in their event-time windows) -> one file at `path` in `fmt` (`writers.FORMATS`),
    written once every window of the release is complete, sorted so that the same rows give the same bytes;
    `columns`: its header when there are no rows."""

    def __init__(self, path: str, fmt: str, columns: tuple[str, ...] = (), label: str | None = None) -> None:
        super().__init__(label)
        self.path, self.fmt, self.columns = path, fmt, columns

    def expand(self, rows):
        if not rows.is_bounded:
            raise ValueError(f"{self.path}: one file per release collects a bounded release; a stream's windows "
                             f"are written one by one by `dpstream run`")
        (
            rows
            | "Unwindow" >> beam.WindowInto(GlobalWindows())
            | "Collect" >> beam.combiners.ToList()
            | "Write" >> beam.Map(write_rows, self.path, self.fmt, self.columns)
        )
        return beam.pvalue.PDone(rows.pipeline)  # nothing downstream can read what was written
