"""Period scopes in the ledger, on SQLite and on the local PostgreSQL: a budget per absolute period,
all-or-nothing debits of the touched periods, races, crashes, and ledgers written before period scopes.

PostgreSQL tests follow tests/accounting/test_ledger.py: they skip only when no server is reachable,
and fail instead when CI=true.
"""
from __future__ import annotations

import random
import sqlite3
from fractions import Fraction

import pytest
import sqlalchemy as sa

from dpstream.accounting.events import Gaussian, PureDP, SelfComposed
from dpstream.accounting.filters import PureDPFilter
from dpstream.accounting.ledger import MAX_PERIODS_PER_SPEND, Ledger, LedgerError, PeriodGrid, Periods
from tests.accounting.ledger_race import kill_inside_debit, race
from tests.accounting.test_ledger import (  # noqa: F401  (fixtures)
    _scope_name,
    ledger_url,
    postgres_url,
    postgresql_url_fresh,
)

DAY = 86400
START = 1356998400  # 2013-01-01T00:00:00Z, a day boundary
FIRST = START // DAY


def _days(first: int, count: int) -> Periods:
    """`count` days from 2013-01-01 + `first` days."""
    return Periods.overlapping(START + first * DAY, START + (first + count) * DAY, DAY)


def _snapshot(ledger: Ledger, scope: str) -> tuple:
    return ledger.show(scope), ledger.period_states(scope), [r.to_dict() for r in ledger.history(scope)]


def test_periods_are_absolute_and_overlapping():
    assert _days(0, 3) == Periods(DAY, FIRST, FIRST + 2)
    # [06:00 on day 0, 01:00 on day 2) overlaps days 0, 1 and 2; the range's end is exclusive.
    assert Periods.overlapping(START + 6 * 3600, START + 2 * DAY + 3600, DAY) == Periods(DAY, FIRST, FIRST + 2)
    assert Periods.overlapping(START, START + 2 * DAY, DAY).count == 2
    assert Periods.overlapping(START + 0.5, START + 1.5, DAY) == Periods(DAY, FIRST, FIRST)
    assert _days(0, 2).describe() == "2013-01-01T00:00:00Z..2013-01-03T00:00:00Z (2 periods of 1d)"
    assert Periods.overlapping(0, 1, 6 * 3600).to_dict() == {
        "period_s": 21600, "start": "1970-01-01T00:00:00Z", "end": "1970-01-01T06:00:00Z", "count": 1}
    with pytest.raises(LedgerError, match="start < end"):
        Periods.overlapping(START, START, DAY)
    with pytest.raises(LedgerError, match="at most"):
        Periods(1, 0, MAX_PERIODS_PER_SPEND)
    for bad in (0, 1.5, -DAY, float("nan"), True):
        with pytest.raises(LedgerError, match="positive whole number of seconds"):
            Periods(bad, 0, 0)


def test_disjoint_daily_runs_are_all_admitted_while_a_plain_scope_refuses_the_second(ledger_url):
    periodic, plain = _scope_name(), _scope_name()
    with Ledger(ledger_url, create=True) as ledger:
        view = ledger.init_scope(periodic, 1.0, 0.0, unit_period=DAY)
        assert view.unit_period == PeriodGrid(seconds=DAY) and view.filter == "pure" and view.periods.spent == 0
        assert ledger.init_scope(plain, 1.0, 0.0).unit_period is None
        run = PureDP(0.8)
        daily = [ledger.spend(periodic, run, f"days {d}-{d + 2}", _days(d, 3)) for d in (0, 3, 6, 9)]
        assert all(result.admitted for result in daily)
        assert "periods 2013-01-04T00:00:00Z..2013-01-07T00:00:00Z (3 periods of 1d)" in daily[1].message
        assert [ledger.spend(plain, run, f"days {d}").admitted for d in (0, 3)] == [True, False]
        view = ledger.show(periodic)
        assert view.periods.spent == 12 and view.releases == 4
        assert view.periods.largest_spent == {"max_spent_epsilon": 0.8}
        assert view.periods.first == "2013-01-01T00:00:00Z" and view.periods.last == "2013-01-12T00:00:00Z"
        # A re-run over days already spent on is charged to them again, and refused.
        rerun = ledger.spend(periodic, run, "days 3-5 again", _days(3, 3))
        assert not rerun.admitted and "in 3 of its 3 periods" in rerun.message
        history = ledger.history(periodic)
        assert [r.periods for r in history] == [(_days(d, 3),) for d in (0, 3, 6, 9)]
        assert history[0].to_dict()["periods"] == [_days(0, 3).to_dict()]
        assert history[0].budget_after == {"filter": "pure", "period_s": DAY, "periods": 3, "max_spent_epsilon": 0.8}
        assert "periods" not in ledger.history(plain)[0].to_dict()


