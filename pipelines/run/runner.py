"""Run a job: validate -> plan -> debit the ledger once -> run the Beam pipeline -> write releases -> report.

Order matters for privacy (DESIGN.md §1, §6):
1. the job file is validated and every noise scale is planned from public
   values only (`pipelines.planning.job.plan_job`);
2. input files and headers are checked, the output directory is checked for
   write access and the budget scope is looked up; no event is read;
3. the scope is debited once, atomically, with the composition of every
   event of the plan (`accounting.ledger.Ledger.spend`); a refusal ends the
   run here (exit 3) with nothing read and nothing written;
4. the pipeline, built before the debit (building reads nothing), reads,
   bounds, aggregates and adds noise; each release is collected and written
   as one file. A streaming job (Pub/Sub input) writes each window's rows
   when the window is released and ends once every window of its declared
   range has been released, or at `max_seconds` (partial; the outcome says
   which windows are pending), then merges them into one file per release
   (`pipelines.run.streaming`);
5. the report is built from the plan, the accountant's explanation and the
   ledger's answer (`pipelines.report.document`).
SVT monitors (`kind = "svt"`) continue across scheduled runs. Before the
build, each monitor's sealed record is read from the ledger (none: a new
monitor, whose whole budget this run debits); a continued monitor must have
the same parameters and continue exactly where the last run stopped
(window.start = its next window). The debit of step 3 also checks the
monitors out (`Ledger.spend_and_check_out`); after the pipeline, each
monitor's sealed state is checked back in. It travels from the pipeline to
the ledger through a private temporary file (owner-only, deleted at once;
with an output URL such as gs://bucket/dir, a file under the output path,
since workers on a cluster cannot reach the submitting machine's disk).
Every file goes through Beam's FileSystems (`connectors.writers`), so the
output path may be any URL the workers' Beam installation can write.
A failure after step 3 (a bad row, a runner error) keeps the debit: the data
may have been touched, so refunding would depend on it. Nothing is released.
Period scopes (`dpstream budget init --unit-period P`, `accounting.ledger`)
hold a budget per absolute period [k P, (k+1) P) since the epoch. A job with
`[privacy] unit_period` = P on such a scope is charged to every period its
windows overlap, each with the plan's events, which `pipelines.planning.job`
prices for ONE unit period (the worst case over the periods of the range);
its window.start must be a period boundary, so the planner's unit periods
(counted from window.start) are the ledger's periods. Privacy per period p:
the records of a user x period-p unit lie in period p only, so they enter
only runs whose windows overlap p, which are exactly the runs charged to p;
p's filter admits the composition of those runs' events, chosen adaptively
across runs (docs/proofs/ledger.period_scopes.md). Refused before any debit,
exit 2: a period scope with a job without unit_period (its unit is a user
over the whole range, which no per-period budget covers), a different
unit_period, a window.start off the period grid, or svt releases (a
monitor's sealed state spans runs and periods). A job with unit_period on a
plain scope debits that scope's one budget, as before, and says so in a note.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.transforms.window import GlobalWindows

from dpstream.accounting.events import Composed
from dpstream.accounting.ledger import Ledger, LedgerError, Periods, on_period_boundary, resolve_url
from dpstream.accounting.text import duration_text, first_line, instant_text
from dpstream.connectors.beam_io import ReadEvents
from dpstream.connectors.errors import InputError
from dpstream.connectors.readers import check_input
from dpstream.connectors.files import is_local, join, read_bytes, remove_file, remove_tree, write_bytes
from dpstream.connectors.writers import release_path, write_rows
from dpstream.pipelines.report import document as report
from dpstream.pipelines.config.jobfile import PUBSUB, Job
from dpstream.pipelines.run import streaming as streaming_io
from dpstream.pipelines.mechanisms.monitor import SparseVectorMonitor
from dpstream.pipelines.planning import JobPlan, PlanningError, plan_job
from dpstream.pipelines.transforms.windowing import iso

EXIT_OK = 0
EXIT_ERROR = 2
EXIT_REFUSED = 3


class RunError(Exception):
    """The run stopped; `exit_code` is 2 (bad input, before or after the debit) or 3 (debit refused)."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class RunOutcome:
    output_dir: str
    report: dict[str, Any]
    files: dict[str, str]  # release name -> file
    pending: dict[str, int] = field(default_factory=dict)  # streaming, stopped at max_seconds: windows not released


