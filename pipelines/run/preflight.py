"""Checks of the Beam runner and its options, made before the ledger is asked (they need no private data).

Beam checks most options only when the pipeline runs, after dpstream's admission; these are the ones a run
would otherwise fail on, or finish without computing anything (a Dataflow dry run).
"""
from __future__ import annotations

from apache_beam.options.pipeline_options import (
    DirectOptions,
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
    StandardOptions,
    TestOptions,
)

from dpstream.accounting.text import first_line, instant_text
from dpstream.pipelines.config.specs import WindowSpec
from dpstream.pipelines.planning.size import PlanSize
from dpstream.pipelines.run.errors import RunError

_PORTABLE = ("PortableRunner", "FlinkRunner", "SparkRunner", "PrismRunner")
DIRECT_RUNNERS = ("DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner")
COMMITTING_RUNNERS = DIRECT_RUNNERS + ("DataflowRunner", "TestDataflowRunner")
"""Runners that commit a stateful step's state together with its outputs, so a retried bundle's first answers
never reach a later step: a stream may seal its svt monitors window by window only on these
(docs/proofs/pipelines.run.stream.md, Retries). Flink recovers by replaying from a checkpoint instead."""


def runner_name(options: PipelineOptions) -> str:
    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    return runner if isinstance(runner, str) else type(runner).__name__


def check_memory(size: PlanSize, options: PipelineOptions, limit_gb: float) -> None:
    """RunError (exit 2) when a DirectRunner run's estimated memory is above `limit_gb` GiB ([beam] max_memory_gb).

    Cluster runners spread the rows over their workers, so only the in-process runner is refused."""
    if runner_name(options) not in DIRECT_RUNNERS or size.memory_bytes <= limit_gb * 2**30:
        return
    raise RunError(f"the plan writes {size.describe()}, above [beam] max_memory_gb = {limit_gb:g}: raise it if this "
                   f"machine has the memory, shorten the window range or list fewer partitions, or run on a cluster "
                   f"runner (-- --runner=DataflowRunner or FlinkRunner); nothing was debited")


def check_event_time(window: WindowSpec, options: PipelineOptions, now: float, first: int = 0) -> None:
    """RunError (exit 2) for a streaming (Pub/Sub) run on the DirectRunner whose first window to release (index
    `first`: a resumed stream's) is released before `now` (seconds since the epoch): that runner's Pub/Sub
    watermark follows the wall clock, not the timestamp attribute, so every record of such a window would arrive
    late and be dropped, and the window would be released as noise alone."""
    if runner_name(options) not in DIRECT_RUNNERS:
        return
    first_release = window.bounds(first)[1] + window.allowed_lateness
    if first_release > now:
        return
    which = "first window" if first == 0 else f"first window to release (window {first + 1})"
    raise RunError(f"the {which} ends at {instant_text(window.bounds(first)[1])}, in the past: on the DirectRunner "
                   f"a Pub/Sub read's watermark follows the wall clock, not the timestamp attribute, so past windows "
                   f"would be released from noise alone; replay past events from a file (input.format = \"jsonl\") "
                   f"or run on Dataflow, or start the range after now; nothing was debited")


def check_runner(options: PipelineOptions) -> None:
    """RunError (exit 2) for runner options that cannot produce a published run."""
    try:
        name = runner_name(options)
        direct = options.view_as(DirectOptions)
        portable = options.view_as(PortableOptions)
        cloud = options.view_as(GoogleCloudOptions)
        dry_run = options.view_as(TestOptions).dry_run
    except SystemExit as err:  # argparse rejects a malformed value by exiting
        raise RunError("Beam options after --: a value is malformed (see the line above); nothing was debited") from err
    if name in DIRECT_RUNNERS:
        workers = direct.direct_num_workers
        if workers is not None and workers < 0:
            raise RunError(f"--direct_num_workers must be 0 (one per core) or more, got {workers}; nothing was debited")
    if name == "PortableRunner" and not portable.job_endpoint:
        raise RunError("--runner=PortableRunner needs --job_endpoint=HOST:PORT (a Flink or Spark job server); "
                       "nothing was debited")
    if dry_run not in (None, False, "", "0", "False", "false"):
        raise RunError("--dry_run makes the runner skip the job, so nothing would be released; `dpstream validate` "
                       "checks a job without running it; nothing was debited")
    if name == "DataflowRunner":
        missing = [flag for flag, value in (("--project", cloud.project), ("--region", cloud.region),
                                             ("--temp_location", cloud.temp_location)) if not value]
        if missing:
            raise RunError(f"--runner=DataflowRunner needs {', '.join(missing)}; nothing was debited")
    check_runner_exists(options)


def check_runner_exists(options: PipelineOptions) -> None:
    """RunError (exit 2) unless the runner's name (e.g. `--runner=NoSuchRunner`, or a module path that does not
    import) makes a Beam runner, as building the pipeline would; a runner object is taken as it is."""
    from apache_beam.runners.runner import PipelineRunner, create_runner

    name = options.view_as(StandardOptions).runner or "DirectRunner"
    if not isinstance(name, str):
        return
    try:
        made = create_runner(name)
    except ValueError:  # not a known name, and no module path: Beam's message lists every known name
        reason = "neither a known runner name nor a module path"
    except Exception as err:  # the module or the class is not there (ImportError, AttributeError), or fails
        reason = first_line(err)
    else:
        if isinstance(made, PipelineRunner):
            return
        reason = f"{name} makes a {type(made).__name__}, not a PipelineRunner"
    raise RunError(f"--runner={name} is not a Beam runner: {reason}; give DirectRunner, DataflowRunner, "
                   f"FlinkRunner, SparkRunner, PortableRunner or PrismRunner, or the full module path of a "
                   f"PipelineRunner subclass; nothing was debited")
