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

import os
from typing import Iterable, Mapping

import apache_beam as beam

from dpstream.accounting.ledger import (
    DEFAULT_LEASE_SECONDS,
    LedgerError,
    PeriodGrid,
    resolve_url,
)
from dpstream.accounting.ledger.receipts import Debit
from dpstream.accounting.text import first_line
from dpstream.connectors.beam_io import WriteRelease
from dpstream.connectors.files import is_local, remove_tree
from dpstream.connectors.writers import FORMATS as WRITE_FORMATS
from dpstream.connectors.writers import release_path
from dpstream.pipelines.config.specs import ContributionBounds, ReleaseSpec, WindowSpec
from dpstream.pipelines.planning import JobPlan, PlanningError, SvtPlan, plan_job
from dpstream.pipelines.run.budget_base import tell
from dpstream.pipelines.run.budget_streams import (  # noqa: F401  (the stream payment modes, re-exported)
    PREPAID,
    WINDOW,
    BudgetStreams,
    StreamPayment,
)
from dpstream.pipelines.run.errors import RunError
from dpstream.pipelines.run.monitor_state import SealState, WriteState
from dpstream.pipelines.run.preflight import check_verified_runner, pin_direct_engine
from dpstream.pipelines.run.publication import Publication
from dpstream.pipelines.run.sinks import routes
from dpstream.pipelines.run.transaction import run_staged
from dpstream.pipelines.transforms.graph import release_columns, release_graph, release_transform


class Budget(BudgetStreams):
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

    def release(self, name: str) -> beam.PTransform:
        """The private transform of release `name`: EVENT_SCHEMA record batches -> plain dict rows."""
        planned = self.plan[name]
        transform: beam.PTransform = release_transform(planned, self.bounds, self.window, self.seed, self.shards,
                                                       self._initial_state(planned), self.plan.window_cap)
        if isinstance(planned, SvtPlan):
            transform = SealState(transform, self._state_path(name))
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
            self._publication = Publication(self.output, self.overwrite, self.staged_run, tell).__enter__()
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
                state | f"Seal state {name}" >> WriteState(self._state_path(name))
        for name, released in rows.items():
            self._applied.setdefault(name, []).append(released)
        return rows

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
                                  label, tell)
            if found.unstaged:
                tell(f"note: release{'s' if len(found.unstaged) > 1 else ''} {', '.join(found.unstaged)} go to "
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
