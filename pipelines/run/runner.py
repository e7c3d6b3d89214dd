"""Run a job file as one transaction: check -> admit -> compute into staging -> debit -> publish.

The job runner is a client of the library API (`dpstream.pipelines.run.budget.Budget`): the job file parses
into the same typed specs, and the budget plans, builds the private transforms and talks to the ledger.
Order matters for privacy and for the budget (DESIGN.md §1, §6; docs/proofs/pipelines.run.budget.Budget.md):
1. everything that needs no private data is checked first: the job file, and every noise scale planned from
   public values only (`Budget`, from `planning.plan_job`); input files and headers; the runner and its options
   (`preflight`), and the memory the plan's rows need against [beam] max_memory_gb (`planning.size`); the output directory (`Publication`: not a published run unless --overwrite, not in use by
   another run, writable);
2. the pipeline is built (reading nothing): events -> the budget's transforms -> one file per release, all in a
   private staging directory;
3. the ledger admits the run (`Budget.admit`): its filter must admit the plan's events (exit 3, nothing read),
   and the run leases its svt monitors and the output; nothing is debited;
4. the pipeline reads, bounds, aggregates and adds noise into staging, while `LeaseKeeper` renews the lease;
5. the reports are written into staging with the debit the ledger previews; the scope is debited once,
   atomically, with the composition of every event of the plan, storing the monitors' sealed states
   (`Budget.commit`); then the staging directory is published (`Publication.publish`).
A failure or interrupt before step 5's commit ends the run unpublished (`Budget.abandon`): no debit, no output,
monitors unchanged; a killed run's lease expires. Every file goes through Beam's FileSystems (`connectors.files`),
so the output path may be any URL the workers' Beam installation can write; svt monitor states then go beside
the output (workers on a cluster cannot reach the submitting machine's disk).
Period scopes and svt continuation: see `Budget`. A streaming job (Pub/Sub input) is not one transaction but a
stream that pays and publishes window by window (`pipelines.run.paid_stream`), after the same checks.
"""
from __future__ import annotations

import os
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from dpstream.accounting.ledger import DEFAULT_LEASE_SECONDS, FileDigest
from dpstream.accounting.ledger.receipts import Admission, Debit
from dpstream.accounting.text import first_line
from dpstream.connectors.errors import InputError
from dpstream.connectors.files import is_local
from dpstream.connectors.readers import check_input
from dpstream.connectors.writers import release_path
from dpstream.pipelines.config.jobfile import PUBSUB, Job
from dpstream.pipelines.planning import JobPlan
from dpstream.pipelines.planning.size import plan_size
from dpstream.pipelines.report import document as report
from dpstream.pipelines.run import paid_stream
from dpstream.pipelines.run.budget import PREPAID, Budget, StreamPayment
from dpstream.pipelines.run.errors import EXIT_ERROR, EXIT_INTERNAL, EXIT_OK, EXIT_REFUSED, RunError
from dpstream.pipelines.run.input_scan import VALIDATE_ROWS, InputScan, empty_range_refusal, scan
from dpstream.pipelines.run.job_graph import build_pipeline
from dpstream.pipelines.run.lease import LeaseKeeper
from dpstream.pipelines.run.preflight import (
    check_job_runner,
    check_memory,
    check_runner,
    pin_direct_engine,
    runner_name,
)
from dpstream.pipelines.run.publication import Publication
from dpstream.pipelines.run.transaction import (
    commit_staged,
    ends_unpublished,
    interrupts_deferred,
    publish_committed,
)
from dpstream.pipelines.transforms.input_range import counts_of

STAGES = ("checking the job, its input and its runner", "asking the ledger to admit the run",
          "computing {releases} releases over {windows} windows into staging", "writing the reports and debiting",
          "publishing")
"""The lines `run(progress=...)` is told, in order."""
"""Streaming runs also tell `progress` this line per window, between the third stage and the fourth."""

__all__ = ["EXIT_ERROR", "EXIT_INTERNAL", "EXIT_OK", "EXIT_REFUSED", "RunError", "RunOutcome", "budget", "plan", "run", "validate"]


@dataclass(frozen=True)
class RunOutcome:
    output_dir: str
    report: dict[str, Any]
    files: dict[str, str]  # release name -> file
    pending: dict[str, int] = field(default_factory=dict)  # streaming, stopped at max_seconds: windows not released


def budget(job: Job, ledger_url: str | None = None, state_dir: str | None = None,
           lease_seconds: float = DEFAULT_LEASE_SECONDS) -> Budget:
    """The job's budget (its plan made; the ledger not touched yet); a planning error names the job file."""
    privacy = job.privacy
    return Budget(scope=privacy.scope, epsilon=privacy.epsilon, delta=privacy.delta, bounds=privacy.bounds,
                  window=job.window, releases=job.releases, ledger=ledger_url or privacy.ledger,
                  unit_period=privacy.unit_period, seed=job.beam.seed, state_dir=state_dir, source=job.source,
                  lease_seconds=lease_seconds)


