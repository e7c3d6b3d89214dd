"""The ledger's tables (SQLAlchemy Core), shared by SQLite and PostgreSQL.

- `dpstream_scopes`: one row per budget scope, with its filter state (a period scope keeps its period length
  and per-period template there, see `records.scope_config`);
- `dpstream_releases`: every debit, with its events and the scope's public state after it;
- `dpstream_monitors`: the sealed record of each svt monitor;
- `dpstream_periods`, `dpstream_release_periods`: the filter state of each period of a period scope, and the
  periods each release was charged to;
- `dpstream_runs`: every run that asked to publish (`Ledger.open_run`): its outcome, its lease on monitors and
  an output location, and the release its publication debited;
- `dpstream_streams`, `dpstream_stream_periods`, `dpstream_stream_monitors`: streams that pay as their windows
  are released (`Ledger.open_stream`): the event each period is charged, the output, the session that may debit,
  each period's one decision (the release that debited it, or the refusal), and the svt monitors it answers
  (with the release that debited a monitor's budget when the stream opened it);
- `dpstream_stream_journal`: the one record of what a stream published (`accounting.ledger.journal`): each
  release's window, with its bytes, recorded in the transaction that paid for it;
- `dpstream_run_journal`: each file a run publishes (path, size, digest), recorded with its debit;
- `dpstream_ledger`: the ledger's own identity (a random id made when it is created or first opened by a
  dpstream that knows it), which names it in reports and matches runs on recovery, whatever URL reached it;
- `dpstream_stream_prepaid`: the streams that paid their whole plan when they opened (the release that debited
  it), whose windows then cost nothing more (`accounting.ledger.streams`, "Prepaid streams");
- `dpstream_scope_units`: the privacy unit a plain scope serves (`accounting.ledger.units`), fixed at `budget
  init` or by the first job it admits (a period scope's unit is its grid, so it has no row).
Ledgers written before a table existed gain it when opened (`upgrade`): adding a table changes no row.
"""
from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa


@dataclass(frozen=True)
class Tables:
    metadata: sa.MetaData
    scopes: sa.Table
    releases: sa.Table
    monitors: sa.Table
    periods: sa.Table
    release_periods: sa.Table
    runs: sa.Table
    retired: sa.Table
    streams: sa.Table
    stream_periods: sa.Table
    stream_monitors: sa.Table
    stream_journal: sa.Table
    run_journal: sa.Table
    identity: sa.Table
    scope_units: sa.Table
    stream_prepaid: sa.Table


