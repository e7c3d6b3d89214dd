"""The svt release on the DirectRunner: batch = streaming (out-of-order and late data), scheduled runs, job keys."""
from __future__ import annotations

import json
import os
import tempfile

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to

from dpstream.pipelines.config import jobfile
from dpstream.pipelines.config.specs import ContributionBounds, HistogramSpec, SpecError, SvtSpec, WindowSpec
from dpstream.pipelines.planning import PlanningError, plan_job
from dpstream.pipelines.transforms.graph import release_graph
from dpstream.pipelines.transforms.svt import HALTED_NOTE, MonitorRun, window_query
from tests.pipelines.helpers import DAY, START, events

DAYS = 8
WINDOW = WindowSpec(size=DAY, start=START, end=START + DAYS * DAY)
BOUNDS = ContributionBounds(max_partitions=1, max_contributions=1)
SEED = 77
# share of "late" users per day: clearly low or clearly high, so alerts do not hinge on the noise
HIGH_DAYS = (2, 5, 6)
USERS = 400
LATE = True


def _release(**changes) -> SvtSpec:
    fields = dict(name="alerts", metric="share", maximum=float(USERS), threshold=0.5, sigma_threshold=0.05)
    fields.update(changes)
    return SvtSpec(**fields)


def _day_events(day: int, late: bool = False):
    users = [f"u{i}" for i in range(USERS)]
    share = 0.9 if day in HIGH_DAYS else 0.1
    values = [1.0 if i < share * USERS else -1.0 for i in range(USERS)]
    seconds = [START + day * DAY + 60.0 * (i + 1) for i in range(USERS)]
    if late:
        users, values, seconds = ["late"], [1.0], [START + day * DAY + 30.0]
    return events(users, seconds, ["A"] * len(users), values)


def _batches(days=range(DAYS)):
    return [_day_events(day) for day in days]


def _collect(path):
    def matcher(actual):
        with open(path, "w") as handle:
            json.dump(sorted(actual, key=lambda r: json.dumps(r, sort_keys=True)), handle)
    return matcher


def _run_batch(release, window, batches, initial=None):
    plan = plan_job((release,), BOUNDS, window, 4.0, 1e-6)
    directory = tempfile.mkdtemp(prefix="dpstream-svt-")
    with TestPipeline() as pipeline:
        rows, states = release_graph(pipeline | beam.Create(batches), (release,), plan, BOUNDS, window, SEED,
                                     monitor_states={release.name: initial})
        assert_that(rows[release.name], _collect(os.path.join(directory, "rows.json")), label="Rows")
        assert_that(states[release.name], _collect(os.path.join(directory, "state.json")), label="State")
    rows = json.load(open(os.path.join(directory, "rows.json")))
    (state,) = json.load(open(os.path.join(directory, "state.json")))
    return sorted(rows, key=lambda r: (r["window_start"], r["note"])), state


@pytest.fixture(scope="module")
def batch():
    return _run_batch(_release(), WINDOW, _batches())


def test_batch_alerts_on_the_high_days_in_window_order(batch):
    rows, state = batch
    windows = [r for r in rows if not r["note"]]
    assert len(windows) == DAYS and all(not r["halted"] for r in windows)
    assert [i for i, r in enumerate(windows) if r["alert"]] == list(HIGH_DAYS)
    assert state["window"] == DAYS and state["instance"] is None  # the open instance was closed at run end


