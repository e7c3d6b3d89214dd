"""The job runner end to end on the DirectRunner: releases, report.json keys, report.md sections,
one debit before reading, and what a refused debit or a bad row leaves behind."""
import json

import pytest

from dpstream.accounting.ledger import Ledger
from dpstream.connectors import beam_io, readers
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.run import runner

JOB = """
[input]
format = "csv"
path = "events.csv"
user = "user"
timestamp = "time"
partition = "dest"
partitions = ["A", "B", "C"]
[window]
size = "1d"
start = 2013-01-01
end = 2013-01-04
[privacy]
scope = "test"
epsilon = 4.0
delta = 1e-6
max_partitions = 2
[[release]]
kind = "histogram"
name = "daily"
[[release]]
kind = "topk"
name = "top"
k = 1
[[release]]
kind = "peak"
name = "busiest"
period = "3d"
maximum = 100
[output]
format = "jsonl"
[beam]
seed = 7
"""

REPORT_KEYS = {"dpstream_version", "job", "runner", "input", "window", "privacy", "plan", "budget", "releases",
               "chart", "timings_s"}
REPORT_SECTIONS = ["## 1. Privacy unit and contribution bounds", "## 2. Releases", "## 3. Privacy budget", "## 4. Outputs",
                   "## 5. Timings"]


def _events(rows):
    lines = ["user,time,dest"]
    for day in range(3):
        for user in range(rows):
            lines.append(f"u{user},2013-01-0{day + 1}T{10 + user % 10}:00:00Z,{'AB'[user % 2] if day < 2 else 'C'}")
    return "\n".join(lines) + "\n"


def _job(tmp_path, events=None, name="job.toml"):
    (tmp_path / "events.csv").write_text(events or _events(30))
    (tmp_path / name).write_text(JOB)
    return jobfile.load(str(tmp_path / name))


