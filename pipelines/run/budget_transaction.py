"""`Budget`'s transaction with the ledger: admission (and, when refused, what would fit), the period checks of
a period scope, the debit with its journal, an in-doubt commit, abandonment."""
from __future__ import annotations

import math
import time
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any

from dpstream.accounting.events import Composed
from dpstream.accounting.filters import ApproxDPFilter, EventFilter
from dpstream.accounting.ledger import (
    PUBLISHED,
    RUNNING,
    FileDigest,
    Ledger,
    LedgerConflict,
    LedgerError,
    PeriodGrid,
    Periods,
    ScopeView,
    UnitMismatchError,
    UnknownScopeError,
)
from dpstream.accounting.ledger.receipts import Admission, Debit
from dpstream.accounting.text import instant_text
from dpstream.pipelines.config.specs import EPSILON_RANGE
from dpstream.pipelines.planning import PlanningError, plan_job
from dpstream.pipelines.run.budget_base import MonitorStates, tell
from dpstream.pipelines.run.errors import EXIT_REFUSED, CommitInDoubt, RunError
from dpstream.pipelines.run.monitor_state import MonitorState


class BudgetTransaction(MonitorState):
    """A budget's admission and debit (a part of `Budget`)."""

    def admit(self, label: str | None = None, output: str | None = None) -> Admission:
        """Open a run on the scope (`Ledger.open_run`): the filter must admit the plan's events now (else
        RunError with EXIT_REFUSED), and the run leases its svt monitors and `output` (a location only one run
        may publish into at a time). Nothing is debited: `commit` debits when the outputs are complete.
        RunError (exit 2): scope missing, ledger unusable, a monitor or the output leased to another run."""
        records = self.monitor_records
        for planned in self.plan.monitors():
            self._check_start(planned, records[planned.name])
        continued = self._continued()
        event = Composed(tuple(self.plan.events(continued)))
        monitors = {m.name: (m.epsilon, m.delta, records[m.name]) for m in self.plan.monitors()}
        label = label or (f"dpstream at {datetime.now(timezone.utc).isoformat(timespec='seconds')}: "
                          + ", ".join(r.name for r in self.releases))
        with self._ledger("nothing was debited") as ledger:
            try:
                unit_period = ledger.unit_period(self.scope)
            except UnknownScopeError as err:
                raise RunError(f"budget scope {self.scope!r} is not in ledger {ledger.display_url}; "
                               f"{self._create_hint()}") from err
            periods, note = self.scope_periods(unit_period)
            try:
                ticket = ledger.open_run(self.scope, event, label, periods=periods, monitors=monitors, output=output,
                                         lease_seconds=self.lease_seconds, unit=self.privacy_unit)
            except UnitMismatchError as err:
                raise RunError(f"{self.source}: {err}") from err
            display_url, ledger_id = ledger.display_url, ledger.ledger_id
        if not ticket.admitted or ticket.run_id is None:
            fix = self._refusal_fix(periods, continued)
            raise RunError(f"{ticket.message}; {fix}" if fix else ticket.message, EXIT_REFUSED)
        return Admission(display_url, self.scope, ticket.run_id, label, ticket.message, event, periods, note,
                         ledger_id)

    def _refusal_fix(self, periods: Periods | None, continued: frozenset[str]) -> str:
        """What would be admitted instead: the largest job epsilon the scope admits now (same delta, bounds and
        releases, within 0.4% and rounded down to 3 significant digits: it is admitted), and for an approx scope
        that prices runs at a smaller delta than the job's, how to price them at the job's own; "" when the
        filters would admit the run as it is (it was refused for another reason). Public values only."""
        with self._ledger("nothing was debited") as ledger:
            filters = ledger.deciding_filters(self.scope, periods)

        @lru_cache(maxsize=None)
        def admitted(epsilon: float) -> bool:
            try:
                plan = plan_job(self.releases, self.bounds, self.window, epsilon, self.delta, self.unit_period)
            except PlanningError:
                return False
            event = Composed(tuple(plan.events(continued)))
            return all(f.admits(event) for f in filters)

        event = Composed(tuple(self.plan.events(continued)))
        if all(f.admits(event) for f in filters):
            return ""  # the filters would admit this run: it was refused for another reason (a retired scope)
        fix = self._price_hint(filters)
        guess = 0.9 * self.epsilon * min(
            (left / cost for f in filters for cost, left in zip(f.cost_terms(event).values(), f.left_terms().values())
             if cost > 0), default=1.0)  # costs grow about linearly with epsilon: a guess just below the answer
        lowest, highest = (guess, self.epsilon) if EPSILON_RANGE[0] < guess < self.epsilon and admitted(guess) else (
            EPSILON_RANGE[0], self.epsilon)
        if not admitted(lowest):
            return fix + (f"no privacy.epsilon down to {lowest:g} fits what the scope has left: use a new scope "
                          f"(`dpstream budget init --scope NAME ...`)")
        while highest / lowest > 1 + 4e-3:
            middle = math.sqrt(lowest * highest)
            lowest, highest = (middle, highest) if admitted(middle) else (lowest, middle)
        suggestion = _round_down(lowest, 3)
        return fix + f"privacy.epsilon = {suggestion:g} or less fits (this run asks for {self.epsilon:g})"

    def _price_hint(self, filters: list[EventFilter]) -> str:
        """For an approx scope whose release_delta is below the job's delta, the scope option that prices a run at
        the job's own delta (the default release_delta is a tenth of the scope's delta)."""
        priced = {f.release_delta for f in filters if isinstance(f, ApproxDPFilter)}
        if priced and max(priced) < self.delta:
            return (f"the scope prices each run at delta={max(priced):g}, below this job's delta={self.delta:g}, "
                    f"which costs more epsilon; a scope made with `--filter approx:release_delta={self.delta:g}` "
                    f"prices it at the job's own delta; ")
        return ""

    def scope_grid(self) -> PeriodGrid | None:
        """The scope's period grid (None: a plain scope); RunError when the scope or ledger is missing."""
        with self._ledger("nothing was debited") as ledger:
            try:
                return ledger.unit_period(self.scope)
            except UnknownScopeError as err:
                raise RunError(f"budget scope {self.scope!r} is not in ledger {ledger.display_url}; "
                               f"{self._create_hint()}") from err

    def renew(self, admission: Admission) -> None:
        """Extend the run's leases (`LeaseKeeper` calls this while the pipeline runs)."""
        with self._ledger("the run's lease was not renewed") as ledger:
            ledger.renew_run(admission.run_id, self.lease_seconds)

    def preview(self, admission: Admission, states: MonitorStates | None) -> tuple[Debit, str]:
        """The debit `commit` would make now, with the scope's view after it, and a token of the scope's state
        (written into the report before the commit). RunError EXIT_REFUSED when it would be refused."""
        with self._ledger("nothing was debited") as ledger:
            after, token = ledger.preview_run(admission.run_id, states)
        if after is None:
            raise RunError(f"refused: scope {self.scope!r} no longer admits run {admission.run_id} (other releases "
                           f"spent its budget since the run started); nothing was published or debited", EXIT_REFUSED)
        return self._debit(admission, None, admission.message, after), token

    def commit(self, admission: Admission, states: MonitorStates | None, expect: str | None = None,
               files: tuple[FileDigest, ...] = ()) -> Debit:
        """Debit the run, storing the monitors' sealed `states` (None: they stay leased until `check_in`) and
        journaling the `files` it will publish. `expect`: the token of `preview` (LedgerConflict, nothing
        written, when the scope changed since). RunError EXIT_REFUSED when the filter no longer admits the run."""
        try:
            with Ledger(self.url, on_wait=tell) as ledger:
                result = ledger.commit_run(admission.run_id, states, expect, files)
                after = ledger.show(self.scope)
        except LedgerConflict:
            raise
        except LedgerError as err:
            return self._in_doubt(admission, err)
        if not result.admitted or result.release_id is None:
            raise RunError(result.message, EXIT_REFUSED)
        return self._debit(admission, result.release_id, result.message, after)

    def _in_doubt(self, admission: Admission, error: LedgerError) -> Debit:
        """After a commit that failed: ask the ledger, before anything else, whether the run's debit committed (a
        connection lost after the server committed looks like a failure). The debit when it did; RunError (nothing
        was debited) when the run is still unpaid; CommitInDoubt when the ledger cannot say."""
        for attempt in range(3):
            try:
                with Ledger(self.url, on_wait=tell) as ledger:
                    run = ledger.run(admission.run_id)
                    after = ledger.show(self.scope)
            except LedgerError:
                time.sleep(0.5 * (attempt + 1))
                continue
            if run.status == PUBLISHED and run.release_id is not None:
                return self._debit(admission, run.release_id, f"debited (ledger run {run.run_id}, release "
                                   f"{run.release_id}; confirmed after the ledger connection failed)", after)
            raise RunError(f"{error}; nothing was debited") from error
        raise CommitInDoubt(f"{error}; whether ledger run {admission.run_id} was debited is unknown (the ledger "
                            f"cannot be reached); its outputs stay staged: for a local output the next run of this "
                            f"job into it publishes them if the ledger recorded the debit (on an object store, see "
                            f"`dpstream budget history` and copy them by hand)") from error

    def abandon(self, admission: Admission, reason: str) -> None:
        """End the run unpublished (outcome failed): nothing is debited and its leases end."""
        with self._ledger("its leases run out by themselves") as ledger:
            ledger.end_run(admission.run_id, reason)

    def staged_run(self, report: dict[str, Any]) -> tuple[str, tuple[FileDigest, ...]]:
        """What the ledger says of the run a staged report.json describes (a run that stopped between its debit and
        its publication, or before): ("debited", the files journaled with its debit; () for a run debited before
        the journal), ("unpaid", ()) when this ledger shows it never published (its staging may go), or
        ("unknown", ()) when it cannot say: another ledger (runs are matched by the ledger's id and the run id,
        never by how its URL is spelled), a run still running (a commit in doubt), an unreadable report."""
        budget = report.get("budget") or {}
        if not isinstance(budget.get("run_id"), int):
            return "unknown", ()
        with self._ledger("a staged run's outcome is unknown, so it was neither published nor removed") as ledger:
            if budget.get("ledger_id", ledger.ledger_id) != ledger.ledger_id:
                return "unknown", ()
            if budget.get("ledger_id") is None and budget.get("ledger") != ledger.display_url:
                return "unknown", ()  # a report written before ledgers had ids: only its URL can match it
            try:
                run = ledger.run(budget["run_id"])
            except LedgerError:
                return "unknown", ()
            if run.status == PUBLISHED:
                return "debited", ledger.run_files(run.run_id)
            return ("unknown", ()) if run.status == RUNNING else ("unpaid", ())

    def debit(self, label: str | None = None) -> Debit:
        """Admit and debit at once, keeping the monitors leased until `check_in`: for a pipeline whose own sinks
        publish as it runs, which must pay before it runs. RunError as `admit` and `commit`."""
        admission = self.admit(label)
        return self.commit(admission, None)

    def check_in(self, debit: Debit) -> None:
        """Store each monitor's state, sealed by the pipeline, in the ledger, ending the run's lease on it."""
        if not self.plan.monitors():
            return
        states = self.sealed_states()
        with self._ledger("the releases were written, the monitors stay leased to the run") as ledger:
            ledger.check_in_monitors(debit.run_id, states)

    def _debit(self, admission: Admission, release_id: int | None, message: str, after: ScopeView) -> Debit:
        return Debit(admission.ledger, self.scope, admission.run_id, release_id, admission.label, message,
                     admission.event, after, admission.periods, admission.note, admission.ledger_id)

    def scope_periods(self, period: PeriodGrid | None) -> tuple[Periods | None, str | None]:
        """(the periods to charge, a note for the log) on a scope whose period grid is `period` (None: a plain
        scope; `ScopeView.unit_period`).

        A plain scope: (None, None), or a note when the budget has a unit_period (its one budget is debited by
        every run, and it serves one privacy unit, fixed by its first job: the ledger refuses jobs of another
        unit or grid). A period scope: the periods the windows overlap, after checking that the budget has the
        scope's unit_period, no svt release and a window.start on the period grid; else a RunError (exit 2),
        before any debit.
        """
        scope, unit = self.scope, self.unit_period
        if period is None:
            if unit is None:
                return None, None
            return None, (f"note: scope {scope!r} has one budget for all its releases, so every run of this user x "
                          f"{unit.text} job debits it, whichever periods it covers; it serves one privacy unit, fixed "
                          f"by its first job, and refuses jobs of another unit or period grid (this job's: "
                          f"{self.privacy_unit.text}); a scope created with `dpstream budget init ... "
                          f"{unit.options}` holds a budget per period")
        where = f"{self.source}: budget scope {scope!r} has a budget per {period.text} period"
        monitors = [m.name for m in self.plan.monitors()]
        if monitors:
            raise RunError(f"{where}, which svt releases ({', '.join(monitors)}) cannot use: a monitor's sealed state "
                           f"runs on across runs and periods while its budget is debited once; use a scope without a "
                           f"unit period for them; nothing was debited")
        if unit is None:
            raise RunError(f"{where}, but the job has no [privacy] unit_period: its privacy unit is a user over the "
                           f"whole window range, which a per-period budget does not cover; set unit_period to "
                           f"the scope's {period.text} or use a scope without a unit period; nothing was debited")
        if unit != period:
            raise RunError(f"{where}, but [privacy] unit_period is {unit.text}; they must be equal (a calendar "
                           f"unit_period takes the time zone of [input] timezone); nothing was debited")
        window = self.window
        if not period.is_boundary(window.start):
            holding = period.start(period.index(window.start))
            raise RunError(f"{where}: window.start {instant_text(window.start)} is not on its period grid (the "
                           f"period holding it starts {instant_text(holding)}, the next "
                           f"{instant_text(period.start(period.index(window.start) + 1))}); nothing was debited")
        try:
            # Every record the job reads lies in one of its windows.
            return Periods.overlapping(window.start, window.bounds(window.count - 1)[1], period), None
        except LedgerError as err:
            raise RunError(f"{where}: {err}; nothing was debited") from err


def _round_down(value: float, digits: int) -> float:
    """`value` rounded down to `digits` significant digits."""
    scale = 10.0 ** (digits - 1 - math.floor(math.log10(value)))
    return math.floor(value * scale * (1 - 1e-12)) / scale
