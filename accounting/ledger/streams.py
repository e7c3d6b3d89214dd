"""Streams that pay as they release: a period scope debited one period at a time, when the period's first window
is about to be published (`Ledger.open_stream`, `debit_stream`).

A stream is one streaming job publishing into one output location. It opens with the event that one period is
charged (the plan's composition for one user x period unit, fixed before any record is read) and holds a
lease, like a run. Its pipeline asks `debit_stream` for the periods a window overlaps before it publishes the
window; each (stream, period) is decided once: the first ask debits the period's filter (or records its
refusal) and every later ask, from any worker or retry, gets the same answer without debiting again. So a
period is charged at most once per stream, and only when a window touching it is about to be released; a
stopped or crashed stream resumed later (`open_stream` on the same output with the same job) keeps its decided
periods and starts a new session: debits from an older session (a zombie worker) are refused.

Privacy: per period p, the stream's windows that read the unit's records all overlap p, none is published
before p's debit of the whole per-period event, and each window is published at most once (the caller's
writes are create-only), so p is charged the plan's event, admitted by p's filter, before any output that
depends on it is observable. Proof: docs/proofs/pipelines.run.stream.md.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from dpstream.accounting.events import Event
from dpstream.accounting.filters import EventFilter
from dpstream.accounting.ledger.decisions import decide, now_text
from dpstream.accounting.ledger.errors import LedgerError
from dpstream.accounting.ledger.periods import PeriodGrid, Periods
from dpstream.accounting.ledger.records import scope_config
from dpstream.accounting.ledger.schema import Tables

STREAMING, STOPPED, FINISHED = "streaming", "stopped", "finished"
STREAM_STATES = (STREAMING, STOPPED, FINISHED)
"""A stream's states: streaming (a session holds its lease), stopped (ended, or its lease ran out: it may be
resumed), finished (every window of its range was released or refused; it takes no more debits)."""


@dataclass(frozen=True)
class StreamTicket:
    """An opened (or resumed) stream: its id, the session that may debit it, and the periods decided so far."""

    stream_id: int
    session: int
    resumed: bool
    grid: PeriodGrid
    debited: tuple[int, ...]
    refused: dict[int, str]
    message: str


@dataclass(frozen=True)
class StreamRecord:
    """One stream as `Ledger.streams_of` shows it: what it charges per period, its state and its periods."""

    stream_id: int
    scope: str
    label: str
    output: str
    job: str  # the digest of the job that opened it
    status: str
    session: int
    lease_until: float
    event: Event
    debited: dict[int, int]  # period -> release id
    refused: dict[int, str]  # period -> why
    reason: str | None
    created_at: str
    updated_at: str

    def to_dict(self) -> dict[str, Any]:
        return {"stream": self.stream_id, "scope": self.scope, "label": self.label, "output": self.output,
                "job": self.job, "status": self.status, "session": self.session, "lease_until": self.lease_until,
                "events": self.event.to_dict(), "periods_debited": sorted(self.debited),
                "periods_refused": {str(k): v for k, v in sorted(self.refused.items())}, "reason": self.reason,
                "created_at": self.created_at, "updated_at": self.updated_at}


def stream_grid(row: sa.Row) -> PeriodGrid:
    """The period grid of the scope `row`; LedgerError for a plain scope (its one budget has no periods to pay)."""
    grid, _ = scope_config(row)
    if grid is None:
        raise LedgerError(f"scope {row.name!r} has one budget for all its releases, so a stream cannot pay per "
                          f"period; pay-as-released streams need a scope made with `dpstream budget init "
                          f"--unit-period P`")
    return grid


def check_template(row: sa.Row, event: Event) -> str | None:
    """Why a fresh period of the scope could never admit `event` (None when it could): a stream that would be
    refused in every period is refused when it opens."""
    _, template = scope_config(row)
    try:
        if EventFilter.from_dict(template).admits(event):
            return None
    except ValueError as err:  # the filter cannot price the event at all
        raise LedgerError(f"scope {row.name!r} ({row.filter_kind} filter): {err}") from err
    return (f"refused: one period of scope {row.name!r} cannot admit what each period of this stream costs, even "
            f"before any other release; nothing was read or debited")


def find_open(tables: Tables, conn: sa.Connection, scope: str, output: str) -> sa.Row | None:
    """The scope's stream into `output` that has not finished, if any (locked)."""
    streams = tables.streams
    query = (sa.select(streams).where((streams.c.scope == scope) & (streams.c.output == output)
                                      & (streams.c.status != FINISHED)).with_for_update())
    return conn.execute(query).first()


def decided(tables: Tables, conn: sa.Connection, stream_id: int) -> tuple[dict[int, int], dict[int, str]]:
    """(period -> release id, period -> refusal) of a stream's decided periods."""
    table = tables.stream_periods
    rows = conn.execute(sa.select(table).where(table.c.stream_id == stream_id)).all()
    return ({r.period: r.release_id for r in rows if r.release_id is not None},
            {r.period: r.refusal for r in rows if r.release_id is None})


def decide_period(tables: Tables, conn: sa.Connection, row: sa.Row, stream: sa.Row, period: int,
                  grid: PeriodGrid) -> str | None:
    """Debit one period for a stream, or record its refusal; None when debited, else the refusal."""
    event = Event.from_dict(json.loads(stream.events))
    periods = Periods(grid, period, period)
    decision = decide(tables, conn, row, event, f"{stream.label} (stream {stream.id})", periods)
    release_id = decision.write(conn)
    conn.execute(tables.stream_periods.insert().values(
        stream_id=stream.id, period=period, release_id=release_id,
        refusal=None if release_id is not None else decision.refusal, decided_at=now_text()))
    return None if release_id is not None else decision.refusal


def lease_is_live(stream: sa.Row, clock: float | None = None) -> bool:
    return stream.status == STREAMING and stream.lease_until >= (time.time() if clock is None else clock)


def stream_record(tables: Tables, conn: sa.Connection, stream: sa.Row) -> StreamRecord:
    debited, refused = decided(tables, conn, stream.id)
    status = stream.status if stream.status != STREAMING or lease_is_live(stream) else STOPPED
    return StreamRecord(stream.id, stream.scope, stream.label, stream.output, stream.job, status, stream.session,
                        stream.lease_until, Event.from_dict(json.loads(stream.events)), debited, refused,
                        stream.reason if status == stream.status else "its lease ran out (killed or cut off)",
                        stream.created_at, stream.updated_at)
