"""The admission decision of a scope's filter on one release, and the writes that carry it out.

A decision is made inside a transaction that holds the scope's lock (`Ledger._lock_scope`) and reads only what
the filter needs; `Decision.write` then stores it in the same transaction: an admitted release is debited (new
filter state, the release row, on a period scope every touched period and the release's periods), a refused one
changes nothing but the halt of a halting filter, which its theorem requires to be recorded. A caller that only
asks (`Ledger.open_run`) writes refusals only, so admission is checked early and debited once, at publication.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

import sqlalchemy as sa

from dpstream.accounting.events import Event, InvalidEventError
from dpstream.accounting.filters import EventFilter, PrivacyFilter
from dpstream.accounting.filters.base import terms_text
from dpstream.accounting.ledger.errors import LedgerError
from dpstream.accounting.ledger.records import largest_spent, scope_config
from dpstream.accounting.ledger.schema import Tables
from dpstream.accounting.periods import Periods, period_runs


def now_text() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class Decision:
    """The filter's answer; `write(conn)` stores it and returns the new release id when admitted."""

    admitted: bool
    refusal: str | None  # the one line that says why, when refused
    write: Callable[[sa.Connection], int | None]


def check_periods(row: sa.Row, periods: Periods | None) -> None:
    """A release names periods exactly when its scope is a period scope, of the scope's grid."""
    grid, _ = scope_config(row)
    scope = row.name
    if grid is None and periods is not None:
        raise LedgerError(f"scope {scope!r} has one budget for all its releases (no unit period), so a release "
                          f"names no periods; nothing was debited")
    if grid is not None and periods is None:
        raise LedgerError(f"scope {scope!r} has a budget per {grid.text} period: name the periods the "
                          f"release touches (`dpstream budget spend --periods START..END`); nothing was debited")
    if grid is not None and periods is not None and periods.grid != grid:
        raise LedgerError(f"scope {scope!r} has periods of {grid.text}, the release names periods of "
                          f"{periods.grid.text}; nothing was debited")


def retirement(tables: Tables, conn: sa.Connection, scope: str) -> str | None:
    """The refusal every release of a retired scope gets ("refused: ..."), or None while the scope is live."""
    retired = conn.execute(sa.select(tables.retired).where(tables.retired.c.scope == scope)).one_or_none()
    if retired is None:
        return None
    return (f"refused: scope {scope!r} was retired at {retired.retired_at} ({retired.reason}); it admits nothing "
            f"more: use a new scope")


def decide(tables: Tables, conn: sa.Connection, row: sa.Row, event: Event, label: str,
           periods: Periods | None) -> Decision:
    """The scope's decision on `event` (checked with `check_periods` first); a retired scope refuses every event."""
    check_periods(row, periods)
    refusal = retirement(tables, conn, row.name)
    if refusal is not None:
        return Decision(False, refusal, lambda conn: None)
    if periods is None:
        return _decide_plain(tables, row, event, label)
    return _decide_periods(tables, conn, row, event, label, periods)


def _try_spend(row: sa.Row, budget_filter: EventFilter, event: Event) -> bool:
    try:
        return budget_filter.try_spend(event)
    except (InvalidEventError, ValueError) as err:
        raise LedgerError(f"scope {row.name!r} ({row.filter_kind} filter): {err}") from err


def _insert_release(tables: Tables, conn: sa.Connection, scope: str, label: str, event: Event,
                    budget_after: dict[str, Any]) -> int:
    result = conn.execute(tables.releases.insert().values(
        scope=scope, label=label, created_at=now_text(), events=json.dumps(event.to_dict()),
        budget_after=json.dumps(budget_after)))
    return inserted_id(result)


def inserted_id(result: sa.CursorResult[Any]) -> int:
    """The id of the row a single-row insert just wrote (SQLAlchemy types the key as optional)."""
    key = result.inserted_primary_key
    if key is None:
        raise LedgerError("the database reported no id for the new row; nothing was written")
    return int(key[0])


def _save_filter(tables: Tables, conn: sa.Connection, scope: str, budget_filter: PrivacyFilter) -> None:
    conn.execute(tables.scopes.update().where(tables.scopes.c.name == scope)
                 .values(filter_state=json.dumps(budget_filter.to_dict())))


def _decide_plain(tables: Tables, row: sa.Row, event: Event, label: str) -> Decision:
    scope = row.name
    budget_filter = EventFilter.from_dict(json.loads(row.filter_state))
    was_halted = budget_filter.halted
    admitted = _try_spend(row, budget_filter, event)

    def write(conn: sa.Connection) -> int | None:
        if admitted or budget_filter.halted != was_halted:
            _save_filter(tables, conn, scope, budget_filter)
        return _insert_release(tables, conn, scope, label, event, budget_filter.public_dict()) if admitted else None

    if admitted:
        return Decision(True, None, write)
    if was_halted:
        refusal = f"refused: scope {scope!r} has halted ({row.filter_kind} filter); release {label!r} not recorded"
    else:
        refusal = (f"refused: release {label!r} would exceed the budget of scope {scope!r}: it costs "
                   f"{terms_text(budget_filter.cost_terms(event))} and the scope has {terms_text(budget_filter.left_terms())} left "
                   f"({row.filter_kind} filter, epsilon={row.epsilon:g}, delta={row.delta:g})"
                   + ("; the scope has now halted" if budget_filter.halted else ""))
    return Decision(False, refusal, write)


