"""Run a job file: validate -> plan -> check -> build -> debit the ledger once -> run -> write releases -> report.

The job runner is a client of the library API (`dpstream.pipelines.run.budget.Budget`): the job file parses
into the same typed specs, and the budget plans, builds the private transforms, debits and checks monitors in.
Order matters for privacy (DESIGN.md §1, §6):
1. the job file is validated and every noise scale is planned from public values only (`Budget`, from
   `planning.plan_job`);
2. input files and headers are checked, the output directory is checked for write access; no event is read;
3. the pipeline is built (reading nothing): events -> the budget's transforms -> one file per release;
4. the scope is debited once, atomically, with the composition of every event of the plan (`Budget.debit`); a
   refusal ends the run here (exit 3) with nothing read and nothing written;
5. the pipeline reads, bounds, aggregates and adds noise; each release is collected and written as one file. A
   streaming job (Pub/Sub input) writes each window's rows when the window is released and ends once every
   window of its declared range has been released, or at `max_seconds` (partial; the outcome says which windows
   are pending), then merges them into one file per release (`pipelines.run.streaming`);
6. svt monitors are checked back in (`Budget.check_in`) and the report is built from the plan, the accountant's
   explanation and the debit (`pipelines.report.document`).
Every file goes through Beam's FileSystems (`connectors.files`), so the output path may be any URL the workers'
Beam installation can write; svt monitor states then go beside the output (workers on a cluster cannot reach
the submitting machine's disk). A failure after step 4 (a bad row, a runner error) keeps the debit: the data may
have been touched, so refunding would depend on it. Nothing is released.
Period scopes and svt continuation: see `Budget`.
"""
from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.transforms.window import GlobalWindows

from dpstream.accounting.text import first_line
from dpstream.connectors.beam_io import ReadEvents
from dpstream.connectors.errors import InputError
from dpstream.connectors.files import is_local, join, remove_file, remove_tree, write_bytes
from dpstream.connectors.readers import check_input
from dpstream.connectors.writers import release_path, write_rows
from dpstream.pipelines.config.jobfile import PUBSUB, Job
from dpstream.pipelines.planning import JobPlan
from dpstream.pipelines.report import document as report
from dpstream.pipelines.run import streaming as streaming_io
from dpstream.pipelines.run.budget import Budget, Debit
from dpstream.pipelines.run.errors import EXIT_ERROR, EXIT_OK, EXIT_REFUSED, RunError

__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_REFUSED", "RunError", "RunOutcome", "budget", "plan", "run", "validate"]


@dataclass(frozen=True)
class RunOutcome:
    output_dir: str
    report: dict[str, Any]
    files: dict[str, str]  # release name -> file
    pending: dict[str, int] = field(default_factory=dict)  # streaming, stopped at max_seconds: windows not released


def budget(job: Job, ledger_url: str | None = None, state_dir: str | None = None) -> Budget:
    """The job's budget (its plan made; the ledger not touched yet); a planning error names the job file."""
    privacy = job.privacy
    return Budget(scope=privacy.scope, epsilon=privacy.epsilon, delta=privacy.delta, bounds=privacy.bounds,
                  window=job.window, releases=job.releases, ledger=ledger_url or privacy.ledger,
                  unit_period=privacy.unit_period, seed=job.beam.seed, state_dir=state_dir, source=job.source)