def plan(job: Job) -> JobPlan:
    """The job's plan; a planning error becomes a RunError naming the job file."""
    try:
        return plan_job(job.releases, job.privacy.bounds, job.window, job.privacy.epsilon, job.privacy.delta,
                        job.privacy.unit_period)
    except PlanningError as err:
        raise RunError(f"{job.source}: {err}") from err


def validate(job: Job) -> JobPlan:
    """Everything a run checks before its debit, without touching the ledger: plan, input files and headers."""
    job_plan = plan(job)
    if job.input.format == PUBSUB:
        return job_plan  # a subscription has no header to look at before the debit
    try:
        check_input(job.input)
    except InputError as err:
        raise RunError(str(err)) from err
    return job_plan


def beam_options(job: Job, beam_args: Sequence[str]) -> PipelineOptions:
    """Beam options from the arguments after `--`; the job's [beam] runner unless --runner is given there."""
    options = PipelineOptions(list(beam_args))
    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = job.beam.runner
    if job.input.format == PUBSUB:
        standard.streaming = True
    return options


def run(
    job: Job,
    output_dir: str | None = None,
    ledger_url: str | None = None,
    beam_args: Sequence[str] = (),
    log=print,
    max_seconds: float | None = None,
) -> RunOutcome:
    """Run the job end to end (see the module docstring); raises RunError with the exit code.

    `max_seconds` (streaming jobs only): stop the pipeline after this long even
    if windows of the range are still to be released; the outcome's `pending`
    counts them per release.
    """
    started = time.perf_counter()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    timings: dict[str, float] = {}
    job_plan = validate(job)
    timings["plan_s"] = time.perf_counter() - started
    streaming = job.input.format == PUBSUB
    if max_seconds is not None and not (streaming and max_seconds > 0):
        raise RunError(f"{job.source}: max_seconds must be a positive number of seconds and applies to streaming "
                       f"(input.format = {PUBSUB!r}) jobs only, got {max_seconds!r} for input.format {job.input.format!r}")
    output_dir = output_dir or job.output.path
    output_dir = os.path.abspath(output_dir) if is_local(output_dir) else output_dir
    _check_output(output_dir)
    options = beam_options(job, beam_args)
    url = resolve_url(ledger_url or job.privacy.ledger)

    files = {spec.name: release_path(output_dir, spec.name, job.output.format) for spec in job.releases}
    parts = {spec.name: join(output_dir, streaming_io.PARTS_DIR, spec.name) for spec in job.releases} if streaming else None
    records = _monitor_records(job, job_plan, url)
    sealed_dir = _sealed_dir(output_dir) if records else None
    try:
        try:
            pipeline = _build_pipeline(job, job_plan, options, files, records, sealed_dir, parts)
        except (ValueError, TypeError) as err:
            raise RunError(f"{job.source}: cannot build the pipeline: {err}; nothing was debited") from err

        tick = time.perf_counter()
        debit = _debit(job, job_plan, url, started_at, records)
        timings["debit_s"] = time.perf_counter() - tick
        log(debit["message"])
        if debit["note"]:
            log(debit["note"])

        tick = time.perf_counter()
        if is_local(output_dir):
            os.makedirs(output_dir, exist_ok=True)
        if streaming:
            expected = {spec.name: streaming_io.emissions(job_plan[spec.name], job.window) for spec in job.releases}
            stream = _run_streaming(pipeline, debit, parts, expected, max_seconds, output_dir)
            pending = _merge_streamed(stream, parts, files, job.output.format, output_dir)
        else:
            _run_pipeline(pipeline, debit)
            pending = {}
        _check_in_monitors(job, job_plan, url, debit, sealed_dir)
        timings["pipeline_s"] = time.perf_counter() - tick
    finally:
        if sealed_dir is not None:
            remove_tree(sealed_dir)

    tick = time.perf_counter()
    context = report.RunContext(
        job=job,
        plan=job_plan,
        runner=options.view_as(StandardOptions).runner,
        beam_args=tuple(beam_args),
        ledger=debit,
        files=files,
        started_at=started_at,
        timings=timings,
        pending=pending,
    )
    written = report.write_reports(context, output_dir, started)
    return RunOutcome(output_dir, written, files, pending)


