"""What the ledger hands a run of a job: its admission (leases held, nothing debited) and its debit (or the debit
it would make now). Plain values, read by the run, its reports and its streams; the ledger's own records are in
`records`."""
from __future__ import annotations

from dataclasses import dataclass

from dpstream.accounting.events import Event
from dpstream.accounting.ledger.records import ScopeView
from dpstream.accounting.periods import Periods


@dataclass(frozen=True)
class Admission:
    """A run the ledger admitted (`Budget.admit`): it holds its leases, nothing is debited yet. The run id, its
    label, the event its publication debits, the periods charged (period scopes) and a note for the log."""

    ledger: str
    scope: str
    run_id: int
    label: str
    message: str
    event: Event
    periods: Periods | None
    note: str | None
    ledger_id: str | None = None  # the ledger's own id (`Ledger.ledger_id`): names it whatever URL reached it


@dataclass(frozen=True)
class Debit:
    """What the ledger debited for a run, or will debit when it publishes (`Budget.preview`; release_id None):
    where, the run and release ids, its label and events, the scope's public view after it, the periods charged
    (period scopes) and a note for the log."""

    ledger: str
    scope: str
    run_id: int
    release_id: int | None
    label: str
    message: str
    event: Event
    scope_after: ScopeView
    periods: Periods | None
    note: str | None
    ledger_id: str | None = None
