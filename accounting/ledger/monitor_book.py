"""The ledger's svt monitors: their sealed records, the runs and streams that lease them, and their release."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

import sqlalchemy as sa

from dpstream.accounting.ledger.connection import (
    MONITOR_SCOPE_FILTERS,
    LedgerCore,
)
from dpstream.accounting.ledger.decisions import (
    now_text,
)
from dpstream.accounting.ledger.errors import LedgerError
from dpstream.accounting.ledger.records import (
    MonitorRecord,
    scope_config,
)
from dpstream.accounting.ledger.streams import (
    monitor_leases,
)
from dpstream.accounting.text import instant_text


class MonitorBook(LedgerCore):
    """Monitor records and leases (a part of `Ledger`)."""

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

    def _check_monitors(self, conn: sa.Connection, scope: str,
                        monitors: Mapping[str, tuple[float, float, MonitorRecord | None]]) -> None:
        clock = self._clock()
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