def period_rows(tables: Tables, conn: sa.Connection, scope: str, periods: Periods, lock: bool) -> dict[int, sa.Row]:
    """The stored rows of the touched periods that have one, by period (`lock`: FOR UPDATE, in period order)."""
    query = (sa.select(tables.periods)
             .where((tables.periods.c.scope == scope)
                    & (tables.periods.c.period >= periods.first) & (tables.periods.c.period <= periods.last))
             .order_by(tables.periods.c.period))
    return {r.period: r for r in conn.execute(query.with_for_update() if lock else query)}


def _decide_periods(tables: Tables, conn: sa.Connection, row: sa.Row, event: Event, label: str,
                    periods: Periods) -> Decision:
    """A period scope: every touched period's filter (a fresh one from the template when the period has no row
    yet) must admit; periods in the same state share one decision (filters are deterministic in state and
    event). Period rows are locked in period order."""
    scope, (_, template) = row.name, scope_config(row)
    stored = period_rows(tables, conn, scope, periods, lock=True)
    fresh = json.dumps(template)
    decisions: dict[str, tuple[bool, bool, EventFilter]] = {}  # state -> (admitted, was halted, filter after)
    for period in periods.indices():
        state = stored[period].filter_state if period in stored else fresh
        if state not in decisions:
            budget_filter = EventFilter.from_dict(json.loads(state))
            was_halted = budget_filter.halted
            decisions[state] = (_try_spend(row, budget_filter, event), was_halted, budget_filter)

    def decision(period: int) -> tuple[bool, bool, EventFilter]:
        return decisions[stored[period].filter_state if period in stored else fresh]

    refused = [p for p in periods.indices() if not decision(p)[0]]
    halting = [p for p in refused if decision(p)[2].halted and not decision(p)[1]]
    write_periods = _PeriodWriter(tables, scope, stored, decision)
    if not refused:
        def debit(conn: sa.Connection) -> int:
            write_periods(conn, list(periods.indices()), count=True)
            after = largest_spent([f for _, _, f in decisions.values()])
            release_id = _insert_release(tables, conn, scope, label, event, {
                "filter": row.filter_kind, **periods.grid.to_dict(), "periods": periods.count, **after})
            conn.execute(tables.release_periods.insert(),
                         [{"release_id": release_id, "period": p} for p in periods.indices()])
            return release_id

        return Decision(True, None, debit)

    def record_halts(conn: sa.Connection) -> None:
        write_periods(conn, halting, count=False)
        return None

    already = [p for p in refused if decision(p)[1]]
    runs = period_runs(periods.grid, refused)
    where = "; ".join(run.describe() for run in runs[:3]) + ("; ..." if len(runs) > 3 else "")
    if len(already) == len(refused):
        refusal = (f"refused: release {label!r} touches {len(refused)} halted period(s) of scope {scope!r} "
                   f"({where}; {row.filter_kind} filter); nothing was debited")
    else:
        fullest = min((decision(p)[2] for p in refused if not decision(p)[1]),
                      key=lambda f: tuple(f.left_terms().values()))
        refusal = (f"refused: release {label!r} would exceed the budget of scope {scope!r} in {len(refused)} of its "
                   f"{periods.count} periods ({where}; {row.filter_kind} filter, epsilon={row.epsilon:g}, "
                   f"delta={row.delta:g} per {periods.grid.text} period): it costs "
                   f"{terms_text(fullest.cost_terms(event))} per period, and the fullest of those periods has "
                   f"{terms_text(fullest.left_terms())} left; nothing was debited"
                   + (f"; {len(halting)} period(s) have now halted" if halting else ""))
    return Decision(False, refusal, record_halts)


@dataclass(frozen=True)
class _PeriodWriter:
    """Stores the new filter state of some periods (inserting rows for new ones); `count`: one more release."""

    tables: Tables
    scope: str
    stored: dict[int, sa.Row]
    decision: Callable[[int], tuple[bool, bool, EventFilter]]

    def __call__(self, conn: sa.Connection, which: list[int], count: bool) -> None:
        periods, now = self.tables.periods, now_text()
        updates, inserts = [], []
        for period in which:
            state = json.dumps(self.decision(period)[2].to_dict())
            if period in self.stored:
                updates.append({"b_period": period, "b_state": state,
                                "b_releases": self.stored[period].releases + (1 if count else 0)})
            else:
                inserts.append({"scope": self.scope, "period": period, "filter_state": state,
                                "releases": 1 if count else 0, "updated_at": now})
        if updates:
            conn.execute(
                periods.update()
                .where((periods.c.scope == self.scope) & (periods.c.period == sa.bindparam("b_period")))
                .values(filter_state=sa.bindparam("b_state"), releases=sa.bindparam("b_releases"), updated_at=now),
                updates)
        if inserts:
            conn.execute(periods.insert(), inserts)