def plan(job: Job) -> JobPlan:
    """The job's plan; a planning error becomes a RunError naming the job file."""
    return budget(job).plan


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
    validate(job)
    timings["plan_s"] = time.perf_counter() - started
    streaming = job.input.format == PUBSUB
    if max_seconds is not None and not (streaming and max_seconds > 0):
        raise RunError(f"{job.source}: max_seconds must be a positive number of seconds and applies to streaming "
                       f"(input.format = {PUBSUB!r}) jobs only, got {max_seconds!r} for input.format {job.input.format!r}")
    output_dir = output_dir or job.output.path
    output_dir = os.path.abspath(output_dir) if is_local(output_dir) else output_dir
    _check_output(output_dir)
    options = beam_options(job, beam_args)
    files = {spec.name: release_path(output_dir, spec.name, job.output.format) for spec in job.releases}
    parts = {spec.name: join(output_dir, streaming_io.PARTS_DIR, spec.name) for spec in job.releases} if streaming else None
    job_budget = budget(job, ledger_url, state_dir=None if is_local(output_dir) else output_dir)
    job_plan = job_budget.plan
    try:
        try:
            pipeline = _build_pipeline(job, job_budget, options, files, parts)
        except (ValueError, TypeError) as err:
            raise RunError(f"{job.source}: cannot build the pipeline: {err}; nothing was debited") from err

        tick = time.perf_counter()
        label = f"job {job.name} ({job.source}) at {started_at}: " + ", ".join(r.name for r in job.releases)
        debit = job_budget.debit(label)
        timings["debit_s"] = time.perf_counter() - tick
        log(debit.message)
        if debit.note:
            log(debit.note)

        tick = time.perf_counter()
        if is_local(output_dir):
            os.makedirs(output_dir, exist_ok=True)
        if parts is not None:
            expected = {spec.name: streaming_io.emissions(job_plan[spec.name], job.window) for spec in job.releases}
            stream = _run_streaming(pipeline, debit, parts, expected, max_seconds, output_dir)
            pending = _merge_streamed(stream, parts, files, job.output.format, output_dir)
        else:
            _run_pipeline(pipeline, debit)
            pending = {}
        job_budget.check_in(debit)
        timings["pipeline_s"] = time.perf_counter() - tick
    finally:
        job_budget.close()

    tick = time.perf_counter()
    context = report.RunContext(
        job=job,
        plan=job_plan,
        runner=options.view_as(StandardOptions).runner,
        beam_args=tuple(beam_args),
        debit=debit,
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



def _check_writable(output_dir: str) -> None:
    existing = output_dir
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        raise RunError(f"output directory {output_dir}: {existing} is not a writable directory")







def _build_pipeline(job: Job, job_budget: Budget, options: PipelineOptions, files: dict[str, str],
                    parts: dict[str, str] | None = None) -> beam.Pipeline:
    """The job's Beam graph: read -> the budget's private releases -> one file per release (streaming: one per
    window, in the `parts` directories). Building it reads no data."""
    pipeline = beam.Pipeline(options=options)
    if job.input.format == PUBSUB:
        from dpstream.connectors.pubsub import PubSubSource, ReadPubSubEvents

        assert isinstance(job.input, PubSubSource)
        batches = pipeline | "Read events" >> ReadPubSubEvents(job.input)
    else:
        batches = pipeline | "Read events" >> ReadEvents(job.input)
    released = job_budget.apply(batches)
    if parts is not None:
        for name, rows in released.items():
            indices = streaming_io.emissions(job_budget.plan[name], job.window)
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


def _run_pipeline(pipeline: beam.Pipeline, debit: Debit) -> None:
    try:
        pipeline.run().wait_until_finish()
    except Exception as err:  # the runner wraps worker errors; recover the input error when there is one
        raise _pipeline_error(err, debit, "nothing was released") from err


def _run_streaming(pipeline: beam.Pipeline, debit: Debit, parts: dict[str, str], expected: dict[str, tuple[int, ...]],
                   max_seconds: float | None, output_dir: str) -> streaming_io.StreamingOutcome:
    try:
        return streaming_io.run_until_released(pipeline, parts, expected, max_seconds)
    except Exception as err:
        released = f"windows released before the failure stay in {join(output_dir, streaming_io.PARTS_DIR)}"
        raise _pipeline_error(err, debit, released) from err


def _pipeline_error(err: Exception, debit: Debit, released: str) -> RunError:
    cause = _input_error(err)
    stands = f"the debit (ledger release id {debit.release_id}) stands; {released}"
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
    link: BaseException | None = err
    while link is not None and id(link) not in seen:
        if isinstance(link, InputError):
            found = link
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return found
