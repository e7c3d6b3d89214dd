"""The ledger's store: one connection to the SQL database, and the transactions that debit it.

See the package docstring (`dpstream.accounting.ledger`) for the admission rules, locking, sealed monitor
state and period scopes.
"""
from __future__ import annotations

import json
import math
import os
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlalchemy.engine import make_url

from dpstream.accounting.events import Event, InvalidEventError
from dpstream.accounting.filters import SCOPE_FILTERS, EventFilter, PrivacyFilter, default_scope_filter, scope_filter
from dpstream.accounting.ledger.errors import LedgerError
from dpstream.accounting.ledger.periods import Periods, check_unit_period, period_runs
from dpstream.accounting.ledger.records import (
    PERIOD_SCOPE,
    MonitorRecord,
    MonitorView,
    PeriodsView,
    ReleaseRecord,
    ScopeView,
    SpendResult,
    largest_spent,
    monitor_view,
    scope_config,
)
from dpstream.accounting.text import duration_text, instant_text

DEFAULT_URL = "sqlite:///dpstream-ledger.db"
LEDGER_ENV = "DPSTREAM_LEDGER"
_LOCK_TIMEOUT_SECONDS = 120
MONITOR_SCOPE_FILTERS = ("pure", "approx")
"""Scope filters that may hold svt monitors: (epsilon, delta) filters, for which Haney et al. 2023 extend the
filter's validity to interactive mechanisms running concurrently
(docs/proofs/pipelines.mechanisms.monitor.SparseVectorMonitor.md)."""


def resolve_url(explicit: str | None = None) -> str:
    """The ledger URL: `explicit` (--ledger or the job file), else $DPSTREAM_LEDGER, else the default SQLite file."""
    return explicit or os.environ.get(LEDGER_ENV) or DEFAULT_URL


def parse_filter_spec(spec: str | None, delta: float) -> tuple[str, dict[str, float]]:
    """`KIND[:NAME=VALUE,...]`, e.g. `approx:release_delta=1e-8`, -> (kind, options); None -> the default for delta."""
    if spec is None:
        return default_scope_filter(delta), {}
    kind, _, params = spec.strip().partition(":")
    options: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in params.split(","))):
        name, eq, raw = part.partition("=")
        try:
            value = float(raw)
        except ValueError as err:
            raise LedgerError(f"filter {spec!r}: expected NAME=VALUE with a number, got {part!r}") from err
        if not eq or not math.isfinite(value):
            raise LedgerError(f"filter {spec!r}: expected NAME=VALUE with a finite number, got {part!r}")
        options[name.strip()] = value
    if kind not in SCOPE_FILTERS:
        raise LedgerError(f"filter {spec!r}: unknown kind {kind!r}; allowed: {', '.join(SCOPE_FILTERS)}")
    return kind, options


