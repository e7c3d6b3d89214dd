"""What a batch run publishes is what its debit journaled (issue 32, cases 4-6 and 8): the staged files are checked
for completeness and the output directory for strangers before the debit, their digests are journaled with it and
checked again before the rename, a debited run's staging is never thrown away (the next run publishes it, matched
by the ledger's id and the run id, not by how the ledger URL was spelled), Ctrl-C cannot split the debit from the
publication, and a commit whose connection broke is asked about before anything is said. Ledger-bound cases run
on SQLite and the local PostgreSQL."""
from __future__ import annotations

import errno
import glob
import json
import os
import shutil
import signal
import time

import pytest

from dpstream.accounting.ledger import FileDigest, Ledger, LedgerError
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.run import runner
from dpstream.pipelines.run.errors import CommitInDoubt
from dpstream.pipelines.run.publication import Publication
from tests.accounting.test_ledger import ledger_url, postgres_url, postgresql_url_fresh  # noqa: F401  (fixtures)
from tests.pipelines.test_runner import JOB, _events

QUIET = {"log": lambda _: None}


def _setup(tmp_path, url: str | None = None) -> tuple[jobfile.Job, str]:
    (tmp_path / "events.csv").write_text(_events(10))
    (tmp_path / "job.toml").write_text(JOB)
    url = url or f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("test", 40.0, 1e-4, "approx:release_delta=1e-6")
    return jobfile.load(str(tmp_path / "job.toml")), url


def _debits(url: str) -> tuple[int, list[str]]:
    with Ledger(url) as ledger:
        return len(ledger.history("test")), [run.status for run in ledger.runs_of("test")]


def _digests(directory) -> tuple[FileDigest, ...]:
    return tuple(sorted((FileDigest.of(p.name, p.read_bytes()) for p in directory.iterdir()), key=lambda f: f.name))


def _staging(tmp_path) -> list:
    return [p for p in tmp_path.iterdir() if ".dpstream-staging-" in p.name]


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgresql"], indirect=True)
def test_every_published_file_is_journaled_with_the_debit_and_the_ledger_is_named_by_its_id(tmp_path, ledger_url):
    job, url = _setup(tmp_path, ledger_url)
    outcome = runner.run(job, str(tmp_path / "out"), url, **QUIET)
    with Ledger(url) as ledger:
        journaled, ledger_id = ledger.run_files(outcome.report["budget"]["run_id"]), ledger.ledger_id
    assert journaled == _digests(tmp_path / "out") and len(journaled) == 6
    assert outcome.report["budget"]["ledger_id"] == ledger_id


@pytest.mark.parametrize("when", ["computing", "after the reports"])
def test_a_staged_release_that_vanishes_before_the_debit_fails_the_run_with_nothing_debited(tmp_path, monkeypatch,
                                                                                             when):
    """Case 4: a temporary-file cleaner removes a staged release while the run computes, or after the reports
    were written from it: the run fails before its debit, with nothing published."""
    from dpstream.pipelines.report import document

    job, url = _setup(tmp_path)
    compute, write_reports = runner._compute, document.write_reports

    def cleaned(pipeline, log):
        compute(pipeline, log)
        (staged,) = glob.glob(str(tmp_path / ".*dpstream-staging*" / "daily.jsonl"))
        os.remove(staged)

    def cleaned_later(context, output_dir, started):
        out = write_reports(context, output_dir, started)
        os.remove(context.files["daily"])
        return out

    if when == "computing":
        monkeypatch.setattr(runner, "_compute", cleaned)
    else:
        monkeypatch.setattr(document, "write_reports", cleaned_later)
    expected = "daily.jsonl" if when == "computing" else "release 'daily': its staged file is missing"
    with pytest.raises(runner.RunError, match=f"{expected}.*nothing was published or debited"):
        runner.run(job, str(tmp_path / "out"), url, **QUIET)
    assert _debits(url) == (0, ["failed"]) and not (tmp_path / "out").exists() and not _staging(tmp_path)


