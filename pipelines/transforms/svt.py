"""`SparseVectorAlerts`: threshold alerts over windows by a sparse-vector monitor, batch and streaming.

Each window of the public range becomes one bounded query in [0, 1]
(`window_query`):
    count  bounded records of the window / maximum
    sum    bounded values of the window / maximum
    share  bounded records whose value is positive / max(bounded records, maximum)
clipped to [0, 1], from exact totals with one correctly rounded division
(`fixedpoint`). One privacy unit moves it by at most `planning.svt_sensitivity`
(docs/proofs/pipelines.transforms.svt.SparseVectorAlerts.md for share; the division's rounding adds
2**-53, docs/proofs/pipelines.planning.job.plan_job.md).
The queries go, in window order, to a `pipelines.mechanisms.monitor.SparseVectorMonitor`
(Gaussian AboveThreshold instances under the FSRC filter by default), which
answers each window alert / no alert and says when its filter has halted it.

Order. Batch: the window queries are grouped under the monitor's key and
processed sorted by window index (= by window end). Streaming: a stateful
DoFn keyed by monitor buffers the queries and, on an event-time timer, runs
every buffered window that is next in line; a window waits until all earlier
windows were answered, so out-of-order arrival still gives window order. Each
alert row travels at its own window's timestamp, and, given a `snapshots`
directory, the monitor's sealed state after each window is written there
(`snapshot_path`) before that window's row is emitted, so whatever prefix of
windows a stopped stream published, the state after it is on disk. On a stream
that pays as it releases (`paid_from`: the window the monitor answers next, a
resumed stream's included), each row travels as (row, sealed state after its
window) instead, and the stream's payer stores the state in the ledger before
it publishes the row (`pipelines.run.payment.StreamPayer.seal`).
Every window of the range has a query (empty windows included,
`aggregation.PerWindowSums`), so waiting always ends. Late records (behind the
watermark at aggregation) are dropped there, before any noise.

Scheduled runs. The transform starts from the monitor's sealed state
(`initial_state`, from the ledger; None for a new monitor) and, after the
run's last window, emits the state to resume from on the `STATE` output. Unless
the release sets `persist_threshold`, an instance still open then is closed
first (`SparseVectorMonitor.close`, charged its BOT^t ex-post loss), so no
noisy threshold is at rest between runs.

Outputs: one row per window: release, window_start, window_end, alert, halted,
note; the note is "halted: budget exhausted" (alert false, halted true) at the
window where the filter refused a new instance, and "" elsewhere.

Privacy and Proof: the monitor's (docstring of SparseVectorMonitor, proof note
docs/proofs/pipelines.mechanisms.monitor.SparseVectorMonitor.md): the whole output over all runs is
(epsilon, delta)-DP with the monitor's budget, given sensitivity-bounded
queries in a data-independent order. Rows carry only alert bits and halting,
which are the monitor's outputs; the window set is public.
Caller must ensure: a sealed state is resumed by at most one run (the
runner checks it out of the ledger); `seed` only in tests.
Runtime: O(windows) monitor steps plus one ex-post quadrature per new
instance length (memoised).
"""
from __future__ import annotations

import json
from fractions import Fraction
from typing import Any, Mapping

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.coders import PickleCoder
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindows, TimestampedValue

from dpstream.connectors.files import join, write_private_bytes
from dpstream.connectors.schema import EVENT_SCHEMA
from dpstream.pipelines.config.specs import ContributionBounds, WindowSpec
from dpstream.pipelines.mechanisms.fixedpoint import exact_value, rounded_quotient, total
from dpstream.pipelines.mechanisms.monitor import SparseVectorMonitor
from dpstream.pipelines.planning import SvtPlan
from dpstream.pipelines.transforms.aggregation import WindowedRelease
from dpstream.pipelines.transforms.windowing import release_rng, window_bounds_iso, window_timestamp

STATE = "state"
HALTED_NOTE = "halted: budget exhausted"
_POSITIVE, _OTHER = "\x1f+", "\x1f-"  # suffixes of the (partition, positive?) pairs that share queries bound


def query_bounds(plan: SvtPlan, bounds: ContributionBounds) -> ContributionBounds:
    """The contribution bounds the monitor's query is computed under: counting for count and share."""
    if plan.spec.metric == "sum":
        return bounds
    return ContributionBounds(bounds.max_partitions, bounds.max_contributions, 1.0, 1.0)


def window_query(metric: str, maximum: float, sums, quantum: float) -> float:
    """One window's query in [0, 1] from its bounded per-partition sums (a Series of integer units of `quantum`:
    int64, or Python ints beyond it).

    Totals are exact (`fixedpoint.total`); the quotient is rounded once (`fixedpoint.rounded_quotient`).
    """
    window_total = exact_value(total(sums), quantum)
    if metric == "share":
        positive = sums[np.char.endswith(sums.index.to_numpy(dtype=str), _POSITIVE)]
        value = rounded_quotient(exact_value(total(positive), quantum), max(window_total, Fraction(maximum)))
    else:
        value = rounded_quotient(window_total, maximum)
    return min(max(value, 0.0), 1.0)


