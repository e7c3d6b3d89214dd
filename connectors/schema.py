"""The record layout every connector produces and every transform consumes.

`EVENT_SCHEMA`: one `pyarrow.RecordBatch` per element, columns
    user       string   the privacy unit
    timestamp  int64    event time, microseconds since the Unix epoch, UTC
    partition  string   the partition key (e.g. destination airport)
    value      float64  the value summed (1.0 when the job counts events)
It lives with the connectors, which produce it, so that connectors never import the pipelines.
"""
from __future__ import annotations

import pyarrow as pa

EVENT_SCHEMA = pa.schema(
    [
        pa.field("user", pa.string(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("partition", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
    ]
)

MICROS = 1_000_000