def plan(job: Job) -> JobPlan:
    """The job's plan; a planning error becomes a RunError naming the job file."""
    return budget(job).plan


def validate(job: Job) -> tuple[JobPlan, InputScan | None]:
    """Everything a run checks before its debit, without touching the ledger: plan, input files and headers, and
    the job file's [beam] runner (a Beam runner, verified or allowed; a run's options after -- are its own); and
    where the first `input_scan.VALIDATE_ROWS` rows fall against the range (None for a subscription)."""
    job_plan = plan(job)
    _check_input(job)
    options = beam_options(job, ())
    check_job_runner(options, job.beam.allow_unverified_runner)
    _check_watermark(job, options)
    if job.input.format == PUBSUB:
        return job_plan, None
    return job_plan, _scan(job, max_rows=VALIDATE_ROWS)


def _check_input(job: Job) -> None:
    """The job's input files and headers, checked before the debit (a subscription has no header to look at)."""
    if job.input.format == PUBSUB:
        return
    try:
        check_input(job.input)
    except InputError as err:
        raise RunError(str(err)) from err


def _check_watermark(job: Job, options: PipelineOptions) -> None:
    """RunError (exit 2) for a Pub/Sub job on a runner whose watermark another user's messages could move
    (`pubsub.watermark_refusal`), before the ledger is asked."""
    if job.input.format != PUBSUB:
        return
    from dpstream.connectors.pubsub import PubSubSource, watermark_refusal  # imports the Pub/Sub client

    assert isinstance(job.input, PubSubSource)
    refusal = watermark_refusal(job.input, runner_name(options))
    if refusal is not None:
        raise RunError(f"{job.source}: {refusal}; nothing was debited")


def _scan(job: Job, **limits) -> InputScan:
    """`input_scan.scan` of the job's input, its errors as RunError."""
    try:
        return scan(job.input, job.window, **limits)
    except InputError as err:
        raise RunError(f"{err}; nothing was debited") from err


def _check_range(job: Job) -> None:
    """RunError (before the ledger is asked) unless a file input has a row inside the window range, or the job
    allows an empty range (`input_scan`)."""
    if job.input.format == PUBSUB or job.allow_empty:
        return
    found = _scan(job, stop_inside=True)
    if not found.counts.inside:
        raise RunError(empty_range_refusal(job.source, job.input, job.window, found))


def beam_options(job: Job, beam_args: Sequence[str]) -> PipelineOptions:
    """Beam options from the arguments after `--`; the job's [beam] runner unless --runner is given there."""
    options = PipelineOptions(list(beam_args))
    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = job.beam.runner
    if job.input.format == PUBSUB:
        standard.streaming = True
    pin_direct_engine(options)
    return options


