"""Late data in streaming: each window is released once, at its end plus allowed_lateness; later records are dropped."""
from __future__ import annotations

import json
import os
import tempfile

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to

from dpstream.pipelines.config import jobfile
from dpstream.pipelines.config.specs import ContributionBounds, HistogramSpec, SpecError, WindowSpec
from dpstream.pipelines.planning import plan_job
from dpstream.pipelines.transforms.graph import release_graph
from tests.pipelines.helpers import DAY, START, events

HOUR = 3600
BOUNDS = ContributionBounds(max_partitions=1, max_contributions=1)
RELEASES = (HistogramSpec("counts", partitions=("A", "B")),)
SEED = 7

# Day 0 records, all with event time in day 0, arriving in three groups.
ON_TIME = events([f"u{i}" for i in range(30)], [START + 600 + i for i in range(30)], ["A"] * 30)
WITHIN = events([f"v{i}" for i in range(20)], [START + 1200 + i for i in range(20)], ["B"] * 20)
TOO_LATE = events([f"w{i}" for i in range(40)], [START + 1800 + i for i in range(40)], ["A"] * 40)
NEXT_DAY = events(["x"], [START + DAY + 60], ["A"])


def _window(lateness: float) -> WindowSpec:
    return WindowSpec(size=DAY, start=START, end=START + 2 * DAY, allowed_lateness=lateness)


def _batch_rows(window: WindowSpec, batches) -> list:
    """The rows a batch run over `batches` releases (no late data in batch)."""
    plan = plan_job(RELEASES, BOUNDS, window, 1.0, 1e-6)
    with tempfile.TemporaryDirectory(prefix="dpstream-late-") as directory:
        path = os.path.join(directory, "rows.json")

        def store(actual):
            with open(path, "w") as handle:
                json.dump(list(actual), handle)

        with TestPipeline() as pipeline:
            rows = release_graph(pipeline | beam.Create(batches), RELEASES, plan, BOUNDS, window, SEED)[0]["counts"]
            assert_that(rows, store)
        with open(path) as handle:
            return json.load(handle)


def _stream_rows(window: WindowSpec) -> TestPipeline:
    stream = (TestStream()
              .advance_watermark_to(START)
              .add_elements([beam.window.TimestampedValue(ON_TIME, START + 600)])
              .advance_watermark_to(START + DAY + HOUR / 2)       # day 0 has ended; 30 minutes later
              .add_elements([beam.window.TimestampedValue(WITHIN, START + 1200)])
              .advance_watermark_to(START + DAY + 2 * HOUR)       # past day 0's end plus one hour
              .add_elements([beam.window.TimestampedValue(TOO_LATE, START + 1800),
                             beam.window.TimestampedValue(NEXT_DAY, START + DAY + 60)])
              .advance_watermark_to_infinity())
    return stream


@pytest.mark.parametrize("lateness, included", [(HOUR, (ON_TIME, WITHIN)), (0.0, (ON_TIME,))])
def test_records_after_the_allowed_lateness_are_dropped_and_each_window_released_once(lateness, included):
    window = _window(lateness)
    expected = _batch_rows(window, [*included, NEXT_DAY])
    assert len(expected) == 4  # two windows x two partitions, each released once
    plan = plan_job(RELEASES, BOUNDS, window, 1.0, 1e-6)
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    with TestPipeline(options=options) as pipeline:
        rows = release_graph(pipeline | _stream_rows(window), RELEASES, plan, BOUNDS, window, SEED)[0]["counts"]
        assert_that(rows, equal_to(expected))


def test_allowed_lateness_is_checked_and_read_from_the_job_file(tmp_path):
    with pytest.raises(SpecError, match="window.allowed_lateness must be a non-negative number of seconds, got -1"):
        WindowSpec(size=DAY, start=START, end=START + DAY, allowed_lateness=-1)
    path = tmp_path / "job.toml"
    text = """
[input]
path = "events.parquet"
user = "user"
timestamp = "time"
partition = "dest"
[window]
size = "1d"
start = 2013-01-01
end = 2013-01-03
allowed_lateness = "2h"
[privacy]
scope = "s"
epsilon = 1.0
delta = 1e-6
[[release]]
kind = "histogram"
name = "h"
"""
    path.write_text(text)
    assert jobfile.load(str(path)).window.allowed_lateness == 2 * HOUR
    path.write_text(text.replace('allowed_lateness = "2h"\n', ""))
    assert jobfile.load(str(path)).window.allowed_lateness == 0.0
