"""The ledger's runs: admission, leases, the debit with its journal at commit, and outcomes."""
from __future__ import annotations

import json
import math
from typing import Mapping, Sequence

import sqlalchemy as sa

from dpstream.accounting.events import Event
from dpstream.accounting.ledger.connection import (
    DEFAULT_LEASE_SECONDS,
    _admitted,
    _check_event,
    _check_name,
    _check_opening,
    _first_chars,
    _run_record,
)
from dpstream.accounting.ledger.decisions import (
    decide,
    inserted_id,
    now_text,
)
from dpstream.accounting.ledger.errors import LedgerConflict, LedgerError
from dpstream.accounting.ledger.journal import (
    FileDigest,
    record_run_files,
    run_files,
)
from dpstream.accounting.ledger.monitor_book import MonitorBook
from dpstream.accounting.ledger.records import (
    EXPIRED,
    FAILED,
    PUBLISHED,
    REFUSED,
    RELEASED,
    RUNNING,
    MonitorRecord,
    RunRecord,
    RunTicket,
    ScopeView,
    SpendResult,
    scope_config,
)
from dpstream.accounting.ledger.scope_book import ScopeBook
from dpstream.accounting.ledger.units import (
    PrivacyUnit,
    check_unit,
    record_unit,
)
from dpstream.accounting.periods import Periods


class RunBook(ScopeBook, MonitorBook):
    """Runs that publish once, after their debit (a part of `Ledger`)."""

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
            clock = self._clock()
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
                         .values(lease_until=self._clock() + lease_seconds))

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

    def runs_of(self, scope: str) -> list[RunRecord]:
        """Every run on the scope, oldest first; a running run whose lease has run out shows as expired."""
        with self._reading() as conn:
            self._scope_row(conn, scope)
            rows = conn.execute(sa.select(self.runs).where(self.runs.c.scope == scope).order_by(self.runs.c.id)).all()
        clock = self._clock()
        return [_run_record(r, clock) for r in rows]

    def run(self, run_id: int) -> RunRecord:
        """One run, as `runs_of` shows it."""
        with self._reading() as conn:
            return _run_record(self._run_row(conn, run_id, lock=False), self._clock())

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