def test_a_run_overlapping_an_exhausted_day_is_refused_and_changes_no_period(ledger_url):
    scope = _scope_name()
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope(scope, 1.0, 1e-6, "approx:release_delta=1e-7", unit_period=DAY)
        gaussian = SelfComposed(Gaussian(20.0, 1.0), 3)
        assert ledger.spend(scope, gaussian, "days 0-2", _days(0, 3)).admitted
        assert ledger.spend(scope, PureDP(0.5), "day 2", _days(2, 1)).admitted  # day 2 is now nearly spent
        before = _snapshot(ledger, scope)
        refused = ledger.spend(scope, PureDP(0.5), "days 1-4", _days(1, 4))
        assert not refused.admitted
        assert "in 1 of its 4 periods (2013-01-03T00:00:00Z..2013-01-04T00:00:00Z (1 period of 1d)" in refused.message
        assert _snapshot(ledger, scope) == before  # days 1 and 3-4 had room: none of them was debited or created
        assert [p["start"][:10] for p in ledger.period_states(scope)] == ["2013-01-01", "2013-01-02", "2013-01-03"]
        assert ledger.spend(scope, PureDP(0.1), "days 1-4, smaller", _days(1, 4)).admitted
        states = {p["start"][:10]: p for p in ledger.period_states(scope)}
        assert states["2013-01-02"]["releases"] == 2 and states["2013-01-05"]["releases"] == 1
        assert states["2013-01-05"]["state"]["spent_epsilon"] == pytest.approx(0.1)


def test_halting_filter_halts_only_the_periods_that_refused(ledger_url):
    scope = _scope_name()
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope(scope, 1.0, 1e-6, "whitehouse", unit_period=DAY)
        assert ledger.spend(scope, PureDP(0.1), "day 0", _days(0, 1)).admitted
        refused = ledger.spend(scope, PureDP(0.17), "days 0-1", _days(0, 2))
        assert not refused.admitted and "1 period(s) have now halted" in refused.message
        halted = {p["start"][:10]: p["halted"] for p in ledger.period_states(scope)}
        assert halted == {"2013-01-01": True}  # day 1 admitted the release, so nothing of it was stored
        again = ledger.spend(scope, PureDP(0.01), "day 0 small", _days(0, 1))
        assert not again.admitted and "halted period" in again.message
        assert ledger.spend(scope, PureDP(0.17), "day 1", _days(1, 1)).admitted
        view = ledger.show(scope)
        assert view.periods.halted == 1 and not view.halted and view.periods.spent == 2


def test_periods_must_match_the_scope(ledger_url):
    periodic, plain = _scope_name(), _scope_name()
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope(periodic, 1.0, 0.0, unit_period=DAY)
        ledger.init_scope(plain, 1.0, 0.0)
        before = _snapshot(ledger, periodic), ledger.show(plain)
        with pytest.raises(LedgerError, match=r"budget per 1d period: name the periods"):
            ledger.spend(periodic, PureDP(0.1), "no periods")
        with pytest.raises(LedgerError, match=r"has periods of 1d, the release names periods of 6h"):
            ledger.spend(periodic, PureDP(0.1), "6h", Periods.overlapping(START, START + DAY, 6 * 3600))
        with pytest.raises(LedgerError, match="no unit period"):
            ledger.spend(plain, PureDP(0.1), "plain", _days(0, 1))
        with pytest.raises(LedgerError, match="no unit period"):
            ledger.period_states(plain)
        with pytest.raises(LedgerError, match="cannot price Gaussian"):  # a pure filter per period
            ledger.spend(periodic, Gaussian(1.0), "wrong kind", _days(0, 1))
        with pytest.raises(LedgerError, match="positive whole number of seconds"):
            ledger.init_scope(_scope_name(), 1.0, 0.0, unit_period=0.5)
        assert (_snapshot(ledger, periodic), ledger.show(plain)) == before
        assert ledger.unit_period(periodic) == PeriodGrid(seconds=DAY) and ledger.unit_period(plain) is None


def test_svt_monitors_are_refused_on_period_scopes(ledger_url):
    scope = _scope_name()
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope(scope, 2.0, 1e-6, unit_period=DAY)
        before = _snapshot(ledger, scope)
        with pytest.raises(LedgerError, match="does not support svt monitors"):
            ledger.open_run(scope, PureDP(0.1), "svt", monitors={"alerts": (0.1, 0.0, None)})
        assert _snapshot(ledger, scope) == before
        assert ledger.monitor_record(scope, "alerts") is None