def _check_output(output_dir: str) -> None:
    """Before the debit: a local directory must be writable; a URL must have a Beam filesystem that takes a file."""
    if is_local(output_dir):
        _check_writable(output_dir)
        return
    try:
        probe = join(output_dir, f".dpstream-write-check-{uuid.uuid4().hex}")
        write_bytes(probe, b"")
        remove_file(probe)
    except Exception as err:  # Beam raises ValueError (no filesystem for the scheme) or BeamIOError / OSError
        raise RunError(f"output directory {output_dir}: cannot write there: {first_line(err)}; nothing was debited") from err


def _sealed_dir(output_dir: str) -> str:
    """Where the pipeline seals monitor states: a private local directory, or beside an output URL."""
    if is_local(output_dir):
        return tempfile.mkdtemp(prefix="dpstream-sealed-")
    return join(output_dir, f".dpstream-sealed-{uuid.uuid4().hex}")






def _check_writable(output_dir: str) -> None:
    existing = output_dir
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        raise RunError(f"output directory {output_dir}: {existing} is not a writable directory")


def _monitor_records(job: Job, job_plan: JobPlan, url: str) -> dict[str, dict[str, Any] | None]:
    """svt release name -> its sealed ledger record (None: a new monitor); checks that a run may continue it."""
    records: dict[str, dict[str, Any] | None] = {}
    if not job_plan.monitors():
        return records
    try:
        with Ledger(url) as ledger:
            for planned in job_plan.monitors():
                records[planned.name] = ledger.monitor_record(job.privacy.scope, planned.name)
    except LedgerError as err:
        raise RunError(f"{err}; nothing was debited") from err
    for planned in job_plan.monitors():
        record = records[planned.name]
        if record is None:
            continue
        where = f"{job.source}: release {planned.name!r}"
        if record.get("checked_out") is not None:
            raise RunError(f"{where}: the monitor is checked out by the run of ledger release {record['checked_out']} "
                           f"(still running, or failed); nothing was debited")
        if "monitor" not in record or "next_start" not in record:
            raise RunError(f"{where}: monitor {planned.name!r} on scope {job.privacy.scope!r} is not an svt release "
                           f"monitor; choose another release name")
        try:
            SparseVectorMonitor.from_dict(record["monitor"])
        except ValueError as err:
            raise RunError(f"{where}: monitor {planned.name!r} on scope {job.privacy.scope!r} cannot be continued: "
                           f"{err}; give the release a new name to open a new monitor (its budget is debited); "
                           f"nothing was debited") from err
        wanted = planned.monitor().to_dict()["parameters"]
        if record["monitor"]["parameters"] != wanted:
            raise RunError(f"{where}: the monitor was opened with parameters {record['monitor']['parameters']}, "
                           f"the job now asks for {wanted}; a monitor's parameters cannot change")
        if record["next_start"] != job.window.start:
            raise RunError(f"{where}: the monitor continues at window start {iso(record['next_start'])}, "
                           f"got window.start {iso(job.window.start)}")
    return records


def _check_in_monitors(job: Job, job_plan: JobPlan, url: str, debit: dict[str, Any], sealed_dir: str | None) -> None:
    """Store each monitor's sealed state (written by the pipeline) back in the ledger."""
    next_start = job.window.start + job.window.count * job.window.step
    for planned in job_plan.monitors():
        path = join(sealed_dir, f"{planned.name}.json")
        state = json.loads(read_bytes(path))
        remove_file(path)
        try:
            with Ledger(url) as ledger:
                ledger.check_in_monitor(job.privacy.scope, planned.name, debit["release_id"],
                                        {"monitor": state, "next_start": next_start}, state["halt_reason"] is not None)
        except LedgerError as err:
            raise RunError(f"{err}; the releases were written, the monitor stays checked out") from err


