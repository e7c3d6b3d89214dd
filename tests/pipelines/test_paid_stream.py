"""Pieces of a stream that pays as it releases (`pipelines.run.paid_stream`, `payment`, `streaming._WritePart`),
without Pub/Sub: where a resumed session starts, which periods a window pays, and that a window is written only
after its payment, at most once, and never when refused (a broken writer that ignores the refusal is caught).
The end-to-end runs against the Pub/Sub emulator are in tests/integration/test_pubsub_streams.py."""
from __future__ import annotations

import json
import math
import os
import shutil

import pytest

from dpstream.accounting.events import Gaussian, PureDP, SelfComposed
from dpstream.accounting.filters import GDPFilter
from dpstream.accounting.ledger import Ledger, PeriodGrid, Periods
from dpstream.pipelines.config.specs import ContributionBounds, HistogramSpec, PeakSpec, WindowSpec
from dpstream.pipelines.planning import plan_job
from dpstream.pipelines.run import streaming
from dpstream.pipelines.run.budget import PREPAID, StreamPayment
from dpstream.pipelines.run.budget import WINDOW as PER_WINDOW
from dpstream.pipelines.run.paid_stream import answered_before, mark_answered, resume_point
from dpstream.pipelines.run.payment import StreamPayer
from dpstream.pipelines.transforms.windowing import window_bounds_iso

HOUR = 3600
START = 1356998400  # 2013-01-01T00:00:00Z
GRID = PeriodGrid.of(4 * HOUR)
WINDOW = WindowSpec(size=HOUR, start=START, end=START + 12 * HOUR)  # 3 periods of 4 windows
ALL = tuple(range(12))


def _plan(bounds: ContributionBounds, *extra):
    return plan_job([HistogramSpec("h", partitions=("a", "b")), *extra], bounds, WINDOW, 1.0, 1e-6, GRID)


def test_a_session_resumes_at_the_first_undecided_window_unless_state_spans_windows():
    plain = _plan(ContributionBounds())
    assert resume_point(plain, WINDOW, GRID, {"h": set()}, {"h": ALL}) == 0
    assert resume_point(plain, WINDOW, GRID, {"h": {0, 1, 2, 3, 4}}, {"h": ALL}) == 5  # mid period: fine
    assert resume_point(plain, WINDOW, GRID, {"h": set(ALL)}, {"h": ALL}) == 12  # nothing left
    capped = _plan(ContributionBounds(max_windows=2))
    assert capped.window_cap is not None
    assert resume_point(capped, WINDOW, GRID, {"h": {0, 1, 2, 3, 4}}, {"h": ALL}) == 8  # next period
    assert resume_point(capped, WINDOW, GRID, {"h": {0, 1, 2, 3}}, {"h": ALL}) == 4  # on a period start
    assert resume_point(capped, WINDOW, GRID, {"h": set(range(9))}, {"h": ALL}) == 12  # skips the rest
    peaks = _plan(ContributionBounds(), PeakSpec("p", period=4 * HOUR, maximum=100.0))
    assert resume_point(peaks, WINDOW, GRID, {"h": {0, 1, 2, 3, 4, 5}, "p": {3}},
                        {"h": ALL, "p": (3, 7, 11)}) == 8


def test_a_prepaid_stream_on_a_plain_scope_never_resumes_inside_state_an_earlier_session_touched():
    """A plain scope has no period grid; a prepaid stream's cross-window state lives per cap group (the job's unit
    period, or the whole range without one) and per peak period. A resume starts after every group and peak
    period a decided (or paid) window touched; with no state, at the first undecided window."""
    def plain_plan(bounds, unit_period=None, *extra):
        return plan_job([HistogramSpec("h", partitions=("a", "b")), *extra], bounds, WINDOW, 1.0, 1e-6, unit_period)

    free = plain_plan(ContributionBounds())
    assert resume_point(free, WINDOW, None, {"h": {0, 1, 2, 5}}, {"h": ALL}) == 3
    whole_range = plain_plan(ContributionBounds(max_windows=2))
    assert set(whole_range.window_cap.unit_of_window) == {0}
    assert resume_point(whole_range, WINDOW, None, {"h": set()}, {"h": ALL}) == 0
    assert resume_point(whole_range, WINDOW, None, {"h": {0}}, {"h": ALL}) == 12  # one group: nothing more
    assert resume_point(whole_range, WINDOW, None, {"h": set()}, {"h": ALL}, paid=(3,)) == 12
    per_unit = plain_plan(ContributionBounds(max_windows=2), GRID)
    assert resume_point(per_unit, WINDOW, None, {"h": {0, 1, 2, 3, 4}}, {"h": ALL}) == 8  # next 4-hour group
    assert resume_point(per_unit, WINDOW, None, {"h": {0, 1, 2, 3}}, {"h": ALL}) == 4
    assert resume_point(per_unit, WINDOW, None, {"h": set()}, {"h": ALL}, paid=(9,)) == 12
    peaks = plain_plan(ContributionBounds(), None, PeakSpec("p", period=4 * HOUR, maximum=100.0))
    assert resume_point(peaks, WINDOW, None, {"h": {0, 1, 2, 3, 4, 5}, "p": {3}},
                        {"h": ALL, "p": (3, 7, 11)}) == 8


