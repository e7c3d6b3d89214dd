"""Streaming jobs against the Pub/Sub emulator of the Google Cloud CLI (DESIGN.md §7).

One emulator serves every integration module (tests/integration/conftest.py, about 6 s to start); it runs in its own process group, watched, and the
whole group is killed when the module ends, or within a second of this process dying.

1. Timestamped JSON events are published to a topic; `runner.run` reads them from a subscription on the
   DirectRunner in streaming mode, writes each window's rows when the window is released, and stops once
   every window of the declared range has its file (no metric involved). The merged release files must
   equal, byte for byte, a batch run of the same events (as a JSONL file) with the same seed. The
   DirectRunner's Pub/Sub watermark is wall-clock time, so the job's windows lie a few seconds in the
   future: events are published before their windows end, and each window is released when the clock
   passes its end.
2. A job whose windows lie an hour ahead stops at `max_seconds`, reports every window pending, and leaves
   no window files behind.
While a job runs, the test publishes one filler event every half second, timestamped after the job's range
(so no window counts it): the DirectRunner's Pub/Sub reader pulls with a 30 s deadline, and on an idle
subscription its watermark (and a cancel, which waits for the pull in flight) would advance only every 30 s.
Skips only when gcloud's Pub/Sub emulator, java or google-cloud-pubsub is absent; with CI=true it fails.
Bounded: about 40 s on 2 cores; every run has a max_seconds bound, so nothing waits forever.
"""
import contextlib
import json
import threading
import time

import pytest

from dpstream.accounting.ledger import Ledger
from dpstream.accounting.text import instant_text
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.run import paid_stream, runner
from tests.integration.conftest import PROJECT
from tests.integration.jobs import iso, job_text

LEAD_S = 20  # publishing to the first window's start: start-up on a loaded machine, plus READER_START_S
WINDOW_S = 4
USERS = 12
BOUND_S = 60  # max_seconds of the complete run: a safety bound, far above the ~20 s it needs


def _topic_and_subscription(clients, name: str) -> tuple[str, str]:
    publisher, subscriber = clients
    topic = publisher.topic_path(PROJECT, name)
    subscription = subscriber.subscription_path(PROJECT, name)
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=subscription, topic=topic)
    return topic, subscription


def _job_text(start: float, input_table: str, output_path: str) -> str:
    return job_text(input_table=input_table, start=start, windows=2, window_s=WINDOW_S, output=output_path,
                    scope="stream", epsilon=4.0, seed=11)


def _events(start: float) -> list[dict]:
    """Two windows of events; users u0..u11, partition A or B, at whole milliseconds inside the windows."""
    return [
        {"user": f"u{user}", "dest": "AB"[(user + window) % 3 == 0],
         "ms": int((start + window * WINDOW_S + 0.25 + 0.3 * user) * 1000)}
        for window in range(2) for user in range(USERS)
    ]


@contextlib.contextmanager
def _traffic(publisher, topic: str, after: float):
    """Publish a filler event every 0.5 s, timestamped at `after` (outside every window), until the block ends."""
    stop_event = threading.Event()

    def publish() -> None:
        while not stop_event.wait(0.5):
            filler = {"user": "filler", "dest": "A", "ms": int(after * 1000)}
            publisher.publish(topic, json.dumps(filler).encode(), ts=str(filler["ms"])).result(timeout=30)

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop_event.set()
        thread.join(timeout=35)


