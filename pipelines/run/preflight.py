"""Checks of the Beam runner and its options, made before the ledger is asked (they need no private data).

Beam checks most options only when the pipeline runs, after dpstream's admission; these are the ones a run
would otherwise fail on, or finish without computing anything (a Dataflow dry run).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from apache_beam.options.pipeline_options import (
    DirectOptions,
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
    StandardOptions,
    StreamingOptions,
    TestOptions,
)

from dpstream.accounting.text import first_line, instant_text
from dpstream.pipelines.config.specs import WindowSpec
from dpstream.pipelines.planning.size import PlanSize
from dpstream.pipelines.run.errors import RunError

if TYPE_CHECKING:
    from apache_beam.runners.runner import PipelineRunner

DIRECT_RUNNERS = ("DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner")
COMMITTING_RUNNERS = DIRECT_RUNNERS + ("DataflowRunner", "TestDataflowRunner")
"""Runners that commit a stateful step's state together with its outputs, so a retried bundle's first answers
never reach a later step: a stream may seal its svt monitors window by window only on these
(docs/proofs/pipelines.run.stream.md, Retries). Flink recovers by replaying from a checkpoint instead."""
VERIFIED_HERE = DIRECT_RUNNERS + ("PortableRunner",)
"""Runners verified here: CI runs the conformance test (tests/pipelines/runner_conformance.py: a combine in
event-time fixed windows, a side input, GroupByKey on empty and non-ASCII string keys, a stateful DoFn) on the
DirectRunner in batch and in streaming mode, the BundleBasedDirectRunner, and the PortableRunner against Beam's
Python job service (tests/pipelines/test_runner_conformance.py). The PortableRunner is only the client: this check
cannot see the engine behind its --job_endpoint, which is verified when it is Beam's Python job service
(deploy/run-portable.sh) or Flink's job server (deploy/flink, on VERIFIED_BY_BEAM's basis), and not otherwise
(a Spark job server)."""
VERIFIED_BY_BEAM = ("DataflowRunner", "FlinkRunner")
"""The documented deployment targets, which no run here reaches (no cloud project, no Flink cluster): listed on
the basis of Apache Beam's ValidatesRunner suites, which Beam's CI runs on both: on Flink the Python portable
suite (flink_runner_test, inheriting fn_runner_test's windowed combines, side inputs, GroupByKey and state tests)
in batch and streaming; on Dataflow the Python suite (side inputs, GroupByKey, windowed combines) and the Java
suite on Runner v2, the backend Python pipelines run on (state). To check one by hand:
`python -m tests.pipelines.runner_conformance --runner=... [its options]`."""
VERIFIED_RUNNERS = VERIFIED_HERE + VERIFIED_BY_BEAM
"""A run on any other runner (DaskRunner, which moves event-time windows into the global window (beam#27618),
SparkRunner, PrismRunner, a PipelineRunner subclass of one's own) is refused before the ledger is asked unless the
job names it in [beam] allow_unverified_runner (`check_verified_runner`)."""


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


READER_START_S = 10.0
"""How long a Pub/Sub read on the DirectRunner may take from the launch to its first pull (4-9 s measured on two
loaded cores): a window released sooner would count only the messages of the first pull and drop the rest as
late (found by the stream kill-anywhere campaign, tests/integration/test_stream_kill_anywhere.py)."""


def check_event_time(window: WindowSpec, options: PipelineOptions, now: float, first: int = 0) -> None:
    """RunError (exit 2) for a streaming (Pub/Sub) run on the DirectRunner whose first window to release (index
    `first`: a resumed stream's) is released before `now` (seconds since the epoch) plus READER_START_S: that
    runner's Pub/Sub watermark follows the wall clock, not the timestamp attribute, so the records of such a
    window would arrive late and be dropped, and the window would be released from noise alone, or from the
    first pull's records only."""
    if runner_name(options) not in DIRECT_RUNNERS:
        return
    first_release = window.bounds(first)[1] + window.allowed_lateness
    if first_release > now + READER_START_S:
        return
    which = "first window" if first == 0 else f"first window to release (window {first + 1})"
    when = ("in the past" if first_release <= now else
            f"less than {READER_START_S:g} s from now, before the Pub/Sub read pulls its messages")
    raise RunError(f"the {which} ends at {instant_text(window.bounds(first)[1])}, {when}: on the DirectRunner "
                   f"a Pub/Sub read's watermark follows the wall clock, not the timestamp attribute, so past windows "
                   f"would be released from noise alone; replay past events from a file (input.format = \"jsonl\") "
                   f"or start the range after now; nothing was debited")


def check_runner(options: PipelineOptions, allow_unverified: str | None = None) -> None:
    """RunError (exit 2) for runner options that cannot produce a published run, or name a runner not verified
    for dpstream that `allow_unverified` ([beam] allow_unverified_runner) does not name."""
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
    check_job_runner(options, allow_unverified)


def check_job_runner(options: PipelineOptions, allow_unverified: str | None = None) -> None:
    """RunError (exit 2) unless the runner the options name is a Beam runner (`check_runner_exists`) and verified
    or allowed (`check_verified_runner`); the runner's other options are not looked at (`dpstream validate`)."""
    given = options.view_as(StandardOptions).runner or "DirectRunner"
    made = check_runner_exists(options)
    check_verified_runner(made, given if isinstance(given, str) else None, allow_unverified)


def check_runner_exists(options: PipelineOptions) -> PipelineRunner:
    """The runner the options name, made as building the pipeline would make it (a runner object is taken as it
    is); RunError (exit 2) unless the name (e.g. `--runner=NoSuchRunner`, or a module path that does not import)
    makes a Beam runner. A typo is told as one, never as a runner to opt in to."""
    from apache_beam.runners.runner import PipelineRunner, create_runner

    name = options.view_as(StandardOptions).runner or "DirectRunner"
    if not isinstance(name, str):
        return name
    try:
        made = create_runner(name)
    except ValueError:  # not a known name, and no module path: Beam's message lists every known name
        reason = "neither a known runner name nor a module path"
    except Exception as err:  # the module or the class is not there (ImportError, AttributeError), or fails
        reason = first_line(err)
    else:
        if isinstance(made, PipelineRunner):
            return made
        reason = f"{name} makes a {type(made).__name__}, not a PipelineRunner"
    raise RunError(f"--runner={name} is not a Beam runner: {reason}; give {', '.join(VERIFIED_RUNNERS)}, or the "
                   f"full module path of a PipelineRunner subclass; nothing was debited")


def check_verified_runner(runner: PipelineRunner, name: str | None = None, allow_unverified: str | None = None) -> None:
    """RunError (exit 2) unless `runner` is of a class in VERIFIED_RUNNERS (Beam's own, matched by module path: a
    subclass or a namesake elsewhere is not verified), or `allow_unverified` is exactly `name`: the runner as the
    job names it (default: its class's module path), so that opting in to one runner admits no other."""
    path = f"{type(runner).__module__}.{type(runner).__qualname__}"
    if path in _verified_paths():
        return
    name = name or path
    if allow_unverified == name:
        return
    raise RunError(f"runner {name} is not verified for dpstream (verified: {', '.join(VERIFIED_RUNNERS)}): its "
                   f"windows, side inputs, grouping or state may differ from Beam's model (DaskRunner's do); to run "
                   f"on it anyway, opt in with [beam] allow_unverified_runner = \"{name}\"; nothing "
                   f"was debited")


def _verified_paths() -> set[str]:
    """The module paths of VERIFIED_RUNNERS' classes, as Beam knows them (DirectRunner is SwitchingDirectRunner)."""
    return {path for path in StandardOptions.ALL_KNOWN_RUNNERS if path.rsplit(".", 1)[1] in VERIFIED_RUNNERS}


def pin_direct_engine(options: PipelineOptions) -> None:
    """Keep Beam's DirectRunner on the engines verified here. Its SwitchingDirectRunner hands a pipeline to the
    PrismRunner when it can download Prism's binary (and re-runs it on the BundleBasedDirectRunner when Prism
    fails), else to the FnApiRunner or the BundleBasedDirectRunner: which engine runs would depend on network
    access, and Prism is not verified here. Beam skips Prism when `update_compatibility_version` is set; set to
    this SDK's own version it changes nothing else (no version is prior to it)."""
    if runner_name(options) in ("DirectRunner", "SwitchingDirectRunner"):
        streaming = options.view_as(StreamingOptions)
        if not streaming.update_compatibility_version:
            from apache_beam.version import __version__

            streaming.update_compatibility_version = __version__