class _MarkPositive(beam.DoFn):
    """share: keep the public partitions, then make a record's partition (partition, value > 0); every other
    column is kept as it is (a Pub/Sub batch's `PUBLISHED`, which decides which windows a record counts in)."""

    def __init__(self, partitions: tuple[str, ...] | None):
        self._partitions = partitions

    def process(self, batch: pa.RecordBatch):
        if self._partitions is not None:
            batch = batch.filter(pc.is_in(batch.column(2), pa.array(self._partitions, pa.string())))
        if batch.num_rows == 0:
            return
        suffix = pc.if_else(pc.greater(batch.column(3), 0.0), _POSITIVE, _OTHER)
        partition = pc.binary_join_element_wise(batch.column(2), suffix, "")
        yield batch.set_column(2, EVENT_SCHEMA.field(2), partition)  # keeps PUBLISHED (late data: bounding)


class MonitorRun:
    """One run of a monitor over this run's windows 0..windows-1: restore, answer windows in order, seal.

    Beam-free, shared by the batch and streaming DoFns (so both give the same
    rows for the same seed). Window i of the run is the monitor's window
    `offset + i`, and the run answers window `first` next (a resumed stream
    continues its monitor mid-range); in test mode its noise comes from
    `release_rng(seed, name, offset + i)`, so a monitor split over several
    runs draws the same noise as one long run.
    """

    def __init__(self, plan: SvtPlan, window: WindowSpec, initial_state: Mapping[str, Any] | None, seed: int | None,
                 first: int = 0):
        self._plan = plan
        self._window = window
        self._seed = seed
        if initial_state is None:
            self.monitor = plan.monitor()
        else:
            self.monitor = SparseVectorMonitor.from_dict(initial_state)
        self.offset = self.monitor.window - first  # the run answers window `first` next

    @property
    def next_index(self) -> int:
        """The run's index of the next window to answer."""
        return self.monitor.window - self.offset

    @property
    def finished(self) -> bool:
        return self.next_index >= self._window.count

    def answer(self, index: int, value: float) -> list[dict[str, Any]]:
        """The row of window `index` (which must be next in line), as a one-element list."""
        if index != self.next_index:
            raise ValueError(f"MonitorRun.answer: window {index} is out of order; next is {self.next_index}")
        was_halted = self.monitor.halted
        output = self.monitor.process(value, release_rng(self._seed, self._plan.name, self.monitor.window))
        start, end = window_bounds_iso(self._window, index)
        row = {"release": self._plan.name, "window_start": start, "window_end": end, "alert": output.alert,
               "halted": output.halted, "note": ""}
        if output.halted and not was_halted:
            row["note"] = HALTED_NOTE
        return [row]

    def seal(self) -> dict[str, Any]:
        """The state to resume from; closes an open instance first unless the threshold is persisted."""
        if not self._plan.spec.persist_threshold:
            self.monitor.close()
        return self.monitor.to_dict()

    def sealed_copy(self) -> dict[str, Any]:
        """What `seal` would return now, leaving this run's monitor (and its open instance) as it is: the state
        to resume from if the run's published windows end here."""
        copy = SparseVectorMonitor.from_dict(self.monitor.to_dict())
        if not self._plan.spec.persist_threshold:
            copy.close()
        return copy.to_dict()


def snapshot_path(directory: str, index: int) -> str:
    """Where a streaming monitor seals its state after answering its run's window `index`."""
    return join(directory, f"window-{index:06d}.json")


class _BatchMonitor(beam.DoFn):
    """(monitor key, every window's (index, query)) -> rows in window order, then the sealed state."""

    def __init__(self, plan: SvtPlan, window: WindowSpec, initial_state, seed):
        self._plan, self._window, self._initial, self._seed = plan, window, initial_state, seed

    def process(self, element):
        _, queries = element
        run = MonitorRun(self._plan, self._window, self._initial, self._seed)
        for index, value in sorted(queries):
            yield from run.answer(index, value)
        yield beam.pvalue.TaggedOutput(STATE, run.seal())


