"""Calendar windows (`size = "1mo"`, `"1y"`, `"1week"`, `"1day"` in a time zone): boundaries on the calendar,
records assigned as a datetime oracle assigns them, batch and streaming alike, and the refusals."""
from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that

from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.config.specs import ContributionBounds, HistogramSpec, PeakSpec, SpecError, WindowSpec
from dpstream.pipelines.planning import PlanningError, plan_job
from dpstream.pipelines.run import runner
from dpstream.pipelines.transforms.graph import release_graph
from dpstream.pipelines.transforms.windowing import window_indices
from tests.pipelines.helpers import events

NEW_YORK = ZoneInfo("America/New_York")


def _local_midnight(text: str, zone=NEW_YORK) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=zone).timestamp()


def test_monthly_windows_over_a_year_start_on_the_first():
    window = WindowSpec.of("1mo", "2013-01-01", "2014-01-01")
    starts = [datetime.fromtimestamp(window.bounds(i)[0], timezone.utc) for i in range(window.count)]
    assert window.count == 12 and [(s.month, s.day, s.hour) for s in starts] == [(m, 1, 0) for m in range(1, 13)]
    assert window.next_start == datetime(2014, 1, 1, tzinfo=timezone.utc).timestamp()
    assert window.length_text == "1 month (UTC)"
    years = WindowSpec.of("1y", "2012-01-01", "2016-01-01")
    assert [round((b - a) / 86400) for a, b in (years.bounds(i) for i in range(years.count))] == [366, 365, 365, 365]


def test_new_york_days_across_daylight_saving_are_23_and_25_hours():
    spring = WindowSpec.of("1day", "2026-03-07", "2026-03-10", timezone="America/New_York")
    autumn = WindowSpec.of("1day", "2026-10-31", "2026-11-03", timezone="America/New_York")
    hours = [[(b - a) / 3600 for a, b in (w.bounds(i) for i in range(w.count))] for w in (spring, autumn)]
    assert hours == [[24, 23, 24], [24, 25, 24]]
    assert spring.bounds(1)[0] == _local_midnight("2026-03-08")


def test_iso_weeks_start_on_monday_and_bad_ranges_are_refused():
    weeks = WindowSpec.of("1week", "2026-01-05", "2026-02-02")
    assert weeks.count == 4 and all(datetime.fromtimestamp(weeks.bounds(i)[0], timezone.utc).weekday() == 0
                                     for i in range(4))
    with pytest.raises(SpecError, match=r"window\.start 2026-01-07T00:00:00\+00:00 must be a Monday midnight in UTC"):
        WindowSpec.of("1week", "2026-01-07", "2026-02-02")
    with pytest.raises(SpecError, match=r"window\.end 2013-02-15T00:00:00\+00:00 is not a window boundary of 1 month "
                                        r"windows from 2013-01-01T00:00:00\+00:00; set window\.end to "
                                        r"2013-02-01T00:00:00\+00:00 or 2013-03-01T00:00:00\+00:00"):
        WindowSpec.of("1mo", "2013-01-01", "2013-02-15")
    with pytest.raises(SpecError, match="window.period .* needs a fixed window.size"):
        WindowSpec.of("1mo", "2013-01-01", "2014-01-01", period="1d")
    with pytest.raises(SpecError, match="more than window.max_count = 10 windows"):
        WindowSpec.of("1day", "2013-01-01", "2014-01-01", max_count=10)


def test_records_land_in_the_window_a_datetime_oracle_gives():
    window = WindowSpec.of("1day", "2026-03-01", "2026-03-15", timezone="America/New_York")
    rng = np.random.default_rng(7)
    seconds = rng.uniform(window.start - 86400, window.end + 86400, 5000)
    micros = (seconds * 1e6).astype(np.int64)
    rows, indices = window_indices(micros, window)
    first = datetime(2026, 3, 1).date()
    expected = {}
    for row, micro in enumerate(micros):
        local = datetime.fromtimestamp(micro / 1e6, NEW_YORK).date()
        if first <= local < datetime(2026, 3, 15).date():
            expected[row] = (local - first).days
    assert dict(zip(rows.tolist(), indices.tolist())) == expected


def test_unit_periods_and_peaks_over_calendar_windows_must_follow_the_calendar():
    window = WindowSpec.of("1mo", "2013-01-01", "2014-01-01")
    with pytest.raises(PlanningError, match="privacy.unit_period = 1d: window 2013-01-01T00:00:00Z..2013-02-01T00:00:00Z "
                                            "crosses the period boundary 2013-01-02T00:00:00Z"):
        plan_job((HistogramSpec("h", partitions=("A",)),), ContributionBounds(), window, 1.0, 1e-6, unit_period=86400.0)
    with pytest.raises(PlanningError, match=r"a peak period over calendar windows of 1 month \(UTC\) must be a "
                                            "calendar length"):
        plan_job((PeakSpec("p", period=86400.0 * 60, maximum=10.0),), ContributionBounds(), window, 1.0, 1e-6)


