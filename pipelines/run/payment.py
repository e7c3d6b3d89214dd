"""Paying for a streaming window from inside the pipeline, just before the window is published.

`StreamPayer` travels with the pipeline to its workers (it holds only public values: the ledger URL, the stream
and session the launcher opened, the window range and the scope's period grid). Asked for emission i, it debits
the steps the emission's rows read (`Ledger.debit_stream`: each step once per stream, whatever asks again) and
says whether all of them were admitted; the caller publishes the window only then. On a period scope the steps
are every period window i overlaps (a peak release's whole period); on a plain scope (no grid) the one step is
window i itself.

Privacy: see `accounting.ledger.streams` and docs/proofs/pipelines.run.stream.md. The workers must reach the
ledger (PostgreSQL in production; an SQLite file only on the machine that runs the DirectRunner).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from dpstream.accounting.ledger import Ledger, PeriodGrid, Periods
from dpstream.pipelines.config.specs import WindowSpec
from dpstream.pipelines.planning import PeakPlan


@dataclass(frozen=True)
class StreamPayer:
    ledger: str
    stream_id: int
    session: int
    window: WindowSpec
    grid: PeriodGrid | None  # None: a plain scope, paid window by window
    lease_seconds: float | None  # each payment extends the lease this long (a detached pipeline keeps it live)
    spans: Mapping[int, tuple[float, float]] = field(default_factory=dict)
    """Emission index -> the time range its rows read, where that is more than its window (a peak release
    emits at its period's last window a row that reads every window of the period)."""

    def steps(self, index: int) -> Periods | tuple[int, ...]:
        """What the emission at `index` is paid with: on a period scope the periods it reads (its window's or its
        span's), the only periods whose units its rows can depend on; on a plain scope its window."""
        if self.grid is None:
            return (index,)
        start, end = self.spans.get(index) or self.window.bounds(index)
        return Periods.overlapping(start, end, self.grid)

    def for_release(self, plan) -> "StreamPayer":
        """This payer for one planned release: a peak release's emissions pay for their whole period."""
        if isinstance(plan, PeakPlan):
            return replace(self, spans=dict(zip(plan.last_windows, plan.period_bounds)))
        return self

    def pay(self, index: int) -> str | None:
        """Debit the steps of window `index` (those already debited by this stream are not debited again); None
        when every one is paid, else why the window must not be published. LedgerError when the session may not
        debit (the stream was stopped or resumed elsewhere)."""
        with Ledger(self.ledger) as ledger:
            answers = ledger.debit_stream(self.stream_id, self.session, self.steps(index), self.lease_seconds)
        refusals = [refusal for refusal in answers.values() if refusal is not None]
        return "; ".join(refusals) if refusals else None
