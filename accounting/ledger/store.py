"""The ledger's store: one connection to the SQL database, and the transactions that debit it.

See the package docstring (`dpstream.accounting.ledger`) for the admission rules, locking, sealed monitor
state and period scopes.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
import uuid
from contextlib import contextmanager
from dataclasses import replace
from functools import cached_property
from typing import Any, Callable, Iterator, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlalchemy.engine import make_url

from dpstream.accounting.composition import leaf_counts
from dpstream.accounting.events import ApproxDP, Composed, Event
from dpstream.accounting.filters import SCOPE_FILTERS, EventFilter, PrivacyFilter, default_scope_filter, scope_filter
from dpstream.accounting.filters.pure import basic_total, pure_epsilon_exact
from dpstream.accounting.ledger.decisions import (
    check_periods,
    decide,
    inserted_id,
    now_text,
    period_rows,
    retirement,
)
from dpstream.accounting.ledger.errors import LedgerConflict, LedgerError, UnitMismatchError, UnknownScopeError
from dpstream.accounting.ledger.journal import (
    Artifact,
    FileDigest,
    PublishAnswer,
    artifacts,
    journaled,
    record_run_files,
    run_files,
)
from dpstream.accounting.ledger.journal import record as journal_artifact
from dpstream.accounting.ledger.periods import PeriodGrid, Periods, period_runs
from dpstream.accounting.ledger.records import (
    EXPIRED,
    FAILED,
    PERIOD_SCOPE,
    PUBLISHED,
    REFUSED,
    RELEASED,
    RUNNING,
    MonitorRecord,
    MonitorView,
    PeriodsView,
    ReleaseRecord,
    RunRecord,
    RunTicket,
    ScopeView,
    SpendResult,
    largest_spent,
    monitor_view,
    scope_config,
)
from dpstream.accounting.ledger.schema import define_tables, upgrade
from dpstream.accounting.ledger.streams import (
    FINISHED,
    STOPPED,
    STREAMING,
    StreamMonitor,
    StreamRecord,
    StreamTicket,
    check_template,
    decide_step,
    decided,
    find_open,
    lease_is_live,
    monitor_leases,
    prepaid_release,
    stream_grid,
    stream_monitors,
    stream_record,
)
from dpstream.accounting.ledger.units import (
    PrivacyUnit,
    check_unit,
    mark_unknown,
    record_unit,
    scope_unit,
    unit_unused,
)
from dpstream.accounting.ledger.urls import masked_url
from dpstream.accounting.text import instant_text

DEFAULT_URL = "sqlite:///dpstream-ledger.db"
LEDGER_ENV = "DPSTREAM_LEDGER"
_LOCK_TIMEOUT_SECONDS = 120
_LOCK_POLL_SECONDS = 5  # SQLite: after this long waiting for the write lock, `on_wait` is told once
_READ_ONLY = "dpstream_read_only"
DEFAULT_LEASE_SECONDS = 300.0
"""How long a run holds its leases without renewing them (`Ledger.open_run`); the runner renews every third of it."""
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


class Ledger:
    """A connection to one ledger database.

    `Ledger(url, create=True)` creates the tables (and an SQLite file with
    owner-only permissions) when missing; without `create` a missing file or
    missing tables is an error, so reads and debits never create anything.
    `on_wait` is told (one line) when a write waits for another process's lock.
    """

    def __init__(self, url: str | None = None, create: bool = False,
                 on_wait: Callable[[str], None] | None = None) -> None:
        self.on_wait = on_wait
        raw = resolve_url(url)
        try:
            parsed = make_url(raw)
        except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
            # from None: the parser's message may quote part of the password
            raise LedgerError(f"ledger URL {masked_url(raw)!r} is not a database URL (sqlite:///FILE or "
                              f"postgresql://...)") from None
        backend = parsed.get_backend_name()
        if backend == "postgres":
            parsed = parsed.set(drivername="postgresql")
            backend = "postgresql"
        if backend == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        elif backend != "sqlite":
            raise LedgerError(f"ledger URL {masked_url(raw)!r}: backend {backend!r} is not supported; use sqlite or "
                              f"postgresql")
        self.url = parsed
        self.display_url = masked_url(parsed.render_as_string(hide_password=True))
        self.backend = backend
        if backend == "sqlite":
            self._prepare_sqlite_file(create)
            self.engine = sa.create_engine(
                parsed, connect_args={"timeout": _LOCK_POLL_SECONDS}, poolclass=sa.pool.NullPool
            )
            sa_event.listen(self.engine, "connect", _sqlite_on_connect)
            sa_event.listen(self.engine, "begin", _sqlite_on_begin)
        else:
            self.engine = sa.create_engine(parsed, pool_size=1, max_overflow=2)
        tables = self.tables = define_tables()
        self.scopes, self.releases, self.monitors = tables.scopes, tables.releases, tables.monitors
        self.periods, self.release_periods, self.runs = tables.periods, tables.release_periods, tables.runs
        self.retired, self.streams = tables.retired, tables.streams
        with self._errors():
            with self._reading() as conn:
                found = existing = set(sa.inspect(conn).get_table_names())
            if create:
                tables.metadata.create_all(self.engine)
                with self._reading() as conn:
                    existing = set(sa.inspect(conn).get_table_names())
            if "dpstream_scopes" not in existing:
                raise LedgerError(
                    f"ledger {self.display_url} has no budget scopes yet; create one with `dpstream budget init`"
                )
            upgrade(self.engine, tables, existing)
            if "dpstream_scopes" in found and tables.scope_units.name not in found:  # units were not recorded
                with self._transaction() as conn:
                    mark_unknown(tables, conn, now_text())

    # -- setup ------------------------------------------------------------------------------------

    @cached_property
    def ledger_id(self) -> str:
        """The ledger's id (`dpstream_ledger`), made once: by the first dpstream that asks and finds none (read
        when first needed, so the workers' per-window connections do not pay for it)."""
        table = self.tables.identity
        with self._reading() as conn:
            found = conn.execute(sa.select(table.c.ledger_id)).scalar()
        if found is not None:
            return found
        try:
            with self._transaction() as conn:
                conn.execute(table.insert().values(singleton=1, ledger_id=str(uuid.uuid4()), created_at=now_text()))
        except LedgerError:  # another process made it first (the primary key is one row)
            pass
        with self._reading() as conn:
            return conn.execute(sa.select(table.c.ledger_id)).scalar_one()

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
        except (json.JSONDecodeError, KeyError, TypeError) as err:  # a row edited or damaged outside dpstream
            raise LedgerError(f"ledger {self.display_url}: a stored record is corrupt ({type(err).__name__}: "
                              f"{err}); nothing was changed; restore the ledger from a backup") from err

    @contextmanager
    def _transaction(self) -> Iterator[sa.Connection]:
        """One atomic transaction holding the write lock (SQLite) or taking row locks (PostgreSQL). Waiting for
        SQLite's write lock longer than _LOCK_POLL_SECONDS is told to `on_wait` once; after
        _LOCK_TIMEOUT_SECONDS it is an error."""
        with self._errors(), self.engine.connect() as conn:
            deadline, told = time.monotonic() + _LOCK_TIMEOUT_SECONDS, False
            while True:
                try:
                    transaction = conn.begin()
                    break
                except sa.exc.OperationalError as err:
                    conn.rollback()
                    if "locked" not in str(err) or time.monotonic() > deadline:
                        raise
                    if not told and self.on_wait is not None:
                        self.on_wait(f"waiting for the write lock of ledger {self.display_url}, held by another "
                                     f"process (at most {_LOCK_TIMEOUT_SECONDS} s)")
                    told = True
            with transaction:
                yield conn

    @contextmanager
    def _reading(self) -> Iterator[sa.Connection]:
        """One read-only transaction: a consistent snapshot, without the write lock (SQLite) or row locks."""
        with self._errors(), self.engine.connect() as conn:
            conn = conn.execution_options(**{_READ_ONLY: True})
            with conn.begin():
                yield conn

    def _lock_scope(self, conn: sa.Connection, scope: str) -> sa.Row:
        return self._scope_row(conn, scope, lock=True)

    def _scope_row(self, conn: sa.Connection, scope: str, lock: bool = False) -> sa.Row:
        query = sa.select(self.scopes).where(self.scopes.c.name == scope)
        row = conn.execute(query.with_for_update() if lock else query).one_or_none()
        if row is None:
            raise UnknownScopeError(f"unknown scope {scope!r} in ledger {self.display_url}")
        return row

    # -- scopes -----------------------------------------------------------------------------------

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

    @staticmethod
    def _refuse_monitors(row: sa.Row) -> None:
        """svt monitors only on plain scopes whose filter has a concurrent-composition theorem
        (MONITOR_SCOPE_FILTERS), never on period scopes (a monitor's sealed state runs on across runs and
        periods while its budget is debited once)."""
        grid, _ = scope_config(row)
        if grid is not None:
            raise LedgerError(
                f"scope {row.name!r} has a budget per {grid.text} period, which does not support "
                f"svt monitors: an svt monitor's sealed state runs on across runs and periods while its budget is "
                f"debited once; use a scope without a unit period for svt releases; nothing was debited"
            )
        if row.filter_kind not in MONITOR_SCOPE_FILTERS:
            raise LedgerError(
                f"scope {row.name!r} uses the {row.filter_kind!r} filter, which does not support svt monitors: a "
                f"monitor keeps answering after later releases on the scope (concurrent composition), and only the "
                f"{' and '.join(MONITOR_SCOPE_FILTERS)} filters are covered by a theorem for that "
                f"(docs/proofs/pipelines.mechanisms.monitor.SparseVectorMonitor.md); create a scope for svt releases with "
                f"`dpstream budget init ... --filter approx`; nothing was debited"
            )

    # -- runs: admitted when they open, debited when they publish ----------------------------------

    def open_run(self, scope: str, event: Event, label: str, *, periods: Periods | None = None,
                 monitors: Mapping[str, tuple[float, float, MonitorRecord | None]] | None = None,
                 output: str | None = None, lease_seconds: float = DEFAULT_LEASE_SECONDS,
                 unit: PrivacyUnit | None = None) -> RunTicket:
        """Open a run that will publish a release of `event`: nothing is debited (`commit_run` debits).

        One transaction: ends the leases of runs whose lease ran out (outcome expired), asks the scope's
        filter whether it would admit `event` now (a refusal is recorded as a refused run; a halting filter
        records its halt), and leases the monitors and the output location to the new run until `lease_seconds`
        from now (`renew_run` extends it). `monitors`: name -> (epsilon, delta, the sealed record the caller read,
        or None for a monitor to open, whose budget `event` includes). LedgerError, recording nothing, when a
        monitor or the output is leased to another live run, a monitor to open exists, a monitor to continue
        is missing or changed since it was read, or `event` priced by basic composition does not cover the budgets
        of the monitors it opens. `unit`: the job's privacy unit (`accounting.ledger.units`): UnitMismatchError,
        recording nothing, when the scope serves another; an admitted run fixes a plain scope's unit if none is;
        None: not checked.
        """
        _check_event(label, event, periods)
        monitors = dict(monitors or {})
        for name in monitors:
            _check_name("monitor", name, 200)
        opened = [(epsilon, delta) for epsilon, delta, record in monitors.values() if record is None]
        if opened:
            _check_opening(event, opened)
        if output is not None:
            _check_name("output", output, 4000)
        if not (math.isfinite(lease_seconds) and lease_seconds > 0):
            raise LedgerError(f"a run's lease must be a positive number of seconds, got {lease_seconds!r}")
        with self._transaction() as conn:
            row = self._lock_scope(conn, scope)
            fix_unit = check_unit(self.tables, conn, scope, scope_config(row)[0], unit)
            clock = time.time()
            self._expire_leases(conn, clock)
            if monitors:
                self._refuse_monitors(row)
                self._check_monitors(conn, scope, monitors)
            if output is not None:
                self._check_output(conn, output)
            decision = decide(self.tables, conn, row, event, label, periods)
            if not decision.admitted:
                decision.write(conn)
            elif fix_unit and unit is not None:
                record_unit(self.tables, conn, scope, unit, label, now_text())
            result = conn.execute(self.runs.insert().values(
                scope=scope, label=label, status=RUNNING if decision.admitted else REFUSED,
                events=json.dumps(event.to_dict()), periods=None if periods is None else json.dumps(periods.to_json()),
                monitors=json.dumps({n: [e, d, r is None] for n, (e, d, r) in monitors.items()}), output=output,
                lease_until=clock + lease_seconds if decision.admitted else clock, monitors_pending=False,
                reason=decision.refusal, created_at=now_text(), finished_at=None if decision.admitted else now_text()))
            run_id = inserted_id(result)
        if not decision.admitted:
            return RunTicket(False, scope, label, run_id, f"{decision.refusal}; nothing was read or debited "
                                                          f"(ledger run {run_id})")
        return RunTicket(True, scope, label, run_id,
                         f"admitted: run {run_id} ({label!r}) on scope {scope!r}; it is debited when it publishes")

    def renew_run(self, run_id: int, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> None:
        """Extend a running run's lease to `lease_seconds` from now; LedgerError when it is no longer running."""
        with self._transaction() as conn:
            run = self._run_row(conn, run_id, lock=True)
            self._require_running(run)
            conn.execute(self.runs.update().where(self.runs.c.id == run_id)
                         .values(lease_until=time.time() + lease_seconds))

    def preview_run(self, run_id: int, states: Mapping[str, tuple[MonitorRecord, bool]] | None = None
                    ) -> tuple[ScopeView | None, str]:
        """What `commit_run` would leave: (the scope's view after it, or None when it would be refused; a token
        of the scope's state now). Nothing is written (the transaction is rolled back)."""
        with self._errors(), self.engine.connect() as conn:
            transaction = conn.begin()
            try:
                admitted, token, run = self._commit_locked(conn, run_id, states, None)
                view = self._show_locked(conn, self._lock_scope(conn, run.scope)) if admitted.admitted else None
            finally:
                transaction.rollback()
        return view, token

    def commit_run(self, run_id: int, states: Mapping[str, tuple[MonitorRecord, bool]] | None = None,
                   expect: str | None = None, files: Sequence[FileDigest] = ()) -> SpendResult:
        """Debit a running run's release (the event fixed at `open_run`), at publication, in one transaction.

        `states`: every leased monitor's new sealed record and halted flag, stored and checked in; None keeps
        the monitors leased (`check_in_monitors` stores them later: a pipeline that publishes as it runs).
        `expect`: a token from `preview_run`; LedgerConflict, writing nothing, when the scope changed since.
        Refused (the filter no longer admits it): the run's outcome is refused and nothing is debited.
        `files`: what the run will publish, journaled with the debit (`run_files`).
        LedgerError when the run is no longer running (its lease expired and was ended, or it was released).
        """
        with self._transaction() as conn:
            result, _, _ = self._commit_locked(conn, run_id, states, expect)
            if result.admitted:
                record_run_files(self.tables, conn, run_id, files)
        return result

    def run_files(self, run_id: int) -> tuple[FileDigest, ...]:
        """The files journaled with run `run_id`'s debit (`commit_run(files=...)`), by path."""
        with self._reading() as conn:
            self._run_row(conn, run_id, lock=False)
            return run_files(self.tables, conn, run_id)

    def _commit_locked(self, conn: sa.Connection, run_id: int, states: Mapping[str, tuple[MonitorRecord, bool]] | None,
                       expect: str | None) -> tuple[SpendResult, str, sa.Row]:
        scope = self._run_row(conn, run_id, lock=False).scope
        row = self._lock_scope(conn, scope)
        run = self._run_row(conn, run_id, lock=True)
        self._require_running(run)
        token = self._token(conn, row)
        if expect is not None and token != expect:
            raise LedgerConflict(f"scope {scope!r} changed since run {run_id}'s publication was previewed")
        event = Event.from_dict(json.loads(run.events))
        periods = None if run.periods is None else Periods.from_json(json.loads(run.periods))
        decision = decide(self.tables, conn, row, event, run.label, periods)
        release_id = decision.write(conn)
        if release_id is None:
            self._finish_run(conn, run_id, REFUSED, decision.refusal)
            return SpendResult(False, scope, run.label, None, f"{decision.refusal}; nothing was published"), token, run
        leased = json.loads(run.monitors)
        if states is not None:
            self._store_monitors(conn, scope, leased, states)
        else:
            self._store_monitors(conn, scope, {n: v for n, v in leased.items() if v[2]},
                                 {n: (MonitorRecord({}), False) for n, v in leased.items() if v[2]})
        conn.execute(self.runs.update().where(self.runs.c.id == run_id).values(
            status=PUBLISHED, release_id=release_id, finished_at=now_text(),
            monitors_pending=states is None and bool(leased)))
        return SpendResult(True, scope, run.label, release_id, _admitted(run.label, release_id, scope, periods)), token, run

    def check_in_monitors(self, run_id: int, states: Mapping[str, tuple[MonitorRecord, bool]]) -> None:
        """Store the sealed records of a published run whose monitors stayed leased (`commit_run(states=None)`)."""
        with self._transaction() as conn:
            run = self._run_row(conn, run_id, lock=True)
            if run.status != PUBLISHED or not run.monitors_pending:
                raise LedgerError(f"run {run_id} holds no monitors to check in (outcome {run.status})")
            self._store_monitors(conn, run.scope, json.loads(run.monitors), states)
            conn.execute(self.runs.update().where(self.runs.c.id == run_id).values(monitors_pending=False))

    def end_run(self, run_id: int, reason: str, outcome: str = FAILED) -> None:
        """End a running run without publishing (failed, by default): its leases end, nothing is debited.
        A run that is no longer running is left as it is."""
        if outcome not in (FAILED, EXPIRED):
            raise LedgerError(f"a run ends unpublished as {FAILED!r} or {EXPIRED!r}, not {outcome!r}")
        with self._transaction() as conn:
            run = self._run_row(conn, run_id, lock=True)
            if run.status == RUNNING:
                self._finish_run(conn, run_id, outcome, _first_chars(reason))

    # -- streams: debited one period at a time, as their windows are released -------------------------

    def open_stream(self, scope: str, event: Event, label: str, *, output: str, job: str,
                    lease_seconds: float = DEFAULT_LEASE_SECONDS, monitors: Mapping[str, StreamMonitor] | None = None,
                    opening: Event | None = None, unit: PrivacyUnit | None = None,
                    prepaid: bool = False) -> StreamTicket:
        """Open a stream that pays `event` per step as it publishes into `output` (`accounting.ledger.streams`):
        per period of a period scope, per window of a plain scope. Or resume the stream of the same `job` (a digest
        of the public job) into `output` that stopped, was killed or lost its lease: it keeps its decided steps
        and starts a new session. No step is debited (`debit_stream` debits). LedgerError when the output is
        leased to a live run or stream, or the output's stream was made by another job; a refused ticket is
        never returned: a stream no step could admit raises LedgerError too, with the refusal.

        `monitors`: the svt monitors the stream answers (plain scopes only), leased to it while it streams and
        sealed after each window (`seal_stream_monitor`). A new one (record None) is opened here and gets its
        `initial` record; a monitor to continue must still have the record the caller read. `opening`: debited
        once, in this transaction, when the stream is created (never when it resumes): the composition of the new
        monitors' budgets (it must cover them), or, `prepaid` (plain scopes only), of the whole plan, whose steps
        then charge `event` = Composed(()) (`accounting.ledger.streams`, "Prepaid streams"); a stream resumes only
        as it was opened. A refused opening raises LedgerError("refused: ...") and records nothing. `unit`: the job's privacy unit
        (`accounting.ledger.units`): UnitMismatchError, recording nothing, when the scope serves another; an opened
        stream fixes a plain scope's unit if none is; None: not checked."""
        _check_event(label, event, None)
        monitors = dict(monitors or {})
        for name in monitors:
            _check_name("monitor", name, 200)
        opened = sorted(name for name, monitor in monitors.items() if monitor.record is None)
        if (opened and opening is None) or any(monitors[n].initial is None for n in opened):
            raise LedgerError(f"a stream opening monitors {opened} needs their budgets' event and first records")
        if opening is not None:
            _check_opening(opening, [(monitors[n].epsilon, monitors[n].delta) for n in opened])
        if prepaid and (opening is None or event != Composed(())):
            raise LedgerError("a prepaid stream pays its whole plan as its opening and nothing per step")
        _check_name("output", output, 4000)
        if not (math.isfinite(lease_seconds) and lease_seconds > 0):
            raise LedgerError(f"a stream's lease must be a positive number of seconds, got {lease_seconds!r}")
        with self._transaction() as conn:
            row = self._lock_scope(conn, scope)
            grid = stream_grid(row)
            fix_unit = check_unit(self.tables, conn, scope, grid, unit)
            clock = time.time()
            self._expire_leases(conn, clock)
            self._check_output(conn, output)
            retired = retirement(self.tables, conn, scope)
            if retired is not None:
                raise LedgerError(f"{retired}; nothing was debited")
            refusal = check_template(row, event)
            if refusal is not None:
                raise LedgerError(refusal)
            found = find_open(self.tables, conn, scope, output)
            if found is not None and found.job != job:
                raise LedgerError(f"output {output} holds stream {found.id} ({found.label!r}) of another job; a "
                                  f"stream resumes only with the same job file (same releases, bounds, windows "
                                  f"and budget); write to another output; nothing was debited")
            if monitors:
                self._refuse_monitors(row)
                self._check_monitors(conn, scope, {n: (m.epsilon, m.delta, m.record) for n, m in monitors.items()})
            if found is not None and set(stream_monitors(self.tables, conn, found.id)) != set(monitors):
                raise LedgerError(f"output {output} holds stream {found.id} ({found.label!r}), which answers other svt "
                                  f"monitors; a stream resumes only with its own; nothing was debited")
            if prepaid and grid is not None:
                raise LedgerError(f"scope {scope!r} holds a budget per period; a stream there pays each period, not "
                                  f"its whole plan at once; nothing was debited")
            if found is not None and (prepaid_release(self.tables, conn, found.id) is not None) != prepaid:
                raise LedgerError(f"output {output} holds stream {found.id} ({found.label!r}), which "
                                  f"{'prepaid its plan' if not prepaid else 'pays per step'}; a stream resumes only "
                                  f"as it was opened; write to another output; nothing was debited")
            if found is not None and found.events != json.dumps(event.to_dict()):
                raise LedgerError(f"output {output} holds stream {found.id} ({found.label!r}), which charges each "
                                  f"step {found.events}, but this run's plan charges {json.dumps(event.to_dict())} "
                                  f"(the planner changed, e.g. another dpstream version); a stream resumes only "
                                  f"under its own plan; write to another output; nothing was debited")
            if found is None:
                stream_id, session = inserted_id(conn.execute(self.streams.insert().values(
                    scope=scope, label=label, output=output, job=job, events=json.dumps(event.to_dict()),
                    status=STREAMING, session=1, lease_until=clock + lease_seconds, reason=None,
                    created_at=now_text(), updated_at=now_text()))), 1
            else:
                stream_id, session = found.id, found.session + 1
                conn.execute(self.streams.update().where(self.streams.c.id == stream_id).values(
                    status=STREAMING, session=session, lease_until=clock + lease_seconds, reason=None,
                    updated_at=now_text()))
            if found is None and (monitors or opening is not None):
                opened_by = self._open_stream_monitors(conn, row, stream_id, label, monitors, opening)
                if prepaid:
                    conn.execute(self.tables.stream_prepaid.insert().values(stream_id=stream_id, release_id=opened_by))
            if fix_unit and unit is not None:
                record_unit(self.tables, conn, scope, unit, label, now_text())
            debited, refused = decided(self.tables, conn, stream_id)
        verb = "resumed" if found is not None else "opened"
        step = "window" if grid is None else "period"
        pays = ("its whole plan once, when it opened, and nothing per window" if prepaid
                else "each window when it is released" if grid is None
                else f"each {grid.text} period when its first window is released")
        return StreamTicket(stream_id, session, found is not None, grid, tuple(sorted(debited)), refused,
                            f"{verb}: stream {stream_id} ({label!r}) on scope {scope!r} pays {pays}"
                            + (f" ({len(debited)} {step}(s) paid before)" if debited else ""))

    def _open_stream_monitors(self, conn: sa.Connection, row: sa.Row, stream_id: int, label: str,
                              monitors: Mapping[str, StreamMonitor], opening: Event | None) -> int | None:
        """Debit the stream's `opening` (one release: the new monitors' budgets, or a prepaid stream's whole plan)
        and record the stream's monitors; the opening's release id (None: no opening). LedgerError when the scope
        refuses the opening."""
        release_id = None
        if opening is not None:
            names = sorted(n for n, m in monitors.items() if m.record is None)
            what = f"opening svt monitor(s) {', '.join(names)}" if names else "opening"
            decision = decide(self.tables, conn, row, opening, f"{label} (stream {stream_id}, {what})", None)
            release_id = decision.write(conn)
            if release_id is None:
                raise LedgerError(f"{decision.refusal}; the stream's svt monitors were not opened; nothing was read "
                                  f"or debited")
        for name, monitor in monitors.items():
            if monitor.record is None:
                assert monitor.initial is not None
                conn.execute(self.monitors.insert().values(
                    scope=row.name, name=name, epsilon=float(monitor.epsilon), delta=float(monitor.delta),
                    sealed_state=replace(monitor.initial, checked_out=None).to_json(), halted=False,
                    created_at=now_text()))
            conn.execute(self.tables.stream_monitors.insert().values(
                stream_id=stream_id, name=name, release_id=None if monitor.record is not None else release_id))
        return release_id

    def debit_stream(self, stream_id: int, session: int, steps: Periods | tuple[int, ...],
                     lease_seconds: float | None = None) -> dict[int, str | None]:
        """Debit each of `steps` for the stream once, or record its refusal: step -> None (debited, now or before)
        or the refusal. `steps`: the `Periods` of a period scope, or window indices on a plain scope. One
        transaction; the same answer for every later ask. `lease_seconds`: also
        extend the session's lease to at least that long from now (a pipeline whose launcher left keeps its
        stream live by releasing windows). LedgerError when the stream is not streaming in `session` (stopped,
        finished, or resumed by a newer session)."""
        with self._transaction() as conn:
            row, stream = self._streaming_session(conn, stream_id, session, lease_seconds)
            return self._decide_steps(conn, row, stream, steps)

    def publish_stream_window(self, stream_id: int, session: int, steps: Periods | tuple[int, ...],
                              artifact: Artifact, lease_seconds: float | None = None) -> PublishAnswer:
        """What a worker may publish for one release's window (`accounting.ledger.journal`): when the journal
        holds an artifact for its (release, emission), that one (paid when it was journaled); else, in one
        transaction, `steps` are decided as `debit_stream` decides them and, when all were admitted, `artifact`
        is journaled and returned; a refusal journals nothing. LedgerError as `debit_stream`."""
        with self._transaction() as conn:
            row, stream = self._streaming_session(conn, stream_id, session, lease_seconds)

            def pay() -> str | None:
                refusals = [r for r in self._decide_steps(conn, row, stream, steps).values() if r is not None]
                return "; ".join(refusals) if refusals else None

            return self._publish_once(conn, stream_id, session, artifact, pay)

    def _publish_once(self, conn: sa.Connection, stream_id: int, session: int, artifact: Artifact,
                      pay: Callable[[], str | None]) -> PublishAnswer:
        """The journal's one rule (`accounting.ledger.journal`): the artifact journaled for (stream, release,
        emission) if there is one; else `pay()` (debit, or seal: None when done, else the refusal) and, when it
        succeeded, `artifact` journaled in the same transaction."""
        found = journaled(self.tables, conn, stream_id, artifact.release, artifact.emission)
        if found is not None:
            return PublishAnswer(None, found.content)
        refusal = pay()
        if refusal is not None:
            return PublishAnswer(refusal, None)
        journal_artifact(self.tables, conn, stream_id, session, artifact)
        return PublishAnswer(None, artifact.content)

    def _decide_steps(self, conn: sa.Connection, row: sa.Row, stream: sa.Row,
                      steps: Periods | tuple[int, ...]) -> dict[int, str | None]:
        """Step -> None (debited, now or before) or its refusal, each step decided once (`decide_step`)."""
        scope = stream.scope
        debited, refused = decided(self.tables, conn, stream.id)
        grid = stream_grid(row)
        out: dict[int, str | None] = {}
        for step in _stream_steps(scope, grid, steps):
            if step in debited:
                out[step] = None
            elif step in refused:
                out[step] = refused[step]
            else:
                out[step] = decide_step(self.tables, conn, row, stream, step, grid)
                if grid is None:  # the scope's one filter changed: the next window is decided on its new state
                    row = self._lock_scope(conn, scope)
        return out

    def seal_stream_monitor(self, stream_id: int, session: int, name: str, record: MonitorRecord, halted: bool,
                            lease_seconds: float | None = None) -> bool:
        """Store svt monitor `name`'s sealed `record` after one of the stream's windows, before that window's alert
        is published; True when stored, False when the ledger already holds a later one (a window sealed out of
        order: the later record covers it). LedgerError as `debit_stream` (the session may not publish), or when
        the stream does not answer `name`. `lease_seconds`: as in `debit_stream`."""
        _check_sealed(name, record)
        with self._transaction() as conn:
            row, _ = self._streaming_session(conn, stream_id, session, lease_seconds)
            return self._seal_locked(conn, row, stream_id, name, record, halted)

    def seal_and_publish_stream_window(self, stream_id: int, session: int, name: str, record: MonitorRecord,
                                       halted: bool, artifact: Artifact,
                                       lease_seconds: float | None = None) -> PublishAnswer:
        """What a worker may publish as svt monitor `name`'s alert at one window: the journaled alert when there is
        one (its monitor was sealed with it); else, in one transaction, the monitor's `record` after that window is
        sealed (`seal_stream_monitor`) and `artifact` journaled and returned. So every published alert is covered
        by the sealed record, and an answer computed again is never published. LedgerError as
        `seal_stream_monitor`."""
        _check_sealed(name, record)
        with self._transaction() as conn:
            row, _ = self._streaming_session(conn, stream_id, session, lease_seconds)

            def seal() -> None:  # a later record stored already covers this alert: nothing to refuse
                self._seal_locked(conn, row, stream_id, name, record, halted)

            return self._publish_once(conn, stream_id, session, artifact, seal)

    def _seal_locked(self, conn: sa.Connection, row: sa.Row, stream_id: int, name: str, record: MonitorRecord,
                     halted: bool) -> bool:
        if name not in stream_monitors(self.tables, conn, stream_id):
            raise LedgerError(f"stream {stream_id} does not answer svt monitor {name!r}")
        refusal = retirement(self.tables, conn, row.name)
        if refusal is not None:  # retired while the stream ran: its monitor answers nothing more
            raise LedgerError(f"{refusal}; monitor {name!r} is not sealed and its alert is not published")
        current = self._monitor_row(conn, row.name, name)
        if current is None:
            raise LedgerError(f"scope {row.name!r} has no svt monitor {name!r}; its window is not published")
        stored = MonitorRecord.from_json(current.sealed_state).next_start
        assert record.next_start is not None  # _check_sealed
        if stored is not None and record.next_start <= stored:
            return False
        conn.execute(self.monitors.update()
                     .where((self.monitors.c.scope == row.name) & (self.monitors.c.name == name))
                     .values(sealed_state=replace(record, checked_out=None).to_json(), halted=bool(halted)))
        return True

    def stream_journal(self, stream_id: int) -> dict[str, dict[int, Artifact]]:
        """Release -> emission -> the artifact the stream published there (`accounting.ledger.journal`)."""
        with self._reading() as conn:
            self._stream_row(conn, stream_id, lock=False)
            return artifacts(self.tables, conn, stream_id)

    def _streaming_session(self, conn: sa.Connection, stream_id: int, session: int,
                           lease_seconds: float | None) -> tuple[sa.Row, sa.Row]:
        """(the scope row, locked; the stream row, locked) when `session` streams with a live lease (extended to
        `lease_seconds` from now when given), else LedgerError: its window must not be published."""
        scope = conn.execute(sa.select(self.streams.c.scope).where(self.streams.c.id == stream_id)).scalar()
        if scope is None:
            raise LedgerError(f"ledger {self.display_url} has no stream {stream_id!r}")
        row = self._lock_scope(conn, scope)
        stream = conn.execute(sa.select(self.streams).where(self.streams.c.id == stream_id).with_for_update()).one()
        if stream.status != STREAMING or stream.session != session or not lease_is_live(stream):
            state = stream.status if lease_is_live(stream) or stream.status != STREAMING else "expired"
            raise LedgerError(f"stream {stream_id} is {state} in session {stream.session}, not streaming in "
                              f"session {session} with a live lease; its window is not published (run the "
                              f"job again to resume the stream)")
        if lease_seconds is not None:
            conn.execute(self.streams.update().where(self.streams.c.id == stream_id).values(
                lease_until=max(stream.lease_until, time.time() + lease_seconds), updated_at=now_text()))
        return row, stream

    def renew_stream(self, stream_id: int, session: int, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> None:
        """Extend a streaming session's lease; LedgerError when the stream is not streaming in that session."""
        with self._transaction() as conn:
            stream = self._stream_row(conn, stream_id)
            if stream.status != STREAMING or stream.session != session or not lease_is_live(stream):
                raise LedgerError(f"stream {stream_id} is {stream.status} in session {stream.session} (lease until "
                                  f"{instant_text(float(stream.lease_until))}); its lease was not renewed")
            conn.execute(self.streams.update().where(self.streams.c.id == stream_id)
                         .values(lease_until=time.time() + lease_seconds, updated_at=now_text()))

    def end_stream(self, stream_id: int, session: int, finished: bool, reason: str | None = None) -> None:
        """End a streaming session: finished (its whole range was released or refused) or stopped (resumable).
        A stream that a newer session resumed is left as it is."""
        with self._transaction() as conn:
            stream = self._stream_row(conn, stream_id)
            if stream.session == session and stream.status == STREAMING:
                conn.execute(self.streams.update().where(self.streams.c.id == stream_id).values(
                    status=FINISHED if finished else STOPPED, reason=reason and _first_chars(reason),
                    lease_until=time.time(), updated_at=now_text()))

    def streams_of(self, scope: str, output: str | None = None) -> list[StreamRecord]:
        """The scope's streams (only those into `output` when given), oldest first; a streaming one whose lease
        ran out shows as stopped."""
        with self._reading() as conn:
            self._scope_row(conn, scope)
            where = self.streams.c.scope == scope
            if output is not None:
                where = where & (self.streams.c.output == output)
            rows = conn.execute(sa.select(self.streams).where(where).order_by(self.streams.c.id)).all()
            return [stream_record(self.tables, conn, r) for r in rows]

    def stream(self, stream_id: int) -> StreamRecord:
        with self._reading() as conn:
            return stream_record(self.tables, conn, self._stream_row(conn, stream_id, lock=False))

    def _stream_row(self, conn: sa.Connection, stream_id: int, lock: bool = True) -> sa.Row:
        query = sa.select(self.streams).where(self.streams.c.id == stream_id)
        row = conn.execute(query.with_for_update() if lock else query).one_or_none()
        if row is None:
            raise LedgerError(f"ledger {self.display_url} has no stream {stream_id!r}")
        return row

    def release_run(self, scope: str, run_id: int, force: bool = False) -> str:
        """An operator ends run `run_id`'s leases (`dpstream budget release`); the one line that says what changed.

        A running run (dead, or cut off) ends as released; its monitors return to their state before it, which
        is sound because its outputs were never published. A published run whose monitors are still leased
        (a library pipeline that failed after its debit) may have published alerts, so releasing it needs
        `force`, and its monitors return to their state before it: only right if it published nothing.
        """
        with self._transaction() as conn:
            self._lock_scope(conn, scope)
            run = self._run_row(conn, run_id, lock=True)
            if run.scope != scope:
                raise LedgerError(f"run {run_id} belongs to scope {run.scope!r}, not {scope!r}")
            if run.status == RUNNING:
                self._finish_run(conn, run_id, RELEASED, "its lease was ended by `dpstream budget release`")
                return f"run {run_id} released: its monitors and output are free; nothing was debited for it"
            if run.status == PUBLISHED and run.monitors_pending:
                if not force:
                    raise LedgerError(
                        f"run {run_id} was debited (release {run.release_id}) and its pipeline may have published "
                        f"alerts before it stopped; release its monitors with --force only if it published nothing "
                        f"(they return to their state before it)")
                conn.execute(self.runs.update().where(self.runs.c.id == run_id).values(
                    monitors_pending=False, reason="monitors released by `dpstream budget release --force`"))
                return f"run {run_id}: its monitors were released and keep their state from before it"
            raise LedgerError(f"run {run_id} holds no lease (outcome {run.status})")

    def release_monitor(self, scope: str, name: str) -> str:
        """End a hold left on a monitor by a dpstream from before runs were recorded (its `checked_out` release)."""
        with self._transaction() as conn:
            self._lock_scope(conn, scope)
            row = self._monitor_row(conn, scope, name)
            if row is None:
                raise LedgerError(f"scope {scope!r} has no monitor {name!r}")
            record = MonitorRecord.from_json(row.sealed_state)
            if record.checked_out is None:
                raise LedgerError(f"monitor {name!r} on scope {scope!r} has no hold from an older dpstream")
            conn.execute(self.monitors.update()
                         .where((self.monitors.c.scope == scope) & (self.monitors.c.name == name))
                         .values(sealed_state=replace(record, checked_out=None).to_json()))
        return f"monitor {name!r}: the hold of release {record.checked_out} ended; it keeps its state from before"

    def runs_of(self, scope: str) -> list[RunRecord]:
        """Every run on the scope, oldest first; a running run whose lease has run out shows as expired."""
        with self._reading() as conn:
            self._scope_row(conn, scope)
            rows = conn.execute(sa.select(self.runs).where(self.runs.c.scope == scope).order_by(self.runs.c.id)).all()
        clock = time.time()
        return [_run_record(r, clock) for r in rows]

    def run(self, run_id: int) -> RunRecord:
        """One run, as `runs_of` shows it."""
        with self._reading() as conn:
            return _run_record(self._run_row(conn, run_id, lock=False), time.time())

    def _run_row(self, conn: sa.Connection, run_id: int, lock: bool) -> sa.Row:
        query = sa.select(self.runs).where(self.runs.c.id == run_id)
        row = conn.execute(query.with_for_update() if lock else query).one_or_none()
        if row is None:
            raise LedgerError(f"ledger {self.display_url} has no run {run_id!r}")
        return row

    @staticmethod
    def _require_running(run: sa.Row) -> None:
        if run.status != RUNNING:
            raise LedgerError(f"run {run.id} is no longer running (outcome {run.status}: {run.reason}); its outputs "
                              f"are not published and nothing was debited for it")

    def _finish_run(self, conn: sa.Connection, run_id: int, outcome: str, reason: str | None) -> None:
        conn.execute(self.runs.update().where(self.runs.c.id == run_id)
                     .values(status=outcome, reason=reason, finished_at=now_text()))

    def _expire_leases(self, conn: sa.Connection, clock: float) -> None:
        """Running runs whose lease ran out end as expired (killed, or cut off from the ledger)."""
        conn.execute(self.runs.update()
                     .where((self.runs.c.status == RUNNING) & (self.runs.c.lease_until < clock))
                     .values(status=EXPIRED, reason="its lease ran out (the run was killed or lost the ledger)",
                             finished_at=now_text()))

    def _live_leases(self, conn: sa.Connection, clock: float) -> Sequence[sa.Row]:
        """Runs that hold leases: running within their lease, or published with monitors still leased."""
        runs = self.runs.c
        return conn.execute(sa.select(self.runs).where(
            ((runs.status == RUNNING) & (runs.lease_until >= clock))
            | ((runs.status == PUBLISHED) & runs.monitors_pending))).all()

    def _monitor_leases(self, conn: sa.Connection, scope: str, clock: float) -> dict[str, tuple[int, float]]:
        """Monitor name -> (the run leasing it, lease end; inf while a published run holds it) on `scope`."""
        out: dict[str, tuple[int, float]] = {}
        for run in self._live_leases(conn, clock):
            if run.scope == scope:
                until = float(run.lease_until) if run.status == RUNNING else math.inf
                out.update({name: (int(run.id), until) for name in json.loads(run.monitors)})
        return out

    def _check_monitors(self, conn: sa.Connection, scope: str,
                        monitors: Mapping[str, tuple[float, float, MonitorRecord | None]]) -> None:
        clock = time.time()
        leases, streaming = self._monitor_leases(conn, scope, clock), monitor_leases(self.tables, conn, scope, clock)
        for name, (_, _, expected) in monitors.items():
            if name in streaming:
                holder, until = streaming[name]
                raise LedgerError(f"monitor {name!r} on scope {scope!r} is answered by stream {holder}, whose lease "
                                  f"runs until {instant_text(until)}; nothing was debited")
            if name in leases:
                holder, until = leases[name]
                when = "until its pipeline checks it in" if math.isinf(until) else f"until {instant_text(until)}"
                raise LedgerError(
                    f"monitor {name!r} on scope {scope!r} is leased to run {holder} {when}; if that run is dead, "
                    f"`dpstream budget release --scope {scope} --run {holder}` frees it; nothing was debited")
            current = self._monitor_row(conn, scope, name)
            if expected is None and current is not None:
                raise LedgerError(f"monitor {name!r} already exists on scope {scope!r}; nothing was debited")
            if expected is not None and current is None:
                raise LedgerError(f"monitor {name!r} was never opened on scope {scope!r} (the caller read a record "
                                  f"another ledger or scope holds); nothing was debited")
            if current is not None and expected is not None and MonitorRecord.from_json(current.sealed_state) != expected:
                raise LedgerError(f"monitor {name!r} on scope {scope!r} changed since it was read; nothing was debited")
            if expected is not None and expected.checked_out is not None:
                raise LedgerError(
                    f"monitor {name!r} on scope {scope!r} is held by release {expected.checked_out} of a dpstream "
                    f"before runs were recorded, which never checked it in; `dpstream budget release --scope {scope} "
                    f"--monitor {name}` ends the hold (only if that run published nothing); nothing was debited")

    def _check_output(self, conn: sa.Connection, output: str) -> None:
        for run in self._live_leases(conn, time.time()):
            if run.output == output and run.status == RUNNING:
                raise LedgerError(f"output {output} is leased to run {run.id} on scope {run.scope!r} until "
                                  f"{instant_text(float(run.lease_until))} (a concurrent run into the same place); "
                                  f"nothing was debited")
        streams = self.streams.c
        for stream in conn.execute(sa.select(self.streams).where((streams.output == output)
                                                                 & (streams.status == STREAMING))).all():
            if lease_is_live(stream):
                raise LedgerError(f"output {output} is being written by stream {stream.id} ({stream.label!r}) on "
                                  f"scope {stream.scope!r}, whose lease runs until "
                                  f"{instant_text(float(stream.lease_until))}; nothing was debited")

    def _store_monitors(self, conn: sa.Connection, scope: str, leased: Mapping[str, list[Any]],
                        states: Mapping[str, tuple[MonitorRecord, bool]]) -> None:
        """Write the new sealed record of every leased monitor (insert the ones this run opened)."""
        if set(states) != set(leased):
            raise LedgerError(f"a run must check in exactly its monitors {sorted(leased)}, got {sorted(states)}")
        for name, (epsilon, delta, new) in leased.items():
            record, halted = states[name]
            sealed = replace(record, checked_out=None).to_json()
            if new and self._monitor_row(conn, scope, name) is None:
                conn.execute(self.monitors.insert().values(
                    scope=scope, name=name, epsilon=float(epsilon), delta=float(delta), sealed_state=sealed,
                    halted=bool(halted), created_at=now_text()))
            else:
                conn.execute(self.monitors.update()
                             .where((self.monitors.c.scope == scope) & (self.monitors.c.name == name))
                             .values(sealed_state=sealed, halted=bool(halted)))

    def _token(self, conn: sa.Connection, row: sa.Row) -> str:
        """A digest of everything a scope's view depends on (filter states, releases, monitors)."""
        scope, digest = row.name, hashlib.sha256(row.filter_state.encode("utf-8"))
        for query in (sa.select(self.periods.c.period, self.periods.c.filter_state, self.periods.c.releases)
                      .where(self.periods.c.scope == scope).order_by(self.periods.c.period),
                      sa.select(self.releases.c.id).where(self.releases.c.scope == scope).order_by(self.releases.c.id),
                      sa.select(self.monitors.c.name, self.monitors.c.sealed_state, self.monitors.c.halted)
                      .where(self.monitors.c.scope == scope).order_by(self.monitors.c.name)):
            for found in conn.execute(query):
                digest.update(repr(tuple(found)).encode("utf-8"))
        return digest.hexdigest()

    # -- views --------------------------------------------------------------------------------------

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
            running = [r.id for r in self._live_leases(conn, time.time()) if r.scope == scope]
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
        clock = time.time()
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

    # -- monitors (sealed FSRC state) -------------------------------------------------------------

    def monitor_record(self, scope: str, name: str) -> MonitorRecord | None:
        """The monitor's sealed record, or None when the scope has no such monitor. Sealed: never publish it."""
        with self._reading() as conn:
            self._scope_row(conn, scope)
            row = self._monitor_row(conn, scope, name)
        return None if row is None else MonitorRecord.from_json(row.sealed_state)

    def _monitor_row(self, conn: sa.Connection, scope: str, name: str) -> sa.Row | None:
        return conn.execute(
            sa.select(self.monitors).where((self.monitors.c.scope == scope) & (self.monitors.c.name == name))
        ).one_or_none()


def _check_opening(opening: Event, budgets: Sequence[tuple[float, float]]) -> None:
    """LedgerError unless `opening`, priced by basic composition, covers the (epsilon, delta) budgets of the svt
    monitors it opens (each monitor's filter keeps it within its budget, so a smaller debit would under-charge the
    scope). A necessary condition only: the caller composes the budgets (ApproxDP events) into the event, and the
    leaves basic composition cannot price (Gaussian noise) count for nothing here."""
    leaves = {leaf: count for leaf, count in leaf_counts(opening).items()
              if isinstance(leaf, ApproxDP) or pure_epsilon_exact(leaf) is not None}
    priced = basic_total(leaves)
    epsilon, delta = sum(e for e, _ in budgets), sum(d for _, d in budgets)
    if priced is None or float(priced[0]) < epsilon * (1 - 1e-12) or float(priced[1]) < delta * (1 - 1e-12):
        raise LedgerError(f"the event {opening!r} does not cover the new svt monitors' budgets (epsilon "
                          f"{epsilon:g}, delta {delta:g} in all); nothing was debited")


def _check_sealed(name: str, record: MonitorRecord) -> None:
    if record.next_start is None or not math.isfinite(record.next_start):
        raise LedgerError(f"monitor {name!r}: a sealed record needs the window start it continues at")


def _check_event(label: str, event: Event, periods: Periods | None) -> None:
    _check_name("label", label, 1000)
    if not isinstance(event, Event):
        raise LedgerError(f"a debit needs a privacy event, got {event!r}")
    if periods is not None and not isinstance(periods, Periods):
        raise LedgerError(f"a debit takes its periods as a Periods range, got {periods!r}")


def _admitted(label: str, release_id: int, scope: str, periods: Periods | None) -> str:
    return (f"admitted: release {label!r} (id {release_id}) on scope {scope!r}"
            + ("" if periods is None else f", periods {periods.describe()}"))


def _grid_rule(grid: PeriodGrid) -> str:
    """How a period scope's periods fall, for `show`."""
    if grid.seconds is not None:
        return (f"{grid.text} period (period k covers [k*{grid.seconds}, (k+1)*{grid.seconds}) seconds since "
                f"1970-01-01T00:00:00Z)")
    return f"{grid.text} period (local midnight to local midnight, following daylight-saving changes)"


def _stream_steps(scope: str, grid: PeriodGrid | None, steps: Periods | tuple[int, ...]) -> list[int]:
    """The step indices a stream asks for: periods of the scope's own grid, or windows (>= 0) of a plain scope."""
    if grid is not None:
        if not isinstance(steps, Periods) or steps.grid != grid:
            raise LedgerError(f"scope {scope!r} has periods of {grid.text}: a stream on it pays periods of that "
                              f"grid, got {steps!r}")
        return list(steps.indices())
    if isinstance(steps, Periods) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in steps):
        raise LedgerError(f"scope {scope!r} has one budget, so a stream on it pays window indices (integers >= 0), "
                          f"got {steps!r}")
    return sorted(set(steps))


def _first_chars(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _run_record(row: sa.Row, clock: float) -> RunRecord:
    expired = row.status == RUNNING and row.lease_until < clock
    return RunRecord(int(row.id), row.scope, row.label, EXPIRED if expired else row.status, row.created_at,
                     row.finished_at, Event.from_dict(json.loads(row.events)), row.output,
                     tuple(json.loads(row.monitors)), float(row.lease_until), bool(row.monitors_pending),
                     row.release_id, "its lease ran out (the run was killed or lost the ledger)" if expired
                     else row.reason)


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
    """Writes take the database's write lock when they begin; reads (`Ledger._reading`) take none (WAL)."""
    conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(_READ_ONLY) else "BEGIN IMMEDIATE")
