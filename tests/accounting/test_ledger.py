"""The budget ledger on SQLite and on the local PostgreSQL: atomic debits, races, crashes, sealed state.

PostgreSQL tests need a server at 127.0.0.1:5432 (database `test`, user
postgres or root, trust auth). They skip, saying why, only when none is
reachable, and fail instead when CI=true. Each run works in a fresh schema
that is dropped afterwards.
"""
from __future__ import annotations

import json
import math
import os
import uuid

import pytest
import sqlalchemy as sa

from dpstream.accounting.events import ApproxDP, Gaussian, PureDP, SelfComposed
from dpstream.accounting.filters import FSRCFilter, PureDPFilter
from dpstream.accounting.filters.fsrc import basel_delta
from dpstream.accounting.ledger import Ledger, LedgerError, MonitorRecord
from dpstream.accounting.ledger.schema import define_tables
from tests.accounting.ledger_race import kill_inside_debit, race

PG_HOST, PG_PORT, PG_DATABASE = "127.0.0.1", 5432, "test"


def _pg_user() -> tuple[str | None, str]:
    import psycopg

    errors = []
    for user in ("postgres", "root"):
        try:
            with psycopg.connect(host=PG_HOST, port=PG_PORT, dbname=PG_DATABASE, user=user, connect_timeout=3):
                return user, ""
        except psycopg.Error as err:
            errors.append(f"{user}: {str(err).strip().splitlines()[0]}")
    return None, "; ".join(errors)


@pytest.fixture(scope="module")
def postgres_url():
    import psycopg

    user, why = _pg_user()
    if user is None:
        reason = f"no PostgreSQL server reachable at {PG_HOST}:{PG_PORT}/{PG_DATABASE} ({why})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    schema = f"dpstream_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(host=PG_HOST, port=PG_PORT, dbname=PG_DATABASE, user=user, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"postgresql://{user}@{PG_HOST}:{PG_PORT}/{PG_DATABASE}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(host=PG_HOST, port=PG_PORT, dbname=PG_DATABASE, user=user, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return request.getfixturevalue("postgresql_url_fresh")


@pytest.fixture
def postgresql_url_fresh(postgres_url):
    """The run's schema, emptied before each test."""
    engine = sa.create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        for table in reversed(define_tables().metadata.sorted_tables):  # dependents first
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table.name}")
    engine.dispose()
    return postgres_url


