"""The ledger's scopes: creating them, direct debits, the filters that decide, their public state and history."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any, Sequence

import sqlalchemy as sa

from dpstream.accounting.events import Event
from dpstream.accounting.filters import EventFilter, PrivacyFilter, scope_filter
from dpstream.accounting.ledger.connection import (
    LedgerCore,
    _admitted,
    _check_event,
    _check_name,
    _grid_rule,
    parse_filter_spec,
)
from dpstream.accounting.ledger.decisions import (
    check_periods,
    decide,
    now_text,
    period_rows,
)
from dpstream.accounting.ledger.errors import LedgerError, UnitMismatchError
from dpstream.accounting.ledger.records import (
    PERIOD_SCOPE,
    MonitorView,
    PeriodsView,
    ReleaseRecord,
    ScopeView,
    SpendResult,
    largest_spent,
    monitor_view,
    scope_config,
)
from dpstream.accounting.ledger.streams import (
    monitor_leases,
)
from dpstream.accounting.ledger.units import (
    PrivacyUnit,
    check_unit,
    record_unit,
    scope_unit,
    unit_unused,
)
from dpstream.accounting.periods import PeriodGrid, Periods, period_runs
from dpstream.accounting.text import instant_text


class ScopeBook(LedgerCore):
    """Scopes and their state (a part of `Ledger`)."""

    def init_scope(self, scope: str, epsilon: float, delta: float, filter_spec: str | None = None,
                   unit_period: PeriodGrid | float | str | None = None, timezone: str = "UTC",
                   unit: PrivacyUnit | None = None) -> ScopeView:
        """Create a budget scope with total (epsilon, delta) and its filter (see the module docstring).

        unit_period: None for a plain scope (one budget for all its releases); else a period scope's grid (whole
        seconds, a calendar length such as "1day" or "1month" in `timezone`, or a `PeriodGrid`), whose
        (epsilon, delta) and filter are the budget of each period.
        unit: the privacy unit a plain scope serves (`accounting.ledger.units`; None: fixed by its first job); on
        a period scope it must be the grid's own.
        """
        _check_name("scope", scope, 200)
        grid = None if unit_period is None else PeriodGrid.of(unit_period, timezone)
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
            raise LedgerError(f"epsilon must be a positive finite number, got {epsilon!r}")
        if not (isinstance(delta, (int, float)) and math.isfinite(delta) and 0 <= delta < 1):
            raise LedgerError(f"delta must lie in [0, 1), got {delta!r}")
        kind, options = parse_filter_spec(filter_spec, delta)
        try:
            budget_filter = scope_filter(kind, float(epsilon), float(delta), **options)
        except ValueError as err:
            raise LedgerError(f"filter {kind!r}: {err}") from err
        if unit is not None and grid is not None and unit != PrivacyUnit.of_scope(grid):
            raise LedgerError(f"a period scope of {grid.text} serves privacy unit {PrivacyUnit.of_scope(grid).text}, "
                              f"not {getattr(unit, 'text', repr(unit))}")
        if unit is not None and not isinstance(unit, PrivacyUnit):
            raise LedgerError(f"a scope's privacy unit is a PrivacyUnit, got {unit!r}")
        with self._transaction() as conn:
            exists = conn.execute(sa.select(self.scopes.c.name).where(self.scopes.c.name == scope)).first()
            if exists is not None:
                raise LedgerError(f"scope {scope!r} already exists in ledger {self.display_url}")
            conn.execute(
                self.scopes.insert().values(
                    name=scope,
                    epsilon=float(epsilon),
                    delta=float(delta),
                    filter_kind=kind,
                    filter_state=json.dumps(
                        budget_filter.to_dict() if grid is None
                        else {"filter": PERIOD_SCOPE, **grid.to_dict(), "template": budget_filter.to_dict()}
                    ),
                    created_at=now_text(),
                )
            )
            if unit is not None and grid is None:
                record_unit(self.tables, conn, scope, unit, "budget init", now_text(), declared=True)
        return self.show(scope)

    def spend(self, scope: str, event: Event, label: str, periods: Periods | None = None, *,
              unit: PrivacyUnit | None = None) -> SpendResult:
        """Atomically ask the scope's filter about `event` and record the release when admitted (a debit made
        without a run, e.g. `dpstream budget spend`; its outputs are the caller's).

        periods: required on a period scope (the periods the release touches, of the scope's length;
        every one of them must admit `event`, and all are debited), refused on a plain scope.
        unit: the release's privacy unit (`accounting.ledger.units`): UnitMismatchError, writing nothing, when the
        scope serves another; an admitted one fixes a plain scope's unit if none is; None: not checked.
        """
        _check_event(label, event, periods)
        with self._transaction() as conn:
            row = self._lock_scope(conn, scope)
            fix_unit = check_unit(self.tables, conn, scope, scope_config(row)[0], unit)
            decision = decide(self.tables, conn, row, event, label, periods)
            release_id = decision.write(conn)
            if fix_unit and release_id is not None and unit is not None:
                record_unit(self.tables, conn, scope, unit, label, now_text())
        if release_id is None:
            return SpendResult(False, scope, label, None, decision.refusal or "refused")
        return SpendResult(True, scope, label, release_id, _admitted(label, release_id, scope, periods))

    def unit_period(self, scope: str) -> PeriodGrid | None:
        """The scope's period grid, or None for a plain scope."""
        with self._reading() as conn:
            return scope_config(self._scope_row(conn, scope))[0]

    def deciding_filters(self, scope: str, periods: Periods | None = None) -> list[EventFilter]:
        """The filters that would decide a release on `scope` now: the scope's, or one per distinct state among
        the periods touched (a period without a row has the fresh template). A release is admitted iff every
        one admits it. Reads without taking the write lock; for messages and what-ifs, never for a decision."""
        with self._reading() as conn:
            row = self._scope_row(conn, scope)
            check_periods(row, periods)
            _, config = scope_config(row)
            if periods is None:
                return [EventFilter.from_dict(config)]
            stored = [r.filter_state for r in period_rows(self.tables, conn, scope, periods, lock=False).values()]
        states = set(stored) | ({json.dumps(config)} if len(stored) < periods.count else set())
        return [EventFilter.from_dict(json.loads(state)) for state in sorted(states)]

    def declare_unit(self, scope: str, unit: PrivacyUnit, label: str) -> str:
        """An operator declares the privacy unit a plain scope serves (`dpstream budget unit`): where it is unknown
        (releases from before units were recorded), not fixed yet, or fixed by jobs that never published; the one
        line that says what changed. LedgerError for a period scope (its grid is its unit) or a scope whose unit is
        in use and differs."""
        with self._transaction() as conn:
            row = self._lock_scope(conn, scope)
            grid = scope_config(row)[0]
            if grid is not None:
                raise LedgerError(f"scope {scope!r} has a budget per {grid.text} period: its unit is that grid")
            served = scope_unit(self.tables, conn, scope, grid)
            if served is not None and served.unit is not None and served.unit != unit \
                    and not unit_unused(self.tables, conn, scope):
                raise UnitMismatchError(f"scope {scope!r} serves privacy unit {served.unit.text} (fixed "
                                        f"{served.fixed}), which its releases used; it stays so")
            record_unit(self.tables, conn, scope, unit, label, now_text(), declared=True)
        return f"scope {scope!r} serves privacy unit {unit.text} from now on"

    def retire_scope(self, scope: str, reason: str) -> str:
        """End a scope for good: from now on it refuses every release and run (its record and history stay; a
        scope is never reset, and `init_scope` refuses its name). Refused while a run holds a live lease on it."""
        reason = _check_name("reason", reason, 2000)
        with self._transaction() as conn:
            self._lock_scope(conn, scope)
            retired = conn.execute(sa.select(self.retired).where(self.retired.c.scope == scope)).one_or_none()
            if retired is not None:
                raise LedgerError(f"scope {scope!r} was already retired at {retired.retired_at} ({retired.reason})")
            running = [r.id for r in self._live_leases(conn, self._clock()) if r.scope == scope]
            if running:
                raise LedgerError(f"scope {scope!r} has run {running[0]} running; retire it once the run has ended "
                                  f"(or `dpstream budget release --scope {scope} --run {running[0]}`)")
            at = now_text()
            conn.execute(self.retired.insert().values(scope=scope, reason=reason, retired_at=at))
        return f"retired scope {scope!r} at {at} ({reason}); it admits nothing more"

    def show(self, scope: str) -> ScopeView:
        """The scope's public view: budget, filter rule and state, release count, monitors (halted or not, and
        the run leasing each).

        A period scope shows its period length (`unit_period`), how many periods were spent on and the
        largest figure spent in any one period (`largest_spent`); `period_states` lists every period.
        Reads without taking the write lock.
        """
        with self._reading() as conn:
            return self._show_locked(conn, self._scope_row(conn, scope))

    def _show_locked(self, conn: sa.Connection, row: sa.Row) -> ScopeView:
        scope = row.name
        count = conn.execute(
            sa.select(sa.func.count()).select_from(self.releases).where(self.releases.c.scope == scope)
        ).scalar_one()
        monitors = conn.execute(
            sa.select(self.monitors).where(self.monitors.c.scope == scope).order_by(self.monitors.c.name)
        ).all()
        clock = self._clock()
        leases, streaming = self._monitor_leases(conn, scope, clock), monitor_leases(self.tables, conn, scope, clock)
        grid, template = scope_config(row)
        period_rows = [] if grid is None else self._period_rows(conn, scope)
        monitors_view = tuple(monitor_view(m, leases.get(m.name), streaming.get(m.name, (None,))[0]) for m in monitors)
        retired = conn.execute(sa.select(self.retired).where(self.retired.c.scope == scope)).one_or_none()
        retired_text = None if retired is None else f"{retired.retired_at} ({retired.reason})"
        served = scope_unit(self.tables, conn, scope, grid)
        unit, unit_fixed = (None, None) if served is None else (served.unit, served.fixed)
        if grid is not None:
            return replace(self._period_view(row, grid, template, period_rows, int(count), monitors_view),
                           retired=retired_text, unit=unit, unit_fixed=unit_fixed)
        budget_filter = PrivacyFilter.from_dict(template)
        return ScopeView(row.name, row.epsilon, row.delta, row.filter_kind, budget_filter.describe(),
                         budget_filter.public_dict(), budget_filter.halted, int(count), monitors_view, row.created_at,
                         retired=retired_text, unit=unit, unit_fixed=unit_fixed)

    def _period_rows(self, conn: sa.Connection, scope: str) -> Sequence[sa.Row]:
        return conn.execute(
            sa.select(self.periods).where(self.periods.c.scope == scope).order_by(self.periods.c.period)
        ).all()

    @staticmethod
    def _period_view(row: sa.Row, grid: PeriodGrid, template: dict[str, Any], period_rows: Sequence[sa.Row], count: int,
                     monitors: tuple[MonitorView, ...]) -> ScopeView:
        """`show` of a period scope: the budget of each period and public figures over the periods spent on."""
        spent = [r for r in period_rows if r.releases > 0]
        filters = [PrivacyFilter.from_dict(json.loads(r.filter_state)) for r in period_rows]
        largest = largest_spent([f for f, r in zip(filters, period_rows) if r.releases > 0])
        halted = sum(f.halted for f in filters)
        rule = f"a budget per {_grid_rule(grid)}; in each period, {PrivacyFilter.from_dict(template).describe()}"
        periods = PeriodsView(len(spent), halted, largest, instant_text(grid.start(spent[0].period)) if spent else None,
                              instant_text(grid.start(spent[-1].period)) if spent else None)
        # A period scope never halts as a whole (halted False); see periods.halted.
        return ScopeView(row.name, row.epsilon, row.delta, row.filter_kind, rule,
                         {"periods_spent": len(spent), "periods_halted": halted, **largest}, False, count, monitors,
                         row.created_at, grid, periods)

    def period_states(self, scope: str) -> list[dict[str, Any]]:
        """A period scope's periods that have a filter state, oldest first: start, end, releases, public state."""
        with self._reading() as conn:
            grid, _ = scope_config(self._scope_row(conn, scope))
            if grid is None:
                raise LedgerError(f"scope {scope!r} has one budget for all its releases (no unit period), so no periods")
            rows = self._period_rows(conn, scope)
        out = []
        for r in rows:
            budget_filter = PrivacyFilter.from_dict(json.loads(r.filter_state))
            out.append({
                "period": int(r.period),
                "start": instant_text(grid.start(r.period)),
                "end": instant_text(grid.start(r.period + 1)),
                "releases": int(r.releases),
                "state": budget_filter.public_dict(),
                "halted": budget_filter.halted,
            })
        return out

    def history(self, scope: str) -> list[ReleaseRecord]:
        """Every admitted release of the scope, oldest first (on a period scope, with the periods it was charged)."""
        with self._reading() as conn:
            grid, _ = scope_config(self._scope_row(conn, scope))
            rows = conn.execute(
                sa.select(self.releases).where(self.releases.c.scope == scope).order_by(self.releases.c.id)
            ).all()
            charged: dict[int, list[int]] = {}
            if grid is not None:
                links = conn.execute(
                    sa.select(self.release_periods.c.release_id, self.release_periods.c.period)
                    .join(self.releases, self.releases.c.id == self.release_periods.c.release_id)
                    .where(self.releases.c.scope == scope)
                ).all()
                for link in links:
                    charged.setdefault(int(link.release_id), []).append(int(link.period))
        return [
            ReleaseRecord(r.id, r.scope, r.label, r.created_at, Event.from_dict(json.loads(r.events)),
                    json.loads(r.budget_after),
                    None if grid is None else tuple(period_runs(grid, charged.get(r.id, []))))
            for r in rows
        ]