def _seal(states: list, path: str) -> None:
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


def scope_periods(job: Job, job_plan: JobPlan, view: dict[str, Any]) -> tuple[Periods | None, str | None]:
    """(the periods to charge, a note for the log) for the job on the scope `view` (`Ledger.show`).

    A plain scope: (None, None), or a note when the job has a unit_period (its one budget is debited by
    every run). A period scope: the periods the job's windows overlap, after checking that the job has
    the scope's unit_period, no svt release and a window.start on the period grid; else a RunError
    (exit 2), before any debit.
    """
    scope, period, unit = job.privacy.scope, view.get("unit_period"), job.privacy.unit_period
    if period is None:
        if unit is None:
            return None, None
        return None, (f"note: scope {scope!r} has one budget for all its releases, so every run of this user x "
                      f"{duration_text(unit)} job debits it, whichever periods it covers; a scope created with "
                      f"`dpstream budget init ... --unit-period {duration_text(unit)}` holds a budget per period")
    where = f"{job.source}: budget scope {scope!r} has a budget per {duration_text(period)} period"
    monitors = [m.name for m in job_plan.monitors()]
    if monitors:
        raise RunError(f"{where}, which svt releases ({', '.join(monitors)}) cannot use: a monitor's sealed state "
                       f"runs on across runs and periods while its budget is debited once; use a scope without a "
                       f"unit period for them; nothing was debited")
    if unit is None:
        raise RunError(f"{where}, but the job has no [privacy] unit_period: its privacy unit is a user over the whole "
                       f"window range, which a per-period budget does not cover; set unit_period = "
                       f"\"{duration_text(period)}\" or use a scope without a unit period; nothing was debited")
    if unit != period:
        raise RunError(f"{where} ({period} s), but [privacy] unit_period is {duration_text(unit)} ({unit:g} s); "
                       f"they must be equal; nothing was debited")
    window = job.window
    if not on_period_boundary(window.start, period):
        holding = math.floor(Fraction(window.start) / period) * period
        raise RunError(f"{where}: window.start {instant_text(window.start)} is not on its period grid (periods start "
                       f"at whole multiples of {period} s since 1970-01-01T00:00:00Z; the period holding it starts "
                       f"{instant_text(holding)}); nothing was debited")
    try:
        # Every record the job reads lies in one of its windows; the last window may end after window.end.
        return Periods.overlapping(window.start, window.bounds(window.count - 1)[1], period), None
    except LedgerError as err:
        raise RunError(f"{where}: {err}; nothing was debited") from err