def _ledger(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as book:
        book.init_scope("stream", 40.0, 1e-5, "approx:release_delta=1e-6")
    return url


@pytest.mark.timeout(150)
def test_streaming_run_ends_when_the_range_is_released_and_equals_batch(emulator, tmp_path):
    topic, subscription = _topic_and_subscription(emulator, "events")
    ledger = _ledger(tmp_path)
    start = float(int(time.time()) + LEAD_S)
    events = _events(start)
    futures = [emulator[0].publish(topic, json.dumps(event).encode(), ts=str(event["ms"])) for event in events]
    for future in futures:
        future.result(timeout=30)

    (tmp_path / "stream.toml").write_text(_job_text(
        start, f'format = "pubsub"\nsubscription = "{subscription}"\ntimestamp_attribute = "ts"', "stream"))
    end = start + 2 * WINDOW_S
    lines: list[str] = []
    with _traffic(emulator[0], topic, end + 3600):
        streamed = runner.run(jobfile.load(str(tmp_path / "stream.toml")), ledger_url=ledger, log=lambda _: None,
                              max_seconds=BOUND_S, progress=lines.append)
    assert streamed.pending == {}, f"stopped at the {BOUND_S}s bound with windows pending"
    assert [line for line in lines if line.startswith("window ")] == [
        paid_stream.STREAMING_WINDOW.format(number=n, windows=2, end=instant_text(start + n * WINDOW_S))
        for n in (1, 2)], lines
    assert any("its whole plan is paid now" in line for line in lines), lines  # Gaussian on approx: prepaid
    assert time.time() - end < 15, "the run did not end soon after its last window"
    assert streamed.report["runner"]["name"] == "DirectRunner"
    assert streamed.report["streaming"] == {"complete": True, "windows_pending": {}}

    # The reference: the same events as a file, one batch run with the same seed.
    with open(tmp_path / "events.jsonl", "w") as out:
        for event in events:
            out.write(json.dumps({**event, "time": iso(event["ms"] / 1000)}) + "\n")
    (tmp_path / "batch.toml").write_text(_job_text(
        start, 'format = "jsonl"\npath = "events.jsonl"\ntimestamp = "time"', "batch"))
    batch = runner.run(jobfile.load(str(tmp_path / "batch.toml")), ledger_url=ledger, log=lambda _: None)
    for name, path in batch.files.items():
        with open(path, "rb") as expected, open(streamed.files[name], "rb") as got:
            content = expected.read()
            assert content and got.read() == content, name
    assert streamed.report["releases"]["counts"]["rows"] == 2 * 3  # two windows, three public partitions


@pytest.mark.timeout(90)
def test_max_seconds_stops_a_run_and_reports_the_pending_windows(emulator, tmp_path):
    topic, subscription = _topic_and_subscription(emulator, "later")
    ledger = _ledger(tmp_path)
    start = float(int(time.time()) + 3600)
    (tmp_path / "later.toml").write_text(_job_text(
        start, f'format = "pubsub"\nsubscription = "{subscription}"\ntimestamp_attribute = "ts"', "later"))
    began = time.monotonic()
    with _traffic(emulator[0], topic, start + 7200):
        outcome = runner.run(jobfile.load(str(tmp_path / "later.toml")), ledger_url=ledger, log=lambda _: None,
                             max_seconds=5)
    took = time.monotonic() - began
    assert outcome.pending == {"counts": 2, "top": 2}
    assert 5 <= took < 25, took
    assert outcome.report["releases"]["counts"]["rows"] == 0
    assert outcome.report["streaming"] == {"complete": False, "windows_pending": {"counts": 2, "top": 2}}
    with Ledger(ledger) as book:
        assert len(book.history("stream")) == 1  # a prepaid stream: its whole plan, when it opened


def test_a_backfill_from_pubsub_on_the_direct_runner_is_refused_before_the_debit(tmp_path):
    """The DirectRunner's Pub/Sub watermark follows the wall clock: a range that ended an hour ago would be
    released from noise alone, so the run is refused (exit 2) before the ledger is asked."""
    ledger = _ledger(tmp_path)
    start = float(int(time.time()) - 3600 - 2 * WINDOW_S)
    (tmp_path / "past.toml").write_text(_job_text(
        start, 'format = "pubsub"\nsubscription = "projects/p/subscriptions/s"\ntimestamp_attribute = "ts"', "past"))
    with pytest.raises(runner.RunError, match=r"in the past: on the DirectRunner a Pub/Sub read's watermark follows "
                                              r"the wall clock.*nothing was debited") as caught:
        runner.run(jobfile.load(str(tmp_path / "past.toml")), ledger_url=ledger, log=lambda _: None)
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)
    with Ledger(ledger) as book:
        assert book.history("stream") == []
