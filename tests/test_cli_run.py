"""`dpstream run`, `validate` and `demo` on the command line: exit codes, messages, Beam options after --."""
import pytest

from pipelines import cli
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
    assert "valid; 3 windows, scope 'test'" in out and "Top-1 'top'" in out
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