def define_tables() -> Tables:
    metadata = sa.MetaData()
    scopes = sa.Table(
        "dpstream_scopes",
        metadata,
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("epsilon", sa.Float(precision=53), nullable=False),
        sa.Column("delta", sa.Float(precision=53), nullable=False),
        sa.Column("filter_kind", sa.String(32), nullable=False),
        sa.Column("filter_state", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )
    releases = sa.Table(
        "dpstream_releases",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("scope", sa.String(200), sa.ForeignKey("dpstream_scopes.name"), nullable=False, index=True),
        sa.Column("label", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("events", sa.Text, nullable=False),
        sa.Column("budget_after", sa.Text, nullable=False),
    )
    monitors = sa.Table(
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
    periods = sa.Table(
        "dpstream_periods",
        metadata,
        sa.Column("scope", sa.String(200), sa.ForeignKey("dpstream_scopes.name"), primary_key=True),
        sa.Column("period", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("filter_state", sa.Text, nullable=False),
        sa.Column("releases", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.String(40), nullable=False),
    )
    release_periods = sa.Table(
        "dpstream_release_periods",
        metadata,
        sa.Column("release_id", sa.Integer, sa.ForeignKey("dpstream_releases.id"), primary_key=True,
                  autoincrement=False),
        sa.Column("period", sa.BigInteger, primary_key=True, autoincrement=False),
    )
    runs = sa.Table(
        "dpstream_runs",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("scope", sa.String(200), sa.ForeignKey("dpstream_scopes.name"), nullable=False, index=True),
        sa.Column("label", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("events", sa.Text, nullable=False),  # the plan's event, fixed when the run opens
        sa.Column("periods", sa.Text, nullable=True),  # period scopes: the Periods it will be charged to
        sa.Column("monitors", sa.Text, nullable=False),  # name -> [epsilon, delta, new?]: the monitors it leases
        sa.Column("output", sa.Text, nullable=True),  # the output location it leases
        sa.Column("lease_until", sa.Float(precision=53), nullable=False),  # seconds since the epoch (UTC)
        sa.Column("monitors_pending", sa.Boolean, nullable=False),  # published, monitors not checked in yet
        sa.Column("release_id", sa.Integer, sa.ForeignKey("dpstream_releases.id"), nullable=True),
        sa.Column("reason", sa.Text, nullable=True),  # why it failed, expired or was refused
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("finished_at", sa.String(40), nullable=True),
    )
    retired = sa.Table(
        "dpstream_retired",
        metadata,
        sa.Column("scope", sa.String(200), sa.ForeignKey("dpstream_scopes.name"), primary_key=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("retired_at", sa.String(40), nullable=False),
    )
    streams = sa.Table(
        "dpstream_streams",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("scope", sa.String(200), sa.ForeignKey("dpstream_scopes.name"), nullable=False, index=True),
        sa.Column("label", sa.Text, nullable=False),
        sa.Column("output", sa.Text, nullable=False),  # where its windows are published; one stream per output
        sa.Column("job", sa.String(64), nullable=False),  # digest of the public job: a resume must be the same job
        sa.Column("events", sa.Text, nullable=False),  # the event each period is charged, fixed when it opens
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("session", sa.Integer, nullable=False),  # bumped by every resume; only this session debits
        sa.Column("lease_until", sa.Float(precision=53), nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("updated_at", sa.String(40), nullable=False),
    )
    stream_periods = sa.Table(
        "dpstream_stream_periods",
        metadata,
        sa.Column("stream_id", sa.Integer, sa.ForeignKey("dpstream_streams.id"), primary_key=True,
                  autoincrement=False),
        sa.Column("period", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("release_id", sa.Integer, sa.ForeignKey("dpstream_releases.id"), nullable=True),
        sa.Column("refusal", sa.Text, nullable=True),
        sa.Column("decided_at", sa.String(40), nullable=False),
    )
    stream_monitors = sa.Table(
        "dpstream_stream_monitors",
        metadata,
        sa.Column("stream_id", sa.Integer, sa.ForeignKey("dpstream_streams.id"), primary_key=True,
                  autoincrement=False),
        sa.Column("name", sa.String(200), primary_key=True),
        # the debit of the monitor's budget when this stream opened it; None: it was open before
        sa.Column("release_id", sa.Integer, sa.ForeignKey("dpstream_releases.id"), nullable=True),
    )
    stream_journal = sa.Table(
        "dpstream_stream_journal",
        metadata,
        sa.Column("stream_id", sa.Integer, sa.ForeignKey("dpstream_streams.id"), primary_key=True,
                  autoincrement=False),
        sa.Column("release", sa.String(200), primary_key=True),
        sa.Column("emission", sa.Integer, primary_key=True, autoincrement=False),  # the window index it emits at
        sa.Column("rows", sa.Integer, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),  # SHA-256 of the published bytes, hex
        sa.Column("content", sa.LargeBinary, nullable=False),  # the published bytes, zlib-compressed
        sa.Column("session", sa.Integer, nullable=False),  # the session that published it first
        sa.Column("recorded_at", sa.String(40), nullable=False),
    )
    scope_units = sa.Table(
        "dpstream_scope_units",
        metadata,
        sa.Column("scope", sa.String(200), sa.ForeignKey("dpstream_scopes.name"), primary_key=True),
        sa.Column("unit", sa.Text, nullable=False),  # `PrivacyUnit.to_json`
        sa.Column("fixed_at", sa.String(40), nullable=False),
        sa.Column("fixed_by", sa.Text, nullable=False),  # the label of the job (or `budget init`) that fixed it
    )
    run_journal = sa.Table(
        "dpstream_run_journal",
        metadata,
        sa.Column("run_id", sa.Integer, sa.ForeignKey("dpstream_runs.id"), primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(1000), primary_key=True),  # the file's path inside the output directory
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),  # SHA-256 of its bytes, hex
    )
    identity = sa.Table(
        "dpstream_ledger",
        metadata,
        sa.Column("singleton", sa.Integer, primary_key=True, autoincrement=False),  # always 1: one row
        sa.Column("ledger_id", sa.String(36), nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )
    stream_prepaid = sa.Table(
        "dpstream_stream_prepaid",
        metadata,
        sa.Column("stream_id", sa.Integer, sa.ForeignKey("dpstream_streams.id"), primary_key=True,
                  autoincrement=False),
        sa.Column("release_id", sa.Integer, sa.ForeignKey("dpstream_releases.id"), nullable=False),
        sa.Column("plan", sa.Text, nullable=False),  # the whole plan's event (every monitor new): a resume matches it
    )
    return Tables(metadata, scopes, releases, monitors, periods, release_periods, runs, retired, streams,
                  stream_periods, stream_monitors, stream_journal, run_journal, identity, scope_units, stream_prepaid)


def upgrade(engine: sa.Engine, tables: Tables, existing: set[str]) -> None:
    """Create the tables a ledger written by an older dpstream lacks (`existing`: the tables it has); never
    alters an existing table."""
    added = (tables.runs, tables.retired, tables.streams, tables.stream_periods, tables.stream_monitors,
             tables.stream_journal, tables.run_journal, tables.identity, tables.scope_units, tables.stream_prepaid)
    missing = [t for t in added if t.name not in existing]
    if missing:
        tables.metadata.create_all(engine, tables=missing)
