"""A scope serves one privacy unit (`accounting.ledger.units`, issue 32 case 2): the unit's exact equality (fixed
periods by length and phase, calendar ones by length and time zone), and the ledger refusing, on SQLite and on
PostgreSQL, a job whose unit or grid differs from the one its scope serves, recording and debiting nothing.
Proof: docs/proofs/accounting.ledger.periods.md, "Plain scopes serve one privacy unit"."""
from __future__ import annotations

import re
import threading
from fractions import Fraction

import pytest
import sqlalchemy as sa

from dpstream.accounting.events import PureDP
from dpstream.accounting.ledger import (
    Ledger,
    LedgerError,
    PeriodGrid,
    Periods,
    PrivacyUnit,
    UnitMismatchError,
)
from dpstream.pipelines.cli import main as cli
from tests.accounting.test_ledger import ledger_url, postgres_url, postgresql_url_fresh  # noqa: F401  (fixtures)

DAY = 86400
JAN1 = 1356998400.0  # 2013-01-01T00:00:00Z
MIDNIGHT = PrivacyUnit.of(PeriodGrid.of(DAY), JAN1)
NOON = PrivacyUnit.of(PeriodGrid.of(DAY), JAN1 + DAY / 2)
USER = PrivacyUnit.of(None, JAN1)
NEW_YORK = PrivacyUnit.of(PeriodGrid.of("1day", "America/New_York"), JAN1 + 5 * 3600)
JOB_A = """
[input]
format = "csv"
path = "events.csv"
user = "user"
timestamp = "time"
partition = "dest"
partitions = ["A"]
[window]
size = "1d"
start = 2013-01-01
end = 2013-01-04
[privacy]
scope = "s"
epsilon = 0.5
delta = 1e-6
unit_period = "1d"
[[release]]
kind = "histogram"
name = "daily"
"""


# -- the unit -----------------------------------------------------------------------------------------

def test_fixed_units_are_equal_iff_same_length_and_phase():
    assert MIDNIGHT.phase == 0 and NOON.phase == DAY // 2
    assert PrivacyUnit.of(DAY, JAN1 + 9 * DAY) == MIDNIGHT  # a later start on the same grid
    assert NOON != MIDNIGHT
    assert PrivacyUnit.of(2 * DAY, JAN1) != MIDNIGHT  # same phase, another length
    assert PrivacyUnit.of(PeriodGrid.of("1day", "UTC"), JAN1) != MIDNIGHT  # calendar and fixed: never equal
    # the phase is exact: 0.1 s is the float's own value, not 1/10
    tenth = PrivacyUnit.of(DAY, 0.1)
    assert tenth.phase == Fraction(0.1) != Fraction(1, 10)
    assert PrivacyUnit.of(DAY, DAY + 0.1) != tenth  # DAY + 0.1 rounds to another float: another phase
    assert PrivacyUnit.of(DAY, DAY + 0.1).phase == Fraction(DAY + 0.1) - DAY
    assert PrivacyUnit.of(DAY, -DAY / 4).phase == 3 * DAY // 4  # before the epoch: phase in [0, P)


def test_calendar_units_are_equal_iff_same_length_and_time_zone():
    assert PrivacyUnit.of(PeriodGrid.of("1day", "America/New_York"), JAN1 + 40 * DAY) == NEW_YORK  # absolute
    assert NEW_YORK.phase is None
    assert PrivacyUnit.of(PeriodGrid.of("1day", "Europe/Paris"), JAN1) != NEW_YORK
    assert PrivacyUnit.of(PeriodGrid.of("1week", "America/New_York"), JAN1) != NEW_YORK
    assert USER == PrivacyUnit() != NEW_YORK and USER != MIDNIGHT


@pytest.mark.parametrize("unit", [USER, MIDNIGHT, NOON, NEW_YORK, PrivacyUnit.of(DAY, 0.1),
                                  PrivacyUnit.of(PeriodGrid.of("2month", "Asia/Kolkata"), 0)])
def test_a_unit_survives_its_json(unit):
    assert PrivacyUnit.from_json(unit.to_json()) == unit
    assert PrivacyUnit.from_dict(unit.to_dict()) == unit


def test_unit_texts_name_the_grid():
    assert USER.text == "user"
    assert MIDNIGHT.text == "user x 1d period (periods of 86400 s from 1970-01-01T00:00:00Z; phase 0 s)"
    assert NOON.text == "user x 1d period (periods of 86400 s from 1970-01-01T12:00:00Z; phase 43200 s)"
    assert NEW_YORK.text == "user x 1 day period in America/New_York"


