"""`Budget`'s streams: how a stream pays a plain scope (per window, or its whole plan prepaid), and
opening, resuming, renewing and ending it in the ledger."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from dpstream.accounting.events import Composed, Event
from dpstream.accounting.ledger import (
    LedgerError,
    MonitorRecord,
    ScopeView,
    StreamMonitor,
    StreamRecord,
    StreamTicket,
    UnitMismatchError,
)
from dpstream.accounting.ledger.streams import FINISHED
from dpstream.pipelines.run.budget_transaction import BudgetTransaction
from dpstream.pipelines.run.errors import EXIT_REFUSED, RunError

WINDOW, PREPAID = "window", "prepaid"


@dataclass(frozen=True)
class StreamPayment:
    """How a stream pays a plain scope (`Budget.stream_payment`): WINDOW or PREPAID, and why not window by window
    (None when it is, or when it resumes a stream opened so)."""

    mode: str
    reason: str | None


class BudgetStreams(BudgetTransaction):
    """A budget's streams (a part of `Budget`)."""

    def stream_payment(self, output: str) -> StreamPayment:
        """How a stream of this plan into `output` pays a plain scope (public values only):
        - WINDOW: window by window, as it releases: the plan is one mechanism run once per window
          (`JobPlan.window_event`) and the scope's filter charges its W windows, one round each, what it would
          charge their composition (`EventFilter.charges_evenly`, on the scope's state now);
        - PREPAID: its whole plan once, when the stream opens, then each window journaled at no further cost
          (windows that share state or budget, or a filter that prices rounds above their composition).
        A stream of this job that did not finish there keeps the way it was opened (it resumes). Streams run only
        on runners that commit a stateful step's state with its outputs (`pubsub.watermark_refusal` admits the
        DirectRunner and Dataflow), so svt monitors and caps across windows may be sealed window by window."""
        event = self.plan.window_event()
        unfinished = self.unfinished_stream(output)
        if unfinished is not None:
            return StreamPayment(WINDOW if unfinished.prepaid is None else PREPAID, None)
        if event is None:
            return StreamPayment(PREPAID, "its windows share state or budget (a unit period, caps across windows or "
                                          "peaks), so they are not separate rounds")
        with self._ledger("nothing was debited") as ledger:
            (scope_filter,) = ledger.deciding_filters(self.scope)
        if scope_filter.charges_evenly(event, self.window.count, self.plan.opening_event(self._continued())):
            return StreamPayment(WINDOW, None)
        monitors = " and its new svt monitors' budgets" if self.plan.monitors() else ""
        return StreamPayment(PREPAID, f"the scope's {scope_filter.kind} filter would charge its {self.window.count} "
                                      f"windows{monitors} one at a time more than all at once, or cannot admit them "
                                      f"all now (a zcdp or gdp scope prices Gaussian windows one at a time at no "
                                      f"extra cost, a pure or approx scope Laplace ones)")

    def job_digest(self) -> str:
        """A digest of everything public that decides the plan and its outputs: a stream resumes only under it."""
        public = repr((self.scope, float(self.epsilon), float(self.delta), self.bounds, self.window, self.releases,
                       self.unit_period, self.seed, self.shards))
        return hashlib.sha256(public.encode("utf-8")).hexdigest()

    def open_stream(self, label: str, output: str, prepaid: bool = False, resume_only: bool = False) -> StreamTicket:
        """Open (or resume) a stream that publishes as windows are released (`Ledger.open_stream`): on a period
        scope paying the plan's event per period, checked as `scope_periods` checks a run; on a plain scope paying
        one window's event per window (`stream_payment` said WINDOW) and the budgets of the svt monitors it
        opens, debited here, once (a monitor holds its budget in its own filter, so opening it spends nothing it
        cannot still use: a stopped stream's monitor continues with what it has left), or, `prepaid` (it said
        PREPAID), paying the whole plan here, once, what one run of it is charged, and nothing per window (a
        resume must carry the same plan). `resume_only`: only resume (the caller found the stream's windows).
        RunError EXIT_REFUSED when no step could be admitted, or the opening was refused."""
        monitors = {m.name: StreamMonitor(m.epsilon, m.delta, self.monitor_records[m.name],
                                          MonitorRecord(m.monitor().to_dict(), self.window.start))
                    for m in self.plan.monitors()}
        continued = self._continued()
        with self._ledger("nothing was debited") as ledger:
            periods, _ = self.scope_periods(ledger.unit_period(self.scope))
            event: Event | None
            opening: Event | None
            if periods is not None:
                event, opening = Composed(tuple(self.plan.events(frozenset()))), None
            elif prepaid:
                event, opening = Composed(()), Composed(tuple(self.plan.events(continued)))
            else:
                event, opening = self.plan.window_event(), self.plan.opening_event(continued)
            if event is None:
                raise RunError(f"{self.source}: this plan's windows cannot be paid one at a time on scope "
                               f"{self.scope!r}; nothing was debited")
            try:
                return ledger.open_stream(self.scope, event, label, output=output, job=self.job_digest(),
                                          lease_seconds=self.lease_seconds, monitors=monitors, opening=opening,
                                          unit=self.privacy_unit, resume_only=resume_only,
                                          prepaid=Composed(tuple(self.plan.events(frozenset()))) if prepaid else None)
            except LedgerError as err:
                if isinstance(err, UnitMismatchError):
                    raise RunError(f"{self.source}: {err}") from err
                if str(err).startswith("refused:"):
                    raise RunError(str(err), EXIT_REFUSED) from err
                raise

    def unfinished_stream(self, output: str) -> StreamRecord | None:
        """The scope's stream of this very job into `output` that has not finished (a resume continues it)."""
        with self._ledger("nothing was debited") as ledger:
            streams = ledger.streams_of(self.scope, output)
        return next((s for s in streams if s.status != FINISHED and s.job == self.job_digest()), None)

    def finished_stream(self, output: str) -> StreamRecord | None:
        """The scope's latest finished stream of this very job into `output` (running the job again rewrites its
        files from the journal and its report: `paid_stream.report_again`)."""
        with self._ledger("nothing was debited") as ledger:
            streams = ledger.streams_of(self.scope, output)
        done = [s for s in streams if s.status == FINISHED and s.job == self.job_digest()]
        return max(done, key=lambda s: s.stream_id, default=None)

    def check_resumable(self, output: str) -> None:
        """RunError (nothing opened or debited) unless the scope has an unfinished stream of this very job into
        `output`: windows found there may only be continued by the stream that released them."""
        if self.unfinished_stream(output) is not None:
            return
        raise RunError(f"{output} holds windows released by a stream of scope {self.scope!r} that has finished or "
                       f"was made by another job; a stream continues only the windows it released itself; write to "
                       f"another output; nothing was debited")

    def renew_stream(self, ticket: StreamTicket) -> None:
        with self._ledger("the stream's lease was not renewed") as ledger:
            ledger.renew_stream(ticket.stream_id, ticket.session, self.lease_seconds)

    def end_stream(self, ticket: StreamTicket, finished: bool, reason: str | None = None) -> StreamRecord:
        """End the stream's session (finished, or stopped and resumable); its record as the ledger has it."""
        with self._ledger("its lease runs out by itself") as ledger:
            ledger.end_stream(ticket.stream_id, ticket.session, finished, reason)
            return ledger.stream(ticket.stream_id)

    def stream_view(self) -> tuple[str, ScopeView]:
        """(the ledger's URL without its password, the scope's public view now)."""
        with self._ledger("nothing was changed") as ledger:
            return ledger.display_url, ledger.show(self.scope)
