"""Kill anywhere, the stream half (issue 32, must-show): a `dpstream run` of a Pub/Sub stream is SIGKILLed at
seeded random moments of its life, then the same job is run again into the same output until it is done.

The stream pays window by window (a plain gdp scope, Gaussian counts and top-k: the "window" case of
test_pubsub_streams.test_a_killed_stream_resumes_and_equals_one_batch_run). One clean run is measured first (its
own scope, topic, subscription and output); the moments are stratified over its duration (one drawn uniformly in
each KILLS-th of it, seeded), so they land before admission, between admission and the first window's payment,
mid-stream (some windows paid), during the merge and report, or after the run ended by itself. Each killed
campaign has its own scope, topic, subscription and output, and a sentinel file beside the output and one in a
sibling directory.

Events are published once, before the killed session starts. The DirectRunner's Pub/Sub reader acknowledges
what it pulls (Beam's _PubSubReadEvaluator), so the killed session consumed them: the subscription keeps
acknowledged messages (retain_acked_messages) and is sought back to its creation before the resume, which
delivers every event again (the windows already published are written from the ledger's journal, never
computed again: their events arrive behind the watermark, or are computed and dropped by the writer, which
releases only the windows the session may).

Whatever the moment:
- each (release, window) is journaled at most once, every window file equals its journaled bytes, and every
  journaled window holds the rows a batch run over the same events with the same seed gives that window;
- the scope is debited once per window with a journaled artifact and for nothing else;
- the sentinel files are untouched and nothing but dpstream's output appears beside them.
When the stream could be resumed (see below), every window is published exactly once, the merged release files
equal the batch run's byte for byte, and the scope's state equals the clean run's (one clean run's debit).

The DirectRunner cannot release a window whose release time passed while no session ran (its Pub/Sub watermark
is the wall clock; LIMITATIONS, "Resuming on the DirectRunner"): a kill that leaves such a window unpublished
(killed within the resume's start-up time before a release, or between a release and its publication) is refused
on resume, exit 2 ("in the past", or within `preflight.READER_START_S` of now; nothing was debited), and the
campaign checks the first list only, plus that the refusal debited nothing and left the stream stopped. Those
moments are reported as such, not hidden. This test found that a resume starting a few seconds before a window's
release used to pass that check while its reader started after the release: the window was published with only
the events of the reader's first pull (10 messages), the rest dropped as late, paid once and journaled; the
check now keeps READER_START_S (10 s) of margin, and the comparison with the batch run would catch it again.

`make test` runs DPSTREAM_STREAM_KILLS (default 2) moments, about 3.5 min with the clean run on 2 loaded cores;
the issue's 30 is DPSTREAM_STREAM_KILLS=30 (about 60 s a moment). The resume runs in this process (as
test_kill_anywhere's does): it saves the CLI's start-up, which the DirectRunner's wall-clock watermark would
otherwise add to every unresumable span. Windows are 20 s: a mid-stream kill can be resumed only when a window
outlasts its publication lag (4-9 s here) plus the lease wait and the resume's start-up (8-10 s). Run with -s to see
the clean run's timeline and where each moment landed. Skips only when the emulator, java or google-cloud-pubsub
is absent; with CI=true it fails (the `emulator` fixture)."""
from __future__ import annotations

import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.run import runner
from dpstream.pipelines.run.preflight import READER_START_S
from tests.integration.conftest import PROJECT
from tests.integration.jobs import iso, pubsub_input
from tests.integration.test_pubsub import _traffic
from tests.integration.test_pubsub_streams import KILLED, PLAIN_SCOPES, _events, _job, _publish

KILLS = int(os.environ.get("DPSTREAM_STREAM_KILLS", "2"))
SEED = 32
_SCOPE, RELEASES, EPSILON, _USERS = KILLED["window"]  # paid window by window on a plain gdp scope
FILTER = PLAIN_SCOPES[_SCOPE]
NAMES = ("counts", "top")
WINDOW_S, WINDOWS, LATENESS_S = 20, 2, 0  # two windows: a kill can land between a paid window and the next
LEAD_S = 4  # from launching `dpstream run` to the first window's start (its events count until the window ends)
LEASE_S = 6  # a stream's lease must outlast the time from opening it to its pipeline's first renewal
BOUND_S = 150  # --max-seconds of every session: a safety bound
SENTINEL = "not dpstream's"