def _debit(job: Job, job_plan: JobPlan, url: str, started_at: str,
           records: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    scope = job.privacy.scope
    per_period = "" if job.privacy.unit_period is None else f" --unit-period {duration_text(job.privacy.unit_period)}"
    create_hint = (
        f"create it with `dpstream budget init --ledger {url} --scope {scope} --epsilon EPSILON --delta DELTA "
        f"--filter approx:release_delta={job.privacy.delta!r}{per_period}` (one run of this job spends "
        f"epsilon={job.privacy.epsilon:g}, delta={job.privacy.delta:g}"
        + (" per period)" if per_period else ")")
    )
    continued = frozenset(name for name, record in records.items() if record is not None)
    event = Composed(tuple(job_plan.events(continued)))
    monitors = {m.name: (m.epsilon, m.delta, records[m.name]) for m in job_plan.monitors()}
    label = f"job {job.name} ({job.source}) at {started_at}: " + ", ".join(r.name for r in job.releases)
    try:
        with Ledger(url) as ledger:
            try:
                view = ledger.show(scope)
            except LedgerError as err:
                raise RunError(f"budget scope {scope!r} is not in ledger {ledger.display_url}; {create_hint}") from err
            periods, note = scope_periods(job, job_plan, view)
            if monitors:
                result = ledger.spend_and_check_out(scope, event, label, monitors)
            else:
                result = ledger.spend(scope, event, label, periods)
            after = ledger.show(scope) if result.admitted else None
            display_url = ledger.display_url
    except LedgerError as err:
        raise RunError(f"{err}; {create_hint}" if "budget init" not in str(err) else str(err)) from err
    if not result.admitted:
        raise RunError(f"{result.message}; nothing was read or written", EXIT_REFUSED)
    return {
        "ledger": display_url,
        "scope": scope,
        "release_id": result.release_id,
        "label": label,
        "message": result.message,
        "event": event,
        "scope_after": after,
        "periods": periods,
        "note": note,
    }


def _build_pipeline(job: Job, job_plan: JobPlan, options: PipelineOptions, files: dict[str, str],
                    records: dict[str, dict[str, Any] | None], sealed_dir: str | None,
                    parts: dict[str, str] | None = None) -> beam.Pipeline:
    """The job's Beam graph: read -> private releases -> one file per release (streaming: one per window, in
    the `parts` directories). Building it reads no data."""
    from dpstream.pipelines.transforms.graph import release_graph

    pipeline = beam.Pipeline(options=options)
    if job.input.format == PUBSUB:
        from dpstream.connectors.pubsub import ReadPubSubEvents

        batches = pipeline | "Read events" >> ReadPubSubEvents(job.input)
    else:
        batches = pipeline | "Read events" >> ReadEvents(job.input)
    initial = {name: None if record is None else record["monitor"] for name, record in records.items()}
    released, states = release_graph(batches, job.releases, job_plan, job.privacy.bounds, job.window, job.beam.seed,
                                     monitor_states=initial)
    for name, state in states.items():
        (
            state
            | f"Collect state {name}" >> beam.combiners.ToList()
            | f"Seal state {name}" >> beam.Map(_seal, join(sealed_dir, f"{name}.json"))
        )
    if parts is not None:
        for name, rows in released.items():
            indices = streaming_io.emissions(job_plan[name], job.window)
            rows | f"Write windows {name}" >> streaming_io.WriteWindowParts(job.window, indices, parts[name])
        return pipeline
    for name, rows in released.items():
        (
            rows
            | f"Unwindow {name}" >> beam.WindowInto(GlobalWindows())
            | f"Collect {name}" >> beam.combiners.ToList()
            | f"Write {name}" >> beam.Map(write_rows, files[name], job.output.format)
        )
    return pipeline


def _run_pipeline(pipeline: beam.Pipeline, debit: dict) -> None:
    try:
        pipeline.run().wait_until_finish()
    except Exception as err:  # the runner wraps worker errors; recover the input error when there is one
        raise _pipeline_error(err, debit, "nothing was released") from err


def _run_streaming(pipeline: beam.Pipeline, debit: dict, parts: dict[str, str], expected: dict[str, tuple[int, ...]],
                   max_seconds: float | None, output_dir: str) -> streaming_io.StreamingOutcome:
    try:
        return streaming_io.run_until_released(pipeline, parts, expected, max_seconds)
    except Exception as err:
        released = f"windows released before the failure stay in {join(output_dir, streaming_io.PARTS_DIR)}"
        raise _pipeline_error(err, debit, released) from err


def _pipeline_error(err: Exception, debit: dict, released: str) -> RunError:
    cause = _input_error(err)
    stands = f"the debit (ledger release id {debit['release_id']}) stands; {released}"
    if cause is not None:
        return RunError(f"{cause}; {stands}")
    return RunError(f"pipeline failed: {type(err).__name__}: {first_line(err)}; {stands}")


def _merge_streamed(stream: streaming_io.StreamingOutcome, parts: dict[str, str], files: dict[str, str], fmt: str,
                    output_dir: str) -> dict[str, int]:
    """Merge each release's window files into its release file, remove them; returns the pending windows."""
    for name, directory in parts.items():
        streaming_io.merge_parts(directory, stream.released[name], files[name], fmt)
    remove_tree(join(output_dir, streaming_io.PARTS_DIR))
    return stream.pending()


def _input_error(err: BaseException) -> InputError | None:
    """The innermost InputError of the chain (Beam re-raises it with "[while running ...]" appended)."""
    found, seen = None, set()
    while err is not None and id(err) not in seen:
        if isinstance(err, InputError):
            found = err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return found
