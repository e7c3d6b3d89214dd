"""The ledger's streams: opening and resuming them, each step decided once, windows journaled with their payment,
monitors sealed window by window."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Callable, Mapping

import sqlalchemy as sa

from dpstream.accounting.events import Composed, Event
from dpstream.accounting.ledger.connection import (
    DEFAULT_LEASE_SECONDS,
    _check_event,
    _check_name,
    _check_opening,
    _check_sealed,
    _first_chars,
    _stream_steps,
)
from dpstream.accounting.ledger.decisions import (
    decide,
    now_text,
    retirement,
)
from dpstream.accounting.ledger.errors import LedgerError
from dpstream.accounting.ledger.journal import (
    Artifact,
    PublishAnswer,
    artifacts,
    journaled,
)
from dpstream.accounting.ledger.journal import record as journal_artifact
from dpstream.accounting.ledger.monitor_book import MonitorBook
from dpstream.accounting.ledger.records import (
    MonitorRecord,
)
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
    start_session,
    stream_grid,
    stream_monitors,
    stream_record,
)
from dpstream.accounting.ledger.units import (
    PrivacyUnit,
    check_unit,
    record_unit,
)
from dpstream.accounting.periods import PeriodGrid, Periods
from dpstream.accounting.text import instant_text


class StreamBook(MonitorBook):
    """Streams that pay as they release (a part of `Ledger`; `accounting.ledger.streams`)."""

    def open_stream(self, scope: str, event: Event, label: str, *, output: str, job: str,
                    lease_seconds: float = DEFAULT_LEASE_SECONDS, monitors: Mapping[str, StreamMonitor] | None = None,
                    opening: Event | None = None, unit: PrivacyUnit | None = None,
                    prepaid: Event | None = None, resume_only: bool = False) -> StreamTicket:
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
        monitors' budgets (it must cover them), or, for a prepaid stream (plain scopes only), of the whole plan,
        whose steps then charge `event` = Composed(()) (`accounting.ledger.streams`, "Prepaid streams"). `prepaid`:
        that plan's event with every svt monitor's budget counted (whatever the scope holds), which a resume must
        match; a stream resumes only as it was opened and under the same plan. `resume_only`: refuse, recording
        nothing, unless an unfinished stream of `job` into `output` is there to resume (the caller found its
        windows). A refused opening raises LedgerError("refused: ...") and records nothing. `unit`: the job's privacy unit
        (`accounting.ledger.units`): UnitMismatchError, recording nothing, when the scope serves another; an opened
        stream fixes a plain scope's unit if none is; None: not checked."""
        monitors = dict(monitors or {})
        _check_stream_request(label, event, output, lease_seconds, monitors, opening, prepaid)
        with self._transaction() as conn:
            row = self._lock_scope(conn, scope)
            grid = stream_grid(row)
            if prepaid is not None and grid is not None:
                raise LedgerError(f"scope {scope!r} holds a budget per period; a stream there pays each period, not "
                                  f"its whole plan at once; nothing was debited")
            fix_unit = check_unit(self.tables, conn, scope, grid, unit)
            self._expire_leases(conn, self._clock())
            self._check_output(conn, output)
            retired = retirement(self.tables, conn, scope)
            if retired is not None:
                raise LedgerError(f"{retired}; nothing was debited")
            refusal = check_template(row, event)
            if refusal is not None:
                raise LedgerError(refusal)
            found = find_open(self.tables, conn, scope, output)
            if found is None and resume_only:
                raise LedgerError(f"output {output} has no unfinished stream to resume (it finished meanwhile); "
                                  f"nothing was debited")
            if monitors:
                self._refuse_monitors(row)
                self._check_monitors(conn, scope, {n: (m.epsilon, m.delta, m.record) for n, m in monitors.items()})
            if found is not None:
                self._check_resume(conn, found, output, job, event, set(monitors), prepaid)
            stream_id, session = start_session(self.tables, conn, found, scope, label, output, job, event,
                                               self._clock() + lease_seconds)
            if found is None and (monitors or opening is not None):
                opened_by = self._open_stream_monitors(conn, row, stream_id, label, monitors, opening)
                if prepaid is not None:
                    conn.execute(self.tables.stream_prepaid.insert().values(
                        stream_id=stream_id, release_id=opened_by, plan=json.dumps(prepaid.to_dict())))
            if fix_unit and unit is not None:
                record_unit(self.tables, conn, scope, unit, label, now_text())
            debited, refused = decided(self.tables, conn, stream_id)
        return StreamTicket(stream_id, session, found is not None, grid, tuple(sorted(debited)), refused,
                            _opened_text(stream_id, label, scope, grid, found is not None, prepaid is not None,
                                         len(debited)))

    def _check_resume(self, conn: sa.Connection, found: sa.Row, output: str, job: str, event: Event,
                      monitors: set[str], prepaid: Event | None) -> None:
        """LedgerError unless the unfinished stream `found` into `output` may be resumed by this request: the same
        job, the same svt monitors, paid the same way (prepaid or per step), the same step event and, prepaid, the
        same plan (after an upgrade whose planner changed, the windows left would come from another plan than the
        one paid for)."""
        where = f"output {output} holds stream {found.id} ({found.label!r})"
        if found.job != job:
            raise LedgerError(f"{where} of another job; a stream resumes only with the same job file (same "
                              f"releases, bounds, windows and budget); write to another output; nothing was debited")
        if set(stream_monitors(self.tables, conn, found.id)) != monitors:
            raise LedgerError(f"{where}, which answers other svt monitors; a stream resumes only with its own; "
                              f"nothing was debited")
        table = self.tables.stream_prepaid
        paid_plan = conn.execute(sa.select(table.c.plan).where(table.c.stream_id == found.id)).scalar_one_or_none()
        if (paid_plan is not None) != (prepaid is not None):
            raise LedgerError(f"{where}, which {'pays per step' if prepaid is not None else 'prepaid its plan'}; a "
                              f"stream resumes only as it was opened; write to another output; nothing was debited")
        if prepaid is not None and paid_plan != json.dumps(prepaid.to_dict()):
            raise LedgerError(f"{where}, which prepaid another plan ({_first_chars(str(paid_plan), 200)}) than this run's "
                              f"(the planner changed, e.g. another dpstream version); a stream resumes only under "
                              f"the plan it paid for; write to another output; nothing was debited")
        if found.events != json.dumps(event.to_dict()):
            raise LedgerError(f"{where}, which charges each step {found.events}, but this run's plan charges "
                              f"{json.dumps(event.to_dict())} (the planner changed, e.g. another dpstream version); "
                              f"a stream resumes only under its own plan; write to another output; nothing was "
                              f"debited")

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
        if stream.status != STREAMING or stream.session != session or not lease_is_live(stream, self._clock()):
            state = stream.status if lease_is_live(stream, self._clock()) or stream.status != STREAMING else "expired"
            raise LedgerError(f"stream {stream_id} is {state} in session {stream.session}, not streaming in "
                              f"session {session} with a live lease; its window is not published (run the "
                              f"job again to resume the stream)")
        if lease_seconds is not None:
            conn.execute(self.streams.update().where(self.streams.c.id == stream_id).values(
                lease_until=max(stream.lease_until, self._clock() + lease_seconds), updated_at=now_text()))
        return row, stream

    def renew_stream(self, stream_id: int, session: int, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> None:
        """Extend a streaming session's lease; LedgerError when the stream is not streaming in that session."""
        with self._transaction() as conn:
            stream = self._stream_row(conn, stream_id)
            if stream.status != STREAMING or stream.session != session or not lease_is_live(stream, self._clock()):
                raise LedgerError(f"stream {stream_id} is {stream.status} in session {stream.session} (lease until "
                                  f"{instant_text(float(stream.lease_until))}); its lease was not renewed")
            conn.execute(self.streams.update().where(self.streams.c.id == stream_id)
                         .values(lease_until=self._clock() + lease_seconds, updated_at=now_text()))

    def end_stream(self, stream_id: int, session: int, finished: bool, reason: str | None = None) -> None:
        """End a streaming session: finished (its whole range was released or refused) or stopped (resumable).
        A stream that a newer session resumed is left as it is."""
        with self._transaction() as conn:
            stream = self._stream_row(conn, stream_id)
            if stream.session == session and stream.status == STREAMING:
                conn.execute(self.streams.update().where(self.streams.c.id == stream_id).values(
                    status=FINISHED if finished else STOPPED, reason=reason and _first_chars(reason),
                    lease_until=self._clock(), updated_at=now_text()))

    def streams_of(self, scope: str, output: str | None = None) -> list[StreamRecord]:
        """The scope's streams (only those into `output` when given), oldest first; a streaming one whose lease
        ran out shows as stopped."""
        with self._reading() as conn:
            self._scope_row(conn, scope)
            where = self.streams.c.scope == scope
            if output is not None:
                where = where & (self.streams.c.output == output)
            rows = conn.execute(sa.select(self.streams).where(where).order_by(self.streams.c.id)).all()
            return [stream_record(self.tables, conn, r, self._clock()) for r in rows]

    def stream(self, stream_id: int) -> StreamRecord:
        with self._reading() as conn:
            return stream_record(self.tables, conn, self._stream_row(conn, stream_id, lock=False), self._clock())

    def _stream_row(self, conn: sa.Connection, stream_id: int, lock: bool = True) -> sa.Row:
        query = sa.select(self.streams).where(self.streams.c.id == stream_id)
        row = conn.execute(query.with_for_update() if lock else query).one_or_none()
        if row is None:
            raise LedgerError(f"ledger {self.display_url} has no stream {stream_id!r}")
        return row


def _check_stream_request(label: str, event: Event, output: str, lease_seconds: float,
                          monitors: Mapping[str, StreamMonitor], opening: Event | None,
                          prepaid: Event | None) -> None:
    """LedgerError for an `open_stream` request that is malformed whatever the ledger holds."""
    _check_event(label, event, None)
    for name in monitors:
        _check_name("monitor", name, 200)
    opened = sorted(name for name, monitor in monitors.items() if monitor.record is None)
    if (opened and opening is None) or any(monitors[n].initial is None for n in opened):
        raise LedgerError(f"a stream opening monitors {opened} needs their budgets' event and first records")
    if opening is not None:
        _check_opening(opening, [(monitors[n].epsilon, monitors[n].delta) for n in opened])
    if prepaid is not None and (opening is None or event != Composed(())):
        raise LedgerError("a prepaid stream pays its whole plan as its opening and nothing per step")
    _check_name("output", output, 4000)
    if not (math.isfinite(lease_seconds) and lease_seconds > 0):
        raise LedgerError(f"a stream's lease must be a positive number of seconds, got {lease_seconds!r}")


def _opened_text(stream_id: int, label: str, scope: str, grid: PeriodGrid | None, resumed: bool, prepaid: bool,
                 paid_before: int) -> str:
    """What `open_stream` tells the caller: opened or resumed, and how the stream pays."""
    pays = ("its whole plan once, when it opened, and nothing per window" if prepaid
            else "each window when it is released" if grid is None
            else f"each {grid.text} period when its first window is released")
    step = "window" if grid is None else "period"
    return (f"{'resumed' if resumed else 'opened'}: stream {stream_id} ({label!r}) on scope {scope!r} pays {pays}"
            + (f" ({paid_before} {step}(s) paid before)" if paid_before else ""))
