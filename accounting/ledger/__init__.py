"""The privacy-budget ledger: budget scopes, their releases and sealed monitor state, in SQL.

Storage is SQLAlchemy Core over SQLite (default, one file in the working
directory) or PostgreSQL (`postgresql://` URLs, psycopg 3 driver). SQLAlchemy
is the one layer that speaks both dialects, so the check-and-debit logic is
written once; only the locking differs:
- SQLite: every transaction starts with BEGIN IMMEDIATE (the database write
  lock is taken before the scope is read), WAL journal, synchronous=FULL;
- PostgreSQL: the scope row is read with SELECT ... FOR UPDATE.
A debit reads the scope's filter state, asks the filter, writes the new
state and the release, and commits, all in one transaction: concurrent debits
serialise, and a crash at any point leaves the whole release or none of it.

Admission rule. Releases on a scope are chosen one after another, and a later
job may depend on earlier outputs, so the rule is a privacy filter valid for
adaptively chosen parameters (`accounting.filters`), never "compose exact
curves and stop at the budget" (Regehr et al. 2026). Each scope has a total
(epsilon, delta) and a filter:
- default when delta = 0: `pure` -- the epsilons of admitted releases add up
  to at most epsilon; a release must be pure DP;
- default when delta > 0: `approx` -- each release costs the epsilon the
  tight `Accountant` computes for its own events at the per-release delta
  share (release_delta, one tenth of the scope's delta unless set); a release
  of only pure and approx events costs its summed epsilon and delta instead;
  epsilons and deltas of admitted releases add up to at most the scope's
  epsilon and delta;
- `zcdp`, `gdp`, `gdp-residue`: the releases' rho or GDP mu must fit the
  largest rho or mu that still implies the scope's (epsilon, delta); best
  for many Gaussian releases (gdp-residue is never worse than gdp);
- `whitehouse`: approximate zCDP pricing for every kind of event; halts the
  scope for good at its first refusal, as the theorem requires.
Within one release the parameters are fixed before it runs, so the release's
own events are priced by each filter as its docstring states.

Runs (`open_run`, `renew_run`, `preview_run`, `commit_run`, `end_run`,
`release_run`; table `dpstream_runs`): a run is admitted when it opens (the
filter is asked, nothing is debited; a refusal is recorded, and a halting
filter records its halt) and debited once, when it commits, immediately before
its outputs are published; one that fails, is released or whose lease runs out
is never debited. Each run's outcome is recorded. Proof that charging only
published runs is sound: docs/proofs/pipelines.run.budget.Budget.md.

Sealed state: SVT monitors keep their whole record here. Its realised spend
depends on the data and is never shown; `show` reports whether a monitor has
halted and, from its filter's public view, how many AboveThreshold instances
it admitted and the delta they used (functions of how many instances ran,
which its alerts show). A run leases the monitors it continues or opens
(`open_run`), and only that run's commit stores their new records, so one
sealed state is continued by at most one run; a run that ends unpublished
leaves them as they were, and its lease ends (at once, or when it runs out).
A monitor is created, with its budget debited, by the commit of the run that
opened it.

Period scopes (`init_scope(..., unit_period=P)`, `dpstream budget init
--unit-period 1d`, or `--unit-period 1day --timezone America/New_York`) serve
jobs whose privacy unit is user x period. Periods are absolute (`PeriodGrid`):
period k covers [k P, (k+1) P) seconds since 1970-01-01T00:00:00Z, or the k-th
local day, ISO week, month or year since 1970 in the scope's time zone, so every
run agrees on them. The scope's (epsilon, delta) and filter are the
budget of EACH period: every period has its own filter state (table
`dpstream_periods`, a fresh filter of the scope's kind created on its first
debit). A spend names the periods it touches (`Periods`); it is admitted only
when every touched period's filter admits the release's events, and then all
of them are debited in the same transaction (scope row locked first, then the
period rows in period order: SELECT ... FOR UPDATE on PostgreSQL, BEGIN
IMMEDIATE on SQLite), so a refusal changes no period (a halting filter still
records its halt in the periods that refused). Which periods each release was
charged to is kept in `dpstream_release_periods`.
Privacy (per period p, for the unit user x period p): every release whose
records can include the unit's records is charged to p, and the releases
charged to p are admitted by p's filter, so their composition, with
parameters chosen adaptively across runs, is within the scope's (epsilon,
delta) by that filter's theorem; releases not charged to p read none of the
unit's records and have the same output distribution on both neighbours.
Caller must ensure: a release charged to periods reads only records whose
timestamps lie in those periods, and its events bound the privacy loss of
one user x period unit (the runner charges a job the periods its windows
overlap, and `pipelines.planning.job` prices one unit period).
Proof: docs/proofs/accounting.ledger.periods.md.
Privacy units (`accounting.ledger.units`, table `dpstream_scope_units`): a
scope serves one unit, user or user x period of one grid (length, time zone,
and for fixed periods where they start). A period scope's unit is its grid; a
plain scope's is fixed by `budget init --unit user` or by the first job it
admits (`open_run`, `open_stream`, `spend` with `unit=`), and a job of another
unit is refused, recording and debiting nothing (a unit of one grid overlaps
two of another, so one filter would bound neither). `unit=None` (manual
spends, older callers) is not checked.
Streams (`open_stream`, `debit_stream`, `renew_stream`, `end_stream`; tables
`dpstream_streams`, `dpstream_stream_periods`) pay a period scope one period
at a time, when a streaming job's first window touching the period is about
to be published, and may be resumed (`accounting.ledger.streams`). What a
stream published is journaled with its bytes in the transaction that paid for
it (`publish_stream_window`; table `dpstream_stream_journal`), and only
journaled bytes are ever published (`accounting.ledger.journal`).
Refused on period scopes: SVT monitors (`open_run` with monitors),
whose sealed state spans runs and so periods, while the monitor's budget is
debited only once. Monitors are refused too on scopes whose filter is not an
(epsilon, delta) filter (MONITOR_SCOPE_FILTERS): a monitor keeps answering
after later releases, and the theorem that covers that concurrency (Haney et
al. 2023) is used here for (epsilon, delta) filters only.
The period length is kept in the scope row's filter_state JSON (`filter` =
"period-scope", with the per-period template filter), so ledgers written
before period scopes need no new column, and a dpstream without period
scopes refuses to debit such a scope instead of treating it as a plain one.
The two new tables are created when missing by any `Ledger(url, create=True)`
(`dpstream budget init`); plain scopes never read them.
"""
from __future__ import annotations

