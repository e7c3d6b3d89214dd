"""The record layout every connector produces and every transform consumes.

`EVENT_SCHEMA`: one `pyarrow.RecordBatch` per element, columns
    user       string   the privacy unit
    timestamp  int64    event time, microseconds since the Unix epoch, UTC
    partition  string   the partition key (e.g. destination airport)
    value      float64  the value summed (1.0 when the job counts events)
A Pub/Sub source whose event time is a JSON key adds a fifth column, `PUBLISHED`.
It lives with the connectors, which produce it, so that connectors never import the pipelines.
`EventColumns` says which input column (or JSON key) holds each event field and how timestamps are read.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from dpstream.connectors import timestamps

EVENT_SCHEMA = pa.schema(
    [
        pa.field("user", pa.string(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("partition", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
    ]
)

MICROS = 1_000_000

PUBLISHED = "published"
"""The optional fifth column (int64 microseconds since the epoch): each record's Pub/Sub publish time, stamped by
Pub/Sub, never by the record. Bounding drops a record from every window released before it was published
(`pipelines.transforms.bounding`), so whether it is late is a fact about itself, not about the watermark that
other records move (docs/proofs/pipelines.run.stream.md, "Late data")."""

WALL_CLOCK_RUNNERS = ("DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner")
"""Runners whose Pub/Sub read holds its watermark at the wall clock whatever the messages say (Beam's
`_PubSubReadEvaluator.finish_bundle` returns the time of day): on them a record is late when it is read after its
window's release, and an unbounded input needs no `PUBLISHED` column; every other runner needs one
(`pipelines.transforms.bounding`)."""


@dataclass(frozen=True)
class EventColumns:
    """Which input column (or JSON key) holds each event field, and how its timestamps are read.

    value: None when the job counts events (every value 1.0). timestamp_format: auto, epoch_s, epoch_ms,
    epoch_us, epoch_ns or iso8601 (`connectors.timestamps`); timezone: the zone of timestamps without an offset.
    """

    user: str
    timestamp: str
    partition: str
    value: str | None = None
    timestamp_format: str = "auto"
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        for key in ("user", "timestamp", "partition"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value:
                raise ValueError(f"input.{key} must be a non-empty string, got {value!r}")
        if self.value is not None and (not isinstance(self.value, str) or not self.value):
            raise ValueError(f"input.value must be a non-empty string when given, got {self.value!r}")
        timestamps.check_format(self.timestamp_format, self.timezone)

    @property
    def columns(self) -> dict[str, str]:
        """Event field -> input column."""
        mapping = {"user": self.user, "timestamp": self.timestamp, "partition": self.partition}
        if self.value is not None:
            mapping["value"] = self.value
        return mapping