@dataclass
class Campaign:
    """One stream: its scope, topic and subscription, output and events, and what happened to it."""

    name: str
    home: Path  # the output's parent directory: the job file, the output and the sentinels
    topic: str
    subscription: str
    since: float  # before the subscription existed: seeking to it delivers every message again
    start: float
    events: list[dict]
    notes: dict = field(default_factory=dict)

    @property
    def scope(self) -> str:
        return self.name

    @property
    def job(self) -> Path:
        return self.home / "job.toml"

    @property
    def output(self) -> Path:
        return self.home / "out"

    def released_at(self, index: int) -> float:
        """When the DirectRunner releases window `index` (its end plus the allowed lateness, wall clock)."""
        return self.start + (index + 1) * WINDOW_S + LATENESS_S


def _campaign(emulator, tmp_path: Path, url: str, name: str) -> Campaign:
    publisher, subscriber = emulator
    home = tmp_path / name
    (home / "theirs").mkdir(parents=True)
    (home / "keep.txt").write_text(SENTINEL)
    (home / "theirs" / "keep.txt").write_text(SENTINEL)
    with Ledger(url) as book:
        book.init_scope(name, 40.0, 1e-5, FILTER)
    topic = publisher.topic_path(PROJECT, f"kill-anywhere-{name}")
    subscription = subscriber.subscription_path(PROJECT, f"kill-anywhere-{name}")
    publisher.create_topic(name=topic)
    since = time.time() - 1
    subscriber.create_subscription(request={"name": subscription, "topic": topic, "retain_acked_messages": True})
    start = float(math.ceil(time.time() + LEAD_S))
    events = _events(start, WINDOW_S, range(WINDOWS))
    _publish(publisher, topic, events)
    campaign = Campaign(name, home, topic, subscription, since, start, events)
    campaign.job.write_text(_job(start, WINDOWS, WINDOW_S, None, LATENESS_S, pubsub_input(subscription),
                                 str(campaign.output), name, RELEASES, EPSILON))
    return campaign