def test_a_stateful_session_never_shares_a_period_with_an_earlier_one():
    """Regressions from an adversarial review: two releases that stopped at different windows, a release that
    published nothing while another did, and periods paid (by a stale worker) without a window file."""
    capped = plan_job([HistogramSpec("a", partitions=("x",)), HistogramSpec("b", partitions=("x",))],
                      ContributionBounds(max_windows=1), WINDOW, 1.0, 1e-6, GRID)
    both = {"a": ALL, "b": ALL}
    assert resume_point(capped, WINDOW, GRID, {"a": set(range(5)), "b": set(range(4))}, both) == 8
    assert resume_point(capped, WINDOW, GRID, {"a": set(), "b": {0}}, both) == 4
    first_period = START // (4 * HOUR)
    assert resume_point(capped, WINDOW, GRID, {"a": set(), "b": set()}, both, paid=(first_period + 1,)) == 8
    assert resume_point(capped, WINDOW, GRID, {"a": set(), "b": set()}, both) == 0


def test_a_peak_over_several_unit_periods_pays_all_of_them():
    hourly = PeriodGrid.of(HOUR)
    peaks = plan_job([PeakSpec("p", period=2 * HOUR, maximum=100.0)], ContributionBounds(), WINDOW, 1.0, 1e-6, hourly)
    payer = StreamPayer("sqlite:///unused.db", 1, 1, WINDOW, hourly, 60.0)
    assert payer.steps(1).count == 1
    peak_payer = payer.for_release(peaks["p"])
    assert peaks["p"].last_windows[0] == 1 and peak_payer.steps(1).count == 2
    assert peak_payer.steps(1).first == START // HOUR
    # resuming inside a 2-hour peak period (at an hour boundary) would compute that peak over part of it
    assert resume_point(peaks, WINDOW, hourly, {"p": {1}}, {"p": peaks["p"].last_windows}) == 3  # next emission
    assert resume_point(peaks, WINDOW, hourly, {"p": set()}, {"p": peaks["p"].last_windows}, paid=(START // HOUR,)) == 2


@pytest.fixture
def stream(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as book:
        book.init_scope("s", 1.0, 0.0, unit_period=4 * HOUR)
        book.spend("s", PureDP(0.8), "another job", Periods(GRID, START // (4 * HOUR) + 1, START // (4 * HOUR) + 1))
        ticket = book.open_stream("s", PureDP(0.5), "job", output=str(tmp_path / "out"), job="digest")
    return url, StreamPayer(url, ticket.stream_id, ticket.session, WINDOW, GRID, 60.0, release="h")


def _write(payer, directory, index, rows, indices=ALL, writer=streaming._WritePart):
    fn = writer(str(directory), indices, payer)
    list(fn.process((index, [*rows, None])) or ())


class _IgnoresRefusals(streaming._WritePart):
    """Negative control: pays, then writes the rows whatever the ledger answered."""

    def process(self, element):
        index, items = element
        self._payer.publish(index, b'{"x": 1}\n', 1)
        path = streaming.part_path(self._directory, index)
        streaming.create_bytes(path, b"".join(b'{"x": 1}\n' for item in items if item is not None))


def test_a_window_is_written_after_its_period_is_paid_once_and_never_twice(stream, tmp_path):
    url, payer = stream
    directory = tmp_path / "out" / "windows" / "h"
    assert payer.steps(5).first == START // (4 * HOUR) + 1 and payer.steps(5).count == 1
    _write(payer, directory, 0, [{"v": 1}])
    _write(payer, directory, 1, [{"v": 2}])
    _write(payer, directory, 0, [{"v": 99}])  # a retry or a resumed session: the first publication stands
    with open(directory / "window-000000.jsonl") as handle:
        assert handle.read() == '{"v": 1}\n'
    _write(payer, directory, 9, [{"v": 3}], indices=(0, 1))  # not this session's window: dropped
    assert not (directory / "window-000009.jsonl").exists()
    with Ledger(url) as book:
        assert len(book.history("s")) == 2  # the other job's, and period 0 once


def test_a_refused_window_is_never_published_and_the_broken_writer_is_caught(stream, tmp_path):
    url, payer = stream
    directory = tmp_path / "out" / "windows" / "h"
    _write(payer, directory, 4, [{"v": 1}])  # period 1 has 0.2 left, the stream costs 0.5
    assert not (directory / "window-000004.jsonl").exists()
    with open(directory / "window-000004.refused") as handle:
        assert "would exceed the budget" in handle.read()
    assert streaming.parts(str(directory)) == {4: False}
    _write(payer, directory, 5, [{"v": 1}])
    assert streaming.parts(str(directory)) == {4: False, 5: False}
    broken = tmp_path / "broken"
    _write(payer, broken, 6, [{"v": 1}], writer=_IgnoresRefusals)
    assert os.path.exists(broken / "window-000006.jsonl"), "the negative control publishes a refused window"


PUBSUB_JOB = """
[input]
format = "pubsub"
subscription = "projects/p/subscriptions/s"
timestamp_attribute = "ts"
user = "user"
partition = "dest"
partitions = ["a", "b"]
[window]
size = "1h"
start = "2013-01-01T00:00:00Z"
end = "2013-01-01T08:00:00Z"
[privacy]
scope = "s"
epsilon = 1.0
delta = 1e-6
unit_period = "4h"
[[release]]
kind = "histogram"
name = "h"
[output]
format = "jsonl"
path = "out"
"""


def _pubsub_job(tmp_path, text=PUBSUB_JOB):
    from dpstream.pipelines.config import jobfile

    (tmp_path / "job.toml").write_text(text)
    return jobfile.load(str(tmp_path / "job.toml"))


def test_the_pipeline_s_report_refresh_merges_windows_and_finishes_the_stream(tmp_path):
    """What a worker does after each window (`StreamReport.refresh`), so the launcher may leave: the merged file
    and report.json follow the windows published so far, and the stream ends finished at the last one."""
    from dpstream.pipelines.run.stream_report import StreamReport

    job = _pubsub_job(tmp_path)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    output = str(tmp_path / "out")
    with Ledger(url, create=True) as book:
        book.init_scope("s", 10.0, 1e-5, unit_period=4 * HOUR)
        ticket = book.open_stream("s", PureDP(0.5), "job", output=output, job="digest")
    report = StreamReport(job, output, url, ticket.stream_id, ticket.session, "DataflowRunner", (), "now", ())
    payer = StreamPayer(url, ticket.stream_id, ticket.session, job.window, GRID, 60.0, release="h")
    directory = tmp_path / "out" / "windows" / "h"
    for index in range(7):
        fn = streaming._WritePart(str(directory), tuple(range(8)), payer, report.refresh)
        start, end = window_bounds_iso(job.window, index)
        fn.process((index, [{"window_start": start, "window_end": end, "partition": "a", "value": 1.0}, None]))
    content = json.loads((tmp_path / "out" / "report.json").read_text())
    assert content["streaming"]["windows_pending"] == {"h": 1} and content["stream"]["status"] == "streaming"
    assert len(content["stream"]["periods_debited"]) == 2
    assert len((tmp_path / "out" / "h.jsonl").read_text().splitlines()) == 7
    with Ledger(url) as book:
        assert book.stream(ticket.stream_id).status == "streaming"
    streaming._WritePart(str(directory), tuple(range(8)), payer, report.refresh).process((7, [None]))
    with Ledger(url) as book:
        assert book.stream(ticket.stream_id).status == "finished"
    content = json.loads((tmp_path / "out" / "report.json").read_text())
    assert content["streaming"] == {"complete": True, "windows_pending": {}}


def test_detach_is_refused_where_the_launcher_cannot_leave(tmp_path):
    from dpstream.pipelines.run import runner

    job = _pubsub_job(tmp_path)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as book:
        book.init_scope("s", 10.0, 1e-5, unit_period=4 * HOUR)
        book.init_scope("plain", 10.0, 1e-5)
    with pytest.raises(runner.RunError, match="the DirectRunner runs the pipeline inside this process") as caught:
        runner.run(job, ledger_url=url, log=lambda _: None, detach=True)
    assert caught.value.exit_code == 2
    plain = _pubsub_job(tmp_path, PUBSUB_JOB.replace('scope = "s"', 'scope = "plain"'))
    with pytest.raises(runner.RunError, match="the DirectRunner runs the pipeline inside this process"):
        runner.run(plain, ledger_url=url, log=lambda _: None, detach=True)  # prepaid: it publishes as it goes
    monitored = _pubsub_job(tmp_path, PLAIN_JOB.replace('name = "h"\n', 'name = "h"\nnoise = "laplace"\n')
                            .replace("epsilon = 1.0", "epsilon = 4.0")
                            .replace('timestamp_attribute = "ts"', 'timestamp = "t"') + SVT_RELEASE)
    with pytest.raises(runner.RunError, match="a Pub/Sub stream runs on Dataflow or the DirectRunner"):
        runner.run(monitored, ledger_url=url, beam_args=["--runner=FlinkRunner"], log=lambda _: None, detach=True)
    with Ledger(url) as book:
        assert book.history("s") == [] and book.streams_of("s") == [] and book.runs_of("plain") == []


def test_windows_of_another_stream_are_never_adopted(tmp_path):
    """Regression from an adversarial review: a refused attempt used to leave a stopped stream of the new job,
    which the next attempt resumed, adopting the other stream's windows. Now nothing is opened, every time."""
    from dpstream.pipelines.run import runner

    job = _pubsub_job(tmp_path)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as book:
        book.init_scope("s", 10.0, 1e-5, unit_period=4 * HOUR)
    (tmp_path / "out" / "windows" / "h").mkdir(parents=True)
    (tmp_path / "out" / "windows" / "h" / "window-000000.jsonl").write_text("{}\n")
    for _ in range(2):
        with pytest.raises(runner.RunError, match="a stream continues only the windows it released itself"):
            runner.run(job, ledger_url=url, log=lambda _: None)
    with Ledger(url) as book:
        assert book.streams_of("s") == [] and book.history("s") == []


PLAIN_JOB = PUBSUB_JOB.replace('unit_period = "4h"\n', "").replace('scope = "s"', 'scope = "plain"')


@pytest.mark.parametrize("scope_filter, pays_per_window", [("gdp", True), ("zcdp", True), ("approx", False)])
def test_a_plain_scope_stream_pays_per_window_only_where_that_costs_no_more(tmp_path, scope_filter, pays_per_window):
    """Gaussian windows: a gdp or zcdp scope charges 8 windows one at a time what it charges them at once; the
    approx filter prices the whole plan by the accountant, below the sum of its windows' prices, so the stream
    prepays its whole plan when it opens instead (and says why). Either way it publishes window by window, and
    nothing is debited before the stream opens."""
    from dpstream.pipelines.run import runner

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as book:
        book.init_scope("plain", 10.0, 1e-5, scope_filter)
    job = _pubsub_job(tmp_path, PLAIN_JOB)
    job_budget = runner.budget(job, url)
    payment = job_budget.stream_payment(str(tmp_path / "out"))
    assert payment.mode == (PER_WINDOW if pays_per_window else PREPAID)
    assert (payment.reason is None) == pays_per_window
    logged: list[str] = []
    with pytest.raises(runner.RunError, match="the DirectRunner runs the pipeline inside this process"):
        runner.run(job, ledger_url=url, log=logged.append, detach=True)
    assert any("pays scope 'plain' its whole plan once, when it opens" in line for line in logged) != pays_per_window
    with Ledger(url) as book:
        assert book.history("plain") == [] and book.streams_of("plain") == []


def test_windows_that_share_state_are_not_paid_one_at_a_time(tmp_path):
    from dpstream.pipelines.run import runner

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as book:
        book.init_scope("plain", 10.0, 1e-5, "gdp")
    capped = PLAIN_JOB.replace("delta = 1e-6\n", "delta = 1e-6\nmax_windows = 2\n")
    payment = runner.budget(_pubsub_job(tmp_path, capped), url).stream_payment(str(tmp_path / "out"))
    assert payment.mode == PREPAID and "caps across windows" in payment.reason


def test_on_a_plain_scope_each_window_is_paid_once_and_a_refused_one_is_never_published(tmp_path):
    """A plain pure scope of epsilon 1 and windows of 0.4: windows 0 and 1 are paid (once, whatever retries),
    window 2 is refused and stays unpublished; the broken writer (negative control) would publish it."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as book:
        book.init_scope("p", 1.0, 0.0)
        ticket = book.open_stream("p", PureDP(0.4), "job", output=str(tmp_path / "out"), job="digest")
    payer = StreamPayer(url, ticket.stream_id, ticket.session, WINDOW, None, 60.0, release="h")
    assert payer.steps(7) == (7,)
    directory = tmp_path / "out" / "windows" / "h"
    for index in (0, 1, 0, 1):  # retries find the recorded debits
        _write(payer, directory, index, [{"v": index}])
    _write(payer, directory, 2, [{"v": 2}])
    assert streaming.parts(str(directory)) == {0: True, 1: True, 2: False}
    with Ledger(url) as book:
        assert [r.label.rsplit(", ", 1)[1] for r in book.history("p")] == ["window 0)", "window 1)"]
    _write(payer, tmp_path / "broken", 2, [{"v": 2}], writer=_IgnoresRefusals)
    assert os.path.exists(tmp_path / "broken" / "window-000002.jsonl"), "the negative control publishes it"


def test_a_plain_scope_stream_that_paid_some_windows_resumes_window_by_window(tmp_path):
    """Regression from an adversarial review: after 4 of 8 windows were paid the scope no longer fits all 8, so
    the gate said "pay at the end" and the resume took the run path into the stream's own output. A stream of
    this job that did not finish there keeps paying per window."""
    from dpstream.pipelines.run import runner

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    job = _pubsub_job(tmp_path, PLAIN_JOB)
    job_budget = runner.budget(job, url)
    window = job_budget.plan.window_event()
    output = str(tmp_path / "out")
    plan_mu = GDPFilter(1.0).cost_terms(SelfComposed(window, job.window.count))["mu"]
    with Ledger(url, create=True) as book:
        book.init_scope("plain", 10.0, 1e-5, "gdp")
        total = book.show("plain").state["remaining_mu"]
        spent = math.sqrt(total**2 - 0.75 * plan_mu**2)  # leaves room for 6 of the 8 windows
        book.spend("plain", Gaussian(1.0, spent), "another job")
    assert job_budget.stream_payment(output).mode == PREPAID  # a new stream would prepay its whole plan
    with Ledger(url) as book:
        ticket = book.open_stream("plain", window, "job", output=output, job=job_budget.job_digest())
        book.debit_stream(ticket.stream_id, 1, (0, 1, 2, 3))
        book.end_stream(ticket.stream_id, 1, finished=False)
    assert job_budget.stream_payment(output) == StreamPayment(PER_WINDOW, None)  # it resumes, paying windows not yet paid


class _PublishesBeforeSealing(streaming._WritePart):
    """Negative control: publishes an svt window's alert, then seals the monitor (a failed seal leaves an alert
    the ledger's record does not cover)."""

    def process(self, element):
        index, items = element
        (row, state), = [item for item in items if item is not None]
        content = (json.dumps(row) + "\n").encode()
        streaming.create_bytes(streaming.part_path(self._directory, index), content)
        self._payer.seal_and_publish(index, state, content)


def test_an_svt_alert_is_published_only_after_its_monitor_is_sealed_in_the_ledger(tmp_path):
    """A stream that pays window by window answers an svt monitor opened with it: each alert is published only
    after the monitor's state after that window is sealed in the ledger (continuing at the next window start), so
    the record always covers every published alert; a session that lost the stream neither seals nor publishes.
    The writer that publishes first (negative control) leaves an alert the record does not cover."""
    from dpstream.accounting.events import ApproxDP
    from dpstream.accounting.ledger import LedgerError, MonitorRecord, StreamMonitor

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    first = MonitorRecord({"window": 0, "filter": None}, WINDOW.start)
    with Ledger(url, create=True) as book:
        book.init_scope("p", 4.0, 1e-6)
        ticket = book.open_stream("p", PureDP(0.1), "job", output=str(tmp_path / "out"), job="digest",
                                  monitors={"busy": StreamMonitor(1.0, 1e-7, None, first)},
                                  opening=ApproxDP(1.0, 1e-7))
    payer = StreamPayer(url, ticket.stream_id, ticket.session, WINDOW, None, 60.0, monitor="busy", release="busy")
    directory = tmp_path / "out" / "windows" / "busy"

    def alert(index: int):
        return {"window": index, "alert": index == 1}, {"window": index + 1, "filter": None, "halt_reason": None}

    for index in (0, 1):
        _write(payer, directory, index, [alert(index)])
        with Ledger(url) as book:
            assert book.monitor_record("p", "busy").next_start == WINDOW.bounds(index + 1)[0]
    assert streaming.parts(str(directory)) == {0: True, 1: True}
    assert (directory / "window-000001.jsonl").read_text() == '{"window": 1, "alert": true}\n'
    with Ledger(url) as book:
        assert len(book.history("p")) == 1, "the monitor's opening only: its windows cost nothing more"
        book.end_stream(ticket.stream_id, ticket.session, finished=False)
    with pytest.raises(LedgerError, match="not streaming"):
        _write(payer, directory, 2, [alert(2)])
    assert 2 not in streaming.parts(str(directory))
    with pytest.raises(LedgerError, match="not streaming"):
        _write(payer, tmp_path / "broken", 2, [alert(2)], writer=_PublishesBeforeSealing)
    assert os.path.exists(tmp_path / "broken" / "window-000002.jsonl"), "the negative control published it"
    with Ledger(url) as book:
        assert book.monitor_record("p", "busy").next_start == WINDOW.bounds(2)[0], "the record misses that alert"


SVT_RELEASE = '''
[[release]]
kind = "svt"
name = "busy"
metric = "count"
maximum = 40
threshold = 0.5
sigma_threshold = 0.2
'''


@pytest.mark.parametrize("noise, pays_per_window", [("laplace", True), ("gaussian", False)])
def test_a_stream_with_an_svt_monitor_pays_per_window_where_its_windows_and_opening_add_up(tmp_path, noise,
                                                                                           pays_per_window):
    """On an approx scope the monitor's budget plus Laplace windows cost their sum however they are split, so the
    stream opens the monitor and pays window by window; Gaussian windows compose below their sum there, so the
    stream prepays its whole plan when it opens. A resumed stream's monitor answers from where its record continues."""
    from dpstream.pipelines.run import runner

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as book:
        book.init_scope("plain", 40.0, 1e-5, "approx:release_delta=1e-6")
    text = PLAIN_JOB.replace('name = "h"\n', f'name = "h"\nnoise = "{noise}"\n').replace(
        "epsilon = 1.0", "epsilon = 4.0") + SVT_RELEASE
    job_budget = runner.budget(_pubsub_job(tmp_path, text), url)
    assert (job_budget.stream_payment(str(tmp_path / "out")).mode == PER_WINDOW) == pays_per_window
    assert job_budget.monitor_starts() == {"busy": 0}
    # a session died after sealing the monitor past window 2 but before publishing alerts 1 and 2: those two are
    # decided as never published, the counts of windows 2.. are still released, the monitor answers from window 3
    expected, decided = {"h": ALL[:8], "busy": ALL[:8]}, {"h": {0, 1}, "busy": {0}}
    answered = answered_before(job_budget.plan, expected, decided, {"busy": 3})
    assert answered == {"busy": {1, 2}}
    assert answered_before(job_budget.plan, expected, decided, {"busy": 1}) == {"busy": set()}
    parts = {name: str(tmp_path / "out" / "windows" / name) for name in expected}
    mark_answered(parts, answered, {"busy": 3})
    assert streaming.parts(parts["busy"]) == {1: False, 2: False}
    assert "had answered this window" in (tmp_path / "out" / "windows" / "busy" / "window-000001.refused").read_text()
    decided["busy"] |= answered["busy"]
    assert resume_point(job_budget.plan, job_budget.window, None, decided, expected) == 2


def test_monitors_sealed_at_different_windows_each_resume_where_their_record_continues(tmp_path):
    """Review finding: each svt release has its own writer, so a killed stream can leave its monitors sealed after
    different windows; the resume used to refuse for good ("continue at different windows"). Each monitor now
    answers from its own record, and only its own answered windows are marked unpublished."""
    from dpstream.accounting.ledger import MonitorRecord
    from dpstream.pipelines.run import runner

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as book:
        book.init_scope("plain", 40.0, 1e-5, "approx:release_delta=1e-6")
    text = (PLAIN_JOB.replace('name = "h"\n', 'name = "h"\nnoise = "laplace"\n').replace("epsilon = 1.0", "epsilon = 8.0")
            + SVT_RELEASE + SVT_RELEASE.replace('name = "busy"', 'name = "quiet"'))
    job = _pubsub_job(tmp_path, text)
    output = str(tmp_path / "out")
    job_budget = runner.budget(job, url)
    assert job_budget.stream_payment(output).mode == PER_WINDOW
    ticket = job_budget.open_stream("job", output)
    with Ledger(url) as book:
        for name, after in (("busy", 3), ("quiet", 2)):
            state = job_budget.plan[name].monitor().to_dict()
            assert book.seal_stream_monitor(ticket.stream_id, ticket.session, name,
                                            MonitorRecord(state, job.window.bounds(after)[0]), False)
        book.end_stream(ticket.stream_id, ticket.session, finished=False)
    resumed = runner.budget(job, url)
    starts = resumed.monitor_starts()
    assert starts == {"busy": 3, "quiet": 2}
    expected = {name: ALL[:8] for name in ("h", "busy", "quiet")}
    answered = answered_before(resumed.plan, expected, {"h": set(), "busy": set(), "quiet": set()}, starts)
    assert answered == {"busy": {0, 1, 2}, "quiet": {0, 1}}
    assert resumed.open_stream("job", output).resumed


class _RecomputesPaidWindows(streaming._WritePart):
    """Negative control, the writer before the journal: asks whether the window's step is paid (the ledger says yes
    to any session once it was) and writes the rows it computed now wherever the window has no file."""

    def process(self, element):
        index, items = element
        with Ledger(self._payer.ledger) as book:
            book.debit_stream(self._payer.stream_id, self._payer.session, self._payer.steps(index))
        rows = [item for item in items if item is not None]
        streaming.create_bytes(streaming.part_path(self._directory, index),
                               "".join(json.dumps(row) + "\n" for row in rows).encode())


def _wipe_and_resume(tmp_path, writer) -> tuple[float, float, dict[int, set[bytes]]]:
    """Issue 32, case 1, as a falsification run: a plain pure scope of epsilon 1 pays windows of epsilon 0.25 as
    they are released; two windows are published, the output is wiped (an ephemeral disk, a lifecycle rule), the
    stream is resumed twice, and each session computes both windows again with fresh noise (events delivered
    again). Returns (the ledger's spent epsilon, the exact pure loss of what was published, window -> every
    distinct content published for it). Each distinct content of a window is another Laplace release of it, so
    the exact loss of k of them is k x 0.25 (pure composition is tight for Laplace)."""
    from dpstream.pipelines.run.paid_stream import republished

    tmp_path.mkdir()
    url, output = f"sqlite:///{tmp_path / 'ledger.db'}", str(tmp_path / "out")
    window_epsilon = 0.25
    with Ledger(url, create=True) as book:
        book.init_scope("p", 1.0, 0.0)
    directory = tmp_path / "out" / "windows" / "h"
    published: dict[int, set[bytes]] = {0: set(), 1: set()}
    for session in range(3):
        with Ledger(url) as book:
            ticket = book.open_stream("p", PureDP(window_epsilon), "job", output=output, job="digest")
        assert ticket.session == session + 1
        republished(url, ticket.stream_id, {"h": str(directory)}, lambda _: None)  # the launcher, on resume
        payer = StreamPayer(url, ticket.stream_id, ticket.session, WINDOW, None, 60.0, release="h")
        for index in (0, 1):
            _write(payer, directory, index, [{"window": index, "noisy": 100 * session + index}], writer=writer)
            published[index].add((directory / f"window-{index:06d}.jsonl").read_bytes())
        with Ledger(url) as book:
            book.end_stream(ticket.stream_id, ticket.session, finished=False)
            spent = book.show("p").state["spent_epsilon"]
        shutil.rmtree(output)
    exact = sum(window_epsilon * len(contents) for contents in published.values())
    return spent, exact, published


def test_a_wiped_and_resumed_stream_publishes_each_paid_window_once_from_the_journal(tmp_path):
    """The ledger's charge covers the exact loss of everything published: each window has one content, the
    journaled one, whatever each session computed; the negative control (the writer before the journal) published
    three noisy versions of each window for the price of one."""
    spent, exact, published = _wipe_and_resume(tmp_path / "fixed", streaming._WritePart)
    assert {index: len(contents) for index, contents in published.items()} == {0: 1, 1: 1}
    assert spent == pytest.approx(0.5) and spent >= exact - 1e-12
    spent, exact, published = _wipe_and_resume(tmp_path / "broken", _RecomputesPaidWindows)
    assert {index: len(contents) for index, contents in published.items()} == {0: 3, 1: 3}
    assert spent == pytest.approx(0.5) and exact == pytest.approx(1.5), "the negative control is under-charged"


def test_a_resumed_stream_writes_published_windows_again_only_from_the_journal(tmp_path):
    """The launcher's side (`paid_stream.republished`): a missing part, a part whose bytes were changed and a part
    replaced by a refusal marker are all written again with the journaled bytes; unpaid windows are left alone,
    and the windows decided afterwards are exactly the journaled ones plus the refused ones."""
    from dpstream.pipelines.run.paid_stream import republished

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as book:
        book.init_scope("p", 1.0, 0.0)
        ticket = book.open_stream("p", PureDP(0.3), "job", output=str(tmp_path / "out"), job="digest")
    payer = StreamPayer(url, ticket.stream_id, ticket.session, WINDOW, None, 60.0, release="h")
    directory = tmp_path / "out" / "windows" / "h"
    for index in range(4):
        _write(payer, directory, index, [{"window": index}])
    assert streaming.parts(str(directory)) == {0: True, 1: True, 2: True, 3: False}  # 0.9 spent: 3 refused
    original = {i: (directory / f"window-{i:06d}.jsonl").read_bytes() for i in range(3)}
    (directory / "window-000000.jsonl").unlink()
    (directory / "window-000001.jsonl").write_bytes(b'{"window": 1, "forged": true}\n')
    (directory / "window-000002.jsonl").unlink()
    (directory / "window-000002.refused").write_text("refused: forged\n")
    logged: list[str] = []
    decided, journal = republished(url, ticket.stream_id, {"h": str(directory)}, logged.append)
    assert decided == {"h": {0, 1, 2, 3}} and {name: set(items) for name, items in journal.items()} == {"h": {0, 1, 2}}
    assert {i: (directory / f"window-{i:06d}.jsonl").read_bytes() for i in range(3)} == original
    assert not (directory / "window-000002.refused").exists() and (directory / "window-000003.refused").exists()
    assert logged == ["h: 3 published window(s) written again from the ledger's journal (their files were missing "
                      "or changed): 0, 1, 2"]
    assert republished(url, ticket.stream_id, {"h": str(directory)}, logged.append)[0] == decided and len(logged) == 1


@pytest.mark.parametrize("grid", [None, GRID], ids=["plain scope", "period scope"])
def test_windows_paid_before_the_journal_are_never_published_again_after_a_wipe(tmp_path, grid):
    """Review finding: a stream opened by an older dpstream (no journal) paid windows 0-1 and published them; its
    output is wiped, and the new code resumes it. Those windows have no journaled bytes, and their steps are paid,
    so recomputing them would publish a second noisy version for free; they are decided as never published again
    (on a period scope, every window of the paid period without a journaled window). The resumed session's own
    windows are journaled and paid as usual."""
    from dpstream.pipelines.run.paid_stream import mark_paid_unjournaled, paid_unjournaled, republished

    url, output = f"sqlite:///{tmp_path / 'ledger.db'}", str(tmp_path / "out")
    with Ledger(url, create=True) as book:
        book.init_scope("p", 1.0, 0.0, unit_period=None if grid is None else 4 * HOUR)
        ticket = book.open_stream("p", PureDP(0.25), "job", output=output, job="digest")
    directory = tmp_path / "out" / "windows" / "h"
    legacy = StreamPayer(url, ticket.stream_id, ticket.session, WINDOW, grid, 60.0, release="h")
    for index in (0, 1):
        _write(legacy, directory, index, [{"window": index, "noisy": 1}], writer=_RecomputesPaidWindows)
    with Ledger(url) as book:
        book.end_stream(ticket.stream_id, ticket.session, finished=False)
        resumed = book.open_stream("p", PureDP(0.25), "job", output=output, job="digest")
    shutil.rmtree(output)
    parts = {"h": str(directory)}
    decided, journal = republished(url, resumed.stream_id, parts, lambda _: None)
    before = paid_unjournaled(_plan(ContributionBounds()), WINDOW, grid, {"h": ALL}, decided, resumed.debited, journal)
    assert before == {"h": {0, 1} if grid is None else {0, 1, 2, 3}}  # period 0 holds windows 0-3
    mark_paid_unjournaled(parts, before)
    payer = StreamPayer(url, resumed.stream_id, resumed.session, WINDOW, grid, 60.0, release="h")
    for index in (0, 1, 4):
        _write(payer, directory, index, [{"window": index, "noisy": 2}])
    assert streaming.parts(str(directory)) == {**{i: False for i in before["h"]}, 4: True}
    assert "an older dpstream" in (directory / "window-000000.refused").read_text()
    with Ledger(url) as book:
        assert set(book.stream_journal(resumed.stream_id)["h"]) == {4}
        assert paid_unjournaled(_plan(ContributionBounds()), WINDOW, grid, {"h": ALL}, {"h": set()},
                                book.stream(resumed.stream_id).debited, book.stream_journal(resumed.stream_id)) \
            == before, "steps paid with a journaled window are not legacy; the legacy ones stay so"


def test_running_a_finished_stream_again_rewrites_its_files_and_report_from_the_journal(tmp_path):
    """Found by the stream kill-anywhere campaign: a session killed between its last window and its report left
    report.json saying "streaming" while the ledger said finished, and running the job again was refused. Now it
    writes the window files again from the journal, merges them and rewrites the reports; nothing is opened,
    computed or debited (the DirectRunner would refuse to start a stream over past windows: it never starts)."""
    from dpstream.pipelines.run import runner

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    job = _pubsub_job(tmp_path, PLAIN_JOB.replace('name = "h"\n', 'name = "h"\nnoise = "laplace"\n'))
    output = str(tmp_path / "out")
    job_budget = runner.budget(job, url)
    with Ledger(url, create=True) as book:
        book.init_scope("plain", 10.0, 1e-5)
        ticket = book.open_stream("plain", job_budget.plan.window_event(), "job", output=output,
                                  job=job_budget.job_digest())
    payer = StreamPayer(url, ticket.stream_id, ticket.session, job.window, None, 60.0, release="h")
    directory = tmp_path / "out" / "windows" / "h"
    windows = range(job.window.count)
    for index in windows:
        start, end = window_bounds_iso(job.window, index)
        row = {"release": "h", "window_start": start, "window_end": end, "partition": "a", "value": float(index),
               "noise_stddev": 1.0}
        _write(payer, directory, index, [row], indices=tuple(windows))
    with Ledger(url) as book:
        book.end_stream(ticket.stream_id, ticket.session, finished=True)
        spent = book.show("plain").state
    (directory / "window-000003.jsonl").unlink()  # and a window file lost meanwhile
    (tmp_path / "out" / "report.json").write_text('{"streaming": {"complete": false}}')
    logged: list[str] = []
    outcome = runner.run(job, ledger_url=url, log=logged.append)
    assert outcome.pending == {} and any("had finished" in line for line in logged)
    assert json.loads((tmp_path / "out" / "report.json").read_text())["streaming"] == {
        "complete": True, "windows_pending": {}}
    merged = [json.loads(line)["value"] for line in open(outcome.files["h"])]
    assert sorted(merged) == [float(index) for index in windows]
    with Ledger(url) as book:
        assert book.show("plain").state == spent and len(book.streams_of("plain")) == 1