def test_streaming_out_of_order_and_late_data_equals_batch(batch):
    rows, state = batch
    order = [1, 0, 3, 2, 5, 4, 7, 6]  # pairs of days arrive swapped
    stream = TestStream()
    for position, day in enumerate(order):
        stream.add_elements([beam.window.TimestampedValue(_day_events(day), START + day * DAY + 60.0)])
        if position % 2 == 1:
            stream.advance_watermark_to(START + (max(order[: position + 1]) + 1) * DAY)
    # late: day 0's window has closed; its record must be dropped, not counted or alerted on
    if LATE:
        stream.add_elements([beam.window.TimestampedValue(_day_events(0, late=True), START + 30.0)])
    stream.advance_watermark_to_infinity()
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    release = _release()
    plan = plan_job((release,), BOUNDS, WINDOW, 4.0, 1e-6)
    with TestPipeline(options=options) as pipeline:
        released, states = release_graph(pipeline | stream, (release,), plan, BOUNDS, WINDOW, SEED)
        assert_that(released["alerts"], equal_to(rows), label="Streaming rows equal batch")
        assert_that(states["alerts"], equal_to([state]), label="Streaming state equals batch")


@pytest.mark.parametrize("persist", [True, False])
def test_three_scheduled_runs_equal_one_run(persist):
    release = _release(persist_threshold=persist)
    whole_rows, whole_state = _run_batch(release, WINDOW, _batches())
    rows, state = [], None
    for first, last in ((0, 3), (3, 5), (5, 8)):
        window = WindowSpec(size=DAY, start=START + first * DAY, end=START + last * DAY)
        part, state = _run_batch(release, window, _batches(range(first, last)), state)
        rows += part
    assert [r["alert"] for r in rows] == [r["alert"] for r in whole_rows]
    split, whole = state["filter"]["state"]["spent_epsilon"], whole_state["filter"]["state"]["spent_epsilon"]
    assert split <= whole
    if persist:  # the same instances, charged the same
        assert state["filter"] == whole_state["filter"]
    else:  # instances open at a run's end were closed (charged BOT^t) and restarted: different, here smaller, charges
        assert state["filter"] != whole_state["filter"]


def test_halted_row_when_the_filter_refuses():
    release = _release(metric="count", maximum=float(USERS), threshold=0.0, sigma_threshold=0.05)  # a TOP every window
    window = WindowSpec(size=DAY, start=START, end=START + 100 * DAY)
    plan = plan_job((release,), BOUNDS, window, 1.5, 1e-6)
    run = MonitorRun(plan.releases[0], window, None, SEED)
    rows = [row for index in range(window.count) for row in run.answer(index, 1.0)]
    assert len(rows) == window.count and len({r["window_start"] for r in rows}) == window.count  # each window once
    notes = [i for i, r in enumerate(rows) if r["note"]]
    halted_from = next(i for i, r in enumerate(rows) if r["halted"])
    assert notes == [halted_from] and rows[halted_from]["note"] == HALTED_NOTE and not rows[halted_from]["alert"]
    assert 0 < halted_from < window.count and all(r["halted"] for r in rows[halted_from:])


def test_window_query_share_count_sum():
    import pandas as pd

    sums = pd.Series([3, 1, 6], index=["A\x1f+", "A\x1f-", "B\x1f+"])
    assert window_query("share", 5.0, sums, 1.0) == 9 / 10  # exact totals, one correctly rounded division
    assert window_query("share", 20.0, sums, 1.0) == 9 / 20  # the floor denominator
    assert window_query("count", 5.0, sums, 1.0) == 1.0  # clipped
    assert window_query("sum", 20.0, pd.Series([-30]), 1.0) == 0.0
    assert window_query("sum", 20.0, pd.Series([3, 7]), 0.5) == 5 / 20  # units of the quantum 1/2