def test_a_period_scope_is_not_debited_as_a_plain_one_by_older_code(ledger_url):
    """The period length lives in filter_state, tagged so that code without period scopes cannot load it."""
    scope = _scope_name()
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope(scope, 1.0, 0.0, unit_period=DAY)
        with ledger.engine.connect() as conn:
            state = conn.execute(sa.select(ledger.scopes.c.filter_state).where(ledger.scopes.c.name == scope)).scalar_one()
    from dpstream.accounting.filters import PrivacyFilter

    with pytest.raises(ValueError, match="unknown filter 'period-scope'"):
        PrivacyFilter.from_dict(__import__("json").loads(state))


def _drop_period_tables(url: str) -> None:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        for table in ("dpstream_release_periods", "dpstream_periods"):
            conn.exec_driver_sql(f"DROP TABLE {table}")
    engine.dispose()


def test_a_ledger_from_before_period_scopes_still_opens_and_works(ledger_url):
    scope = _scope_name()
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope(scope, 1.0, 0.0)
        assert ledger.spend(scope, PureDP(0.25), "old").admitted
    _drop_period_tables(ledger_url)  # the old tables are unchanged, so this is a ledger of the previous version
    with Ledger(ledger_url) as ledger:  # reads and debits create nothing
        assert ledger.show(scope).state["spent_epsilon"] == 0.25
        assert ledger.spend(scope, PureDP(0.25), "new").admitted
        assert [r.label for r in ledger.history(scope)] == ["old", "new"]
        assert not sa.inspect(ledger.engine).has_table("dpstream_periods")
    with Ledger(ledger_url, create=True) as ledger:  # `budget init` adds the missing tables
        periodic = _scope_name()
        ledger.init_scope(periodic, 1.0, 0.0, unit_period=DAY)
        assert ledger.spend(periodic, PureDP(0.5), "days", _days(0, 2)).admitted
        assert ledger.show(scope).state["spent_epsilon"] == 0.5


# -- races ---------------------------------------------------------------------------------------

WORKERS, SPENDS, DAYS, COST = 6, 40, 6, Fraction(1, 10)


def _race_worker(url: str, scope: str, worker: int, queue) -> None:
    rng = random.Random(worker)
    admitted = 0
    with Ledger(url) as ledger:
        for i in range(SPENDS):
            first = rng.randrange(DAYS)
            count = rng.randint(1, min(3, DAYS - first))
            admitted += ledger.spend(scope, PureDP(float(COST)), f"w{worker}-{i}", _days(first, count)).admitted
    queue.put(admitted)


def test_racing_spends_on_overlapping_periods_never_overdraw(ledger_url):
    """6 processes x 40 spends of 1 to 3 overlapping days: no day over budget, every day's state equals the
    replay of the releases charged to it, in release order, on a fresh filter."""
    scope = _scope_name()
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope(scope, 1.0, 0.0, unit_period=DAY)
    counts = race(_race_worker, ledger_url, scope, WORKERS, timeout=180)
    with Ledger(ledger_url) as ledger:
        history = ledger.history(scope)
        states = {p["period"]: p for p in ledger.period_states(scope)}
    assert len(history) == sum(counts) and 10 <= sum(counts) < WORKERS * SPENDS
    replay = {period: PureDPFilter(1.0) for period in states}
    charged = {period: 0 for period in states}
    for release in history:
        for run in release.periods:
            for period in run.indices():
                assert replay[period].try_spend(release.event)
                charged[period] += 1
    for period, state in states.items():
        assert state["releases"] == charged[period]
        assert Fraction(str(state["state"]["spent_epsilon"])) == charged[period] * COST <= 1
        assert state["state"]["spent_epsilon"] == float(replay[period].spent)
    assert max(charged.values()) == 10  # demand far above the budget: some day is full


# -- crash mid-debit -----------------------------------------------------------------------------


def test_sigkill_mid_period_debit_leaves_nothing(ledger_url, tmp_path):
    scope = _scope_name()
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope(scope, 1.0, 0.0, unit_period=DAY)
        ledger.spend(scope, PureDP(0.25), "before", _days(1, 1))
        before = _snapshot(ledger, scope)
    kill_inside_debit(tmp_path, ledger_url, scope, "--periods", "2013-01-01..2013-01-04")
    with Ledger(ledger_url) as ledger:
        assert _snapshot(ledger, scope) == before  # no period row, release or release period was kept
        assert ledger.spend(scope, PureDP(0.75), "after", _days(0, 3)).admitted  # lock released, budgets intact
        assert {p["start"][:10]: p["state"]["spent_epsilon"] for p in ledger.period_states(scope)} == {
            "2013-01-01": 0.75, "2013-01-02": 1.0, "2013-01-03": 0.75}
    if ledger_url.startswith("sqlite"):
        with sqlite3.connect(ledger_url.removeprefix("sqlite:///")) as conn:
            assert conn.execute("SELECT count(*) FROM dpstream_release_periods").fetchone()[0] == 4
