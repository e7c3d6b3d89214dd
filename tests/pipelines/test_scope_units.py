"""Falsification of issue 32 case 2, end to end through `dpstream run`'s code path (`runner.run`): two user x 1d
jobs on one plain pure scope, daily windows from midnight (A) and from noon (B), epsilon 0.5 each.

Without the unit check (`units.check_unit` replaced: the ledger as before the fix) both are admitted and the
ledger shows about 1.0 spent, while the unit (user, 2013-01-02 from midnight) overlaps one period of A and two of
B: its exact pure loss is E_A + 2 E_B, about 1.5, above the scope's 1.1. With the check the scope's unit is fixed
by A, B is refused before any debit (exit 2), and the ledger's spent epsilon equals the largest exact loss of any
unit. The losses are computed from the plans (each release is a Laplace histogram of independent windows, so a
unit's pure loss is the sum, over the jobs, of the job's per-unit epsilon times how many of the job's unit periods
it overlaps: a user's records in those periods move that many independent windows at full sensitivity), not
written in as numbers. Proof: docs/proofs/accounting.ledger.periods.md, "Plain scopes serve one privacy unit"."""
from __future__ import annotations

from fractions import Fraction

import pytest

from dpstream.accounting.composition import leaf_counts
from dpstream.accounting.events import Composed
from dpstream.accounting.filters.pure import pure_total
from dpstream.accounting.ledger import Ledger, run_book, scope_book, stream_book
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.planning.windows import unit_periods
from dpstream.pipelines.run import runner

JOB = """[input]
format = "csv"
path = "events.csv"
user = "user"
timestamp = "time"
partition = "dest"
partitions = ["A", "B", "C"]
[window]
size = "1d"
start = {start}
end = {end}
[privacy]
scope = "plain"
epsilon = 0.5
delta = 1e-6
max_partitions = 2
unit_period = "1d"
[[release]]
kind = "histogram"
name = "hist"
noise = "laplace"
[output]
format = "jsonl"
[beam]
seed = 3
"""
MIDNIGHT = ("2013-01-01", "2013-01-04")
NOON = ("2013-01-01T12:00:00", "2013-01-04T12:00:00")


def _job(tmp_path, name: str, start: str, end: str):
    lines = ["user,time,dest"] + [f"u{u},2013-01-0{d}T{8 + 2 * u:02d}:00:00Z,{'AB'[u % 2]}" for d in range(1, 5)
                                  for u in range(6)]
    (tmp_path / "events.csv").write_text("\n".join(lines) + "\n")
    path = tmp_path / f"{name}.toml"
    path.write_text(JOB.format(start=start, end=end))
    return jobfile.load(str(path))


def _per_unit_epsilon(job) -> Fraction:
    """The plan's pure epsilon for one unit of its own grid (what the ledger charges a run)."""
    total = pure_total(leaf_counts(Composed(tuple(runner.budget(job).plan.events()))))
    assert total is not None, "the plan is pure"
    return total


def _unit_intervals(job) -> list[tuple[float, float]]:
    """The absolute [start, end) of each unit period of the job that holds a window (fixed grids count from
    window.start, as the planner does)."""
    grid, window = runner.budget(job).unit_period, job.window
    assert grid is not None and grid.seconds is not None
    return [(window.start + grid.start(k), window.start + grid.start(k + 1)) for k in sorted(set(unit_periods(window, grid)))]


def _exact_losses(jobs) -> dict[tuple[float, float], Fraction]:
    """Every unit of every job's grid -> its exact pure loss over all the jobs that ran: each job costs it its
    per-unit epsilon once per unit period of its own grid that the unit overlaps."""
    units = {interval for job in jobs for interval in _unit_intervals(job)}
    return {(a, b): sum((_per_unit_epsilon(job) * sum(1 for c, d in _unit_intervals(job) if c < b and a < d)
                         for job in jobs), Fraction(0)) for a, b in units}


def _scope(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("plain", 1.1, 0.0)  # pure
    return url


def _spent(url: str) -> Fraction:
    with Ledger(url) as ledger:
        return Fraction(ledger.show("plain").state["spent_epsilon"])


def test_without_the_unit_check_a_noon_job_under_charges_a_midnight_unit(tmp_path, monkeypatch):
    """The negative control: the ledger as before the fix (no unit check) admits both runs."""
    for part in (run_book, scope_book, stream_book):  # every place the ledger checks a unit
        monkeypatch.setattr(part, "check_unit", lambda *args: False)
    url = _scope(tmp_path)
    first, second = _job(tmp_path, "a", *MIDNIGHT), _job(tmp_path, "b", *NOON)
    runner.run(first, str(tmp_path / "a"), url, log=lambda _: None)
    runner.run(second, str(tmp_path / "b"), url, log=lambda _: None)
    losses = _exact_losses([first, second])
    jan2 = (first.window.start + 86400, first.window.start + 2 * 86400)
    assert losses[jan2] == _per_unit_epsilon(first) + 2 * _per_unit_epsilon(second)
    assert float(losses[jan2]) == pytest.approx(1.5, rel=1e-4)
    spent = _spent(url)
    assert float(spent) == pytest.approx(float(_per_unit_epsilon(first) + _per_unit_epsilon(second)), rel=1e-12)
    assert max(losses.values()) > 1.1 > spent  # the scope's budget is broken while the ledger shows 1.0


def test_the_second_grid_is_refused_before_any_debit_and_the_ledger_bounds_every_unit(tmp_path):
    url = _scope(tmp_path)
    first, second = _job(tmp_path, "a", *MIDNIGHT), _job(tmp_path, "b", *NOON)
    logs: list[str] = []
    runner.run(first, str(tmp_path / "a"), url, log=logs.append)
    assert any("it serves one privacy unit, fixed by its first job" in line for line in logs)
    with Ledger(url) as ledger:
        before = ledger.history("plain"), ledger.runs_of("plain"), ledger.show("plain").state
    with pytest.raises(runner.RunError, match=r"b\.toml: scope 'plain' serves privacy unit user x 1d period "
                                              r"\(periods of 86400 s from 1970-01-01T00:00:00Z; phase 0 s\) \(fixed at "
                                              r".* by 'job a .*'\), but this job's privacy unit is user x 1d period "
                                              r"\(periods of 86400 s from 1970-01-01T12:00:00Z; phase 43200 s\).*"
                                              r"use another scope for this job .*; nothing was debited$") as caught:
        runner.run(second, str(tmp_path / "b"), url, log=lambda _: None)
    assert caught.value.exit_code == 2 and str(caught.value).count("nothing was debited") == 1
    assert not (tmp_path / "b").exists()
    with Ledger(url) as ledger:
        assert (ledger.history("plain"), ledger.runs_of("plain"), ledger.show("plain").state) == before
    losses = _exact_losses([first])
    assert set(losses.values()) == {_per_unit_epsilon(first)}  # every unit, once
    assert float(_spent(url)) == pytest.approx(float(max(losses.values())), rel=1e-12)
    # the same grid (a later range from midnight) is still admitted
    runner.run(_job(tmp_path, "c", "2013-01-04", "2013-01-05"), str(tmp_path / "c"), url, log=lambda _: None)
    assert len(_history(url)) == 2


def _history(url: str):
    with Ledger(url) as ledger:
        return ledger.history("plain")