def run(
    job: Job,
    output_dir: str | None = None,
    ledger_url: str | None = None,
    beam_args: Sequence[str] = (),
    log=print,
    max_seconds: float | None = None,
    overwrite: bool = False,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    progress=None,
    detach: bool = False,
) -> RunOutcome:
    """Run the job end to end as one transaction (see the module docstring); raises RunError with the exit code.

    `max_seconds` (streaming jobs only): stop the pipeline after this long even if windows of the range are
    still to be released; the outcome's `pending` counts them per release. `overwrite`: replace a run published
    in the output directory. `lease_seconds`: how long a killed run keeps its monitors and output leased.
    `progress`: told one line as each stage starts (`STAGES`; the CLI prints them when stderr is a terminal).
    `detach`: a stream on a period scope, on a runner that runs the pipeline elsewhere: return once it is
    submitted (the pipeline pays, publishes and reports by itself; the outcome's report is empty).
    """
    progress = progress or (lambda _: None)
    progress(STAGES[0])
    started = time.perf_counter()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    timings: dict[str, float] = {}
    output_dir = output_dir or job.output.path
    output_dir = os.path.abspath(output_dir) if is_local(output_dir) else output_dir
    job_budget = budget(job, ledger_url, state_dir=None if is_local(output_dir) else output_dir,
                        lease_seconds=lease_seconds)  # the plan, made once (calibration can take seconds)
    _check_input(job)
    streaming = job.input.format == PUBSUB
    if max_seconds is not None and not (streaming and max_seconds > 0):
        raise RunError(f"{job.source}: max_seconds must be a positive number of seconds and applies to streaming "
                       f"(input.format = {PUBSUB!r}) jobs only, got {max_seconds!r} for input.format {job.input.format!r}")
    options = beam_options(job, beam_args)
    check_runner(options, job.beam.allow_unverified_runner)
    _check_watermark(job, options)
    check_memory(plan_size(job_budget.plan), options, job.beam.max_memory_gb)
    _check_range(job)  # reads the input's first rows: after every check that needs no data
    grid = job_budget.scope_grid() if streaming else None
    timings["plan_s"] = time.perf_counter() - started
    if streaming:
        if overwrite:
            raise RunError(f"{job.source}: --overwrite does not apply to a stream that pays as it releases, which "
                           f"resumes into its own output; write to another output; nothing was debited")
        payment = None if grid is not None else _stream_payment(job_budget, output_dir, log)
        stream = paid_stream.run_stream(job, job_budget, grid, options, beam_args, output_dir, log, max_seconds,
                                        progress, started, timings, detach,
                                        prepaid=payment is not None and payment.mode == PREPAID)
        return RunOutcome(output_dir, stream.report, stream.files, stream.pending)
    if detach:
        raise RunError(f"{job.source}: --detach applies to streaming jobs (input.format = {PUBSUB!r}), which pay "
                       f"and report from inside the pipeline; a batch run debits and publishes when it ends, so its "
                       f"launcher must stay; nothing was debited")
    with Publication(output_dir, overwrite, job_budget.staged_run, log) as publication, ExitStack() as debiting:
        files = {spec.name: release_path(publication.staging, spec.name, job.output.format) for spec in job.releases}
        try:
            pipeline = build_pipeline(job, job_budget, options, files)
        except (ValueError, TypeError) as err:
            raise RunError(f"{job.source}: cannot build the pipeline: {first_line(err)}; nothing was debited") from err
        label = f"job {job.name} ({job.source}) at {started_at}: " + ", ".join(r.name for r in job.releases)
        try:
            progress(STAGES[1])
            tick = time.perf_counter()
            admission = job_budget.admit(label, output=output_dir)
            timings["admit_s"] = time.perf_counter() - tick
            log(admission.message)
            if admission.note:
                log(admission.note)
            with ends_unpublished(job_budget, admission, log):
                progress(STAGES[2].format(windows=job.window.count, releases=len(job.releases)))
                tick = time.perf_counter()
                with LeaseKeeper(lambda: job_budget.renew(admission), job_budget.lease_seconds, f"run-{admission.run_id}"):
                    _compute(pipeline, log)
                    states = job_budget.sealed_states()
                timings["pipeline_s"] = time.perf_counter() - tick
                progress(STAGES[3])
                debiting.enter_context(interrupts_deferred(log))  # until published: Ctrl-C cannot split the two
                debit, written, journaled = _commit(job, job_budget, admission, states, options, beam_args, files,
                                                    started_at, timings, publication, started)
        finally:
            job_budget.close()
        log(debit.message)
        progress(STAGES[4])
        publish_committed(debit, journaled, publication, "run the job again")
    final_files = {name: publication.final(path) for name, path in files.items()}
    return RunOutcome(output_dir, written, final_files)


def _stream_payment(job_budget: Budget, output_dir: str, log) -> StreamPayment:
    """How a stream on a plain scope pays (`Budget.stream_payment`); logs why not window by window."""
    payment = job_budget.stream_payment(output_dir)
    if payment.mode == PREPAID and payment.reason is not None:
        log(f"note: this stream pays scope {job_budget.scope!r} its whole plan once, when it opens, and then publishes "
            f"each window as it is released: {payment.reason}")
    return payment


def _compute(pipeline: beam.Pipeline, log) -> None:
    """Run the batch pipeline into the staging directory, and log where its input rows fell against the range
    (`input_range`: for the operator, never in an output or the ledger)."""
    result = pipeline.run()
    result.wait_until_finish()
    counts = counts_of(result)
    log(f"input: {counts.text()}" if counts is not None else "input: the runner reported no row counts")


def _commit(job: Job, job_budget: Budget, admission: Admission, states, options: PipelineOptions,
            beam_args: Sequence[str], files: dict[str, str], started_at: str, timings: dict[str, float],
            publication: Publication, started: float) -> tuple[Debit, dict[str, Any], tuple[FileDigest, ...]]:
    """`transaction.commit_staged` with the job's reports (report.json, report.md, chart.png) staged for the debit
    the ledger previews; (the debit, the report, the journaled files)."""

    def stage_report(preview: Debit) -> dict[str, Any]:
        context = report.RunContext(job=job, plan=job_budget.plan, runner=options.view_as(StandardOptions).runner,
                                    beam_args=tuple(beam_args), debit=preview, files=files, started_at=started_at,
                                    timings=timings)
        try:
            return report.write_reports(context, publication.staging, started)
        except OSError as err:
            where = f"{err.filename}: " if err.filename else ""
            raise RunError(f"cannot write the report into {publication.staging}: {where}{err.strerror or err}; "
                           f"nothing was published or debited") from err

    return commit_staged(job_budget, admission, states, publication, files, stage_report)
