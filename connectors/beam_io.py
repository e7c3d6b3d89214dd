"""Beam transforms over the connectors: `ReadEvents` yields EVENT_SCHEMA record batches."""
from __future__ import annotations

import apache_beam as beam
import pyarrow as pa
from apache_beam.metrics import Metrics

from dpstream.connectors.readers import InputSpec, list_chunks, read_chunk


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
