"""The ledger's connection: the SQL engine, transactions and locking, the ledger's identity, an injectable clock,
and the leases every part reads; the module-level checks and records the parts share.

See the package docstring (`dpstream.accounting.ledger`) for the admission rules and locking.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
import uuid
from contextlib import contextmanager
from functools import cached_property
from typing import Callable, Iterator, Self, Sequence

import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlalchemy.engine import make_url

from dpstream.accounting.composition import leaf_counts
from dpstream.accounting.events import ApproxDP, Event
from dpstream.accounting.filters import SCOPE_FILTERS, default_scope_filter
from dpstream.accounting.filters.pure import basic_total, pure_epsilon_exact
from dpstream.accounting.ledger.decisions import (
    now_text,
)
from dpstream.accounting.ledger.errors import LedgerError, UnknownScopeError
from dpstream.accounting.ledger.records import (
    EXPIRED,
    PUBLISHED,
    RUNNING,
    MonitorRecord,
    RunRecord,
)
from dpstream.accounting.ledger.schema import define_tables, upgrade
from dpstream.accounting.ledger.streams import (
    STREAMING,
    lease_is_live,
)
from dpstream.accounting.ledger.units import (
    mark_unknown,
)
from dpstream.accounting.ledger.urls import masked_url
from dpstream.accounting.periods import PeriodGrid, Periods
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


class LedgerCore:
    """One connection to a ledger database (`Ledger` is this plus its parts: scopes, monitors, runs, streams)."""

    def __init__(self, url: str | None = None, create: bool = False,
                 on_wait: Callable[[str], None] | None = None, clock: Callable[[], float] = time.time) -> None:
        self.on_wait = on_wait
        self._clock = clock  # seconds since the epoch: when leases expire (tests pass their own)
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

    def __enter__(self) -> Self:
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

    def _check_output(self, conn: sa.Connection, output: str) -> None:
        for run in self._live_leases(conn, self._clock()):
            if run.output == output and run.status == RUNNING:
                raise LedgerError(f"output {output} is leased to run {run.id} on scope {run.scope!r} until "
                                  f"{instant_text(float(run.lease_until))} (a concurrent run into the same place); "
                                  f"nothing was debited")
        streams = self.streams.c
        for stream in conn.execute(sa.select(self.streams).where((streams.output == output)
                                                                 & (streams.status == STREAMING))).all():
            if lease_is_live(stream, self._clock()):
                raise LedgerError(f"output {output} is being written by stream {stream.id} ({stream.label!r}) on "
                                  f"scope {stream.scope!r}, whose lease runs until "
                                  f"{instant_text(float(stream.lease_until))}; nothing was debited")

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