class FakeClock:
    """An injectable ledger clock (`Ledger(..., clock=...)`) that moves only when told: lease tests need no sleep."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _scope_name() -> str:
    return f"scope-{uuid.uuid4().hex[:8]}"


def test_sqlite_file_is_owner_only(tmp_path):
    path = tmp_path / "new.db"
    with Ledger(f"sqlite:///{path}", create=True) as ledger:
        ledger.init_scope("s", 1.0, 0.0)
    assert path.stat().st_mode & 0o777 == 0o600


def test_reads_never_create_a_ledger(tmp_path):
    path = tmp_path / "absent.db"
    with pytest.raises(LedgerError, match="does not exist"):
        Ledger(f"sqlite:///{path}")
    assert not path.exists()


def test_unsupported_url():
    with pytest.raises(LedgerError, match="not supported"):
        Ledger("mysql://localhost/x")


def test_spend_show_history_roundtrip(ledger_url):
    scope = _scope_name()
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope(scope, 1.0, 0.0)
        with pytest.raises(LedgerError, match="already exists"):
            ledger.init_scope(scope, 1.0, 0.0)
        first = ledger.spend(scope, SelfComposed(PureDP(0.1), 4), "day 1")
        second = ledger.spend(scope, PureDP(0.6), "day 2")
        third = ledger.spend(scope, PureDP(0.1), "day 3")
        assert (first.admitted, second.admitted, third.admitted) == (True, True, False)
        view = ledger.show(scope)
        assert view.releases == 2 and view.filter == "pure"
        assert view.state["spent_epsilon"] == 1.0
        history = ledger.history(scope)
        assert [r.label for r in history] == ["day 1", "day 2"]
        assert history[0].event == SelfComposed(PureDP(0.1), 4)
        json.dumps([r.to_dict() for r in history])
        with pytest.raises(LedgerError, match="unknown scope"):
            ledger.spend("missing", PureDP(0.1), "x")


def test_refused_or_invalid_spend_writes_nothing(ledger_url):
    scope = _scope_name()
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope(scope, 1.0, 0.0)
        before = ledger.show(scope)
        assert not ledger.spend(scope, PureDP(2.0), "too big").admitted
        with pytest.raises(LedgerError, match="cannot price Gaussian"):
            ledger.spend(scope, Gaussian(1.0), "wrong kind")
        assert ledger.show(scope) == before
        assert ledger.history(scope) == []


def test_halting_filter_records_its_halt(ledger_url):
    scope = _scope_name()
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope(scope, 1.0, 1e-6, "whitehouse")
        assert not ledger.spend(scope, PureDP(5.0), "too big").admitted
        assert ledger.show(scope).halted
        result = ledger.spend(scope, PureDP(0.01), "small")
        assert not result.admitted and "halted" in result.message


def test_monitor_state_is_sealed(ledger_url):
    """A monitor opened and checked in: `show` gives its instances and delta used, never its realised spend."""
    scope = _scope_name()
    monitor = FSRCFilter(1.0, 1e-7)
    assert monitor.admits(0.3, basel_delta(1e-7, 1))
    monitor.charge(0.123456)
    assert monitor.admits(0.35, basel_delta(1e-7, 2))
    monitor.charge(0.654321)
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope(scope, 2.0, 1e-6)
        opened = ledger.open_run(scope, ApproxDP(1.0, 1e-7), "svt monitor", monitors={"alerts": (1.0, 1e-7, None)})
        assert opened.admitted and ledger.show(scope).monitors == ()  # opened at publication, with its debit
        committed = ledger.commit_run(opened.run_id, None)
        assert committed.admitted and ledger.show(scope).monitors[0].checked_out == opened.run_id
        ledger.check_in_monitors(opened.run_id, {"alerts": (MonitorRecord({"filter": monitor.to_dict()}), True)})
        view = ledger.show(scope)
        assert [m.to_dict() for m in view.monitors] == [{"name": "alerts", "epsilon": 1.0, "delta": 1e-7, "halted": True,
                                                         "checked_out": None, "instances": 2,
                                                         "delta_used": monitor.delta_used}]
        assert monitor.delta_used == pytest.approx(1e-7 * 6 / math.pi**2 * 1.25)
        text = json.dumps(view.to_dict()) + json.dumps([r.to_dict() for r in ledger.history(scope)])
        monitors = json.dumps([m.to_dict() for m in view.monitors])
        assert "0.123456" not in text and "0.654321" not in text and "spent" not in monitors


@pytest.mark.parametrize("kind", ["zcdp", "whitehouse", "gdp", "gdp-residue"])
def test_monitors_are_refused_on_scopes_without_a_concurrent_composition_theorem(ledger_url, kind):
    scope = _scope_name()
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope(scope, 2.0, 1e-6, kind)
        before = (ledger.show(scope), ledger.history(scope))
        with pytest.raises(LedgerError, match=f"uses the '{kind}' filter, which does not support svt monitors.*"
                                              f"only the pure and approx filters.*nothing was debited"):
            ledger.open_run(scope, PureDP(0.1), "svt", monitors={"alerts": (0.1, 0.0, None)})
        assert (ledger.show(scope), ledger.history(scope), ledger.runs_of(scope)) == (*before, [])
        assert ledger.monitor_record(scope, "alerts") is None


# -- races ---------------------------------------------------------------------------------------

WORKERS, SPENDS, BUDGET, COST = 8, 100, 5.0, 0.1


def _race_worker(url: str, scope: str, worker: int, queue) -> None:
    admitted = 0
    with Ledger(url) as ledger:
        for i in range(SPENDS):
            admitted += ledger.spend(scope, PureDP(COST), f"w{worker}-{i}").admitted
    queue.put(admitted)


def test_racing_spends_never_overdraw(ledger_url):
    """8 processes x 100 spends: admitted count equals the sequential filter's, and the ledger agrees."""
    scope = _scope_name()
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope(scope, BUDGET, 0.0)
    sequential = PureDPFilter(BUDGET)
    expected = sum(sequential.try_spend(PureDP(COST)) for _ in range(WORKERS * SPENDS))
    assert expected == 50
    counts = race(_race_worker, ledger_url, scope, WORKERS, timeout=120)
    assert sum(counts) == expected
    with Ledger(ledger_url) as ledger:
        view = ledger.show(scope)
        assert view.releases == expected
        assert view.state["spent_epsilon"] == BUDGET
        assert len({r.label for r in ledger.history(scope)}) == expected


# -- crash mid-debit -----------------------------------------------------------------------------


def test_sigkill_mid_debit_leaves_a_consistent_ledger(ledger_url, tmp_path):
    scope = _scope_name()
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope(scope, 1.0, 0.0)
        ledger.spend(scope, PureDP(0.25), "before")
        before = ledger.show(scope)
    kill_inside_debit(tmp_path, ledger_url, scope)
    with Ledger(ledger_url) as ledger:
        assert ledger.show(scope) == before
        assert [r.label for r in ledger.history(scope)] == ["before"]
        assert ledger.spend(scope, PureDP(0.75), "after").admitted  # lock released, full budget still there
        assert ledger.show(scope).state["spent_epsilon"] == 1.0