@pytest.mark.parametrize("build, message", [
    (lambda: PrivacyUnit(PeriodGrid.of(DAY)), "exact number of seconds"),
    (lambda: PrivacyUnit(PeriodGrid.of(DAY), Fraction(DAY)), r"lies in \[0, 86400\)"),
    (lambda: PrivacyUnit(PeriodGrid.of(DAY), 0.5), "exact number of seconds"),
    (lambda: PrivacyUnit(None, Fraction(0)), "only fixed periods have a phase"),
    (lambda: PrivacyUnit.of(DAY, float("nan")), "finite number"),
    (lambda: PrivacyUnit.from_dict({"unit": "household"}), "stored privacy unit"),
])
def test_malformed_units_are_refused(build, message):
    with pytest.raises(LedgerError, match=message):
        build()


# -- the ledger ---------------------------------------------------------------------------------------

def _state(ledger: Ledger, scope: str):
    """Everything a refusal must leave as it was."""
    view = ledger.show(scope)
    return view.state, view.unit, len(ledger.history(scope)), len(ledger.runs_of(scope)), len(ledger.streams_of(scope))


def test_a_plain_scope_refuses_a_job_of_another_grid_and_admits_its_own(ledger_url):  # noqa: F811
    """Job A daily from midnight fixes the scope's unit; job B daily from noon is refused by open_run, spend and
    open_stream, recording and debiting nothing; another midnight job (a later range, same grid) is admitted."""
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope("plain", 2.0, 0.0)
        assert ledger.show("plain").unit is None
        first = ledger.open_run("plain", PureDP(0.5), "job A", unit=MIDNIGHT)
        assert first.admitted and ledger.commit_run(first.run_id).admitted
        view = ledger.show("plain")
        assert view.unit == MIDNIGHT and view.unit_fixed.endswith("by 'job A'")
        assert view.to_dict()["privacy_unit"]["text"] == MIDNIGHT.text
        before = _state(ledger, "plain")
        message = (r"scope 'plain' serves privacy unit user x 1d period \(periods of 86400 s from "
                   r"1970-01-01T00:00:00Z; phase 0 s\) \(fixed at .* by 'job A'\), but this job's privacy unit is "
                   r"user x 1d period \(periods of 86400 s from 1970-01-01T12:00:00Z; phase 43200 s\): a unit of one "
                   r"grid overlaps two or more units of the other .* use another scope for this job .*; nothing was "
                   r"debited$")
        with pytest.raises(UnitMismatchError, match=message):
            ledger.open_run("plain", PureDP(0.5), "job B", unit=NOON)
        with pytest.raises(UnitMismatchError, match="but this job's privacy unit is user x 1d period"):
            ledger.spend("plain", PureDP(0.5), "job B", unit=NOON)
        with pytest.raises(UnitMismatchError, match="but this job's privacy unit is user x 1d period"):
            ledger.open_stream("plain", PureDP(0.5), "job B", output="/tmp/b", job="b", unit=NOON)
        assert _state(ledger, "plain") == before
        assert ledger.show("plain").state["spent_epsilon"] == pytest.approx(0.5)
        again = ledger.open_run("plain", PureDP(0.5), "job A, next week", unit=PrivacyUnit.of(DAY, JAN1 + 7 * DAY))
        assert again.admitted
        assert ledger.spend("plain", PureDP(0.1), "a manual spend").admitted  # unit None: not checked
        assert ledger.show("plain").unit_fixed.endswith("by 'job A'")


@pytest.mark.parametrize("first, second", [(USER, MIDNIGHT), (MIDNIGHT, USER), (NEW_YORK, MIDNIGHT),
                                           (MIDNIGHT, PrivacyUnit.of(2 * DAY, JAN1))])
def test_user_level_and_other_grids_do_not_mix_on_a_plain_scope(ledger_url, first, second):  # noqa: F811
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope("plain", 2.0, 0.0)
        assert ledger.spend("plain", PureDP(0.5), "first", unit=first).admitted
        before = _state(ledger, "plain")
        why = "a user holds many user x period units" if USER in (first, second) else "a unit of one grid overlaps"
        with pytest.raises(UnitMismatchError, match=re.escape(f"serves privacy unit {first.text} (") + f".*{why}"):
            ledger.open_run("plain", PureDP(0.5), "second", unit=second)
        assert _state(ledger, "plain") == before


