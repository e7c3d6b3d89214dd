"""Streams that pay as they release: a period scope debited one period at a time, when the period's first window
is about to be published, or a plain scope debited one window at a time (`Ledger.open_stream`, `debit_stream`).

A stream is one streaming job publishing into one output location. It opens with the event one step is
charged, fixed before any record is read: on a period scope the plan's composition for one user x period unit
(a step is a period), on a plain scope the plan's mechanism for one window (a step is a window, `JobPlan.
window_event`). It holds a lease, like a run. Its pipeline asks `debit_stream` for the steps a window needs
before it publishes the window; each (stream, step) is decided once: the first ask debits the filter (the
period's, or the scope's one) or records its refusal, and every later ask, from any worker or retry, gets the
same answer without debiting again. So a step is charged at most once per stream, and only when a window
needing it is about to be released; a stopped or crashed stream resumed later (`open_stream` on the same output
with the same job) keeps its decided steps and starts a new session: debits from an older session (a zombie
worker) are refused.

Privacy: per period p (period scope), the stream's windows that read the unit's records all overlap p, none is
published before p's debit of the whole per-period event, and each window is published at most once (the
caller's writes are create-only), so p is charged the plan's event, admitted by p's filter, before any output
that depends on it is observable. On a plain scope every window is one round of the scope's filter, charged its
own mechanism's event before it is published.

Prepaid streams: a plain-scope stream whose windows are not separate rounds at no extra cost (Gaussian noise on
an approx scope, caps or peaks across windows) is opened with its whole plan as its `opening`, debited once when
the stream is created, and a step event of Composed(()): each window is still decided and journaled once, at no
further cost. The opening is what one run of the plan is charged, and each window is computed and published at
most once per stream, so the stream's outputs are a subset of that run's mechanisms (a resumed session starts
cross-window state afresh only where no earlier session touched it: `pipelines.run.paid_stream.resume_point`).
Proof: docs/proofs/pipelines.run.stream.md.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from dpstream.accounting.events import Event
from dpstream.accounting.filters import EventFilter
from dpstream.accounting.ledger.decisions import decide, inserted_id, now_text, retirement
from dpstream.accounting.ledger.errors import LedgerError
from dpstream.accounting.ledger.records import MonitorRecord, scope_config
from dpstream.accounting.ledger.schema import Tables
from dpstream.accounting.periods import PeriodGrid, Periods

STREAMING, STOPPED, FINISHED = "streaming", "stopped", "finished"
STREAM_STATES = (STREAMING, STOPPED, FINISHED)
"""A stream's states: streaming (a session holds its lease), stopped (ended, or its lease ran out: it may be
resumed), finished (every window of its range was released or refused; it takes no more debits)."""


@dataclass(frozen=True)
class StreamMonitor:
    """An svt monitor a stream answers (`Ledger.open_stream`): its budget, the sealed record the caller read (None:
    the stream opens it, debiting its budget once, and stores `initial` as its first record)."""

    epsilon: float
    delta: float
    record: MonitorRecord | None
    initial: MonitorRecord | None = None


@dataclass(frozen=True)
class StreamTicket:
    """An opened (or resumed) stream: its id, the session that may debit it, the scope's period grid (None: a
    plain scope, whose steps are windows) and the steps (periods or windows) decided so far."""

    stream_id: int
    session: int
    resumed: bool
    grid: PeriodGrid | None
    debited: tuple[int, ...]
    refused: dict[int, str]
    message: str


@dataclass(frozen=True)
class StreamRecord:
    """One stream as `Ledger.streams_of` shows it: what it charges per step, its state and its steps (periods on
    a period scope, windows on a plain one)."""

    stream_id: int
    scope: str
    label: str
    output: str
    job: str  # the digest of the job that opened it
    status: str
    session: int
    lease_until: float
    event: Event
    debited: dict[int, int]  # step (period, or window on a plain scope) -> release id
    refused: dict[int, str]  # step -> why
    reason: str | None
    created_at: str
    updated_at: str
    pays: str = "period"  # what a step is: "period" (a period scope) or "window" (a plain scope)
    monitors: tuple[str, ...] = ()  # the svt monitors it answers, sealed in the ledger after each window
    prepaid: int | None = None  # the release that debited its whole plan when it opened (None: it pays per step)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; the steps under `periods_debited`/`periods_refused` or `windows_debited`/`windows_refused`."""
        return {"stream": self.stream_id, "scope": self.scope, "label": self.label, "output": self.output,
                "job": self.job, "status": self.status, "session": self.session, "lease_until": self.lease_until,
                "events": self.event.to_dict(), "pays": self.pays, f"{self.pays}s_debited": sorted(self.debited),
                f"{self.pays}s_refused": {str(k): v for k, v in sorted(self.refused.items())},
                "monitors": list(self.monitors), "prepaid": self.prepaid, "reason": self.reason,
                "created_at": self.created_at, "updated_at": self.updated_at}


def stream_grid(row: sa.Row) -> PeriodGrid | None:
    """The period grid of the scope `row`: a stream's steps are its periods; None for a plain scope, whose stream
    steps are windows."""
    return scope_config(row)[0]


def check_template(row: sa.Row, event: Event) -> str | None:
    """Why one step of a stream charging `event` could never be admitted now (None when it could): on a period
    scope a fresh period's filter, on a plain scope the scope's filter as it stands. A stream that would be
    refused at every step is refused when it opens."""
    grid, config = scope_config(row)
    try:
        if EventFilter.from_dict(config).admits(event):
            return None
    except ValueError as err:  # the filter cannot price the event at all
        raise LedgerError(f"scope {row.name!r} ({row.filter_kind} filter): {err}") from err
    if grid is None:
        return (f"refused: scope {row.name!r} has too little left for even one window of this stream; nothing was "
                f"read or debited")
    return (f"refused: one period of scope {row.name!r} cannot admit what each period of this stream costs, even "
            f"before any other release; nothing was read or debited")