from dpstream.accounting.ledger.errors import LedgerConflict, LedgerError, UnitMismatchError, UnknownScopeError
from dpstream.accounting.ledger.journal import Artifact, FileDigest, PublishAnswer
from dpstream.accounting.ledger.records import (
    PUBLISHED,
    RUN_OUTCOMES,
    RUNNING,
    MonitorRecord,
    MonitorView,
    PeriodsView,
    ReleaseRecord,
    RunRecord,
    RunTicket,
    ScopeView,
    SpendResult,
)
from dpstream.accounting.ledger.store import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_URL,
    LEDGER_ENV,
    MONITOR_SCOPE_FILTERS,
    Ledger,
    parse_filter_spec,
    resolve_url,
)
from dpstream.accounting.ledger.streams import STREAM_STATES, StreamMonitor, StreamRecord, StreamTicket
from dpstream.accounting.ledger.units import PrivacyUnit
from dpstream.accounting.periods import MAX_PERIODS_PER_SPEND, PeriodGrid, Periods, check_unit_period

__all__ = [
    "Artifact",
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_URL",
    "FileDigest",
    "LEDGER_ENV",
    "Ledger",
    "LedgerConflict",
    "LedgerError",
    "MAX_PERIODS_PER_SPEND",
    "MONITOR_SCOPE_FILTERS",
    "MonitorRecord",
    "MonitorView",
    "PeriodGrid",
    "Periods",
    "PeriodsView",
    "PrivacyUnit",
    "PublishAnswer",
    "PUBLISHED",
    "RUN_OUTCOMES",
    "RUNNING",
    "ReleaseRecord",
    "RunRecord",
    "RunTicket",
    "ScopeView",
    "SpendResult",
    "STREAM_STATES",
    "StreamMonitor",
    "StreamRecord",
    "StreamTicket",
    "UnitMismatchError",
    "UnknownScopeError",
    "check_unit_period",
    "parse_filter_spec",
    "resolve_url",
]
