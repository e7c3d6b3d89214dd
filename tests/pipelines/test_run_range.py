"""`dpstream run/validate --start/--end`: the window range from the command line, absolute or relative to now in
the job's time zone (local midnights), with every window check of a job file."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from dpstream.pipelines.cli import main as cli
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.config.times import relative_instant
from tests.pipelines.test_runner import JOB, _events


def _utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


NOW = datetime(2026, 3, 9, 12, 0, tzinfo=timezone.utc)  # a Monday; New York moved to EDT on Sunday, 2026-03-08


@pytest.mark.parametrize("name, zone, expected", [
    ("today", "UTC", "2026-03-09T00:00"),
    ("yesterday", "UTC", "2026-03-08T00:00"),
    ("this-week", "UTC", "2026-03-09T00:00"),
    ("last-week", "UTC", "2026-03-02T00:00"),
    ("this-month", "UTC", "2026-03-01T00:00"),
    ("last-month", "UTC", "2026-02-01T00:00"),
    ("this-year", "UTC", "2026-01-01T00:00"),
    ("last-year", "UTC", "2025-01-01T00:00"),
    ("today", "America/New_York", "2026-03-09T04:00"),  # EDT: UTC-4
    ("yesterday", "America/New_York", "2026-03-08T05:00"),  # EST until 2 a.m.: a 23-hour day
    ("today", "Asia/Tokyo", "2026-03-08T15:00"),  # 00:00 on the 9th in Tokyo (UTC+9)
])
def test_relative_instants_are_local_midnights(name, zone, expected):
    assert relative_instant(name, zone, NOW) == _utc(expected)


def test_last_month_and_week_across_the_year():
    january = datetime(2027, 1, 3, 9, 0, tzinfo=timezone.utc)  # a Sunday
    assert relative_instant("last-month", "UTC", january) == _utc("2026-12-01T00:00")
    assert relative_instant("last-week", "UTC", january) == _utc("2026-12-21T00:00")
    assert relative_instant("this-week", "UTC", january) == _utc("2026-12-28T00:00")


@pytest.fixture()
def job_file(tmp_path):
    (tmp_path / "events.csv").write_text(_events(10))
    path = tmp_path / "job.toml"
    path.write_text(JOB)
    return path


def test_with_range_keeps_the_windows_and_checks_them(job_file):
    job = jobfile.load(str(job_file))
    moved = jobfile.with_range(job, "2013-01-02", None)
    assert (moved.window.start, moved.window.end, moved.window.size) == (_utc("2013-01-02T00:00"), job.window.end, 86400)
    with pytest.raises(jobfile.JobFileError, match=r"with --start/--end: window\.end 2013-01-03T12:00:00Z is not a "
                                                   r"window boundary"):
        jobfile.with_range(job, None, "2013-01-03T12:00")
    with pytest.raises(jobfile.JobFileError, match=r"--start/--end must be an ISO 8601 date .* got 'soon'"):
        jobfile.with_range(job, "soon", None)
    today = jobfile.with_range(job, "yesterday", "today")
    assert today.window.count == 1 and today.window.end - today.window.start == 86400


def test_run_over_a_range_from_the_command_line(job_file, tmp_path, capsys):
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert cli.main(["budget", "init", "--ledger", ledger, "--scope", "test", "--epsilon", "8", "--delta", "1e-5",
                     "--filter", "approx:release_delta=1e-6"]) == 0
    assert cli.main(["validate", str(job_file), "--start", "2013-01-02", "--end", "2013-01-04"]) == 0
    assert "valid; 2 windows" in capsys.readouterr().out
    argv = ["run", str(job_file), "--ledger", ledger, "--output", str(tmp_path / "out"), "--start", "2013-01-02",
            "--end", "2013-01-04"]
    assert cli.main(argv) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["window"]["count"] == 2 and report["window"]["start"].startswith("2013-01-02")
    rows = [json.loads(line) for line in (tmp_path / "out" / "daily.jsonl").read_text().splitlines()]
    assert sorted({row["window_start"][:10] for row in rows}) == ["2013-01-02", "2013-01-03"]
