"""Shared fixtures for the pipeline tests: synthetic event batches and a Beam-free driver of the bounding DoFns."""
from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict

import numpy as np
import pyarrow as pa
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that
from apache_beam.transforms.window import TimestampedValue

from dpstream.connectors.schema import EVENT_SCHEMA, MICROS
from dpstream.pipelines.transforms.aggregation import (
    SumSeriesFn,
    empty_bucket_counts,
    empty_sums,
    empty_sums_and_units,
)
from dpstream.pipelines.transforms.bounding import _BoundCapped, _BoundWindow, _kept_cells, _Keys, _Piece, _PreAggregate
from dpstream.pipelines.transforms.graph import release_graph

START = 1356998400  # 2013-01-01T00:00:00Z
DAY = 86400


def events(users, seconds, partitions, values=None) -> pa.RecordBatch:
    users = np.asarray(users, dtype=object)
    values = np.ones(len(users)) if values is None else np.asarray(values, dtype=float)
    micros = (np.asarray(seconds, dtype=np.float64) * MICROS).astype(np.int64)
    return pa.RecordBatch.from_arrays(
        [pa.array(users, pa.string()), pa.array(micros), pa.array(np.asarray(partitions, dtype=object), pa.string()),
         pa.array(values)], schema=EVENT_SCHEMA)


def random_events(n, days, n_users, partitions, seed=1, skip_days=(), values=False) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    day = rng.choice([d for d in range(days) if d not in skip_days], size=n)
    seconds = START + day * DAY + rng.uniform(0, DAY, n)
    order = np.argsort(seconds)
    users = np.array([f"user{i}" for i in rng.integers(0, n_users, n)], dtype=object)
    chosen = np.asarray(partitions, dtype=object)[rng.integers(0, len(partitions), n)]
    vals = rng.uniform(-5, 5, n) if values else None
    return events(users[order], seconds[order], chosen[order], None if vals is None else vals[order])


def _pieces(batches, bounds, window, partitions, seed, shards) -> dict:
    """(window, shard) -> the pre-aggregated pieces of `batches` (`_PreAggregate`)."""
    pre = _PreAggregate(bounds, window, partitions, seed, shards)
    pre.setup()
    pieces = defaultdict(list)
    for batch in batches:
        for timestamped in pre.process(batch):
            key, frame = timestamped.value
            pieces[key].append(frame)
    return pieces


def bounded_cells(batches, bounds, window, partitions=None, seed=0) -> dict:
    """Window index -> [(user, partition, bounded sum)] kept by steps 2 and 3 (`_kept_cells`), one user shard."""
    keys, partition_keys = _Keys(seed, "records"), _Keys(seed, "partitions")
    cells = {}
    for (index, _), frames in _pieces(batches, bounds, window, partitions, seed, 1).items():
        users, labels, sums = _kept_cells(_Piece.concat(frames), index, bounds, keys, partition_keys)
        cells[index] = list(zip(users, labels, sums))
    return cells


def bounded_sums(batches, bounds, window, partitions=None, seed=0, shards=1, units=False, cap=None, grid=None) -> dict:
    """Window index -> per-partition bounded sums (with `units`: sums and users; with `grid`: record counts per
    (partition, value bucket)), by the BoundContributions DoFns without Beam (`cap`: a `WindowCap`, applied per
    user shard over every window as the capped path does)."""
    pieces = _pieces(batches, bounds, window, partitions, seed, shards)
    partial = defaultdict(list)
    if cap is None:
        bound = _BoundWindow(bounds, seed, units, grid)
        bound.setup()
        outputs = (out for key, frames in pieces.items() for out in bound.process((key, frames)))
    else:
        capped = _BoundCapped(bounds, window, cap, seed, units)
        capped.setup()
        shards_pieces = defaultdict(list)
        for (index, shard), frames in pieces.items():
            shards_pieces[shard] += [(index, frame) for frame in frames]
        outputs = (out.value for shard, items in shards_pieces.items() for out in capped.process((shard, items)))
    for index, sums in outputs:
        partial[index].append(sums)
    combine = SumSeriesFn(empty_sums_and_units if units else empty_bucket_counts if grid is not None else empty_sums)
    return {index: combine.extract_output(parts) for index, parts in partial.items()}


def out_of_order_stream(chunks) -> TestStream:
    """A TestStream of record batches, the latest first, each timestamped at its first record, then the watermark
    to infinity."""
    stream = TestStream()
    for chunk in reversed(chunks):
        stream.add_elements([TimestampedValue(chunk, chunk.column(1)[0].as_py() // 1000 / 1e3)])
    return stream.advance_watermark_to_infinity()


def graph_rows(source, releases, plan, bounds, window, seed: int, streaming: bool = False) -> dict[str, list[dict]]:
    """Release name -> its rows (sorted), from running the release graph on `pipeline | source` on the
    DirectRunner (`source`: `beam.Create(batches)`, or a TestStream with `streaming`)."""
    directory = tempfile.mkdtemp(prefix="dpstream-graph-")
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = streaming
    with TestPipeline(options=options) as pipeline:
        outputs = release_graph(pipeline | source, releases, plan, bounds, window, seed=seed)[0]
        for name, rows in outputs.items():
            assert_that(rows, _store_sorted(os.path.join(directory, f"{name}.json")), label=f"Store {name}")
    return {name: json.load(open(os.path.join(directory, f"{name}.json"))) for name in outputs}


def _store_sorted(path: str):
    def matcher(actual):
        with open(path, "w") as handle:
            json.dump(sorted(actual, key=lambda r: json.dumps(r, sort_keys=True)), handle)
    return matcher
