"""`Budget`: the Python API for Beam users. One budget plans every release of a pipeline, gives the private
transforms, and debits its ledger scope, with the same lifecycle as `dpstream run` (which is a client of it).

    import apache_beam as beam
    import dpstream.pipelines as dp

    budget = dp.Budget(scope="flights", epsilon=2.0, delta=1e-6,
                       bounds=dp.ContributionBounds(max_partitions=2, max_contributions=1),
                       window=dp.WindowSpec(size=86400, start=START, end=END),
                       releases=[dp.HistogramSpec("daily", partitions=DESTINATIONS),
                                 dp.TopKSpec("top5", k=5, partitions=DESTINATIONS, weight=2.0)],
                       ledger="sqlite:///ledger.db", output="out/releases")
    pipeline = beam.Pipeline()
    events = pipeline | ... | dp.ToEvents(user="tailnum", timestamp="time_hour", partition="dest")
    events | "Daily" >> budget.release("daily") | "Write daily" >> budget.write("daily")   # staged sinks
    events | "Top 5" >> budget.release("top5") | "Write top5" >> budget.write("top5")
    budget.run(pipeline)      # admit, run into staging, debit once if it succeeded, publish

Lifecycle (DESIGN.md §1, §6; proof: docs/proofs/pipelines.run.budget.Budget.md): the noise of every release
is planned from public values when the budget is made (`planning.plan_job`; nothing is read); the transforms
are built from that plan. A run is a transaction on the ledger:
- `admit` opens a run (`Ledger.open_run`): the scope's filter must admit the plan's events (svt monitors
  already open on the scope are continued, not charged again: `JobPlan.events`), else RunError EXIT_REFUSED
  before anything is read; the run leases its monitors and output; nothing is debited;
- the pipeline runs into staging (`dpstream run`, or `run` with `write` sinks; `LeaseKeeper` renews the lease
  meanwhile);
- `preview` then `commit` debit the scope once, atomically, when the outputs are complete, immediately before
  they are published; `abandon` ends a run that failed, debiting nothing; a killed run's lease expires.
Charging only published runs is sound because nothing a run computed is observable before its publication
(staged files are owner-only and removed on failure) and the plan's events are fixed before it starts.
`run(pipeline)` whose release rows also reach the user's own transforms (sinks that may publish as the pipeline
runs; `pipelines.run.sinks`) debits before running instead (`debit`), and the debit stands if the pipeline fails.

svt monitors continue across runs (`dpstream.pipelines.mechanisms.monitor`): their sealed ledger records are
read when the budget first needs them (before the graph is built, since the monitor's state is part of it),
leased by `admit` (which fails if a record changed since it was read), written by the pipeline to `state_dir`
(owner-only files, or beside an output URL on a cluster), and stored by `commit` (or `check_in`). A run that
fails or is killed returns them unchanged: its answers were never published.

Period scopes (`dpstream budget init --unit-period P`) hold a budget per absolute period [k P, (k+1) P): a budget
with `unit_period` = P is charged to every period its windows overlap (`scope_periods`); proof:
docs/proofs/accounting.ledger.periods.md. Every scope serves one privacy unit (`privacy_unit`: user, or user x
the unit period's grid), fixed on a plain scope by its first job: the ledger refuses a run or stream of another
unit or grid (RunError, exit 2, nothing debited).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cached_property, lru_cache
from typing import Any, Iterable, Iterator, Mapping

import apache_beam as beam

from dpstream.accounting.events import Composed, Event
from dpstream.accounting.filters import ApproxDPFilter, EventFilter
from dpstream.accounting.ledger import (
    DEFAULT_LEASE_SECONDS,
    PUBLISHED,
    RUNNING,
    FileDigest,
    Ledger,
    LedgerConflict,
    LedgerError,
    MonitorRecord,
    PeriodGrid,
    Periods,
    PrivacyUnit,
    ScopeView,
    StreamMonitor,
    StreamRecord,
    StreamTicket,
    UnitMismatchError,
    UnknownScopeError,
    resolve_url,
)
from dpstream.accounting.ledger.receipts import Admission, Debit
from dpstream.accounting.ledger.streams import FINISHED
from dpstream.accounting.ledger.urls import masked_url
from dpstream.accounting.text import first_line, instant_text
from dpstream.connectors.beam_io import WriteRelease
from dpstream.connectors.files import is_local, join, read_bytes, remove_file, remove_tree, write_bytes
from dpstream.connectors.writers import FORMATS as WRITE_FORMATS
from dpstream.connectors.writers import release_path
from dpstream.pipelines.config.specs import EPSILON_RANGE, ContributionBounds, ReleaseSpec, WindowSpec
from dpstream.pipelines.mechanisms.monitor import SparseVectorMonitor
from dpstream.pipelines.planning import JobPlan, PlanningError, SvtPlan, plan_job
from dpstream.pipelines.run.errors import EXIT_REFUSED, CommitInDoubt, RunError
from dpstream.pipelines.run.preflight import COMMITTING_RUNNERS, check_verified_runner, pin_direct_engine
from dpstream.pipelines.run.publication import Publication
from dpstream.pipelines.run.sinks import routes
from dpstream.pipelines.run.transaction import run_staged
from dpstream.pipelines.transforms.graph import release_columns, release_graph, release_transform
from dpstream.pipelines.transforms.svt import STATE, snapshot_path
from dpstream.pipelines.transforms.windowing import iso

MonitorRecords = dict[str, MonitorRecord | None]
WINDOW, PREPAID, AT_END = "window", "prepaid", "at end"


@dataclass(frozen=True)
class StreamPayment:
    """How a stream pays a plain scope (`Budget.stream_payment`): WINDOW, PREPAID or AT_END, and why not
    window by window (None when it is, or when it resumes a stream opened so)."""

    mode: str
    reason: str | None

MonitorStates = dict[str, tuple[MonitorRecord, bool]]  # name -> (sealed record after a run, halted)


class Budget:
    """A privacy budget for the releases of one Beam pipeline: plan, transforms, debit, monitors.

    Arguments: the ledger `scope` to debit and its `ledger` URL (default: $DPSTREAM_LEDGER, else
    sqlite:///dpstream-ledger.db); the pipeline's whole (`epsilon`, `delta`); the contribution `bounds` and
    public `window` range; the `releases` (specs); `unit_period` for a user x period privacy unit (seconds, or a
    `PeriodGrid` such as `PeriodGrid.of("1day", "America/New_York")`);
    `seed`: tests only (fixes every noise draw and sampling key); `shards`: user shards per window in
    bounding; `state_dir`: a directory (local or a URL the workers can write) in which the budget makes a
    private subdirectory for svt monitor states, removed by `close` (default: a private local temporary one);
    `source`: what error messages name (the job file); `lease_seconds`: how long a run holds its leases on
    monitors and its output without renewing them (a killed run frees them after this long);
    `output`: the directory (local, or a URL the workers can write) into which `write` stages releases and `run`
    publishes them, all at once, after the debit; `overwrite`: replace a run published there;
    `allow_unverified_runner`: the module path of the one runner outside `preflight`'s verified list that `run`
    may use (e.g. "mypkg.MyRunner").
    Raises RunError when the releases cannot be planned.
    """

    def __init__(
        self,
        *,
        scope: str,
        epsilon: float,
        delta: float,
        bounds: ContributionBounds,
        window: WindowSpec,
        releases: Iterable[ReleaseSpec],
        ledger: str | None = None,
        unit_period: PeriodGrid | float | None = None,
        seed: int | None = None,
        shards: int = 1,
        state_dir: str | None = None,
        source: str = "dpstream",
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        output: str | None = None,
        overwrite: bool = False,
        allow_unverified_runner: str | None = None,
    ) -> None:
        self.scope, self.epsilon, self.delta = scope, epsilon, delta
        try:
            self.unit_period = None if unit_period is None else PeriodGrid.of(unit_period)
        except LedgerError as err:
            raise RunError(f"{source}: {err}") from err
        self.bounds, self.window, self.releases = bounds, window, tuple(releases)
        self.url = resolve_url(ledger)
        self.seed, self.shards, self.source = seed, shards, source
        self.lease_seconds = lease_seconds
        self._state_base: str | None = state_dir
        self._state_dir: str | None = None
        self.output = None if output is None else (os.path.abspath(output) if is_local(output) else output)
        self.overwrite, self.allow_unverified_runner = overwrite, allow_unverified_runner
        self._publication: Publication | None = None
        self._issued: dict[int, str] = {}  # id of a transform `release` gave -> its release
        self._applied: dict[str, list[beam.pvalue.PValue]] = {}  # rows each `apply` gave, by release
        self._writes: dict[str, tuple[str, beam.PTransform]] = {}  # release -> (staged file, its `write` transform)
        try:
            self.plan: JobPlan = plan_job(self.releases, bounds, window, epsilon, delta, self.unit_period)
        except PlanningError as err:
            raise RunError(f"{source}: {err}") from err

    def describe(self) -> dict[str, str]:
        """Plain words per release: mechanism, noise and what it costs (the plan's text)."""
        return self.plan.describe()

    # -- transforms --------------------------------------------------------------------------------------

    def release(self, name: str) -> beam.PTransform:
        """The private transform of release `name`: EVENT_SCHEMA record batches -> plain dict rows."""
        planned = self.plan[name]
        transform: beam.PTransform = release_transform(planned, self.bounds, self.window, self.seed, self.shards,
                                                       self._initial_state(planned), self.plan.window_cap)
        if isinstance(planned, SvtPlan):
            transform = _SealState(transform, self._state_path(name))
        self._issued[id(transform)] = name
        return transform

    def write(self, name: str, fmt: str = "parquet") -> beam.PTransform:
        """The sink of release `name`'s rows: one file NAME.EXT (`fmt`: parquet, csv or jsonl) staged privately
        under `output` and published by `run` only after the debit. The first call checks `output` (not a
        published run unless `overwrite`, not in use by another run, writable; RunError, nothing debited)."""
        if self.output is None:
            raise RunError(f"{self.source}: write({name!r}) needs the budget's output directory: "
                           f"Budget(..., output=DIRECTORY)")
        names = [release.name for release in self.releases]
        if name not in names:
            raise RunError(f"{self.source}: write({name!r}): no such release; the budget's releases: "
                           f"{', '.join(names)}")
        if name in self._writes:
            raise RunError(f"{self.source}: release {name!r} is written once, by one write({name!r})")
        if fmt not in WRITE_FORMATS:
            raise RunError(f"{self.source}: write({name!r}): fmt must be one of {', '.join(WRITE_FORMATS)}, "
                           f"got {fmt!r}")
        if self._publication is None:
            self._publication = Publication(self.output, self.overwrite, self.staged_run, _tell).__enter__()
        path = release_path(self._publication.staging, name, fmt)
        transform = WriteRelease(path, fmt, release_columns(self.plan[name]))
        self._writes[name] = (path, transform)
        return transform

    def apply(self, events: beam.PCollection, paid_from: Mapping[str, int] | None = None) -> dict[str, beam.PCollection]:
        """Every release of the budget applied to `events`: release name -> dict rows. `paid_from`: on a stream that
        pays as it releases (`dpstream run`), svt release name -> the window its monitor answers next
        (`monitor_starts`); their rows then travel as (row, sealed state) to the stream's payer, which seals the
        state before publishing."""
        initial = {m.name: self._initial_state(m) for m in self.plan.monitors()}
        snapshots = None if events.is_bounded or paid_from is not None else {
            m.name: self._snapshot_dir(m.name) for m in self.plan.monitors()}
        rows, states = release_graph(events, self.releases, self.plan, self.bounds, self.window, self.seed,
                                     self.shards, initial, snapshots, paid_from)
        for name, state in states.items():
            if state.is_bounded:  # streaming monitors seal a snapshot per window instead (`sealed_states`)
                state | f"Seal state {name}" >> _WriteState(self._state_path(name))
        for name, released in rows.items():
            self._applied.setdefault(name, []).append(released)
        return rows

    # -- lifecycle ---------------------------------------------------------------------------------------

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

    # -- streams that pay as they release (period scopes, and plain scopes window by window) --------------

    def scope_grid(self) -> PeriodGrid | None:
        """The scope's period grid (None: a plain scope); RunError when the scope or ledger is missing."""
        with self._ledger("nothing was debited") as ledger:
            try:
                return ledger.unit_period(self.scope)
            except UnknownScopeError as err:
                raise RunError(f"budget scope {self.scope!r} is not in ledger {ledger.display_url}; "
                               f"{self._create_hint()}") from err

    def stream_payment(self, output: str, runner: str = "DirectRunner") -> StreamPayment:
        """How a stream of this plan into `output` pays a plain scope (public values only):
        - WINDOW: window by window, as it releases: the plan is one mechanism run once per window
          (`JobPlan.window_event`) and the scope's filter charges its W windows, one round each, what it would
          charge their composition (`EventFilter.charges_evenly`, on the scope's state now);
        - PREPAID: its whole plan once, when the stream opens, then each window journaled at no further cost
          (windows that share state or budget, or a filter that prices rounds above their composition);
        - AT_END: as one run that pays when it ends, with its launcher up: svt monitors on a `runner` that
          does not commit a stateful step's state with its outputs (`preflight.COMMITTING_RUNNERS`; the
          monitor is sealed in the ledger window by window, which a runner that recovers by replaying could
          fork).
        A stream of this job that did not finish there keeps the way it was opened (it resumes)."""
        event = self.plan.window_event()
        if self.plan.monitors() and runner not in COMMITTING_RUNNERS:
            return StreamPayment(AT_END, f"its svt monitors are sealed window by window only on runners that commit "
                                         f"a stateful step's state with its outputs ({', '.join(COMMITTING_RUNNERS)}); "
                                         f"{runner} recovers by replaying, which could publish one answer and "
                                         f"continue from another")
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

    def open_stream(self, label: str, output: str, prepaid: bool = False) -> StreamTicket:
        """Open (or resume) a stream that publishes as windows are released (`Ledger.open_stream`): on a period
        scope paying the plan's event per period, checked as `scope_periods` checks a run; on a plain scope paying
        one window's event per window (`stream_payment` said WINDOW) and the budgets of the svt monitors it
        opens, debited here, once (a monitor holds its budget in its own filter, so opening it spends nothing it
        cannot still use: a stopped stream's monitor continues with what it has left), or, `prepaid` (it said
        PREPAID), paying the whole plan here, once, what one run of it is charged, and nothing per window.
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
                                          unit=self.privacy_unit, prepaid=prepaid)
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

    def renew(self, admission: Admission) -> None:
        """Extend the run's leases (`LeaseKeeper` calls this while the pipeline runs)."""
        with self._ledger("the run's lease was not renewed") as ledger:
            ledger.renew_run(admission.run_id, self.lease_seconds)

    def sealed_states(self, released: dict[str, set[int]] | None = None) -> MonitorStates:
        """Each monitor's record as the pipeline sealed it (read from state_dir).

        Batch (`released` None): the state sealed after the run's last window (the file is removed). Streaming
        (`released`: release name -> the window indices whose alerts were published): the state the monitor
        sealed after the last published window, continuing at the window after it; a monitor that published
        no window keeps the state it started from."""
        out: MonitorStates = {}
        for planned in self.plan.monitors():
            if released is None:
                path = self._state_path(planned.name)
                state, next_start = json.loads(read_bytes(path)), self.window.next_start
                remove_file(path)
            else:
                state, next_start = self._streamed_state(planned, released.get(planned.name, set()))
            out[planned.name] = (MonitorRecord(state, next_start), state["halt_reason"] is not None)
        return out

    def _streamed_state(self, planned: SvtPlan, released: set[int]) -> tuple[dict[str, Any], float]:
        """(sealed state, next window start) of a streaming monitor whose windows `released` were published."""
        if not released:
            initial = self._initial_state(planned)
            return (dict(initial) if initial is not None else planned.monitor().to_dict()), self.window.start
        last = max(released)
        path = snapshot_path(self._snapshot_dir(planned.name), last)
        try:
            state = json.loads(read_bytes(path))
        except (OSError, ValueError) as err:
            raise RunError(f"svt release {planned.name!r}: the monitor's state after window {last + 1}, whose alert "
                           f"was written, is missing or unreadable ({path}: {first_line(err)}); nothing was "
                           f"published or debited, and the monitor keeps its state from before this run") from err
        following = self.window.bounds(last + 1)[0] if last + 1 < self.window.count else self.window.next_start
        return state, following

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
            with Ledger(self.url, on_wait=_tell) as ledger:
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
                with Ledger(self.url, on_wait=_tell) as ledger:
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

    def run(self, pipeline: beam.Pipeline, label: str | None = None) -> Debit:
        """Run `pipeline` and pay for its releases; the state directory (and any staging) is removed after.

        When every release's rows flow only into `write` sinks, the run is a transaction (`transaction.run_staged`):
        admitted, computed into staging, debited only when the pipeline succeeded and every written release is
        staged, then published; a pipeline that fails (in any step, a DoFn of yours included) debits nothing and
        `budget history` shows the run failed. When rows also flow into transforms of your own, Beam cannot tell
        whether those published before a failure, so the scope is debited before the pipeline runs and the debit
        stands if it fails (`debit`; a note names the releases)."""
        try:
            check_verified_runner(pipeline.runner, allow_unverified=self.allow_unverified_runner)
            pin_direct_engine(pipeline.options)
            found = routes(pipeline, self._issued, self._applied, {n: sink for n, (_, sink) in self._writes.items()})
            if found.written and found.unstaged:
                raise RunError(f"releases {', '.join(found.written)} go to budget.write and "
                               f"{', '.join(found.unstaged)} to transforms of your own: write every release with "
                               f"budget.write (debited only if the pipeline succeeds), or none (debited before it "
                               f"runs); nothing was debited")
            if found.written:
                assert self._publication is not None
                return run_staged(self, pipeline, self._publication, {n: p for n, (p, _) in self._writes.items()},
                                  label, _tell)
            if found.unstaged:
                _tell(f"note: release{'s' if len(found.unstaged) > 1 else ''} {', '.join(found.unstaged)} go to "
                      f"transforms of your own, which may publish while the pipeline runs: the scope is debited "
                      f"before it runs, and a failure keeps the debit (write every release with budget.write(name) "
                      f"for a run that debits only when it succeeds)")
            debit = self.debit(label)
            try:
                pipeline.run().wait_until_finish()
            except Exception as err:
                raise RunError(f"pipeline failed: {type(err).__name__}: {first_line(err)}; the debit (ledger run "
                               f"{debit.run_id}) stands, since the pipeline's own sinks may have published") from err
            self.check_in(debit)
            return debit
        finally:
            self.close()

    def close(self) -> None:
        """Remove the state directory, if the budget made one, and a staging directory nothing published."""
        if self._state_dir is not None:
            remove_tree(self._state_dir)
            self._state_dir = None
        if self._publication is not None:
            self._publication.__exit__(None, None, None)
            self._publication = None

    def _debit(self, admission: Admission, release_id: int | None, message: str, after: ScopeView) -> Debit:
        return Debit(admission.ledger, self.scope, admission.run_id, release_id, admission.label, message,
                     admission.event, after, admission.periods, admission.note, admission.ledger_id)

    @contextmanager
    def _ledger(self, consequence: str, conflicts: bool = False) -> Iterator[Ledger]:
        """The ledger, with its errors as RunError (`consequence`: what a failure means for the run).
        `conflicts`: let LedgerConflict through (the caller previews again)."""
        try:
            with Ledger(self.url, on_wait=_tell) as ledger:
                yield ledger
        except LedgerError as err:
            if conflicts and isinstance(err, LedgerConflict):
                raise
            raise RunError(f"{err}; {consequence}") from err

    # -- monitors and periods ----------------------------------------------------------------------------

    @cached_property
    def monitor_records(self) -> MonitorRecords:
        """svt release name -> its sealed ledger record (None: a new monitor), after checking a run may continue
        it (an svt monitor, loadable, same parameters; where it continues is checked by admit for a run and by
        `monitor_starts` for a stream; leases are checked when the run or stream opens)."""
        records: MonitorRecords = {}
        if not self.plan.monitors():
            return records
        with self._ledger("nothing was debited") as ledger:
            for planned in self.plan.monitors():
                records[planned.name] = ledger.monitor_record(self.scope, planned.name)
        for planned in self.plan.monitors():
            record = records[planned.name]
            if record is not None:
                self._check_continuation(planned, record)
        return records

    def monitor_starts(self) -> dict[str, int]:
        """svt release name -> the window index its monitor answers next on a stream: 0 for a new monitor, else
        the window at which the ledger's record continues (a stopped stream's monitor continues after its last
        sealed window; each monitor of a job is sealed on its own, so they may differ); the range's window count
        when it went past it. RunError when a record continues between window starts or outside the range."""
        starts = {self.window.bounds(i)[0]: i for i in range(self.window.count)} | {self.window.next_start:
                                                                                  self.window.count}
        found = {}
        for planned in self.plan.monitors():
            next_start = self._continues_at(self.monitor_records[planned.name])
            if next_start not in starts:
                raise RunError(f"{self.source}: release {planned.name!r}: the monitor continues at "
                               f"{iso(next_start)}, which is not a window start of the job's range "
                               f"{iso(self.window.start)} to {iso(self.window.next_start)}; nothing was debited")
            found[planned.name] = starts[next_start]
        return found

    def _continued(self) -> frozenset[str]:
        """The svt monitors of the plan that are already open on the scope (their budgets are not debited again)."""
        return frozenset(name for name, record in self.monitor_records.items() if record is not None)

    def _continues_at(self, record: MonitorRecord | None) -> float:
        """The window start a monitor's record continues at (a new monitor: the range's start)."""
        if record is None:
            return self.window.start
        assert record.next_start is not None, "monitor_records checks every record names where it continues"
        return record.next_start

    def _check_start(self, planned: SvtPlan, record: MonitorRecord | None) -> None:
        """A run continues a monitor at the window its record continues at: RunError otherwise."""
        if (next_start := self._continues_at(record)) != self.window.start:
            raise RunError(f"{self.source}: release {planned.name!r}: the monitor continues at window start "
                           f"{iso(next_start)}, got window.start {iso(self.window.start)}")

    def _check_continuation(self, planned: SvtPlan, record: MonitorRecord) -> None:
        where = f"{self.source}: release {planned.name!r}"
        if not record.state or record.next_start is None:
            raise RunError(f"{where}: monitor {planned.name!r} on scope {self.scope!r} is not an svt release "
                           f"monitor; choose another release name")
        try:
            SparseVectorMonitor.from_dict(record.state)
        except ValueError as err:
            raise RunError(f"{where}: monitor {planned.name!r} on scope {self.scope!r} cannot be continued: "
                           f"{err}; give the release a new name to open a new monitor (its budget is debited); "
                           f"nothing was debited") from err
        wanted = planned.monitor().to_dict()["parameters"]
        if record.state["parameters"] != wanted:
            raise RunError(f"{where}: the monitor was opened with parameters {record.state['parameters']}, "
                           f"the job now asks for {wanted}; a monitor's parameters cannot change")

    def _initial_state(self, planned: object) -> dict[str, Any] | None:
        if not isinstance(planned, SvtPlan):
            return None
        record = self.monitor_records.get(planned.name)
        return None if record is None else record.state

    def _snapshot_dir(self, name: str) -> str:
        return join(os.path.dirname(self._state_path(name)), f"{name}.windows")

    def _state_path(self, name: str) -> str:
        if self._state_dir is None:
            base = self._state_base
            self._state_dir = (tempfile.mkdtemp(prefix="dpstream-sealed-", dir=base) if base is None or is_local(base)
                               else join(base, f".dpstream-sealed-{uuid.uuid4().hex}"))
        return join(self._state_dir, f"{name}.json")

    @property
    def privacy_unit(self) -> PrivacyUnit:
        """The job's privacy unit: user, or user x its unit period, whose fixed periods count from window.start;
        the ledger refuses the job on a scope that serves another (`accounting.ledger.units`)."""
        return PrivacyUnit.of(self.unit_period, self.window.start)

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

    def _create_hint(self) -> str:
        per_period = "" if self.unit_period is None else f" {self.unit_period.options}"
        return (f"create it with `dpstream budget init --ledger {masked_url(self.url)} --scope {self.scope} "
                f"--epsilon EPSILON --delta DELTA --filter approx:release_delta={self.delta!r}{per_period}` (one run "
                f"of this job spends epsilon={self.epsilon:g}, delta={self.delta:g}"
                + (" per period)" if per_period else ")"))


def _tell(message: str) -> None:
    """A note on stderr while the run waits (a ledger lock)."""
    print(f"dpstream: {message}", file=sys.stderr)


class _WriteState(beam.PTransform):
    """A monitor run's one sealed state -> a private file at `path` (local: owner read/write only)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def expand(self, states):
        return (states
                | "Collect state" >> beam.combiners.ToList()
                | "Write state" >> beam.Map(seal_state, self._path))


class _SealState(beam.PTransform):
    """An svt release whose sealed state is written to `path`; yields the alert rows only."""

    def __init__(self, transform: beam.PTransform, path: str) -> None:
        super().__init__()
        self._transform, self._path = transform, path

    def default_label(self) -> str:
        return self._transform.default_label()

    def expand(self, batches):
        released = batches | "Monitor" >> self._transform
        released[STATE] | "Seal state" >> _WriteState(self._path)
        return released["alerts"]


def seal_state(states: list, path: str) -> None:
    """Write the one sealed state of a monitor run to a private file (local: owner read/write only; a URL: the
    output bucket's access rules)."""
    if len(states) != 1:
        raise ValueError(f"a monitor run must seal exactly one state, got {len(states)}")
    if not is_local(path):
        write_bytes(path, json.dumps(states[0]).encode("utf-8"))
        return
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(states[0], handle)


def _round_down(value: float, digits: int) -> float:
    """`value` rounded down to `digits` significant digits."""
    scale = 10.0 ** (digits - 1 - math.floor(math.log10(value)))
    return math.floor(value * scale * (1 - 1e-12)) / scale