@pytest.mark.parametrize("restored", [True, False])
def test_a_staged_file_changed_after_the_debit_is_not_published_and_waits_for_the_next_run(tmp_path, monkeypatch,
                                                                                            restored):
    """A staged file changed between the debit and the rename: nothing is published, the message says the debit
    stands, the staging stays. Once the file is restored, the next run publishes the debited run (no new debit);
    while it differs from the journal, the next run leaves it staged, says so, and publishes a run of its own."""
    job, url = _setup(tmp_path)
    commit = runner.Budget.commit
    saved: dict[str, bytes] = {}

    def tampered(self, admission, states, expect=None, files=()):
        debit = commit(self, admission, states, expect, files)
        (staged,) = _staging(tmp_path)
        saved["path"], saved["bytes"] = str(staged / "daily.jsonl"), (staged / "daily.jsonl").read_bytes()
        (staged / "daily.jsonl").write_bytes(b'{"forged": true}\n')
        return debit

    monkeypatch.setattr(runner.Budget, "commit", tampered)
    with pytest.raises(runner.RunError, match=r"the debit \(ledger run 1\) stands but nothing was published: the staged "
                                              r"outputs changed after the debit \(daily.jsonl changed"):
        runner.run(job, str(tmp_path / "out"), url, **QUIET)
    assert _debits(url) == (1, ["published"]) and not (tmp_path / "out").exists() and len(_staging(tmp_path)) == 1
    monkeypatch.undo()
    logged: list[str] = []
    if not restored:
        outcome = runner.run(job, str(tmp_path / "out"), url, log=logged.append)
        assert any("differ from what its debit journaled (daily.jsonl changed)" in line for line in logged), logged
        assert outcome.report["budget"]["run_id"] == 2 and len(_staging(tmp_path)) == 1
        assert _debits(url) == (2, ["published", "published"])
        return
    with open(saved["path"], "wb") as handle:
        handle.write(saved["bytes"])
    with pytest.raises(runner.RunError, match="holds a published run"):  # published now, so this run is refused
        runner.run(job, str(tmp_path / "out"), url, log=logged.append)
    assert any("ledger run 1 was debited and then stopped before publishing" in line for line in logged)
    with Ledger(url) as ledger:
        assert _digests(tmp_path / "out") == ledger.run_files(1)
    assert _debits(url) == (1, ["published"]) and not _staging(tmp_path)


def test_a_directory_that_appears_at_the_output_while_the_run_computes_is_never_deleted(tmp_path, monkeypatch):
    """Case 5: checked absent at the start, the output directory appears (someone else's files) while the run
    computes: refused before the debit, their files untouched (it used to be deleted at publication)."""
    job, url = _setup(tmp_path)
    compute = runner._compute

    def intruded(*args, **kwargs):
        out = compute(*args, **kwargs)
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "theirs.txt").write_text("not dpstream's")
        return out

    monkeypatch.setattr(runner, "_compute", intruded)
    with pytest.raises(runner.RunError, match="was created by someone else while the run computed"):
        runner.run(job, str(tmp_path / "out"), url, **QUIET)
    assert (tmp_path / "out" / "theirs.txt").read_text() == "not dpstream's"
    assert _debits(url) == (0, ["failed"]) and not _staging(tmp_path)


def test_a_debited_run_is_recovered_whatever_spelling_of_the_ledger_url_the_next_run_uses(tmp_path, monkeypatch):
    """Case 6 and the EBUSY bullet of case 8: the rename fails after the debit (a mount point, a read-only bind
    mount): the staging is kept and the message says where; the next run, reaching the same SQLite ledger by a
    relative path, publishes it without a second debit (recovery matched the URL string before)."""
    job, url = _setup(tmp_path)

    def busy(self):
        raise OSError(errno.EBUSY, "Device or resource busy", self.output_dir)

    monkeypatch.setattr(Publication, "_publish_local", busy)
    with pytest.raises(runner.RunError, match="the complete outputs are kept in .*dpstream-staging.* and the next run "
                                              "of this job into .* publishes them") as caught:
        runner.run(job, str(tmp_path / "out"), url, **QUIET)
    assert caught.value.exit_code == runner.EXIT_ERROR
    (staged,) = _staging(tmp_path)
    assert staged.exists() and _debits(url) == (1, ["published"])
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    logged: list[str] = []
    with pytest.raises(runner.RunError, match="holds a published run"):
        runner.run(job, str(tmp_path / "out"), "sqlite:///ledger.db", log=logged.append)
    assert any("ledger run 1 was debited and then stopped before publishing" in line for line in logged)
    assert json.loads((tmp_path / "out" / "report.json").read_text())["budget"]["run_id"] == 1
    assert _debits(url) == (1, ["published"])


