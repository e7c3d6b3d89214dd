"""The ledger: one connection to the SQL database and the transactions that debit it, assembled from its parts
(`connection.LedgerCore`, `scope_book`, `monitor_book`, `run_book`, `stream_book`).

See the package docstring (`dpstream.accounting.ledger`) for the admission rules, locking, sealed monitor
state and period scopes.
"""
from __future__ import annotations

from dpstream.accounting.ledger.connection import (  # noqa: F401  (re-exported)
    DEFAULT_LEASE_SECONDS,
    DEFAULT_URL,
    LEDGER_ENV,
    MONITOR_SCOPE_FILTERS,
    parse_filter_spec,
    resolve_url,
)
from dpstream.accounting.ledger.run_book import RunBook
from dpstream.accounting.ledger.stream_book import StreamBook


class Ledger(RunBook, StreamBook):
    """A connection to one ledger database.

    `Ledger(url, create=True)` creates the tables (and an SQLite file with
    owner-only permissions) when missing; without `create` a missing file or
    missing tables is an error, so reads and debits never create anything.
    `on_wait` is told (one line) when a write waits for another process's lock. `clock`: the time of day
    in seconds since the epoch (default `time.time`), which decides when leases run out; tests pass their own.

    Its parts, one concern each over the one connection: `ScopeBook` (scopes, direct debits, state, history),
    `MonitorBook` (svt monitor records and leases), `RunBook` (runs: admission, commit with the run journal,
    outcomes), `StreamBook` (streams: steps decided once, windows journaled, monitors sealed).
    """