def find_open(tables: Tables, conn: sa.Connection, scope: str, output: str) -> sa.Row | None:
    """The scope's stream into `output` that has not finished, if any (locked)."""
    streams = tables.streams
    query = (sa.select(streams).where((streams.c.scope == scope) & (streams.c.output == output)
                                      & (streams.c.status != FINISHED)).with_for_update())
    return conn.execute(query).first()


def decided(tables: Tables, conn: sa.Connection, stream_id: int) -> tuple[dict[int, int], dict[int, str]]:
    """(step -> release id, step -> refusal) of a stream's decided steps (periods, or windows on a plain scope)."""
    table = tables.stream_periods
    rows = conn.execute(sa.select(table).where(table.c.stream_id == stream_id)).all()
    return ({r.period: r.release_id for r in rows if r.release_id is not None},
            {r.period: r.refusal for r in rows if r.release_id is None})


def decide_step(tables: Tables, conn: sa.Connection, row: sa.Row, stream: sa.Row, step: int,
                grid: PeriodGrid | None) -> str | None:
    """Debit one step for a stream (period `step` of `grid`, or window `step` on a plain scope), or record its
    refusal; None when debited, else the refusal. A prepaid stream's step is covered by the release that debited
    its whole plan when it opened: it is recorded against that release, and the filter is not asked again (a
    filter that halted since, after refusing another job, still owes the windows it was paid for)."""
    prepaid = prepaid_release(tables, conn, stream.id)
    if prepaid is not None:
        refusal = retirement(tables, conn, stream.scope)  # a retired scope publishes nothing more
        conn.execute(tables.stream_periods.insert().values(
            stream_id=stream.id, period=step, release_id=prepaid if refusal is None else None, refusal=refusal,
            decided_at=now_text()))
        return refusal
    event = Event.from_dict(json.loads(stream.events))
    periods = None if grid is None else Periods(grid, step, step)
    label = f"{stream.label} (stream {stream.id}" + (")" if grid is not None else f", window {step})")
    decision = decide(tables, conn, row, event, label, periods)
    release_id = decision.write(conn)
    conn.execute(tables.stream_periods.insert().values(
        stream_id=stream.id, period=step, release_id=release_id,
        refusal=None if release_id is not None else decision.refusal, decided_at=now_text()))
    return None if release_id is not None else decision.refusal


def start_session(tables: Tables, conn: sa.Connection, found: sa.Row | None, scope: str, label: str, output: str,
                  job: str, event: Event, lease_until: float) -> tuple[int, int]:
    """(stream id, session): a new stream in session 1, or `found`'s next session, leased until `lease_until`."""
    streams = tables.streams
    if found is None:
        return inserted_id(conn.execute(streams.insert().values(
            scope=scope, label=label, output=output, job=job, events=json.dumps(event.to_dict()),
            status=STREAMING, session=1, lease_until=lease_until, reason=None,
            created_at=now_text(), updated_at=now_text()))), 1
    conn.execute(streams.update().where(streams.c.id == found.id).values(
        status=STREAMING, session=found.session + 1, lease_until=lease_until, reason=None, updated_at=now_text()))
    return found.id, found.session + 1


def lease_is_live(stream: sa.Row, clock: float | None = None) -> bool:
    return stream.status == STREAMING and stream.lease_until >= (time.time() if clock is None else clock)


def stream_record(tables: Tables, conn: sa.Connection, stream: sa.Row, clock: float | None = None) -> StreamRecord:
    debited, refused = decided(tables, conn, stream.id)
    status = stream.status if stream.status != STREAMING or lease_is_live(stream, clock) else STOPPED
    scope = conn.execute(sa.select(tables.scopes).where(tables.scopes.c.name == stream.scope)).one()
    return StreamRecord(stream.id, stream.scope, stream.label, stream.output, stream.job, status, stream.session,
                        stream.lease_until, Event.from_dict(json.loads(stream.events)), debited, refused,
                        stream.reason if status == stream.status else "its lease ran out (killed or cut off)",
                        stream.created_at, stream.updated_at, "window" if stream_grid(scope) is None else "period",
                        tuple(sorted(stream_monitors(tables, conn, stream.id))), prepaid_release(tables, conn, stream.id))


def prepaid_release(tables: Tables, conn: sa.Connection, stream_id: int) -> int | None:
    """The release that debited a prepaid stream's whole plan when it opened; None for a stream paid per step."""
    table = tables.stream_prepaid
    return conn.execute(sa.select(table.c.release_id).where(table.c.stream_id == stream_id)).scalar_one_or_none()


def stream_monitors(tables: Tables, conn: sa.Connection, stream_id: int) -> dict[str, int | None]:
    """The svt monitors a stream answers: name -> the release that debited its budget when the stream opened it
    (None: it was open before)."""
    table = tables.stream_monitors
    rows = conn.execute(sa.select(table).where(table.c.stream_id == stream_id)).all()
    return {r.name: r.release_id for r in rows}


def monitor_leases(tables: Tables, conn: sa.Connection, scope: str, clock: float) -> dict[str, tuple[int, float]]:
    """Monitor name -> (the live stream answering it, its lease end) on `scope`."""
    streams, held = tables.streams, tables.stream_monitors
    rows = conn.execute(sa.select(held.c.name, streams.c.id, streams.c.lease_until)
                        .join(streams, streams.c.id == held.c.stream_id)
                        .where((streams.c.scope == scope) & (streams.c.status == STREAMING)
                               & (streams.c.lease_until >= clock))).all()
    return {r.name: (int(r.id), float(r.lease_until)) for r in rows}
