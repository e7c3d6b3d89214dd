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
4. the pipeline reads, bounds, aggregates and adds noise into staging, while `LeaseKeeper` renews the lease. A
   streaming job (Pub/Sub input) writes each window's rows when the window is released and ends once every
   window of its declared range has been released, or at `max_seconds` (partial; the outcome says which windows
   are pending), then merges them into one file per release (`pipelines.run.streaming`);
5. the reports are written into staging with the debit the ledger previews; the scope is debited once,
   atomically, with the composition of every event of the plan, storing the monitors' sealed states
   (`Budget.commit`); then the staging directory is published (`Publication.publish`).
A failure or interrupt before step 5's commit ends the run unpublished (`Budget.abandon`): no debit, no output,
monitors unchanged; a killed run's lease expires. Every file goes through Beam's FileSystems (`connectors.files`),
so the output path may be any URL the workers' Beam installation can write; svt monitor states then go beside
the output (workers on a cluster cannot reach the submitting machine's disk).
Period scopes and svt continuation: see `Budget`.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from dpstream.accounting.ledger import DEFAULT_LEASE_SECONDS, FileDigest, LedgerConflict
from dpstream.accounting.text import first_line, instant_text
from dpstream.connectors.errors import InputError
from dpstream.connectors.files import is_local, join, remove_tree
from dpstream.connectors.readers import check_input
from dpstream.connectors.writers import release_path
from dpstream.pipelines.config.jobfile import PUBSUB, Job
from dpstream.pipelines.planning import JobPlan
from dpstream.pipelines.planning.size import plan_size
from dpstream.pipelines.report import document as report
from dpstream.pipelines.run import paid_stream
from dpstream.pipelines.run import streaming as streaming_io
from dpstream.pipelines.run.budget import Admission, Budget, Debit
from dpstream.pipelines.run.errors import EXIT_ERROR, EXIT_INTERNAL, EXIT_OK, EXIT_REFUSED, CommitInDoubt, RunError
from dpstream.pipelines.run.job_graph import build_pipeline, pipeline_error
from dpstream.pipelines.run.lease import LeaseKeeper
from dpstream.pipelines.run.preflight import check_event_time, check_memory, check_runner, runner_name
from dpstream.pipelines.run.publication import Publication

_COMMIT_ATTEMPTS = 5
STAGES = ("checking the job, its input and its runner (no data read)", "asking the ledger to admit the run",
          "computing {releases} releases over {windows} windows into staging", "writing the reports and debiting",
          "publishing")
"""The lines `run(progress=...)` is told, in order."""
STREAMING_WINDOW = "window {number} of {windows} (ending {end}) released"
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


def validate(job: Job) -> JobPlan:
    """Everything a run checks before its debit, without touching the ledger: plan, input files and headers."""
    job_plan = plan(job)
    _check_input(job)
    return job_plan


def _check_input(job: Job) -> None:
    """The job's input files and headers, checked before the debit (a subscription has no header to look at)."""
    if job.input.format == PUBSUB:
        return
    try:
        check_input(job.input)
    except InputError as err:
        raise RunError(str(err)) from err


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
    check_runner(options)
    check_memory(plan_size(job_budget.plan), options, job.beam.max_memory_gb)
    grid = job_budget.scope_grid() if streaming else None
    timings["plan_s"] = time.perf_counter() - started
    if streaming and (grid is not None or _pays_per_window(job_budget, output_dir, runner_name(options), log)):
        if overwrite:
            raise RunError(f"{job.source}: --overwrite does not apply to a stream that pays as it releases, which "
                           f"resumes into its own output; write to another output; nothing was debited")
        stream = paid_stream.run_stream(job, job_budget, grid, options, beam_args, output_dir, log, max_seconds,
                                        progress, started, timings, detach)
        return RunOutcome(output_dir, stream.report, stream.files, stream.pending)
    if detach:
        raise RunError(f"{job.source}: --detach applies to streams that pay as they release (on a period scope, "
                       f"`dpstream budget init --unit-period P`, or window by window on a plain one), which pay and "
                       f"report from inside the pipeline; this run debits and publishes when it ends, so its "
                       f"launcher must stay; nothing was debited")
    if streaming:
        check_event_time(job.window, options, time.time())
    with Publication(output_dir, overwrite, job_budget.staged_run, log) as publication, ExitStack() as debiting:
        files = {spec.name: release_path(publication.staging, spec.name, job.output.format) for spec in job.releases}
        publication.transient = (streaming_io.PARTS_DIR,)  # window parts a late bundle may still write: never published
        parts = ({spec.name: join(publication.staging, streaming_io.PARTS_DIR, spec.name) for spec in job.releases}
                 if streaming else None)
        try:
            pipeline = build_pipeline(job, job_budget, options, files, parts)
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
            try:
                progress(STAGES[2].format(windows=job.window.count, releases=len(job.releases)))
                tick = time.perf_counter()
                with LeaseKeeper(lambda: job_budget.renew(admission), job_budget.lease_seconds, f"run-{admission.run_id}"):
                    pending, released = _compute(job, job_budget, pipeline, files, parts, max_seconds, publication,
                                                 progress)
                    states = job_budget.sealed_states(released)
                timings["pipeline_s"] = time.perf_counter() - tick
                progress(STAGES[3])
                debiting.enter_context(_interrupts_deferred(log))  # until published: Ctrl-C cannot split the two
                debit, written, journaled = _commit(job, job_budget, admission, states, options, beam_args, files,
                                                    started_at, timings, pending, publication, started)
            except Exception as err:
                error = err if isinstance(err, RunError) else pipeline_error(err)
                _abandon(job_budget, admission, str(error), log)  # the one line the user sees, not the runner's wrapping
                if error is err:
                    raise
                raise error from err
            except BaseException as err:  # Ctrl-C: the run ends unpublished too
                _abandon(job_budget, admission, f"interrupted ({type(err).__name__})", log)
                raise
        finally:
            job_budget.close()
        log(debit.message)
        progress(STAGES[4])
        # a bundle still running when a stream's pipeline was cancelled may have written a window part since
        remove_tree(join(publication.staging, streaming_io.PARTS_DIR))
        try:
            publication.verify(journaled, "after the debit")
        except RunError as err:
            raise RunError(f"the debit (ledger run {debit.run_id}) stands but nothing was published: {err}; the "
                           f"outputs stay in {publication.staging} (the ledger journaled their digests); run the job "
                           f"again once the staged files are restored, and it publishes them", EXIT_ERROR) from err
        publication.publish()
    final_files = {name: publication.final(path) for name, path in files.items()}
    return RunOutcome(output_dir, written, final_files, pending)


def _pays_per_window(job_budget: Budget, output_dir: str, runner: str, log) -> bool:
    """Whether a stream on a plain scope pays window by window, as it releases (`Budget.window_payment`); logs
    why not."""
    reason = job_budget.window_payment(output_dir, runner)
    if reason is not None:
        log(f"note: this stream pays scope {job_budget.scope!r} once, when it ends, for its whole plan: {reason}")
    return reason is None


def _compute(job: Job, job_budget: Budget, pipeline: beam.Pipeline, files: dict[str, str],
             parts: dict[str, str] | None, max_seconds: float | None, publication: Publication,
             progress) -> tuple[dict[str, int], dict[str, set[int]] | None]:
    """Run the pipeline into the staging directory; (the windows still pending (streaming at max_seconds),
    release name -> the windows released (streaming; None for batch)).
    Streaming tells `progress` one line per window as its releases are written (`STREAMING_WINDOW`)."""
    if parts is None:
        pipeline.run().wait_until_finish()
        return {}, None
    expected = {spec.name: streaming_io.emissions(job_budget.plan[spec.name], job.window) for spec in job.releases}
    def on_window(index: int) -> None:
        progress(STREAMING_WINDOW.format(number=index + 1, windows=job.window.count,
                                         end=instant_text(job.window.bounds(index)[1])))

    stream = streaming_io.run_until_released(pipeline, parts, expected, max_seconds, on_window)
    for name, directory in parts.items():
        streaming_io.merge_parts(directory, stream.released[name], files[name], job.output.format)
    remove_tree(join(publication.staging, streaming_io.PARTS_DIR))
    return stream.pending(), stream.released


@contextmanager
def _interrupts_deferred(log) -> Iterator[None]:
    """Ctrl-C (SIGINT) waits until the block ends: a run that is debiting finishes its debit and publication, so
    an interrupt never leaves a debited run unpublished or a message that says otherwise. Only the main thread
    can hold signals; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            log("note: Ctrl-C arrived while the run was debiting and publishing; it finished both first")


def _commit(job: Job, job_budget: Budget, admission: Admission, states, options: PipelineOptions,
            beam_args: Sequence[str], files: dict[str, str], started_at: str, timings: dict[str, float],
            pending: dict[str, int], publication: Publication,
            started: float) -> tuple[Debit, dict[str, Any], tuple[FileDigest, ...]]:
    """Write the reports into staging with the debit the ledger previews, check that the staged outputs are
    complete and the output directory untouched, then commit that very debit with the staged files' digests
    journaled (again, with a fresh report, when another release changed the scope in between); (the debit, the
    report, the journaled files). Once committed, the staging directory is kept until it is published."""
    for _ in range(_COMMIT_ATTEMPTS):
        preview, token = job_budget.preview(admission, states)
        context = report.RunContext(job=job, plan=job_budget.plan, runner=options.view_as(StandardOptions).runner,
                                    beam_args=tuple(beam_args), debit=preview, files=files, started_at=started_at,
                                    timings=timings, pending=pending)
        try:
            written = report.write_reports(context, publication.staging, started)
        except OSError as err:
            where = f"{err.filename}: " if err.filename else ""
            raise RunError(f"cannot write the report into {publication.staging}: {where}{err.strerror or err}; "
                           f"nothing was published or debited") from err
        staged = publication.digests()
        missing = [name for name, path in files.items() if not publication.holds(path, staged)]
        if missing:
            raise RunError(f"release {missing[0]!r}: its staged file vanished from {publication.staging} while the "
                           f"run computed (a temporary-file cleaner?); nothing was published or debited")
        publication.check_unchanged()
        try:
            debit = job_budget.commit(admission, states, token, staged)
        except LedgerConflict:
            continue
        except CommitInDoubt:
            publication.committed = True  # kept for the next run, which asks the ledger again
            raise
        publication.committed = True
        return debit, written, staged
    raise RunError(f"scope {job_budget.scope!r} kept changing while run {admission.run_id} tried to publish "
                   f"({_COMMIT_ATTEMPTS} attempts); nothing was published or debited")


def _abandon(job_budget: Budget, admission: Admission, reason: str, log) -> None:
    """End the run unpublished; a ledger that cannot be reached lets its lease run out instead."""
    try:
        job_budget.abandon(admission, reason)
    except RunError as err:
        log(f"note: could not record the run's failure ({err})")
