"""Paying for a streaming window from inside the pipeline, just before the window is published.

`StreamPayer` travels with the pipeline to its workers (it holds only public values: the ledger URL, the stream
and session the launcher opened, the window range, the scope's period grid and its release's name). Asked to
publish a release's bytes at emission i (`publish`), it debits the steps the emission's rows read and journals
the bytes in one ledger transaction (`Ledger.publish_stream_window`: each step once per stream, whatever asks
again), and answers with the refusal or the bytes to write, which are the journaled ones: a window computed
again (a retry, a resumed session) is never published with other bytes (`accounting.ledger.journal`). On a
period scope the steps are every period window i overlaps (a peak release's whole period); on a plain scope (no
grid) the one step is window i itself. An svt release's alerts cost nothing per window (the monitor's budget
was debited when the stream opened it): its payer seals the monitor's state after window i in the ledger and
journals the alert in the same transaction (`seal_and_publish`), so a resumed stream continues the monitor from
its last published window.

Privacy: see `accounting.ledger.streams` and docs/proofs/pipelines.run.stream.md. The workers must reach the
ledger (PostgreSQL in production; an SQLite file only on the machine that runs the DirectRunner).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from dpstream.accounting.ledger import Artifact, Ledger, MonitorRecord, PeriodGrid, Periods, PublishAnswer
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
    release: str | None = None  # the release whose windows it publishes (`for_release`)

    def steps(self, index: int) -> Periods | tuple[int, ...]:
        """What the emission at `index` is paid with: on a period scope the periods it reads (its window's or its
        span's), the only periods whose units its rows can depend on; on a plain scope its window."""
        if self.grid is None:
            return (index,)
        start, end = self.spans.get(index) or self.window.bounds(index)
        return Periods.overlapping(start, end, self.grid)

    def for_release(self, plan) -> "StreamPayer":
        """This payer for one planned release: a peak release's emissions pay for their whole period."""
        payer = replace(self, release=plan.name)
        if isinstance(plan, PeakPlan):
            return replace(payer, spans=dict(zip(plan.last_windows, plan.period_bounds)))
        if isinstance(plan, SvtPlan):
            return replace(payer, monitor=plan.name)
        return payer

    def publish(self, index: int, content: bytes, rows: int) -> PublishAnswer:
        """Ask the ledger to publish this release's `content` (`rows` rows) at emission `index`
        (`Ledger.publish_stream_window`): the steps of window `index` are debited if need be (once per stream),
        and the answer is the refusal, or the bytes to write: the journaled ones, which are `content` unless an
        earlier session or retry journaled its own. LedgerError when the session may not publish (the stream was
        stopped or resumed elsewhere)."""
        with Ledger(self.ledger) as ledger:
            return ledger.publish_stream_window(self.stream_id, self.session, self.steps(index),
                                                self._artifact(index, content, rows), self.lease_seconds)

    def seal_and_publish(self, index: int, state: dict[str, Any], content: bytes) -> PublishAnswer:
        """For an svt release's payer: seal the monitor's `state` after window `index` and journal its alert
        `content` in one ledger transaction (`Ledger.seal_and_publish_stream_window`; an alert journaled before
        is returned instead, its monitor already sealed past it); the caller then writes the returned bytes.
        LedgerError when the session may not publish."""
        assert self.monitor is not None, "seal_and_publish is for an svt release's payer (for_release)"
        following = self.window.bounds(index + 1)[0] if index + 1 < self.window.count else self.window.next_start
        with Ledger(self.ledger) as ledger:
            return ledger.seal_and_publish_stream_window(
                self.stream_id, self.session, self.monitor, MonitorRecord(state, following),
                state.get("halt_reason") is not None, self._artifact(index, content, 1), self.lease_seconds)

    def _artifact(self, index: int, content: bytes, rows: int) -> Artifact:
        assert self.release is not None, "a payer publishes for one release (for_release)"
        return Artifact(self.release, index, content, rows)