def test_only_an_admitted_job_fixes_the_unit(ledger_url):  # noqa: F811
    """A refused run (over budget) and a job without a unit leave the scope's unit open."""
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope("plain", 1.0, 0.0)
        assert not ledger.open_run("plain", PureDP(5.0), "too big", unit=NOON).admitted
        assert not ledger.spend("plain", PureDP(5.0), "too big", unit=NOON).admitted
        assert ledger.spend("plain", PureDP(0.1), "manual").admitted
        assert ledger.show("plain").unit is None
        assert ledger.open_run("plain", PureDP(0.1), "midnight", unit=MIDNIGHT).admitted
        assert ledger.show("plain").unit == MIDNIGHT
        stream_scope = ledger.init_scope("streams", 1.0, 0.0).scope
        ledger.open_stream(stream_scope, PureDP(0.1), "a stream", output="/tmp/s", job="s", unit=NEW_YORK)
        assert ledger.show(stream_scope).unit == NEW_YORK


def test_racing_first_jobs_of_two_grids_fix_one_unit(ledger_url):  # noqa: F811
    """Two first jobs of different grids at once: the scope's lock orders them, one fixes the unit and the other is
    refused."""
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope("plain", 2.0, 0.0)
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def job(unit: PrivacyUnit, label: str) -> None:
        with Ledger(ledger_url) as own:
            barrier.wait()
            try:
                outcomes.append(label if own.open_run("plain", PureDP(0.5), label, unit=unit).admitted else "over")
            except UnitMismatchError:
                outcomes.append("mismatch")

    threads = [threading.Thread(target=job, args=(u, n)) for u, n in ((MIDNIGHT, "midnight"), (NOON, "noon"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(outcomes) in (["midnight", "mismatch"], ["mismatch", "noon"])
    with Ledger(ledger_url) as ledger:
        winner = ledger.show("plain").unit
        assert winner == (MIDNIGHT if "midnight" in outcomes else NOON)
        assert len(ledger.runs_of("plain")) == 1


def test_a_period_scope_refuses_a_job_of_another_unit(ledger_url):  # noqa: F811
    """A period scope's unit is its grid (phase 0): even a caller that skipped `Budget.scope_periods` is refused."""
    with Ledger(ledger_url, create=True) as ledger:
        view = ledger.init_scope("daily", 1.0, 0.0, unit_period=DAY)
        assert view.unit == PrivacyUnit.of_scope(PeriodGrid.of(DAY)) == MIDNIGHT and view.unit_fixed == \
            "by its budget per 1d period"
        periods = Periods.overlapping(JAN1, JAN1 + 2 * DAY, DAY)
        assert ledger.open_run("daily", PureDP(0.5), "midnight", periods=periods, unit=MIDNIGHT).admitted
        before = _state(ledger, "daily")
        for unit in (NOON, USER, NEW_YORK, PrivacyUnit.of(2 * DAY, JAN1)):
            with pytest.raises(UnitMismatchError, match=r"scope 'daily' serves privacy unit user x 1d period .*"
                                                        r"\(fixed by its budget per 1d period\).*budget of each of its "
                                                        r"periods would bound neither"):
                ledger.open_run("daily", PureDP(0.5), "other", periods=periods, unit=unit)
            with pytest.raises(UnitMismatchError):
                ledger.spend("daily", PureDP(0.5), "other", periods, unit=unit)
        assert _state(ledger, "daily") == before
        calendar = ledger.init_scope("ny", 1.0, 0.0, unit_period="1day", timezone="America/New_York")
        assert calendar.unit == NEW_YORK
        ny_periods = Periods.overlapping(JAN1 + 5 * 3600, JAN1 + DAY + 5 * 3600, PeriodGrid.of("1day", "America/New_York"))
        assert ledger.spend("ny", PureDP(0.5), "ny", ny_periods, unit=NEW_YORK).admitted
        with pytest.raises(UnitMismatchError, match="in America/New_York"):
            ledger.spend("ny", PureDP(0.5), "utc", ny_periods, unit=PrivacyUnit.of(PeriodGrid.of("1day"), 0))


def test_init_fixes_a_unit(ledger_url, capsys):  # noqa: F811
    with Ledger(ledger_url, create=True) as ledger:
        assert ledger.init_scope("users", 1.0, 0.0, unit=USER).unit == USER
        with pytest.raises(UnitMismatchError, match=r"serves privacy unit user \(fixed at .* by 'budget init'\)"):
            ledger.open_run("users", PureDP(0.1), "daily", unit=MIDNIGHT)
        assert ledger.open_run("users", PureDP(0.1), "user-level", unit=USER).admitted
        with pytest.raises(LedgerError, match="a period scope of 1d serves privacy unit user x 1d"):
            ledger.init_scope("p", 1.0, 0.0, unit_period=DAY, unit=NOON)
    assert cli.main(["budget", "init", "--ledger", ledger_url, "--scope", "cli", "--epsilon", "1", "--delta", "0",
                     "--unit", "user"]) == 0
    assert cli.main(["budget", "show", "--ledger", ledger_url, "--scope", "cli"]) == 0
    assert "  privacy unit: user (fixed at " in capsys.readouterr().out
    assert cli.main(["budget", "init", "--ledger", ledger_url, "--scope", "cli2", "--epsilon", "1", "--delta", "0",
                     "--unit", "user", "--unit-period", "1d"]) == 2
    assert "--unit user is for a scope without --unit-period" in capsys.readouterr().err


def test_an_older_ledger_s_scopes_with_releases_serve_an_unknown_unit_until_one_is_declared(tmp_path, capsys):
    """Review finding: a ledger written before units gained the table empty, so the first job after the upgrade
    fixed the unit whatever grid the earlier releases used (daily from midnight before, from noon after: loss 1.5
    for 1.0 charged). Now a scope that already had releases serves an unknown unit: every job is refused until an
    operator declares it (`dpstream budget unit`); a scope without releases is fixed by its first job."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("s", 2.0, 0.0)
        ledger.init_scope("empty", 2.0, 0.0)
        ledger.spend("s", PureDP(0.5), "job A, daily from midnight, before the upgrade")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE dpstream_scope_units")
    engine.dispose()
    assert cli.main(["budget", "show", "--ledger", url, "--scope", "s"]) == 0
    assert "  privacy unit: unknown: releases from before units were recorded" in capsys.readouterr().out
    with Ledger(url) as ledger:
        before = _state(ledger, "s")
        with pytest.raises(UnitMismatchError, match="releases from before dpstream recorded privacy units, so the "
                                                    "unit they were charged for is unknown; .*budget unit"):
            ledger.open_run("s", PureDP(0.5), "job B, daily from noon", unit=NOON)
        assert _state(ledger, "s") == before
        assert ledger.open_run("empty", PureDP(0.5), "first", unit=NOON).admitted
    job = tmp_path / "job.toml"
    job.write_text(JOB_A)
    assert cli.main(["budget", "unit", "--ledger", url, "--scope", "s", "--job", str(job)]) == 0
    assert "serves privacy unit user x 1d period (periods of 86400 s from 1970-01-01T00:00:00Z" in \
        capsys.readouterr().out
    with Ledger(url) as ledger:
        assert ledger.show("s").unit == MIDNIGHT
        with pytest.raises(UnitMismatchError):
            ledger.open_run("s", PureDP(0.5), "job B, daily from noon", unit=NOON)
        assert ledger.open_run("s", PureDP(0.5), "job A again", unit=MIDNIGHT).admitted
    assert cli.main(["budget", "unit", "--ledger", url, "--scope", "s", "--user"]) == 2
    assert "which its releases used; it stays so" in capsys.readouterr().err


def test_a_unit_fixed_by_a_job_that_never_published_may_be_fixed_again(ledger_url):  # noqa: F811
    """Review finding: an admitted run that then failed fixed the unit for good. While nothing used the unit (no
    release, no running run, no stream that may publish) another job fixes it again; not while that run runs."""
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope("plain", 2.0, 0.0)
        first = ledger.open_run("plain", PureDP(0.5), "2-day job", unit=PrivacyUnit.of(2 * DAY, JAN1))
        with pytest.raises(UnitMismatchError):
            ledger.open_run("plain", PureDP(0.5), "daily job", unit=MIDNIGHT)  # the 2-day run may still publish
        ledger.end_run(first.run_id, "failed")
        assert ledger.open_run("plain", PureDP(0.5), "daily job", unit=MIDNIGHT).admitted
        assert ledger.show("plain").unit == MIDNIGHT


