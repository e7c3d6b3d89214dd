"""The release graph on the DirectRunner: known vs unknown partitions, empty windows, and batch = streaming."""
from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to

from dpstream.pipelines.config.specs import ContributionBounds, HistogramSpec, PeakSpec, TopKSpec, WindowSpec
from dpstream.pipelines.planning import plan_job
from dpstream.pipelines.transforms.graph import release_graph
from dpstream.pipelines.transforms.windowing import iso
from tests.pipelines.helpers import DAY, START, events, graph_rows, random_events

DAYS = 4
WINDOW = WindowSpec(size=DAY, start=START, end=START + DAYS * DAY)
BOUNDS = ContributionBounds(max_partitions=2, max_contributions=3)
DATA_PARTITIONS = tuple("ABCDEF")
LISTED = ("A", "B", "C", "D", "E", "F", "G", "Z")  # G and Z never occur in the data
RELEASES = (
    HistogramSpec("known", partitions=LISTED, clamp=True),
    HistogramSpec("unknown"),
    HistogramSpec("distinct", selection="distinct"),
    TopKSpec("top", k=3, partitions=LISTED, counts=True),
    PeakSpec("peak", period=2 * DAY, maximum=20000.0),
)
SEED = 2024


def _data():
    """Day 2 is empty; 'rare' has one user with one event (it can never pass the selection threshold)."""
    common = random_events(6000, DAYS, 400, DATA_PARTITIONS, seed=5, skip_days=(2,))
    rare = events(["loner"], [START + 0.5 * DAY], ["rare"])
    return common, rare


def _chunks(common, rare, size=800):
    return [common.slice(i, size) for i in range(0, common.num_rows, size)] + [rare]


@pytest.fixture(scope="module")
def plan():
    return plan_job(RELEASES, BOUNDS, WINDOW, 3.0, 1e-6)


@pytest.fixture(scope="module")
def batch_rows(plan):
    common, rare = _data()
    return graph_rows(beam.Create(_chunks(common, rare)), RELEASES, plan, BOUNDS, WINDOW, SEED)


def test_known_partitions_appear_in_every_window_empty_or_not(batch_rows):
    rows = batch_rows["known"]
    windows = {(iso(WINDOW.bounds(i)[0]), iso(WINDOW.bounds(i)[1])) for i in range(DAYS)}
    assert {(r["window_start"], r["window_end"]) for r in rows} == windows  # the empty day 2 included
    for start, _ in windows:
        assert sorted(r["partition"] for r in rows if r["window_start"] == start) == sorted(LISTED)
    assert all(r["noise_stddev"] == rows[0]["noise_stddev"] > 0 for r in rows)
    assert all(r["value"] >= 0 for r in rows)  # counts are clamped at 0 (clamp = true)


@pytest.mark.parametrize("name", ["unknown", "distinct"])
def test_unknown_partitions_only_from_data_and_above_threshold(batch_rows, name):
    rows = batch_rows[name]
    assert {r["partition"] for r in rows} <= set(DATA_PARTITIONS)  # never 'rare' (count 1 <= tau), never unlisted
    assert rows, "busy partitions (hundreds of users per day) must pass the selection"
    assert not any(r["window_start"] == iso(WINDOW.bounds(2)[0]) for r in rows)  # nothing from the empty day


def test_topk_and_peak_rows(batch_rows):
    top = batch_rows["top"]
    for i in range(DAYS):
        ranked = sorted((r for r in top if r["window_start"] == iso(WINDOW.bounds(i)[0])), key=lambda r: r["rank"])
        assert [r["rank"] for r in ranked] == [1, 2, 3] and len({r["partition"] for r in ranked}) == 3
        assert all(a["value"] >= b["value"] >= 0 for a, b in zip(ranked, ranked[1:]))  # CountMLE order
    peak = batch_rows["peak"]
    assert [r["period_start"] for r in sorted(peak, key=lambda r: r["period_start"])] == [iso(START), iso(START + 2 * DAY)]


def test_streaming_with_out_of_order_batches_equals_batch(plan, batch_rows):
    common, rare = _data()
    chunks = _chunks(common, rare)
    first_time = [c.column(1)[0].as_py() // 1000 * 1000 for c in chunks]  # ms, as TestStream needs
    stream = TestStream()
    order = list(range(len(chunks) - 1))
    order = [j for pair in zip(order[1::2], order[0::2]) for j in pair] + order[len(order) - len(order) % 2:]
    stream.add_elements([beam.window.TimestampedValue(rare, first_time[-1] / 1e6)])  # early, out of order
    for position, j in enumerate(order):
        stream.add_elements([beam.window.TimestampedValue(chunks[j], first_time[j] / 1e6)])
        if position % 2 == 1 and position + 1 < len(order):
            pending = min(first_time[k] for k in order[position + 1:])
            stream.advance_watermark_to(pending / 1e6 - 1e-3)
    stream.advance_watermark_to_infinity()
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    with TestPipeline(options=options) as pipeline:
        outputs = release_graph(pipeline | stream, RELEASES, plan, BOUNDS, WINDOW, seed=SEED)[0]
        for name, rows in outputs.items():
            assert_that(rows, equal_to(batch_rows[name]), label=f"Streaming equals batch {name}")


def test_streaming_with_a_window_cap_equals_batch_where_no_user_exceeds_it():
    """max_windows = 3 of 4 windows, day 2 empty: no user reaches more than 3 windows, so the stream's first 3
    and the batch's random 3 keep the same records, and every release kind gives the batch rows (noise seeded
    per release and window)."""
    bounds = ContributionBounds(max_partitions=2, max_contributions=3, max_windows=3)
    capped = plan_job(RELEASES, bounds, WINDOW, 3.0, 1e-6)
    assert capped.window_cap is not None and capped["known"].runs == 3
    common, rare = _data()
    chunks = _chunks(common, rare)
    stream = TestStream()
    for chunk in chunks[::-1]:  # the latest first
        stream.add_elements([beam.window.TimestampedValue(chunk, START + 1)])
    stream.advance_watermark_to_infinity()
    batch = graph_rows(beam.Create(chunks), RELEASES, capped, bounds, WINDOW, SEED)
    assert graph_rows(stream, RELEASES, capped, bounds, WINDOW, SEED, streaming=True) == batch
    assert len(batch["known"]) == DAYS * len(LISTED) and len(batch["peak"]) == 2


def test_plan_must_match_the_graph(plan):
    with pytest.raises(ValueError, match="the plan was made for bounds"):
        with TestPipeline() as pipeline:
            release_graph(pipeline | beam.Create([]), RELEASES, plan, ContributionBounds(), WINDOW, seed=1)[0]
