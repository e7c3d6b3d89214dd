"""`dpstream run`, `validate` and `demo` on the command line: exit codes, messages, Beam options after --."""
import io
import sys

import pytest

from dpstream.pipelines.cli import main as cli
from tests.pipelines.test_runner import JOB, _events

EXAMPLE_OUTPUTS = {"report.json", "report.md", "chart.png"}


@pytest.fixture()
def job_file(tmp_path):
    (tmp_path / "events.csv").write_text(_events(10))
    path = tmp_path / "job.toml"
    path.write_text(JOB)
    return path


def _budget(tmp_path, epsilon):
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert cli.main(["budget", "init", "--ledger", ledger, "--scope", "test", "--epsilon", str(epsilon),
                     "--delta", "1e-6", "--filter", "approx:release_delta=1e-6"]) == 0
    return ledger


def test_validate_prints_the_plan_and_touches_nothing(job_file, capsys):
    assert cli.main(["validate", str(job_file)]) == 0
    out = capsys.readouterr().out
    assert "valid; 3 windows, " in out and "scope 'test'" in out and "Top-1 'top'" in out
    assert "output rows (about 0.5 GB on the DirectRunner)" in out
    assert not (job_file.parent / "dpstream-output").exists()


def test_validate_reports_a_bad_job_file_in_one_line(job_file, capsys):
    job_file.write_text(JOB.replace("k = 1", "k = 0"))
    assert cli.main(["validate", str(job_file)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"dpstream validate: {job_file}: release.top.k must be a positive integer, got 0"


def test_run_with_beam_options_and_a_refused_rerun(job_file, tmp_path, capsys):
    ledger = _budget(tmp_path, 4.0)
    out = tmp_path / "out"
    code = cli.main(["run", str(job_file), "--output", str(out), "--ledger", ledger, "--",
                     "--runner=DirectRunner", "--direct_num_workers=1"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "admitted: release 'job job" in printed and "daily: 9 rows" in printed
    assert EXAMPLE_OUTPUTS <= {p.name for p in out.iterdir()}
    again = tmp_path / "again"
    assert cli.main(["run", str(job_file), "--output", str(again), "--ledger", ledger]) == 3
    assert "would exceed the budget of scope 'test'" in capsys.readouterr().err
    assert not again.exists()


def test_run_without_a_scope_says_how_to_create_one(job_file, tmp_path, capsys):
    assert cli.main(["run", str(job_file), "--ledger", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    assert "create a scope first with `dpstream budget init`" in capsys.readouterr().err


def test_beam_options_only_for_run_and_demo(capsys):
    with pytest.raises(SystemExit) as caught:
        cli.main(["budget", "show", "--scope", "x", "--", "--runner=DirectRunner"])
    assert caught.value.code == 2
    assert "accepted by run and demo only" in capsys.readouterr().err


def _daily_job(tmp_path, start, end, name):
    """The JOB above with a user-day unit over [start, end), reading six days of events."""
    lines = ["user,time,dest"] + [f"u{u},2013-01-0{d}T{10 + u % 10}:00:00Z,{'AB'[u % 2]}"
                                  for d in range(1, 7) for u in range(10)]
    (tmp_path / "events.csv").write_text("\n".join(lines) + "\n")
    text = (JOB.replace("max_partitions = 2", 'max_partitions = 2\nunit_period = "1d"')
            .replace("start = 2013-01-01", f"start = {start}").replace("end = 2013-01-04", f"end = {end}"))
    path = tmp_path / name
    path.write_text(text)
    return path


def test_daily_runs_on_a_period_scope_each_get_a_fresh_budget(tmp_path, capsys):
    """`dpstream run` of a user-day job over days 1-3, then 4-6: both admitted on a period scope whose budget per
    day fits one run; a re-run over days 3-5 is refused (exit 3), as is the second run on a plain scope."""
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    for scope, extra in (("test", ["--unit-period", "1d"]), ("plain", [])):
        assert cli.main(["budget", "init", "--ledger", ledger, "--scope", scope, "--epsilon", "4", "--delta", "1e-6",
                         "--filter", "approx:release_delta=1e-6", *extra]) == 0
    first = _daily_job(tmp_path, "2013-01-01", "2013-01-04", "first.toml")
    second = _daily_job(tmp_path, "2013-01-04", "2013-01-07", "second.toml")
    capsys.readouterr()
    assert cli.main(["run", str(first), "--output", str(tmp_path / "out1"), "--ledger", ledger]) == 0
    assert cli.main(["run", str(second), "--output", str(tmp_path / "out2"), "--ledger", ledger]) == 0
    printed = capsys.readouterr().out
    assert "periods 2013-01-01T00:00:00Z..2013-01-04T00:00:00Z (3 periods of 1d)" in printed
    assert "periods 2013-01-04T00:00:00Z..2013-01-07T00:00:00Z (3 periods of 1d)" in printed
    assert "daily: 9 rows" in printed and EXAMPLE_OUTPUTS <= {p.name for p in (tmp_path / "out2").iterdir()}

    rerun = _daily_job(tmp_path, "2013-01-03", "2013-01-06", "rerun.toml")
    assert cli.main(["run", str(rerun), "--output", str(tmp_path / "out3"), "--ledger", ledger]) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("dpstream run: refused: release 'job rerun") and "in 3 of its 3 periods" in err
    assert not (tmp_path / "out3").exists()
    assert cli.main(["budget", "history", "--ledger", ledger, "--scope", "test", "--json"]) == 0
    history = capsys.readouterr().out
    entries = __import__("json").loads(history)
    assert [r["periods"][0]["start"] for r in entries if r["outcome"] == "published"] == [
        "2013-01-01T00:00:00Z", "2013-01-04T00:00:00Z"]
    assert [r["outcome"] for r in entries if r["outcome"] != "published"] == ["refused"]  # recorded, not debited

    for path in (first, second):
        path.write_text(path.read_text().replace('scope = "test"', 'scope = "plain"'))
    assert cli.main(["run", str(first), "--output", str(tmp_path / "plain1"), "--ledger", ledger]) == 0
    assert "note: scope 'plain' has one budget for all its releases" in capsys.readouterr().out
    assert cli.main(["run", str(second), "--output", str(tmp_path / "plain2"), "--ledger", ledger]) == 3
    assert "would exceed the budget of scope 'plain'" in capsys.readouterr().err


def test_a_misaligned_user_day_job_is_refused_in_one_line(tmp_path, capsys):
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert cli.main(["budget", "init", "--ledger", ledger, "--scope", "test", "--epsilon", "4", "--delta", "1e-6",
                     "--unit-period", "1d"]) == 0
    job = _daily_job(tmp_path, "2013-01-01T12:00:00", "2013-01-04T12:00:00", "noon.toml")
    capsys.readouterr()
    assert cli.main(["run", str(job), "--output", str(tmp_path / "out"), "--ledger", ledger]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "window.start 2013-01-01T12:00:00Z is not on its period grid" in err[0]
    assert "nothing was debited" in err[0] and not (tmp_path / "out").exists()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_lines_go_to_a_terminal_only(job_file, tmp_path, monkeypatch, capsys):
    from dpstream.pipelines.run.runner import STAGES

    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert cli.main(["budget", "init", "--ledger", ledger, "--scope", "test", "--epsilon", "8", "--delta", "1e-5",
                     "--filter", "approx:release_delta=1e-6"]) == 0
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert cli.main(["run", str(job_file), "--output", str(tmp_path / "a"), "--ledger", ledger]) == 0
    lines = terminal.getvalue().splitlines()
    stages = [line.split("] ", 1)[1] for line in lines]
    assert stages == [STAGES[0], STAGES[1], STAGES[2].format(releases=3, windows=3), STAGES[3], STAGES[4]], lines
    assert all(line.startswith("dpstream run: [") for line in lines)
    monkeypatch.undo()
    assert cli.main(["run", str(job_file), "--output", str(tmp_path / "b"), "--ledger", ledger]) == 0
    assert capsys.readouterr().err == ""  # not a terminal: nothing on stderr