class _StreamingMonitor(beam.DoFn):
    """Stateful per monitor key: buffer queries, answer those next in line when the watermark passes them.

    Modelled on Beam's DeduplicatePerKey: bag state plus one event-time timer.
    State: the run's `MonitorRun` (between timer firings, so an open
    instance keeps its noisy threshold in the runner's state for the run only)
    and the pending (index, query) pairs. The timer is set at a query's timestamp (its
    window's end minus 1 us); when it fires, every pending window that is next
    in line is answered, and the timer is re-set for the earliest window still
    waiting.
    """

    MONITOR = ReadModifyWriteStateSpec("monitor", PickleCoder())
    PENDING = BagStateSpec("pending", PickleCoder())
    FLUSH = TimerSpec("flush", TimeDomain.WATERMARK)

    def __init__(self, plan: SvtPlan, window: WindowSpec, initial_state, seed, snapshots: str | None,
                 paid_from: int | None = None):
        self._plan, self._window, self._initial, self._seed = plan, window, initial_state, seed
        self._snapshots, self._paid_from = snapshots, paid_from

    def process(self, element, timestamp=beam.DoFn.TimestampParam,
                pending=beam.DoFn.StateParam(PENDING), flush=beam.DoFn.TimerParam(FLUSH)):
        _, query = element
        pending.add(query)
        flush.set(timestamp)

    @on_timer(FLUSH)
    def answer_ready(self, monitor=beam.DoFn.StateParam(MONITOR), pending=beam.DoFn.StateParam(PENDING),
                     flush=beam.DoFn.TimerParam(FLUSH)):
        run = monitor.read() or MonitorRun(self._plan, self._window, self._initial, self._seed, self._paid_from or 0)
        if run.finished:
            return
        # windows before the run's first (a resumed stream's monitor went past them) are never answered
        waiting = {index: query for index, query in pending.read() if index >= run.next_index}
        pending.clear()
        while run.next_index in waiting:
            index = run.next_index
            rows: list[Any] = run.answer(index, waiting.pop(index))
            if self._snapshots is not None:  # sealed before its alert can be published
                write_private_bytes(snapshot_path(self._snapshots, index), json.dumps(run.sealed_copy()).encode())
            if self._paid_from is not None:  # the payer seals it in the ledger before it publishes the row
                rows = [(row, run.sealed_copy()) for row in rows]
            timestamp = window_timestamp(self._window, index)
            yield from (TimestampedValue(row, timestamp) for row in rows)
        for query in waiting.items():
            pending.add(query)
        if run.finished:
            yield beam.pvalue.TaggedOutput(STATE, run.seal())
        elif waiting:
            flush.set(window_timestamp(self._window, min(waiting)))
        monitor.write(run)


class SparseVectorAlerts(WindowedRelease):
    """Record batches -> {"alerts": dict rows, "state": the sealed monitor state after this run's last window}.

    Steps: (share: mark positive records) -> bound contributions -> sum per
    window (every window of the range) -> one normalised query per window ->
    the monitor, in window order (batch: sorted group; streaming: stateful
    DoFn with event-time timers). `initial_state`: the monitor's sealed state
    from the ledger, or None for a new monitor. Streaming only: `snapshots`, a
    directory for the state after each window; `paid_from`, the window a paid
    stream's monitor answers next (its alerts then travel as (row, sealed state)).
    """

    @classmethod
    def columns(cls, plan) -> tuple[str, ...]:
        return ("release", "window_start", "window_end", "alert", "halted", "note")

    def __init__(self, plan: SvtPlan, bounds: ContributionBounds, window: WindowSpec, seed: int | None = None,
                 shards: int = 1, initial_state: Mapping[str, Any] | None = None, snapshots: str | None = None,
                 paid_from: int | None = None):
        super().__init__(plan, bounds, window, seed, shards)
        self._initial = None if initial_state is None else dict(initial_state)
        self._snapshots, self._paid_from = snapshots, paid_from

    def default_label(self) -> str:
        return f"SparseVectorAlerts({self._plan.name}, {self._plan.spec.method}, {self._plan.spec.metric})"

    def display_data(self):
        spec = self._plan.spec
        return {"release": self._plan.name, "metric": spec.metric, "maximum": spec.maximum, "threshold": spec.threshold,
                "sigma_threshold": spec.sigma_threshold, "method": spec.method, "sensitivity": self._plan.sensitivity}

    def expand(self, batches):
        spec = self._plan.spec
        partitions = spec.partitions
        if spec.metric == "share":
            batches = batches | "Mark positive records" >> beam.ParDo(_MarkPositive(partitions))
            partitions = None
        bounds = query_bounds(self._plan, self._bounds)
        queries = (
            self._window_sums(batches, partitions, bounds)
            | "Normalised query" >> beam.Map(
                lambda element, key=spec.name, metric=spec.metric, maximum=spec.maximum, quantum=bounds.quantum:
                (key, (element[0], window_query(metric, maximum, element[1], quantum))))
            | "Into one global window" >> beam.WindowInto(GlobalWindows())
        )
        if queries.is_bounded:
            outputs = (
                queries
                | "Group windows" >> beam.GroupByKey()
                | "Monitor in window order" >> beam.ParDo(
                    _BatchMonitor(self._plan, self._window, self._initial, self._seed)).with_outputs(STATE, main="alerts")
            )
        else:
            outputs = queries | "Monitor on event-time timers" >> beam.ParDo(
                _StreamingMonitor(self._plan, self._window, self._initial, self._seed, self._snapshots, self._paid_from)
            ).with_outputs(STATE, main="alerts")
        return {"alerts": outputs.alerts, STATE: outputs[STATE]}