JOB = """[input]
format = "csv"
path = "events.csv"
user = "user"
timestamp = "time"
partition = "dest"
partitions = ["A"]
timezone = "America/New_York"
[window]
size = "1day"
start = 2026-03-07
end = 2026-03-10
[privacy]
scope = "s"
epsilon = 1000
delta = 1e-6
max_contributions = 1
[[release]]
kind = "histogram"
name = "daily"
[output]
format = "jsonl"
[beam]
seed = 3
"""


def test_a_new_york_job_counts_each_local_day(tmp_path):
    """Records at local 23:30 and 00:30 around the spring-forward night land in their local days; epsilon 1000
    leaves the counts within rounding of the truth (noise sd about 0.005)."""
    stamps = {"2026-03-07T23:30:00": 3, "2026-03-08T00:30:00": 5, "2026-03-08T23:30:00": 7, "2026-03-09T00:30:00": 2}
    lines = ["user,time,dest"] + [f"u{stamp}{i},{stamp},A" for stamp, n in stamps.items() for i in range(n)]
    (tmp_path / "events.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "job.toml").write_text(JOB)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("s", 1000.0, 1e-5, "approx:release_delta=1e-6")
    outcome = runner.run(jobfile.load(str(tmp_path / "job.toml")), str(tmp_path / "out"), url, log=lambda _: None)
    rows = [json.loads(line) for line in open(outcome.files["daily"])]
    assert [(r["window_start"], r["window_end"]) for r in rows] == [
        ("2026-03-07T05:00:00+00:00", "2026-03-08T05:00:00+00:00"),
        ("2026-03-08T05:00:00+00:00", "2026-03-09T04:00:00+00:00"),  # 23 hours
        ("2026-03-09T04:00:00+00:00", "2026-03-10T04:00:00+00:00")]
    assert [round(r["value"]) for r in rows] == [3, 5 + 7, 2]
    assert outcome.report["window"]["calendar"] == "1 day (America/New_York)"


def test_streaming_calendar_windows_equal_batch():
    window = WindowSpec.of("1mo", "2013-01-01", "2013-07-01")
    releases = (HistogramSpec("monthly", partitions=("A", "B")),)
    bounds = ContributionBounds(max_partitions=2, max_contributions=2)
    plan = plan_job(releases, bounds, window, 2.0, 1e-6)
    rng = np.random.default_rng(11)
    seconds = np.sort(rng.uniform(window.start, window.end, 3000))
    batch = events([f"u{i % 300}" for i in range(3000)], seconds, rng.choice(["A", "B"], 3000).tolist())
    chunks = [batch.slice(i, 500) for i in range(0, 3000, 500)]
    directory = tempfile.mkdtemp(prefix="dpstream-calendar-")

    def store(name):
        def matcher(actual):
            with open(os.path.join(directory, name), "w") as handle:
                json.dump(sorted(actual, key=lambda r: json.dumps(r, sort_keys=True)), handle)
        return matcher

    with TestPipeline() as pipeline:
        rows = release_graph(pipeline | beam.Create(chunks), releases, plan, bounds, window, seed=5)[0]["monthly"]
        assert_that(rows, store("batch.json"))
    stream = TestStream()
    for chunk in chunks:
        first = chunk.column(1)[0].as_py() // 1000 * 1000
        stream.add_elements([beam.window.TimestampedValue(chunk, first / 1e6)])
        stream.advance_watermark_to(first / 1e6 + 1)
    stream.advance_watermark_to_infinity()
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    with TestPipeline(options=options) as pipeline:
        rows = release_graph(pipeline | stream, releases, plan, bounds, window, seed=5)[0]["monthly"]
        assert_that(rows, store("streaming.json"))
    batch_rows, streaming_rows = (json.load(open(os.path.join(directory, name))) for name in ("batch.json", "streaming.json"))
    assert batch_rows == streaming_rows and len(batch_rows) == 6 * 2
    assert sorted({r["window_start"][:10] for r in batch_rows}) == [f"2013-0{m}-01" for m in range(1, 7)]
    lengths = {r["window_start"][:7]: datetime.fromisoformat(r["window_end"]) - datetime.fromisoformat(r["window_start"])
               for r in batch_rows}
    assert lengths == {"2013-01": timedelta(days=31), "2013-02": timedelta(days=28), "2013-03": timedelta(days=31),
                       "2013-04": timedelta(days=30), "2013-05": timedelta(days=31), "2013-06": timedelta(days=30)}