def _check_name(what: str, value: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > limit or not value.isprintable():
        raise LedgerError(f"{what} must be 1 to {limit} printable characters, got {value!r}")
    return value


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _inserted_id(result: sa.CursorResult[Any]) -> int:
    """The id of the release row a single-row insert just wrote (SQLAlchemy types the key as optional)."""
    key = result.inserted_primary_key
    if key is None:
        raise LedgerError("the database reported no id for the new release; nothing was debited")
    return int(key[0])


class Ledger:
    """A connection to one ledger database.

    `Ledger(url, create=True)` creates the tables (and an SQLite file with
    owner-only permissions) when missing; without `create` a missing file or
    missing tables is an error, so reads and debits never create anything.
    """

    def __init__(self, url: str | None = None, create: bool = False) -> None:
        raw = resolve_url(url)
        try:
            parsed = make_url(raw)
        except sa.exc.ArgumentError as err:
            raise LedgerError(f"ledger URL {raw!r} is not a database URL (sqlite:///FILE or postgresql://...)") from err
        backend = parsed.get_backend_name()
        if backend == "postgres":
            parsed = parsed.set(drivername="postgresql")
            backend = "postgresql"
        if backend == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        elif backend != "sqlite":
            raise LedgerError(f"ledger URL {raw!r}: backend {backend!r} is not supported; use sqlite or postgresql")
        self.url = parsed
        self.display_url = parsed.render_as_string(hide_password=True)
        self.backend = backend
        if backend == "sqlite":
            self._prepare_sqlite_file(create)
            self.engine = sa.create_engine(
                parsed, connect_args={"timeout": _LOCK_TIMEOUT_SECONDS}, poolclass=sa.pool.NullPool
            )
            sa_event.listen(self.engine, "connect", _sqlite_on_connect)
            sa_event.listen(self.engine, "begin", _sqlite_on_begin)
        else:
            self.engine = sa.create_engine(parsed, pool_size=1, max_overflow=2)
        self._tables()
        with self._errors():
            if create:
                self._metadata.create_all(self.engine)
            elif not sa.inspect(self.engine).has_table("dpstream_scopes"):
                raise LedgerError(
                    f"ledger {self.display_url} has no budget scopes yet; create one with `dpstream budget init`"
                )

    # -- setup ------------------------------------------------------------------------------------

    def _prepare_sqlite_file(self, create: bool) -> None:
        path = self.url.database
        if not path or path == ":memory:":
            raise LedgerError(f"ledger URL {self.display_url!r} needs a file path, e.g. sqlite:///dpstream-ledger.db")
        if os.path.exists(path):
            return
        if not create:
            raise LedgerError(
                f"ledger file {path} does not exist; create a scope first with `dpstream budget init`"
            )
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            pass  # created by a concurrent init
        except OSError as err:
            raise LedgerError(f"cannot create ledger file {path}: {err.strerror}") from err

    def _tables(self) -> None:
        self._metadata = metadata = sa.MetaData()
        self.scopes = sa.Table(
            "dpstream_scopes",
            metadata,
            sa.Column("name", sa.String(200), primary_key=True),
            sa.Column("epsilon", sa.Float(precision=53), nullable=False),
            sa.Column("delta", sa.Float(precision=53), nullable=False),
            sa.Column("filter_kind", sa.String(32), nullable=False),
            sa.Column("filter_state", sa.Text, nullable=False),
            sa.Column("created_at", sa.String(40), nullable=False),
        )
        self.releases = sa.Table(
            "dpstream_releases",
            metadata,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("scope", sa.String(200), sa.ForeignKey("dpstream_scopes.name"), nullable=False, index=True),
            sa.Column("label", sa.Text, nullable=False),
            sa.Column("created_at", sa.String(40), nullable=False),
            sa.Column("events", sa.Text, nullable=False),
            sa.Column("budget_after", sa.Text, nullable=False),
        )
        self.monitors = sa.Table(
            "dpstream_monitors",
            metadata,
            sa.Column("scope", sa.String(200), sa.ForeignKey("dpstream_scopes.name"), primary_key=True),
            sa.Column("name", sa.String(200), primary_key=True),
            sa.Column("epsilon", sa.Float(precision=53), nullable=False),
            sa.Column("delta", sa.Float(precision=53), nullable=False),
            sa.Column("sealed_state", sa.Text, nullable=False),
            sa.Column("halted", sa.Boolean, nullable=False),
            sa.Column("created_at", sa.String(40), nullable=False),
        )
        # Period scopes only; created when missing by Ledger(create=True), never read for plain scopes.
        self.periods = sa.Table(
            "dpstream_periods",
            metadata,
            sa.Column("scope", sa.String(200), sa.ForeignKey("dpstream_scopes.name"), primary_key=True),
            sa.Column("period", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("filter_state", sa.Text, nullable=False),
            sa.Column("releases", sa.Integer, nullable=False),
            sa.Column("updated_at", sa.String(40), nullable=False),
        )
        self.release_periods = sa.Table(
            "dpstream_release_periods",
            metadata,
            sa.Column("release_id", sa.Integer, sa.ForeignKey("dpstream_releases.id"), primary_key=True,
                      autoincrement=False),
            sa.Column("period", sa.BigInteger, primary_key=True, autoincrement=False),
        )

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sa.exc.DBAPIError as err:
            detail = str(getattr(err, "orig", err)).strip().splitlines()[0]
            raise LedgerError(f"ledger {self.display_url}: database error: {detail}") from err

    @contextmanager
    def _transaction(self) -> Iterator[sa.Connection]:
        """One atomic transaction holding the write lock (SQLite) or taking row locks (PostgreSQL)."""
        with self._errors(), self.engine.begin() as conn:
            yield conn

    def _lock_scope(self, conn: sa.Connection, scope: str) -> sa.Row:
        row = conn.execute(
            sa.select(self.scopes).where(self.scopes.c.name == scope).with_for_update()
        ).one_or_none()
        if row is None:
            raise LedgerError(f"unknown scope {scope!r} in ledger {self.display_url}")
        return row

    # -- scopes -----------------------------------------------------------------------------------

    def init_scope(self, scope: str, epsilon: float, delta: float, filter_spec: str | None = None,
                   unit_period: float | None = None) -> ScopeView:
        """Create a budget scope with total (epsilon, delta) and its filter (see the module docstring).

        unit_period: None for a plain scope (one budget for all its releases); else the period length in
        whole seconds of a period scope, whose (epsilon, delta) and filter are the budget of each period.
        """
        _check_name("scope", scope, 200)
        period = None if unit_period is None else check_unit_period(unit_period)
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
            raise LedgerError(f"epsilon must be a positive finite number, got {epsilon!r}")
        if not (isinstance(delta, (int, float)) and math.isfinite(delta) and 0 <= delta < 1):
            raise LedgerError(f"delta must lie in [0, 1), got {delta!r}")
        kind, options = parse_filter_spec(filter_spec, delta)
        try:
            budget_filter = scope_filter(kind, float(epsilon), float(delta), **options)
        except ValueError as err:
            raise LedgerError(f"filter {kind!r}: {err}") from err
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
                        budget_filter.to_dict() if period is None
                        else {"filter": PERIOD_SCOPE, "period_s": period, "template": budget_filter.to_dict()}
                    ),
                    created_at=_now(),
                )
            )
        return self.show(scope)

    def spend(self, scope: str, event: Event, label: str, periods: Periods | None = None) -> SpendResult:
        """Atomically ask the scope's filter about `event` and record the release when admitted.

        periods: required on a period scope (the periods the release touches, of the scope's length;
        every one of them must admit `event`, and all are debited), refused on a plain scope.
        """
        _check_name("label", label, 1000)
        if not isinstance(event, Event):
            raise LedgerError(f"spend needs a privacy event, got {event!r}")
        if periods is not None and not isinstance(periods, Periods):
            raise LedgerError(f"spend takes its periods as a Periods range, got {periods!r}")
        with self._transaction() as conn:
            row = self._lock_scope(conn, scope)
            period, template = scope_config(row)
            if period is None:
                if periods is not None:
                    raise LedgerError(
                        f"scope {scope!r} has one budget for all its releases (no unit period), so a release "
                        f"names no periods; nothing was debited"
                    )
                return self._spend_locked(conn, row, scope, event, label)
            if periods is None:
                raise LedgerError(
                    f"scope {scope!r} has a budget per {duration_text(period)} period: name the periods the "
                    f"release touches (`dpstream budget spend --periods START..END`); nothing was debited"
                )
            if periods.seconds != period:
                raise LedgerError(
                    f"scope {scope!r} has {duration_text(period)} periods ({period} s), the release names "
                    f"{duration_text(periods.seconds)} periods ({periods.seconds} s); nothing was debited"
                )
            return self._spend_periods_locked(conn, row, scope, template, event, label, periods)

    def unit_period(self, scope: str) -> int | None:
        """The scope's period length in seconds, or None for a plain scope."""
        with self._transaction() as conn:
            return scope_config(self._lock_scope(conn, scope))[0]

    @staticmethod
    def _refuse_monitors(row: sa.Row) -> None:
        """svt monitors only on scopes whose filter has a concurrent-composition theorem (MONITOR_SCOPE_FILTERS)."""
        if row.filter_kind not in MONITOR_SCOPE_FILTERS:
            raise LedgerError(
                f"scope {row.name!r} uses the {row.filter_kind!r} filter, which does not support svt monitors: a "
                f"monitor keeps answering after later releases on the scope (concurrent composition), and only the "
                f"{' and '.join(MONITOR_SCOPE_FILTERS)} filters are covered by a theorem for that "
                f"(docs/proofs/pipelines.mechanisms.monitor.SparseVectorMonitor.md); create a scope for svt releases with "
                f"`dpstream budget init ... --filter approx`; nothing was debited"
            )

    def _refuse_periods(self, row: sa.Row, what: str) -> None:
        period, _ = scope_config(row)
        if period is not None:
            raise LedgerError(
                f"scope {row.name!r} has a budget per {duration_text(period)} period, which does not support "
                f"{what}: an svt monitor's sealed state runs on across runs and periods while its budget is "
                f"debited once; use a scope without a unit period for svt releases; nothing was debited"
            )

    def _spend_periods_locked(self, conn: sa.Connection, row: sa.Row, scope: str, template: dict[str, Any],
                              event: Event, label: str, periods: Periods) -> SpendResult:
        """`spend` on a period scope, inside a transaction that holds the scope's lock (`row`).

        Locks the touched periods' rows (in period order), asks each period's filter (a fresh one from
        `template` when the period has no row yet) and, when all admit, writes every new state, the
        release and its periods. Filters are deterministic in (state, event), so periods in the same
        state share one decision (one accountant query for all fresh periods).
        """
        stored = {
            r.period: r
            for r in conn.execute(
                sa.select(self.periods)
                .where((self.periods.c.scope == scope)
                       & (self.periods.c.period >= periods.first) & (self.periods.c.period <= periods.last))
                .order_by(self.periods.c.period)
                .with_for_update()
            )
        }
        fresh = json.dumps(template)
        decisions: dict[str, tuple[bool, bool, PrivacyFilter]] = {}  # state -> (admitted, was halted, filter after)
        for period in periods.indices():
            state = stored[period].filter_state if period in stored else fresh
            if state in decisions:
                continue
            budget_filter = EventFilter.from_dict(json.loads(state))
            was_halted = budget_filter.halted
            try:
                admitted = budget_filter.try_spend(event)
            except (InvalidEventError, ValueError) as err:
                raise LedgerError(f"scope {scope!r} ({row.filter_kind} filter): {err}") from err
            decisions[state] = (admitted, was_halted, budget_filter)

        def decision(period: int) -> tuple[bool, bool, PrivacyFilter]:
            return decisions[stored[period].filter_state if period in stored else fresh]

        refused = [p for p in periods.indices() if not decision(p)[0]]
        now = _now()
        if refused:
            # Only a halting filter changes on refusal: it records its halt, as its theorem requires.
            halting = [p for p in refused if decision(p)[2].halted and not decision(p)[1]]
            self._write_periods(conn, scope, halting, stored, decision, now, count=False)
            already = [p for p in refused if decision(p)[1]]
            runs = period_runs(periods.seconds, refused)
            where = "; ".join(run.describe() for run in runs[:3]) + ("; ..." if len(runs) > 3 else "")
            if len(already) == len(refused):
                message = (f"refused: release {label!r} touches {len(refused)} halted period(s) of scope {scope!r} "
                           f"({where}; {row.filter_kind} filter); nothing was debited")
            else:
                message = (
                    f"refused: release {label!r} would exceed the budget of scope {scope!r} in {len(refused)} of its "
                    f"{periods.count} periods ({where}; {row.filter_kind} filter, epsilon={row.epsilon:g}, "
                    f"delta={row.delta:g} per {duration_text(periods.seconds)} period); nothing was debited"
                    + (f"; {len(halting)} period(s) have now halted" if halting else "")
                )
            return SpendResult(False, scope, label, None, message)
        self._write_periods(conn, scope, list(periods.indices()), stored, decision, now, count=True)
        after = [f for _, _, f in decisions.values()]
        result = conn.execute(
            self.releases.insert().values(
                scope=scope,
                label=label,
                created_at=now,
                events=json.dumps(event.to_dict()),
                budget_after=json.dumps({"filter": row.filter_kind, "period_s": periods.seconds,
                                         "periods": periods.count, **largest_spent(after)}),
            )
        )
        release_id = _inserted_id(result)
        conn.execute(self.release_periods.insert(),
                     [{"release_id": release_id, "period": p} for p in periods.indices()])
        message = f"admitted: release {label!r} (id {release_id}) on scope {scope!r}, periods {periods.describe()}"
        return SpendResult(True, scope, label, release_id, message)

    def _write_periods(self, conn: sa.Connection, scope: str, which: list[int], stored: dict[int, sa.Row],
                       decision: Callable[[int], tuple[bool, bool, PrivacyFilter]], now: str, count: bool) -> None:
        """Store the new filter state of the periods `which` (inserting rows for new periods); `count`: one more release."""
        updates, inserts = [], []
        for period in which:
            state = json.dumps(decision(period)[2].to_dict())
            if period in stored:
                updates.append({"b_period": period, "b_state": state,
                                "b_releases": stored[period].releases + (1 if count else 0)})
            else:
                inserts.append({"scope": scope, "period": period, "filter_state": state,
                                "releases": 1 if count else 0, "updated_at": now})
        if updates:
            conn.execute(
                self.periods.update()
                .where((self.periods.c.scope == scope) & (self.periods.c.period == sa.bindparam("b_period")))
                .values(filter_state=sa.bindparam("b_state"), releases=sa.bindparam("b_releases"), updated_at=now),
                updates,
            )
        if inserts:
            conn.execute(self.periods.insert(), inserts)

    def _spend_locked(self, conn: sa.Connection, row: sa.Row, scope: str, event: Event, label: str) -> SpendResult:
        """`spend` inside a transaction that holds the scope's lock (`row`)."""
        budget_filter = EventFilter.from_dict(json.loads(row.filter_state))
        was_halted = budget_filter.halted
        try:
            admitted = budget_filter.try_spend(event)
        except (InvalidEventError, ValueError) as err:
            raise LedgerError(f"scope {scope!r} ({row.filter_kind} filter): {err}") from err
        release_id = None
        if admitted or budget_filter.halted != was_halted:
            self._save_filter(conn, scope, budget_filter)
        if admitted:
            release_id = self._insert_release(conn, scope, label, event, budget_filter)
        if admitted:
            message = f"admitted: release {label!r} (id {release_id}) on scope {scope!r}"
        elif was_halted:
            message = f"refused: scope {scope!r} has halted ({row.filter_kind} filter); release {label!r} not recorded"
        else:
            message = (
                f"refused: release {label!r} would exceed the budget of scope {scope!r} "
                f"({row.filter_kind} filter, epsilon={row.epsilon:g}, delta={row.delta:g})"
                + ("; the scope has now halted" if budget_filter.halted else "")
            )
        return SpendResult(admitted, scope, label, release_id, message)

    def _save_filter(self, conn: sa.Connection, scope: str, budget_filter: PrivacyFilter) -> None:
        conn.execute(
            self.scopes.update()
            .where(self.scopes.c.name == scope)
            .values(filter_state=json.dumps(budget_filter.to_dict()))
        )

    def _insert_release(
        self, conn: sa.Connection, scope: str, label: str, event: Event, budget_filter: PrivacyFilter
    ) -> int:
        result = conn.execute(
            self.releases.insert().values(
                scope=scope,
                label=label,
                created_at=_now(),
                events=json.dumps(event.to_dict()),
                budget_after=json.dumps(budget_filter.public_dict()),
            )
        )
        return _inserted_id(result)

    def show(self, scope: str) -> ScopeView:
        """The scope's public view: budget, filter rule and state, release count, monitors (halted or not).

        A period scope shows its period length (`unit_period`), how many periods were spent on and the
        largest figure spent in any one period (`largest_spent`); `period_states` lists every period.
        """
        with self._transaction() as conn:
            row = self._lock_scope(conn, scope)
            count = conn.execute(
                sa.select(sa.func.count()).select_from(self.releases).where(self.releases.c.scope == scope)
            ).scalar_one()
            monitors = conn.execute(
                sa.select(self.monitors).where(self.monitors.c.scope == scope).order_by(self.monitors.c.name)
            ).all()
            period, template = scope_config(row)
            period_rows = [] if period is None else self._period_rows(conn, scope)
        monitors_view = tuple(monitor_view(m) for m in monitors)
        if period is not None:
            return self._period_view(row, period, template, period_rows, int(count), monitors_view)
        budget_filter = PrivacyFilter.from_dict(template)
        return ScopeView(row.name, row.epsilon, row.delta, row.filter_kind, budget_filter.describe(),
                         budget_filter.public_dict(), budget_filter.halted, int(count), monitors_view, row.created_at)

    def _period_rows(self, conn: sa.Connection, scope: str) -> Sequence[sa.Row]:
        return conn.execute(
            sa.select(self.periods).where(self.periods.c.scope == scope).order_by(self.periods.c.period)
        ).all()

    @staticmethod
    def _period_view(row: sa.Row, period: int, template: dict[str, Any], period_rows: Sequence[sa.Row], count: int,
                     monitors: tuple[MonitorView, ...]) -> ScopeView:
        """`show` of a period scope: the budget of each period and public figures over the periods spent on."""
        spent = [r for r in period_rows if r.releases > 0]
        filters = [PrivacyFilter.from_dict(json.loads(r.filter_state)) for r in period_rows]
        largest = largest_spent([f for f, r in zip(filters, period_rows) if r.releases > 0])
        halted = sum(f.halted for f in filters)
        rule = (f"a budget per {duration_text(period)} period (period k covers [k*{period}, (k+1)*{period}) seconds "
                f"since 1970-01-01T00:00:00Z); in each period, {PrivacyFilter.from_dict(template).describe()}")
        periods = PeriodsView(len(spent), halted, largest, instant_text(spent[0].period * period) if spent else None,
                              instant_text(spent[-1].period * period) if spent else None)
        # A period scope never halts as a whole (halted False); see periods.halted.
        return ScopeView(row.name, row.epsilon, row.delta, row.filter_kind, rule,
                         {"periods_spent": len(spent), "periods_halted": halted, **largest}, False, count, monitors,
                         row.created_at, period, periods)

    def period_states(self, scope: str) -> list[dict[str, Any]]:
        """A period scope's periods that have a filter state, oldest first: start, end, releases, public state."""
        with self._transaction() as conn:
            period, _ = scope_config(self._lock_scope(conn, scope))
            if period is None:
                raise LedgerError(f"scope {scope!r} has one budget for all its releases (no unit period), so no periods")
            rows = self._period_rows(conn, scope)
        out = []
        for r in rows:
            budget_filter = PrivacyFilter.from_dict(json.loads(r.filter_state))
            out.append({
                "period": int(r.period),
                "start": instant_text(r.period * period),
                "end": instant_text((r.period + 1) * period),
                "releases": int(r.releases),
                "state": budget_filter.public_dict(),
                "halted": budget_filter.halted,
            })
        return out

    def history(self, scope: str) -> list[ReleaseRecord]:
        """Every admitted release of the scope, oldest first (on a period scope, with the periods it was charged)."""
        with self._transaction() as conn:
            period, _ = scope_config(self._lock_scope(conn, scope))
            rows = conn.execute(
                sa.select(self.releases).where(self.releases.c.scope == scope).order_by(self.releases.c.id)
            ).all()
            charged: dict[int, list[int]] = {}
            if period is not None:
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
                    None if period is None else tuple(period_runs(period, charged.get(r.id, []))))
            for r in rows
        ]

    # -- monitors (sealed FSRC state) -------------------------------------------------------------

    def monitor_record(self, scope: str, name: str) -> MonitorRecord | None:
        """The monitor's sealed record, or None when the scope has no such monitor. Sealed: never publish it."""
        with self._transaction() as conn:
            self._lock_scope(conn, scope)
            row = self._monitor_row(conn, scope, name)
        return None if row is None else MonitorRecord.from_json(row.sealed_state)

    def _monitor_row(self, conn: sa.Connection, scope: str, name: str) -> sa.Row | None:
        return conn.execute(
            sa.select(self.monitors).where((self.monitors.c.scope == scope) & (self.monitors.c.name == name))
        ).one_or_none()

    def spend_and_check_out(
        self, scope: str, event: Event, label: str, monitors: dict[str, tuple[float, float, MonitorRecord | None]]
    ) -> SpendResult:
        """One transaction: check the monitors, debit `event`, open the new monitors and check all of them out.

        `monitors`: name -> (epsilon, delta, the sealed record the caller read, or None for a monitor to
        open). Refused with a LedgerError, debiting nothing, when a monitor to open exists, or a monitor to
        continue is missing, changed since it was read, or checked out by another run. When admitted, every
        record is stored with `checked_out` = the release id; `event` must include the budgets of the
        monitors opened here (their whole cost to the scope).
        """
        _check_name("label", label, 1000)
        with self._transaction() as conn:
            row = self._lock_scope(conn, scope)
            self._refuse_periods(row, "svt monitors (spend_and_check_out)")
            self._refuse_monitors(row)
            for name, (_, _, expected) in monitors.items():
                _check_name("monitor", name, 200)
                current = self._monitor_row(conn, scope, name)
                if expected is None and current is not None:
                    raise LedgerError(f"monitor {name!r} already exists on scope {scope!r}; nothing was debited")
                if expected is not None and (current is None or MonitorRecord.from_json(current.sealed_state) != expected):
                    raise LedgerError(f"monitor {name!r} on scope {scope!r} changed since it was read; nothing was debited")
                if expected is not None and expected.checked_out is not None:
                    raise LedgerError(
                        f"monitor {name!r} on scope {scope!r} is checked out by the run of ledger release "
                        f"{expected.checked_out} (still running, or failed); nothing was debited"
                    )
            result = self._spend_locked(conn, row, scope, event, label)
            if not result.admitted:
                return result
            for name, (epsilon, delta, expected) in monitors.items():
                record = replace(expected or MonitorRecord({}), checked_out=result.release_id).to_json()
                if expected is None:
                    conn.execute(self.monitors.insert().values(
                        scope=scope, name=name, epsilon=float(epsilon), delta=float(delta), sealed_state=record,
                        halted=False, created_at=_now()))
                else:
                    conn.execute(self.monitors.update()
                                 .where((self.monitors.c.scope == scope) & (self.monitors.c.name == name))
                                 .values(sealed_state=record))
        return result

    def check_in_monitor(self, scope: str, name: str, release_id: int, record: MonitorRecord, halted: bool) -> None:
        """Store the record a run sealed and end its checkout; only the run that checked it out may."""
        with self._transaction() as conn:
            self._lock_scope(conn, scope)
            current = self._monitor_row(conn, scope, name)
            holder = None if current is None else MonitorRecord.from_json(current.sealed_state).checked_out
            if holder != release_id:
                raise LedgerError(
                    f"monitor {name!r} on scope {scope!r} is checked out by release {holder!r}, not {release_id!r}"
                )
            conn.execute(self.monitors.update()
                         .where((self.monitors.c.scope == scope) & (self.monitors.c.name == name))
                         .values(sealed_state=replace(record, checked_out=None).to_json(), halted=bool(halted)))


def _sqlite_on_connect(dbapi_connection, _record) -> None:
    dbapi_connection.isolation_level = None  # the driver issues no BEGIN of its own; the "begin" hook does
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _sqlite_on_begin(conn) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")