def test_a_mount_point_output_is_refused_before_the_debit(tmp_path, monkeypatch):
    job, url = _setup(tmp_path)
    output = str(tmp_path / "out")
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda path: path == output or real(path))
    with pytest.raises(runner.RunError, match="is a mount point .* give a directory inside it; nothing was debited"):
        runner.run(job, output, url, **QUIET)
    assert _debits(url) == (0, [])


def test_ctrl_c_just_after_the_debit_waits_until_the_run_is_published(tmp_path, monkeypatch):
    """Case 8: Ctrl-C landing right after the debit committed used to discard the staging and say "published
    nothing and was not debited" while the ledger said published. The interrupt now waits for the publication."""
    job, url = _setup(tmp_path)
    commit = runner.Budget.commit

    def interrupted(self, *args, **kwargs):
        debit = commit(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return debit

    monkeypatch.setattr(runner.Budget, "commit", interrupted)
    logged: list[str] = []
    outcome = runner.run(job, str(tmp_path / "out"), url, log=logged.append)
    assert "note: Ctrl-C arrived while the run was debiting and publishing; it finished both first" in logged
    with Ledger(url) as ledger:
        assert _digests(tmp_path / "out") == ledger.run_files(1)
    assert outcome.report["budget"]["run_id"] == 1 and _debits(url) == (1, ["published"])


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgresql"], indirect=True)
def test_a_commit_whose_connection_broke_is_asked_about_before_anything_is_said(tmp_path, monkeypatch, ledger_url):
    """Case 8: the connection is lost after the debit's COMMIT reached the server. The run asks the ledger whether
    its run committed: it did, so it publishes (it used to say "nothing was debited" and delete the staging). A
    commit that failed before the server committed is reported as not debited, truthfully."""
    job, url = _setup(tmp_path, ledger_url)
    commit_run = Ledger.commit_run

    def lost_after(self, *args, **kwargs):
        commit_run(self, *args, **kwargs)
        raise LedgerError("ledger: database error: server closed the connection unexpectedly")

    monkeypatch.setattr(Ledger, "commit_run", lost_after)
    logged: list[str] = []
    runner.run(job, str(tmp_path / "out"), url, log=logged.append)
    assert any("confirmed after the ledger connection failed" in line for line in logged), logged
    with Ledger(url) as ledger:
        assert _digests(tmp_path / "out") == ledger.run_files(1) and _debits(url) == (1, ["published"])

    def lost_before(self, *args, **kwargs):
        raise LedgerError("ledger: database error: server closed the connection unexpectedly")

    monkeypatch.setattr(Ledger, "commit_run", lost_before)
    with pytest.raises(runner.RunError, match="server closed the connection unexpectedly; nothing was debited"):
        runner.run(job, str(tmp_path / "out2"), url, **QUIET)
    assert _debits(url) == (1, ["published", "failed"]) and not (tmp_path / "out2").exists()


def test_a_commit_the_ledger_cannot_confirm_keeps_the_staging_for_the_next_run(tmp_path, monkeypatch):
    """The ledger cannot be reached after the commit at all: the run says the outcome is unknown and keeps its
    staging (it used to delete it and say nothing was debited); the next run asks the ledger, which recorded the
    debit, and publishes the staged outputs."""
    job, url = _setup(tmp_path)
    commit_run, run = Ledger.commit_run, Ledger.run

    def lost_after(self, *args, **kwargs):
        commit_run(self, *args, **kwargs)
        raise LedgerError("ledger: database error: disk I/O error")

    def unreachable(self, *args, **kwargs):
        raise LedgerError("ledger: database error: disk I/O error")

    monkeypatch.setattr(Ledger, "commit_run", lost_after)
    monkeypatch.setattr(Ledger, "run", unreachable)
    monkeypatch.setattr(runner.Budget, "abandon", lambda *args: None)  # the ledger is gone for that too
    with pytest.raises(CommitInDoubt, match="whether ledger run 1 was debited is unknown"):
        runner.run(job, str(tmp_path / "out"), url, **QUIET)
    assert len(_staging(tmp_path)) == 1 and not (tmp_path / "out").exists()
    monkeypatch.setattr(Ledger, "run", run)
    monkeypatch.setattr(Ledger, "commit_run", commit_run)
    logged: list[str] = []
    with pytest.raises(runner.RunError, match="holds a published run"):
        runner.run(job, str(tmp_path / "out"), url, log=logged.append)
    assert any("ledger run 1 was debited and then stopped before publishing" in line for line in logged)
    assert _debits(url) == (1, ["published"]) and not _staging(tmp_path)


def test_a_recovery_whose_rename_fails_again_keeps_the_debited_outputs(tmp_path, monkeypatch):
    """Review finding: the next run's recovery hit the same EBUSY and its error path discarded the recovered
    staging: ledger published, files gone. The staging now stays, the run says so in one line and debits
    nothing; a later run whose rename works publishes it."""
    job, url = _setup(tmp_path)

    def busy(self):
        raise OSError(errno.EBUSY, "Device or resource busy", self.output_dir)

    monkeypatch.setattr(Publication, "_publish_local", busy)
    with pytest.raises(runner.RunError, match="the complete outputs are kept in"):
        runner.run(job, str(tmp_path / "out"), url, **QUIET)
    with pytest.raises(runner.RunError, match=r"ledger run 1 was debited but its outputs in .* cannot be published "
                                              r"into .*: Device or resource busy; they stay there; this run debited "
                                              r"nothing"):
        runner.run(job, str(tmp_path / "out"), url, **QUIET)
    assert len(_staging(tmp_path)) == 1 and _debits(url) == (1, ["published"])
    monkeypatch.undo()
    with pytest.raises(runner.RunError, match="holds a published run"):
        runner.run(job, str(tmp_path / "out"), url, **QUIET)
    with Ledger(url) as ledger:
        assert _digests(tmp_path / "out") == ledger.run_files(1)


def test_a_run_on_another_scope_or_ledger_never_deletes_a_debited_run_s_staging(tmp_path, monkeypatch):
    """Review finding: a run of another scope (or ledger) into the same output treated the kept staging of a
    debited run as unpaid and deleted it. Another scope on the same ledger now publishes it (the ledger shows
    it debited, whatever its scope); another ledger keeps it, with a note."""
    job, url = _setup(tmp_path)
    monkeypatch.setattr(Publication, "_publish_local",
                        lambda self: (_ for _ in ()).throw(OSError(errno.EBUSY, "busy", self.output_dir)))
    with pytest.raises(runner.RunError, match="the complete outputs are kept in"):
        runner.run(job, str(tmp_path / "out"), url, **QUIET)
    monkeypatch.undo()
    other_ledger = f"sqlite:///{tmp_path / 'other.db'}"
    with Ledger(other_ledger, create=True) as ledger:
        ledger.init_scope("test", 40.0, 1e-4, "approx:release_delta=1e-6")
    logged: list[str] = []
    runner.run(job, str(tmp_path / "elsewhere"), other_ledger, log=logged.append)  # another output: not touched
    assert len(_staging(tmp_path)) == 1
    runner.run(job, str(tmp_path / "out"), other_ledger, log=logged.append)  # publishes its own run beside it
    assert any("which this ledger cannot say was debited" in line for line in logged), logged
    assert len(_staging(tmp_path)) == 1
    shutil.rmtree(tmp_path / "out")
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("other", 40.0, 1e-4, "approx:release_delta=1e-6")
    (tmp_path / "other.toml").write_text(JOB.replace('scope = "test"', 'scope = "other"'))
    logged.clear()
    with pytest.raises(runner.RunError, match="holds a published run"):
        runner.run(jobfile.load(str(tmp_path / "other.toml")), str(tmp_path / "out"), url, log=logged.append)
    assert any("ledger run 1 was debited and then stopped before publishing" in line for line in logged)
    assert not _staging(tmp_path) and _debits(url) == (1, ["published"])


def test_recovery_only_touches_its_own_output_s_staging(tmp_path):
    """Review finding: a run into `out` removed the staging of a live run into `out.dpstream-staging-x` (its name
    starts alike). Only `mkdtemp`'s own names for this output are recovered or removed."""
    job, url = _setup(tmp_path)
    neighbour = tmp_path / ".out.dpstream-staging-x.dpstream-staging-abcd1234"
    neighbour.mkdir()
    runner.run(job, str(tmp_path / "out"), url, **QUIET)
    assert neighbour.exists()


def test_a_full_filesystem_is_refused_before_the_ledger_is_asked(tmp_path, monkeypatch):
    """A full filesystem still makes empty files and directories; the staging probe writes real bytes, so the run is
    refused before it is admitted (no run row, nothing debited) instead of failing when it writes a release."""
    job, url = _setup(tmp_path)

    def full(descriptor):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(runner.RunError, match=r"output directory .*out: cannot write in .*: No space left on device; "
                                              r"nothing was debited"):
        runner.run(job, str(tmp_path / "out"), url, **QUIET)
    assert _debits(url) == (0, []) and not _staging(tmp_path)


@pytest.mark.parametrize("when", ["computing", "committing"])
def test_a_sqlite_ledger_moved_away_mid_run_is_told_truthfully(tmp_path, monkeypatch, when):
    """Case 8: the SQLite ledger file is moved away mid-run. While the run computes: the preview cannot reach it,
    so nothing is debited or published and the run says so. As it commits: neither the commit nor the question
    that follows reaches it, so the run says its debit is in doubt and keeps its staging (it used to delete it and
    say nothing was debited). Once the file is back, the ledger shows the run never debited; when its lease has
    run out, the next run removes that staging and publishes its own, debited once."""
    job, url = _setup(tmp_path)
    compute, commit = runner._compute, runner.Budget.commit

    def move(*args, **kwargs):
        os.rename(tmp_path / "ledger.db", tmp_path / "moved.db")
        return (compute if when == "computing" else commit)(*args, **kwargs)

    if when == "computing":
        monkeypatch.setattr(runner, "_compute", move)
    else:
        monkeypatch.setattr(runner.Budget, "commit", move)
    monkeypatch.setattr(runner.Budget, "abandon", lambda *args: None)  # the ledger is gone for that too
    if when == "computing":
        with pytest.raises(runner.RunError, match="ledger file .* does not exist.*; nothing was debited$"):
            runner.run(job, str(tmp_path / "out"), url, lease_seconds=1, **QUIET)
        assert not _staging(tmp_path)
    else:
        with pytest.raises(CommitInDoubt, match="ledger file .* does not exist.*whether ledger run 1 was "
                                                       "debited is unknown"):
            runner.run(job, str(tmp_path / "out"), url, lease_seconds=1, **QUIET)
        assert len(_staging(tmp_path)) == 1
    assert not (tmp_path / "out").exists()
    monkeypatch.undo()
    os.rename(tmp_path / "moved.db", tmp_path / "ledger.db")
    time.sleep(1.2)  # the run's one-second lease runs out: the ledger then shows it expired, never debited
    runner.run(job, str(tmp_path / "out"), url, **QUIET)
    assert not _staging(tmp_path) and _debits(url) == (1, ["expired", "published"])