def _ledger(tmp_path, epsilon, delta=1e-6):
    """A scope whose approx filter prices a run at the job's delta: room for epsilon / 4 runs."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("test", epsilon, delta, "approx:release_delta=1e-6")
    return url


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("run")
    job = _job(tmp_path)
    url = _ledger(tmp_path, 8.0, 2e-6)
    first = runner.run(job, str(tmp_path / "out1"), url, log=lambda _: None)
    second = runner.run(job, str(tmp_path / "out2"), url, log=lambda _: None)
    return tmp_path, url, first, second


def test_releases_and_reports_are_written(finished):
    tmp_path, _, outcome, _ = finished
    out = tmp_path / "out1"
    assert sorted(p.name for p in out.iterdir()) == [
        "busiest.jsonl", "chart.png", "daily.jsonl", "report.json", "report.md", "top.jsonl"]
    daily = [json.loads(line) for line in (out / "daily.jsonl").read_text().splitlines()]
    assert len(daily) == 9 and {r["partition"] for r in daily} == {"A", "B", "C"}
    assert len((out / "top.jsonl").read_text().splitlines()) == 3
    assert len((out / "busiest.jsonl").read_text().splitlines()) == 1


def test_report_json_keys_and_values(finished):
    tmp_path, _, outcome, _ = finished
    report = json.loads((tmp_path / "out1" / "report.json").read_text())
    assert set(report) == REPORT_KEYS and report == outcome.report
    assert report["runner"]["name"] == "DirectRunner" and report["runner"]["seed"] == 7
    assert {name: info["rows"] for name, info in report["releases"].items()} == {"daily": 9, "top": 3, "busiest": 1}
    assert report["plan"]["epsilon"] <= 4.0 and report["plan"]["accountant"]["winner"]
    assert [r["name"] for r in report["plan"]["releases"]] == ["daily", "top", "busiest"]
    assert report["plan"]["releases"][0]["noise"] > 0 and report["plan"]["releases"][0]["noise_stddev"] > 0
    assert report["budget"]["run_id"] == 1 and report["budget"]["debited"]["type"] == "Composed"
    assert set(report["timings_s"]) == {"plan_s", "admit_s", "pipeline_s", "report_s", "total_s"}
    assert report["window"] == {"size_s": 86400.0, "calendar": None, "period_s": None, "start": "2013-01-01T00:00:00+00:00",
                                "end": "2013-01-04T00:00:00+00:00", "count": 3}


def test_report_md_is_built_from_the_plan_and_the_accountant(finished):
    tmp_path, _, outcome, _ = finished
    text = (tmp_path / "out1" / "report.md").read_text()
    positions = [text.index(heading) for heading in REPORT_SECTIONS]
    assert positions == sorted(positions)
    plan = runner.plan(_job(tmp_path / "out1", name="again.toml"))
    for description in plan.describe().values():
        assert description in text
    assert str(plan.calibrated.explanation) in text
    assert "(ledger run 1)" in text and "![released series](chart.png)" in text


def test_a_fixed_seed_gives_the_same_releases_and_each_run_debits_once(finished):
    tmp_path, url, _, second = finished
    for name in ("daily.jsonl", "top.jsonl", "busiest.jsonl"):
        assert (tmp_path / "out1" / name).read_bytes() == (tmp_path / "out2" / name).read_bytes()
    with Ledger(url) as ledger:
        assert [r.release_id for r in ledger.history("test")] == [1, 2]
    assert second.report["budget"]["run_id"] == 2


def test_refused_debit_reads_nothing_and_writes_nothing(tmp_path, monkeypatch):
    job = _job(tmp_path)
    url = _ledger(tmp_path, 1.0)

    def no_reading(*args, **kwargs):
        raise AssertionError("data was read")

    for module in (readers, beam_io):
        monkeypatch.setattr(module, "list_chunks", no_reading)
        monkeypatch.setattr(module, "read_chunk", no_reading)
    with pytest.raises(runner.RunError, match=r"refused: .* would exceed the budget of scope 'test'.*nothing was read or debited") as caught:
        runner.run(job, str(tmp_path / "out"), url, log=lambda _: None)
    assert caught.value.exit_code == runner.EXIT_REFUSED
    assert not (tmp_path / "out").exists()
    with Ledger(url) as ledger:
        assert ledger.history("test") == []


def test_missing_scope_says_how_to_create_it(tmp_path):
    job = _job(tmp_path)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("other", 1.0, 1e-6)
    with pytest.raises(runner.RunError, match=r"budget scope 'test' is not in ledger .*; create it with `dpstream budget init --ledger sqlite:///.* --scope test --epsilon EPSILON --delta DELTA --filter approx:release_delta=1e-06`"):
        runner.run(job, str(tmp_path / "out"), url, log=lambda _: None)
    with pytest.raises(runner.RunError, match=r"ledger file .*none\.db does not exist; create a scope first with `dpstream budget init`"):
        runner.run(job, str(tmp_path / "out"), f"sqlite:///{tmp_path / 'none.db'}", log=lambda _: None)
    assert not (tmp_path / "out").exists()


def test_a_bad_row_names_file_row_and_column_and_the_run_is_neither_published_nor_debited(tmp_path, monkeypatch):
    events = _events(5) + "u1,2013-13-01,A\n"
    job = _job(tmp_path, events)
    url = _ledger(tmp_path, 8.0)
    with pytest.raises(runner.RunError, match=r"events\.csv:17: column 'time': not an ISO 8601 time; nothing was debited$"):
        runner.run(job, str(tmp_path / "out"), url, log=lambda _: None)  # found by the scan before the ledger
    with Ledger(url) as ledger:
        assert ledger.runs_of("test") == []
    monkeypatch.setattr(runner, "_check_range", lambda job: None)  # a row the scan does not reach: the pipeline's
    with pytest.raises(runner.RunError, match=r"events\.csv:17: column 'time': not an ISO 8601 time; nothing was published or debited$") as caught:
        runner.run(job, str(tmp_path / "out"), url, log=lambda _: None)
    assert caught.value.exit_code == runner.EXIT_ERROR
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir() if "staging" in p.name] == []
    with Ledger(url) as ledger:
        assert ledger.history("test") == [] and ledger.show("test").state["spent_epsilon"] == 0
        (failed,) = ledger.runs_of("test")
    assert failed.status == "failed" and "events.csv:17: column 'time': not an ISO 8601 time" in failed.reason
    assert "2013-13-01" not in failed.reason  # the ledger's views are public: never a row's value (issue 32)