def _launch(campaign: Campaign, url: str, logs: Path) -> subprocess.Popen:
    """`dpstream run` of the campaign's job, in its own process group (so a SIGKILL takes every process of it)."""
    command = [sys.executable, "-m", "dpstream.pipelines.cli.main", "run", str(campaign.job), "--ledger", url,
               "--output", str(campaign.output), "--lease-seconds", str(LEASE_S), "--max-seconds", str(BOUND_S)]
    with open(logs / f"{campaign.name}.log", "wb") as log:
        return subprocess.Popen(command, cwd=logs, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _tail(logs: Path, campaign: Campaign) -> str:
    return (logs / f"{campaign.name}.log").read_text(errors="replace")[-2000:]


def _seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _journal_rows(url: str, stream_id: int) -> list[tuple[str, int, str, int]]:
    """(release, emission, recorded_at, session) of every row the ledger's stream journal holds for the stream,
    read from the table itself (`Ledger.stream_journal` is a dictionary and would hide a second row)."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        return db.execute("SELECT release, emission, recorded_at, session FROM dpstream_stream_journal "
                          "WHERE stream_id = ?", (stream_id,)).fetchall()


def _parts(campaign: Campaign, name: str) -> dict[str, Path]:
    directory = campaign.output / "windows" / name
    return {p.name: p for p in sorted(directory.iterdir())} if directory.exists() else {}


def _timeline(campaign: Campaign, url: str, launched: float, ended: float) -> str:
    """Where the clean run spent its life, in seconds from its launch (from the ledger's and the files' times)."""
    with Ledger(url) as book:
        (stream,) = book.streams_of(campaign.scope)
    published: dict[int, float] = {}
    for _, emission, recorded_at, _ in _journal_rows(url, stream.stream_id):
        published[emission] = max(published.get(emission, 0.0), _seconds(recorded_at))
    lines = [f"stream opened {_seconds(stream.created_at) - launched:.1f}",
             f"window 0 starts {campaign.start - launched:.1f}"]
    lines += [f"window {i} released {campaign.released_at(i) - launched:.1f}, journaled "
              f"{published[i] - launched:.1f}" for i in sorted(published)]
    lines += [f"report.json last written {(campaign.output / 'report.json').stat().st_mtime - launched:.1f}",
              f"exit {ended - launched:.1f}"]
    return "; ".join(lines)


def _phase(campaign: Campaign, url: str, killed_at: float) -> str:
    """Where a kill landed, read back from the ledger and the output right after it."""
    with Ledger(url) as book:
        streams = book.streams_of(campaign.scope)
        journal = book.stream_journal(streams[0].stream_id) if streams else {}
    paid = len(streams[0].debited) if streams else 0
    due = [index for index in range(WINDOWS) if campaign.released_at(index) <= killed_at
           and (not streams or index not in streams[0].debited)]
    due_text = f"; window(s) {due} past their release time, unpaid" if due else ""
    if not streams:
        return "before admission (no stream opened)" + due_text
    files = sum(1 for name in NAMES for part in _parts(campaign, name) if part.endswith(".jsonl"))
    artifacts = sum(len(items) for items in journal.values())
    unwritten = f"; {artifacts - files} journaled window file(s) not yet written" if artifacts > files else ""
    if paid == 0:
        return "admitted, no window paid" + due_text
    if artifacts < WINDOWS * len(NAMES):
        published = ", ".join(f"{name} {sorted(journal.get(name, {}))}" for name in NAMES)
        return f"mid-stream: {paid} of {WINDOWS} windows paid, journaled {published}{unwritten}{due_text}"
    report = campaign.output / "report.json"
    complete = report.exists() and json.loads(report.read_text())["streaming"]["complete"]
    return ("every window paid and published, " + ("report complete (merge done)" if complete
                                                    else "during merge/publication") + unwritten)


def _wait_out_lease(campaign: Campaign, url: str) -> None:
    with Ledger(url) as book:
        leases = [s.lease_until for s in book.streams_of(campaign.scope)]
    if leases:
        time.sleep(max(0.0, max(leases) - time.time()) + 0.5)


def _seek_to_start(subscriber, campaign: Campaign) -> None:
    """Every message of the subscription unacknowledged again (the killed session acknowledged what it pulled)."""
    from google.protobuf import timestamp_pb2

    when = timestamp_pb2.Timestamp()
    when.FromMicroseconds(int(campaign.since * 1e6))
    subscriber.seek(request={"subscription": campaign.subscription, "time": when})


def _resume(campaign: Campaign, url: str) -> tuple[str, list[str]]:
    """Run the job again into the same output until it is done: ("resumed" | "refused: ..." | "finished", log)."""
    logged: list[str] = []
    for _ in range(5):
        try:
            outcome = runner.run(jobfile.load(str(campaign.job)), str(campaign.output), url, log=logged.append,
                                 lease_seconds=LEASE_S, max_seconds=BOUND_S)
        except runner.RunError as err:
            text = str(err)
            if "is being written by stream" in text:  # a lease not yet run out: wait it out, run again
                time.sleep(LEASE_S)
                continue
            if ": on the DirectRunner a Pub/Sub read" in text:
                assert err.exit_code == 2 and text.endswith("nothing was debited"), text
                return f"refused: {text}", logged
            raise
        assert outcome.pending == {}, (campaign.name, outcome.pending)
        if any("had finished" in line for line in logged):  # the killed session finished the stream: its files
            return "finished", logged  # and report are written again from the journal
        return "resumed", logged
    pytest.fail(f"{campaign.name}: the output stayed leased: {logged}")


def _batch(campaign: Campaign, url: str, tmp_path: Path) -> dict[str, bytes]:
    """The reference: the campaign's events as a file, one batch run of the same job with the same seed."""
    where = tmp_path / "batch" / campaign.name
    where.mkdir(parents=True)
    with open(where / "events.jsonl", "w") as out:
        for event in campaign.events:
            out.write(json.dumps({**event, "time": iso(event["ms"] / 1000)}) + "\n")
    source = f'format = "jsonl"\npath = "{where / "events.jsonl"}"\ntimestamp = "time"'
    (where / "job.toml").write_text(_job(campaign.start, WINDOWS, WINDOW_S, None, LATENESS_S, source,
                                         str(where / "out"), "reference", RELEASES, EPSILON))
    outcome = runner.run(jobfile.load(str(where / "job.toml")), str(where / "out"), url, log=lambda _: None)
    return {name: Path(path).read_bytes() for name, path in outcome.files.items()}


def _by_window(content: bytes) -> dict[str, list[str]]:
    """A release's rows, as sorted JSON texts, per window start."""
    out: dict[str, list[str]] = {}
    for line in content.decode().splitlines():
        out.setdefault(json.loads(line)["window_start"], []).append(line)
    return {start: sorted(rows) for start, rows in out.items()}


def _check(campaign: Campaign, url: str, reference: dict[str, bytes], outcome: str,
           clean_state: dict | None) -> None:
    """What must hold after a kill and its resume, whatever the moment (and more when the stream was resumed)."""
    tag = (campaign.name, campaign.notes.get("moment"), campaign.notes.get("phase"), outcome,
           campaign.notes.get("timing"))
    with Ledger(url) as book:
        streams = book.streams_of(campaign.scope)
        history = book.history(campaign.scope)
        state = book.show(campaign.scope).state
        journal = book.stream_journal(streams[0].stream_id) if streams else {}
    assert len(streams) <= 1, tag
    rows = _journal_rows(url, streams[0].stream_id) if streams else []
    keys = [(release, emission) for release, emission, _, _ in rows]
    assert len(keys) == len(set(keys)), ("a window journaled twice", tag, sorted(keys))
    expected = {name: _by_window(content) for name, content in reference.items()}
    for name in NAMES:
        parts = _parts(campaign, name)
        assert not [p for p in parts if not p.endswith(".jsonl")], ("a window part refused or stray", tag, parts)
        assert {int(p[7:13]) for p in parts} == set(journal.get(name, {})), ("files differ from the journal", tag)
        for index, artifact in journal.get(name, {}).items():
            assert parts[f"window-{index:06d}.jsonl"].read_bytes() == artifact.content, (name, index, tag)
            starts = {json.loads(line)["window_start"] for line in artifact.content.decode().splitlines()}
            assert len(starts) == 1, (name, index, tag)
            assert sorted(artifact.content.decode().splitlines()) == expected[name][starts.pop()], \
                ("a journaled window differs from the batch run's", name, index, tag)
    windows = {index for items in journal.values() for index in items}
    if streams:
        assert set(streams[0].debited) == windows and streams[0].refused == {}, ("debits differ from the journal", tag)
    assert len(history) == len(windows), ("one debit per journaled window and nothing else", tag, history)
    assert (campaign.home / "keep.txt").read_text() == SENTINEL, tag
    assert [p.name for p in (campaign.home / "theirs").iterdir()] == ["keep.txt"], tag
    assert (campaign.home / "theirs" / "keep.txt").read_text() == SENTINEL, tag
    assert {p.name for p in campaign.home.iterdir()} <= {"job.toml", "keep.txt", "theirs", "out"}, tag
    if outcome.startswith("refused"):  # a window's release passed, or was near, while no session ran (DirectRunner)
        unpublished = [index for index in range(WINDOWS) if any(index not in journal.get(n, {}) for n in NAMES)]
        margin = READER_START_S  # the check refuses a window released within the reader's start-up, too
        assert unpublished and campaign.released_at(unpublished[0]) <= campaign.notes["resume_ended"] + margin, tag
        assert not streams or streams[0].status == "stopped", tag  # (none: it was killed before admission)
        assert len(history) == campaign.notes["debits_before_resume"], ("the refused resume debited", tag)
        return
    (stream,) = streams
    assert stream.status == "finished", tag
    assert {name: set(items) for name, items in journal.items()} == {name: set(range(WINDOWS)) for name in NAMES}, tag
    for name in NAMES:  # the merged release files: one clean run's, byte for byte
        merged = (campaign.output / f"{name}.jsonl").read_bytes()
        assert merged and merged == reference[name], ("the merged file differs from the batch run's", name, tag)
        assert sorted(merged.decode().splitlines()) == sorted(
            line for item in journal[name].values() for line in item.content.decode().splitlines()), (name, tag)
    if clean_state is not None:  # one clean run's debit, no more
        assert state.keys() == clean_state.keys(), tag
        for key, value in state.items():
            assert value == (pytest.approx(clean_state[key], rel=1e-12) if isinstance(value, float)
                             else clean_state[key]), (key, tag)


@pytest.mark.timeout(240 + 150 * KILLS)
def test_a_stream_killed_anywhere_and_run_again_publishes_each_window_once_as_one_clean_run(emulator, tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as book:
        book.init_scope("reference", 1000.0, 1e-2, "approx:release_delta=1e-6")
    logs = tmp_path / "logs"
    logs.mkdir()

    clean = _campaign(emulator, tmp_path, url, "clean")
    with _traffic(emulator[0], clean.topic, clean.start + 3600):
        launched, began = time.time(), time.monotonic()
        child = _launch(clean, url, logs)
        code = child.wait(timeout=BOUND_S + 60)
        clean_s = time.monotonic() - began
    assert code == 0, _tail(logs, clean)
    timeline = _timeline(clean, url, launched, launched + clean_s)
    print(f"\nclean run: {clean_s:.1f} s ({WINDOWS} windows of {WINDOW_S} s, lateness {LATENESS_S} s): {timeline}")
    _check(clean, url, _batch(clean, url, tmp_path), "clean run", None)
    with Ledger(url) as book:
        clean_state = book.show(clean.scope).state
        assert len(book.history(clean.scope)) == WINDOWS

    rng = random.Random(SEED)
    outcomes, failures = [], []
    for attempt in range(KILLS):
        moment = (attempt + rng.random()) / KILLS * clean_s  # one moment in each KILLS-th of the clean run's life
        campaign = _campaign(emulator, tmp_path, url, f"kill{attempt}")
        began = time.monotonic()
        with _traffic(emulator[0], campaign.topic, campaign.start + 3600):
            launched = time.time()
            child = _launch(campaign, url, logs)
            try:
                code = child.wait(timeout=moment)  # it ended by itself before the moment
                phase = f"after its exit (code {code})"
                if code != 0:
                    failures.append(f"kill {attempt}: the session ended by itself, exit {code}: "
                                    f"{_tail(logs, campaign)}")
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait(timeout=30)
                phase = _phase(campaign, url, time.time())
            _wait_out_lease(campaign, url)
            with Ledger(url) as book:
                campaign.notes["debits_before_resume"] = len(book.history(campaign.scope))
            _seek_to_start(emulator[1], campaign)
            resumed_at = time.time() - launched
            outcome, logged = _resume(campaign, url)
            campaign.notes["resume_ended"] = time.time()
        releases = ", ".join(f"window {i} at {campaign.released_at(i) - launched:.1f} s" for i in range(WINDOWS))
        campaign.notes.update(moment=round(moment, 2), phase=phase,
                              timing=f"resume started at {resumed_at:.1f} s; releases: {releases}")
        again = sum(1 for line in logged if "written again from the ledger's journal" in line)
        outcomes.append((campaign.notes["moment"], phase, f"resume at {resumed_at:.1f} s: " + outcome.split(":")[0]
                         + (f", {again} release(s) rewritten from the journal" if again else ""),
                         f"{time.monotonic() - began:.0f} s"))
        print(f"kill {attempt}: {outcomes[-1]}" + (f"\n  {outcome}" if outcome.startswith("refused") else ""))
        try:
            _check(campaign, url, _batch(campaign, url, tmp_path), outcome, clean_state)
        except AssertionError as err:  # every moment runs; the failures are told together at the end
            failures.append(f"kill {attempt} (seed {SEED}, moment {moment:.2f} s of {clean_s:.1f} s): {err}")
            print(f"  FAILED: {str(err)[:1500]}")
    print(f"kill moments (seed {SEED}, s of a {clean_s:.1f} s clean run), where they landed, the resume, the "
          f"campaign's time:", *outcomes, sep="\n  ")
    assert not failures, "\n".join(failures)