def test_job_file_svt_keys(tmp_path):
    def load(release: str):
        path = tmp_path / "job.toml"
        path.write_text(
            '[input]\npath = "e.csv"\nformat = "csv"\nuser = "u"\ntimestamp = "t"\npartition = "p"\n'
            '[window]\nsize = "1d"\nstart = 2013-01-01\nend = 2013-01-05\n'
            '[privacy]\nscope = "s"\nepsilon = 2.0\ndelta = 1e-6\n'
            f'[[release]]\nname = "a"\nkind = "svt"\n{release}\n'
        )
        return jobfile.load(str(path))

    job = load('threshold = 0.5\nsigma_threshold = 0.2\nmaximum = 100\npersist_threshold = true\nmetric = "sum"')
    assert job.releases[0].persist_threshold and job.releases[0].metric == "sum"
    for text, message in [
        ("sigma_threshold = 0.2\nmaximum = 100", r"release\.a\.threshold is required for an svt release"),
        ("threshold = 2\nsigma_threshold = 0.2\nmaximum = 100", r"threshold must lie in \[0, 1\].*got 2"),
        ('threshold = 0.5\nsigma_threshold = 0.2\nmaximum = 100\nmethod = "x"', r"method must be one of fsrc"),
        ('threshold = 0.5\nsigma_threshold = 0.2\nmaximum = 100\nmetric = "mean"', r"metric must be one of count"),
        ("threshold = 0.5\nsigma_threshold = 0.2\nmaximum = 100\npersist_threshold = 1", r"persist_threshold must be true or false"),
        ("threshold = 0.5\nsigma_threshold = 0.2\nsigma_query = 0.1\nmaximum = 100", r"sigma_query must exceed"),
    ]:
        with pytest.raises(jobfile.JobFileError, match=message):
            load(text)
    with pytest.raises(jobfile.JobFileError, match=r"threshold applies to svt releases only"):
        jobfile.parse({**_document(), "release": [{"name": "h", "kind": "histogram", "threshold": 0.5}]}, "j.toml")


def _document():
    return {"input": {"path": "e.csv", "format": "csv", "user": "u", "timestamp": "t", "partition": "p"},
            "window": {"size": "1d", "start": "2013-01-01", "end": "2013-01-05"},
            "privacy": {"scope": "s", "epsilon": 2.0, "delta": 1e-6}}


def test_planning_refuses_a_budget_without_one_instance():
    with pytest.raises(PlanningError, match=r"release 'alerts': SparseVectorMonitor: budget epsilon=.* admits no fsrc instance"):
        plan_job((_release(sigma_threshold=0.01),), BOUNDS, WINDOW, 0.5, 1e-6)
    with pytest.raises(SpecError, match=r"maximum must be a positive number"):
        _release(maximum=None)


def test_monitor_budget_is_its_weight_share_and_debited_only_when_opened():
    releases = (_release(weight=1.0), HistogramSpec("h", partitions=("A",), weight=3.0))
    plan = plan_job(releases, BOUNDS, WINDOW, 8.0, 1e-6)
    monitor = plan["alerts"]
    assert monitor.epsilon == pytest.approx(2.0) and monitor.epsilon < 2.0 and monitor.delta < 0.25e-6
    assert monitor.event in plan.events() and monitor.event not in plan.events(frozenset({"alerts"}))
    assert plan.epsilon <= 8.0
    assert np.isclose(monitor.sensitivity, 1 / USERS)


def test_an_svt_only_job_has_a_chart(tmp_path):
    """The chart's svt panel: alerts and the halting window over time; a job of svt releases alone gets one."""
    from dpstream.accounting.ledger import Ledger
    from dpstream.pipelines.config import jobfile
    from dpstream.pipelines.run import runner
    from tests.pipelines.test_remote_output import SVT
    from tests.pipelines.test_runner import JOB, _events

    job = JOB[:JOB.index("[[release]]")] + SVT + JOB[JOB.index("[output]"):]
    (tmp_path / "events.csv").write_text(_events(30))
    (tmp_path / "job.toml").write_text(job)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("test", 10.0, 1e-4, "approx:release_delta=1e-6")
    outcome = runner.run(jobfile.load(str(tmp_path / "job.toml")), str(tmp_path / "out"), url, log=lambda _: None)
    assert list(outcome.files) == ["alerts"] and outcome.report["chart"] == "chart.png"
    assert (tmp_path / "out" / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
