"""Run a job: validate -> plan -> debit the ledger once -> run the Beam pipeline -> write releases -> report.

Order matters for privacy (DESIGN.md §1, §6):
1. the job file is validated and every noise scale is planned from public
   values only (`pipelines.planning.plan_job`);
2. input files and headers are checked, the output directory is checked for
   write access and the budget scope is looked up; no event is read;
3. the scope is debited once, atomically, with the composition of every
   event of the plan (`accounting.ledger.Ledger.spend`); a refusal ends the
   run here (exit 3) with nothing read and nothing written;
4. the pipeline, built before the debit (building reads nothing), reads,
   bounds, aggregates and adds noise; each release is collected and written
   as one file;
5. the report is built from the plan, the accountant's explanation and the
   ledger's answer (`pipelines.report`).
A failure after step 3 (a bad row, a runner error) keeps the debit: the data
may have been touched, so refunding would depend on it. Nothing is released.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.transforms.window import GlobalWindows

from accounting.events import Composed
from accounting.ledger import Ledger, LedgerError, resolve_url
from connectors.beam_io import ReadEvents
from connectors.errors import InputError
from connectors.readers import check_input
from connectors.writers import release_path, write_rows
from pipelines import report
from pipelines.jobfile import Job
from pipelines.planning import JobPlan, PlanningError, plan_job

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


def plan(job: Job) -> JobPlan:
    """The job's plan; a planning error becomes a RunError naming the job file."""
    try:
        return plan_job(job.releases, job.privacy.bounds, job.window, job.privacy.epsilon, job.privacy.delta)
    except PlanningError as err:
        raise RunError(f"{job.source}: {err}") from err


def validate(job: Job) -> JobPlan:
    """Everything a run checks before its debit, without touching the ledger: plan, input files and headers."""
    job_plan = plan(job)
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
    return options


def run(
    job: Job,
    output_dir: str | None = None,
    ledger_url: str | None = None,
    beam_args: Sequence[str] = (),
    log=print,
) -> RunOutcome:
    """Run the job end to end (see the module docstring); raises RunError with the exit code."""
    started = time.perf_counter()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    timings: dict[str, float] = {}
    job_plan = validate(job)
    timings["plan_s"] = time.perf_counter() - started
    output_dir = os.path.abspath(output_dir or job.output.path)
    _check_writable(output_dir)
    options = beam_options(job, beam_args)
    url = resolve_url(ledger_url or job.privacy.ledger)

    files = {spec.name: release_path(output_dir, spec.name, job.output.format) for spec in job.releases}
    try:
        pipeline = _build_pipeline(job, job_plan, options, files)
    except (ValueError, TypeError) as err:
        raise RunError(f"{job.source}: cannot build the pipeline: {err}; nothing was debited") from err

    tick = time.perf_counter()
    debit = _debit(job, job_plan, url, started_at)
    timings["debit_s"] = time.perf_counter() - tick
    log(debit["message"])

    tick = time.perf_counter()
    os.makedirs(output_dir, exist_ok=True)
    _run_pipeline(pipeline, debit)
    timings["pipeline_s"] = time.perf_counter() - tick

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
    )
    written = report.write_reports(context, output_dir, started)
    return RunOutcome(output_dir, written, files)


def _check_writable(output_dir: str) -> None:
    existing = output_dir
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        raise RunError(f"output directory {output_dir}: {existing} is not a writable directory")


def _debit(job: Job, job_plan: JobPlan, url: str, started_at: str) -> dict[str, Any]:
    scope = job.privacy.scope
    create_hint = (
        f"create it with `dpstream budget init --ledger {url} --scope {scope} --epsilon EPSILON --delta DELTA "
        f"--filter approx:release_delta={job.privacy.delta!r}` (one run of this job spends "
        f"epsilon={job.privacy.epsilon:g}, delta={job.privacy.delta:g})"
    )
    event = Composed(tuple(job_plan.events()))
    label = f"job {job.name} ({job.source}) at {started_at}: " + ", ".join(r.name for r in job.releases)
    try:
        with Ledger(url) as ledger:
            try:
                ledger.show(scope)
            except LedgerError as err:
                raise RunError(f"budget scope {scope!r} is not in ledger {ledger.display_url}; {create_hint}") from err
            result = ledger.spend(scope, event, label)
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
    }


def _build_pipeline(job: Job, job_plan: JobPlan, options: PipelineOptions, files: dict[str, str]) -> beam.Pipeline:
    """The job's Beam graph: read -> private releases -> one file per release. Building it reads no data."""
    from pipelines.graph import private_releases

    pipeline = beam.Pipeline(options=options)
    batches = pipeline | "Read events" >> ReadEvents(job.input)
    released = private_releases(batches, job.releases, job_plan, job.privacy.bounds, job.window, job.beam.seed)
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
        cause = _input_error(err)
        stands = f"the debit (ledger release id {debit['release_id']}) stands; nothing was released"
        if cause is not None:
            raise RunError(f"{cause}; {stands}") from err
        raise RunError(f"pipeline failed: {type(err).__name__}: {_first_line(err)}; {stands}") from err


def _input_error(err: BaseException) -> InputError | None:
    """The innermost InputError of the chain (Beam re-raises it with "[while running ...]" appended)."""
    found, seen = None, set()
    while err is not None and id(err) not in seen:
        if isinstance(err, InputError):
            found = err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return found


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else ""
