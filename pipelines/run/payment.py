"""Paying for a streaming window from inside the pipeline, just before the window is published.

`StreamPayer` travels with the pipeline to its workers (it holds only public values: the ledger URL, the stream
and session the launcher opened, the window range and the scope's period grid). Asked for emission i, it debits
the steps the emission's rows read (`Ledger.debit_stream`: each step once per stream, whatever asks again) and
says whether all of them were admitted; the caller publishes the window only then. On a period scope the steps
are every period window i overlaps (a peak release's whole period); on a plain scope (no grid) the one step is
window i itself. An svt release's alerts cost nothing per window (the monitor's budget was debited when the
stream opened it): its payer seals the monitor's state after window i in the ledger instead, before the alert
is published (`seal`), so a resumed stream continues the monitor from its last published window.

Privacy: see `accounting.ledger.streams` and docs/proofs/pipelines.run.stream.md. The workers must reach the
ledger (PostgreSQL in production; an SQLite file only on the machine that runs the DirectRunner).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from dpstream.accounting.ledger import Ledger, MonitorRecord, PeriodGrid, Periods
from dpstream.pipelines.config.specs import WindowSpec
from dpstream.pipelines.planning import PeakPlan, SvtPlan


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
    monitor: str | None = None  # an svt release's payer: the monitor it seals instead of paying

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
        if isinstance(plan, SvtPlan):
            return replace(self, monitor=plan.name)
        return self

    def seal(self, index: int, state: dict[str, Any]) -> None:
        """Store the monitor's sealed `state` after window `index` in the ledger (`Ledger.seal_stream_monitor`;
        a state older than the stored one is not stored: the later one covers it); the caller then publishes the
        window's alert. LedgerError when the session may not publish."""
        assert self.monitor is not None, "seal is for an svt release's payer (for_release)"
        following = self.window.bounds(index + 1)[0] if index + 1 < self.window.count else self.window.next_start
        with Ledger(self.ledger) as ledger:
            ledger.seal_stream_monitor(self.stream_id, self.session, self.monitor, MonitorRecord(state, following),
                                       state.get("halt_reason") is not None, self.lease_seconds)

    def pay(self, index: int) -> str | None:
        """Debit the steps of window `index` (those already debited by this stream are not debited again); None
        when every one is paid, else why the window must not be published. LedgerError when the session may not
        debit (the stream was stopped or resumed elsewhere)."""
        with Ledger(self.ledger) as ledger:
            answers = ledger.debit_stream(self.stream_id, self.session, self.steps(index), self.lease_seconds)
        refusals = [refusal for refusal in answers.values() if refusal is not None]
        return "; ".join(refusals) if refusals else None
