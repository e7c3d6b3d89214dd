"""A run is a transaction: faults at each stage publish nothing and debit nothing, monitors come back, a re-run
is charged once, output directories are protected. Fault injection: exceptions in-process, and kill -9 of a
`dpstream run` process at each stage. Proof: docs/proofs/pipelines.run.budget.Budget.md."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.report import document
from dpstream.pipelines.run import runner
from dpstream.pipelines.run.publication import Publication
from tests.pipelines.test_remote_output import SVT
from tests.pipelines.test_runner import JOB, _events, _ledger

QUIET = {"log": lambda _: None}


def _job(tmp_path, extra: str = "", rows: int = 10) -> jobfile.Job:
    (tmp_path / "events.csv").write_text(_events(rows))
    (tmp_path / "job.toml").write_text(JOB.replace("[output]", extra + "[output]"))
    return jobfile.load(str(tmp_path / "job.toml"))


def _state(url: str) -> tuple:
    """What a failure must leave unchanged: the scope's spend, its debits and its monitors' sealed records."""
    with Ledger(url) as ledger:
        view = ledger.show("test")
        records = {m.name: ledger.monitor_record("test", m.name) for m in view.monitors}
        return view.state, len(ledger.history("test")), records


def _outcomes(url: str) -> list[str]:
    with Ledger(url) as ledger:
        return [run.status for run in ledger.runs_of("test")]


def _left_in(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("stage", ["pipeline", "sealed states", "report", "commit"])
def test_a_failure_at_any_stage_before_publication_publishes_nothing_and_debits_nothing(tmp_path, monkeypatch, stage):
    job = _job(tmp_path, SVT)
    url = _ledger(tmp_path, 40.0, 1e-4)
    runner.run(job, str(tmp_path / "first"), url, **QUIET)  # opens the monitor
    before = _state(url)
    job = _continue(tmp_path, job)

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    target = {"pipeline": (runner, "_compute"), "sealed states": (runner.Budget, "sealed_states"),
              "report": (document, "write_reports"), "commit": (runner.Budget, "commit")}[stage]
    monkeypatch.setattr(*target, fail)
    with pytest.raises(runner.RunError, match="nothing was published or debited") as caught:
        runner.run(job, str(tmp_path / "out"), url, **QUIET)
    assert caught.value.exit_code in (runner.EXIT_ERROR, runner.EXIT_INTERNAL)
    assert "out" not in _left_in(tmp_path) and not [n for n in _left_in(tmp_path) if "staging" in n]
    assert _state(url) == before and _outcomes(url) == ["published", "failed"]
    monkeypatch.undo()
    runner.run(job, str(tmp_path / "out"), url, **QUIET)  # the re-run is charged once, and continues the monitor
    assert _state(url)[1] == before[1] + 1 and _outcomes(url) == ["published", "failed", "published"]


def _continue(tmp_path, job: jobfile.Job) -> jobfile.Job:
    """The job over the next three days (a monitor continues where the last published run ended), whose events
    all lie before them: the run publishes noise only (`allow_empty`)."""
    text = (tmp_path / "job.toml").read_text().replace("start = 2013-01-01\nend = 2013-01-04",
                                                      "start = 2013-01-04\nend = 2013-01-07").replace(
        'partition = "dest"\n', 'partition = "dest"\nallow_empty = true\n')
    (tmp_path / "job2.toml").write_text(text)
    return jobfile.load(str(tmp_path / "job2.toml"))


def test_a_published_run_is_not_overwritten_unless_asked_and_foreign_directories_never(tmp_path):
    job = _job(tmp_path)
    url = _ledger(tmp_path, 40.0, 1e-4)
    first = runner.run(job, str(tmp_path / "out"), url, **QUIET)
    (tmp_path / "out" / "stale.txt").write_text("from an older job")
    with pytest.raises(runner.RunError, match=r"holds a published run \(job 'job', ledger run 1 on scope 'test'\); "
                                              r"pass --overwrite"):
        runner.run(job, str(tmp_path / "out"), url, **QUIET)
    second = runner.run(job, str(tmp_path / "out"), url, overwrite=True, **QUIET)
    assert "stale.txt" not in _left_in(tmp_path / "out")  # the whole directory is the new run's
    assert second.report["budget"]["run_id"] == 2 and first.report["budget"]["run_id"] == 1
    assert _outcomes(url) == ["published", "published"]  # the refused overwrite never reached the ledger
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("not dpstream's")
    with pytest.raises(runner.RunError, match="is not empty and holds no dpstream run"):
        runner.run(job, str(tmp_path / "mine"), url, overwrite=True, **QUIET)
    assert _left_in(tmp_path / "mine") == ["notes.txt"]


def test_two_concurrent_runs_into_one_directory_publish_one_run(tmp_path):
    job = _job(tmp_path)
    url = _ledger(tmp_path, 40.0, 1e-4)
    entered, release = threading.Event(), threading.Event()
    results: list = []

    def first_run():
        original = runner._compute

        def slow(*args, **kwargs):
            entered.set()
            release.wait(60)
            return original(*args, **kwargs)

        runner._compute = slow
        try:
            results.append(runner.run(job, str(tmp_path / "out"), url, **QUIET))
        finally:
            runner._compute = original

    thread = threading.Thread(target=first_run)
    thread.start()
    assert entered.wait(60)
    try:
        with pytest.raises(runner.RunError, match="is being written by another dpstream run"):
            Publication(str(tmp_path / "out")).__enter__()
    finally:
        release.set()
        thread.join(120)
    assert len(results) == 1 and _outcomes(url) == ["published"]


# -- kill -9 at each stage ------------------------------------------------------------------------

KILL_POINTS = {
    "pipeline": "dpstream.pipelines.run.runner:_compute",
    "report": "dpstream.pipelines.report.document:write_reports",
    "publish": "dpstream.pipelines.run.publication:Publication.publish",
}


def _kill_at(tmp_path, point: str, url: str, job_file: str, out: str, sig: int = signal.SIGKILL):
    """`dpstream run` in a child process, sent `sig` when it enters `point` (module:qualified name); the child."""
    marker = tmp_path / "entered"
    module, _, name = point.partition(":")
    owner, _, attribute = name.rpartition(".")
    script = (
        "import importlib, pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, whatever the parent ignores\n"
        "from dpstream.pipelines.cli.main import main, quiet_libraries\n"
        "quiet_libraries(False)  # as main does, before the patched module imports Beam\n"
        f"module = importlib.import_module({module!r})\n"
        f"owner = getattr(module, {owner!r}) if {owner!r} else module\n"
        f"original = getattr(owner, {attribute!r})\n"
        "def stop_here(*args, **kwargs):\n"
        f"    pathlib.Path({str(marker)!r}).write_text('entered')\n"
        "    time.sleep(120)\n"
        f"setattr(owner, {attribute!r}, stop_here)\n"
        f"sys.exit(main(['run', {job_file!r}, '--output', {out!r}, '--ledger', {url!r}, '--lease-seconds', '1']))\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert child.poll() is None, child.stderr.read().decode()
        assert time.monotonic() < deadline, f"the run never reached {point}"
        time.sleep(0.05)
    os.kill(child.pid, sig)
    child.wait(timeout=60)
    marker.unlink()
    return child


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_kill_9_at_each_stage_leaves_a_consistent_ledger_and_the_next_run_recovers(tmp_path, point):
    job = _job(tmp_path, SVT)
    url = _ledger(tmp_path, 40.0, 1e-4)
    runner.run(job, str(tmp_path / "first"), url, **QUIET)
    _continue(tmp_path, job)
    before = _state(url)
    out = str(tmp_path / "out")
    _kill_at(tmp_path, KILL_POINTS[point], url, str(tmp_path / "job2.toml"), out)
    assert not (tmp_path / "out").exists()  # nothing is published by a killed run
    time.sleep(1.2)  # the killed run's one-second lease runs out
    if point == "publish":  # killed after its debit: the next run into the directory publishes it
        assert _state(url)[1] == before[1] + 1 and _outcomes(url) == ["published", "published"]
        with pytest.raises(runner.RunError, match="holds a published run"):
            runner.run(jobfile.load(str(tmp_path / "job2.toml")), out, url, **QUIET)
        assert json.loads((tmp_path / "out" / "report.json").read_text())["budget"]["run_id"] == 2
        return
    assert _state(url) == before and _outcomes(url) == ["published", "expired"]
    runner.run(jobfile.load(str(tmp_path / "job2.toml")), out, url, **QUIET)  # the monitor came back by itself
    assert _state(url)[1] == before[1] + 1 and _outcomes(url) == ["published", "expired", "published"]
    assert not [n for n in _left_in(tmp_path) if "staging" in n]


def test_ctrl_c_ends_the_run_unpublished_with_one_line(tmp_path):
    job = _job(tmp_path, SVT)
    url = _ledger(tmp_path, 40.0, 1e-4)
    runner.run(job, str(tmp_path / "first"), url, **QUIET)
    _continue(tmp_path, job)
    before = _state(url)
    child = _kill_at(tmp_path, KILL_POINTS["pipeline"], url, str(tmp_path / "job2.toml"), str(tmp_path / "out"),
                     signal.SIGINT)
    assert child.returncode == 130
    assert child.stderr.read().decode().strip().splitlines() == [
        "dpstream run: interrupted; an unfinished run published nothing and was not debited"]
    assert not (tmp_path / "out").exists() and _state(url) == before
    assert _outcomes(url) == ["published", "failed"]  # ended at once, not by its lease
