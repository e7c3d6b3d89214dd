"""Where input rows fall against the window range (issue 33): the counts against a brute-force oracle, told to the
operator after a run and by `validate`, and never written into a report or the ledger."""
from __future__ import annotations

import numpy as np
import pytest

from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.cli.main import main as cli
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.config.specs import WindowSpec
from dpstream.pipelines.run import runner
from dpstream.pipelines.transforms.input_range import RangeCounts, range_counts
from tests.pipelines.test_runner import JOB, _events, _ledger

WINDOWS = [
    WindowSpec.of("1d", "2013-01-01", "2013-01-08"),
    WindowSpec.of("2d", "2013-01-01", "2013-01-08", period="1d"),  # sliding: a row in two windows counts once
    WindowSpec.of("1month", "2013-01-01", "2013-06-01", timezone="America/New_York"),
]


def _oracle(timestamps: np.ndarray, window: WindowSpec) -> RangeCounts:
    inside = before = 0
    for micros in timestamps.tolist():
        seconds = micros / 1e6
        if any(lo <= seconds < hi for lo, hi in (window.bounds(i) for i in range(window.count))):
            inside += 1
        elif seconds < window.bounds(0)[0]:
            before += 1
    return RangeCounts(inside, before, timestamps.size - inside - before)


@pytest.mark.parametrize("window", WINDOWS, ids=["fixed", "sliding", "calendar"])
def test_range_counts_equal_a_brute_force_count(window):
    rng = np.random.default_rng(4)
    lo, hi = window.bounds(0)[0], window.bounds(window.count - 1)[1]
    edges = np.array([window.bounds(i)[k] for i in range(window.count) for k in (0, 1)]) * 1e6
    timestamps = np.concatenate([
        rng.integers(int((lo - 5 * 86400) * 1e6), int((hi + 5 * 86400) * 1e6), 3000),
        edges.astype(np.int64), edges.astype(np.int64) - 1,  # every window edge and the microsecond before it
    ])
    assert range_counts(timestamps, window) == _oracle(timestamps, window)


def test_a_run_tells_the_operator_where_rows_fell_and_no_report_or_ledger_record_says_it(tmp_path):
    events = _events(10) + "u1,2012-12-31T10:00:00Z,A\nu2,2013-02-01T10:00:00Z,B\nu3,2013-02-02T10:00:00Z,A\n"
    (tmp_path / "events.csv").write_text(events)
    (tmp_path / "job.toml").write_text(JOB)
    url = _ledger(tmp_path, 40.0)
    told: list[str] = []
    runner.run(jobfile.load(str(tmp_path / "job.toml")), str(tmp_path / "out"), url, log=told.append)
    assert "input: 33 rows read: 30 inside the window range, 1 before it, 2 after it" in told
    for name in ("report.json", "report.md"):
        text = (tmp_path / "out" / name).read_text()
        assert "rows read" not in text and "before it" not in text, name
    with Ledger(url) as ledger:
        assert not any("rows read" in f"{run.label} {run.reason}" for run in ledger.runs_of("test"))


def test_validate_warns_about_rows_outside_the_range(tmp_path, capsys):
    (tmp_path / "events.csv").write_text(_events(10) + "u1,2012-12-31T10:00:00Z,A\n")
    (tmp_path / "job.toml").write_text(JOB)
    assert cli(["validate", str(tmp_path / "job.toml")]) == 0
    captured = capsys.readouterr()
    assert "input (all rows): 31 rows read: 30 inside the window range, 1 before it" in captured.out
    assert "warning: 1 of the rows read fall outside the window range" in captured.err
    (tmp_path / "events.csv").write_text(_events(10).replace("2013-", "2015-"))
    assert cli(["validate", str(tmp_path / "job.toml")]) == 0
    assert "warning: none of the rows read falls inside the window range; a run is refused" in capsys.readouterr().err


def test_an_empty_release_still_writes_its_header(tmp_path):
    """allow_empty on a header-only file, a histogram over partitions not known in advance (selected by noisy
    thresholds: nothing passes) written as CSV: the file holds the release's header and no row."""
    (tmp_path / "events.csv").write_text("user,time,dest\n")
    job = (JOB.replace('partitions = ["A", "B", "C"]\n', "allow_empty = true\n")
           .split("[[release]]")[0] + '[[release]]\nkind = "histogram"\nname = "daily"\n[output]\nformat = "csv"\n')
    (tmp_path / "job.toml").write_text(job)
    url = _ledger(tmp_path, 40.0)
    outcome = runner.run(jobfile.load(str(tmp_path / "job.toml")), str(tmp_path / "out"), url, log=lambda _: None)
    assert (tmp_path / "out" / "daily.csv").read_text() == (
        '"release","window_start","window_end","partition","value","noise_stddev"\n')
    assert outcome.report["releases"]["daily"]["rows"] == 0
    with Ledger(url) as ledger:
        assert len(ledger.history("test")) == 1  # an empty range is still a paid release
