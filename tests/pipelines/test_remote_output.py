"""Outputs through Beam's FileSystems: a whole run, releases, reports and a sealed svt state, written to a
URL (a test filesystem with its own scheme, as gs:// is on Dataflow) gives the same files as a local run.
Also: the streaming completion bookkeeping (window files, merge) and what max_seconds accepts."""
import pytest

from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.planning import plan_job
from dpstream.pipelines.run import runner, streaming
from tests.connectors.url_filesystem import SCHEME, url_root  # noqa: F401 (url_root is a fixture)
from tests.pipelines.test_runner import JOB, _events

SVT = """
[[release]]
kind = "svt"
name = "alerts"
metric = "count"
maximum = 100
threshold = 0.5
sigma_threshold = 0.5
"""
FILES = ("daily.jsonl", "top.jsonl", "busiest.jsonl", "alerts.jsonl", "report.json")


def test_a_run_to_a_url_writes_what_a_local_run_writes(tmp_path, url_root):
    (tmp_path / "events.csv").write_text(_events(10))
    job_path = tmp_path / "job.toml"
    job_path.write_text(JOB.replace("[output]", SVT + "[output]"))
    ledgers = {}
    for name in ("local", "url"):
        ledgers[name] = f"sqlite:///{tmp_path / name}.db"
        with Ledger(ledgers[name], create=True) as book:
            book.init_scope("test", 40.0, 1e-5, "approx:release_delta=1e-6")
    job = jobfile.load(str(job_path))
    local = runner.run(job, str(tmp_path / "local"), ledgers["local"], log=lambda _: None)
    remote = runner.run(job, f"{SCHEME}://runs/out", ledgers["url"], log=lambda _: None)
    assert remote.output_dir == f"{SCHEME}://runs/out" and remote.files["daily"] == f"{SCHEME}://runs/out/daily.jsonl"
    for name in FILES[:4]:
        assert (url_root / "runs" / "out" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
    assert remote.report["releases"] == local.report["releases"]
    assert (url_root / "runs" / "out" / "chart.png").stat().st_size > 0
    leftovers = [p.name for p in (url_root / "runs" / "out").iterdir() if p.name.startswith(".")]
    assert leftovers == []  # no write probe, temporary file or sealed state left behind
    with Ledger(ledgers["url"]) as book:
        assert book.monitor_record("test", "alerts").checked_out is None  # the sealed state came back in


def test_output_urls_are_kept_and_unknown_schemes_fail_before_the_debit(tmp_path):
    (tmp_path / "events.csv").write_text(_events(2))
    (tmp_path / "job.toml").write_text(JOB.replace('format = "jsonl"', 'format = "jsonl"\npath = "nosuch://b/x"'))
    job = jobfile.load(str(tmp_path / "job.toml"))
    assert job.output.path == "nosuch://b/x"
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(ledger, create=True) as book:
        book.init_scope("test", 40.0, 1e-5, "approx:release_delta=1e-6")
    with pytest.raises(runner.RunError, match=r"output directory nosuch://b/x: cannot list it: .*nothing was debited"):
        runner.run(job, ledger_url=ledger, log=lambda _: None)
    with pytest.raises(runner.RunError, match=r"max_seconds .* applies to streaming \(input.format = 'pubsub'\) jobs "
                                              r"only, got 5 for input.format 'csv'"):
        runner.run(job, ledger_url=ledger, log=lambda _: None, max_seconds=5)
    with Ledger(ledger) as book:
        assert book.history("test") == []


def test_window_files_and_their_merge(tmp_path):
    (tmp_path / "events.csv").write_text(_events(2))
    (tmp_path / "job.toml").write_text(JOB)
    job = jobfile.load(str(tmp_path / "job.toml"))
    job_plan = plan_job(job.releases, job.privacy.bounds, job.window, job.privacy.epsilon, job.privacy.delta)
    assert streaming.emissions(job_plan["daily"], job.window) == (0, 1, 2)
    assert streaming.emissions(job_plan["busiest"], job.window) == (2,)  # one 3-day period, emitted at its end
    parts = str(tmp_path / "windows" / "daily")
    rows = {0: [{"window_start": "b", "value": 1.5}], 2: [], 1: [{"window_start": "a", "value": -2.0, "k": [1, 2]}]}
    write = streaming._WritePart(parts, (0, 1, 2))
    for index, window_rows in rows.items():
        write.process((index, [*window_rows, None]))
    assert streaming.released(parts) == {0, 1, 2}
    outcome = streaming.StreamingOutcome({"daily": {0, 2}}, {"daily": (0, 1, 2)}, 1.0)
    assert not outcome.complete and outcome.pending() == {"daily": 1}
    assert streaming.merge_parts(parts, {0, 1, 2}, str(tmp_path / "daily.jsonl"), "jsonl") == 2
    assert (tmp_path / "daily.jsonl").read_text().splitlines()[0] == '{"window_start": "a", "value": -2.0, "k": [1, 2]}'
