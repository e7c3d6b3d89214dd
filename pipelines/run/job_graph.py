"""A job's Beam graph, and the one line a failed pipeline is reported with (shared by batch runs and streams)."""
from __future__ import annotations

from typing import Mapping

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import GlobalWindows

from dpstream.accounting.text import first_line
from dpstream.connectors.beam_io import ReadEvents
from dpstream.connectors.errors import InputError, OutputError
from dpstream.connectors.writers import write_rows
from dpstream.pipelines.config.jobfile import PUBSUB, Job
from dpstream.pipelines.planning import SvtPlan
from dpstream.pipelines.run import streaming as streaming_io
from dpstream.pipelines.run.budget import Budget
from dpstream.pipelines.run.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, RunError


def build_pipeline(job: Job, job_budget: Budget, options: PipelineOptions, files: dict[str, str],
                   parts: dict[str, str] | None = None, emitted: dict[str, tuple[int, ...]] | None = None,
                   payer=None, on_written=None, monitor_starts: Mapping[str, int] | None = None) -> beam.Pipeline:
    """The job's Beam graph: read -> the budget's private releases -> one file per release (streaming: one per
    window, in the `parts` directories; `emitted`: the emissions each release may write, default all;
    `payer`: a `payment.StreamPayer` that pays each window before it is written; `on_written()`: called after
    each window file, e.g. `StreamReport.refresh`; `monitor_starts`: with a payer, svt release name -> the window
    its monitor answers next, `Budget.monitor_starts`). Building it reads no data."""
    pipeline = beam.Pipeline(options=options)
    if job.input.format == PUBSUB:
        from dpstream.connectors.pubsub import PubSubSource, ReadPubSubEvents

        assert isinstance(job.input, PubSubSource)
        batches = pipeline | "Read events" >> ReadPubSubEvents(job.input)
    else:
        batches = pipeline | "Read events" >> ReadEvents(job.input)
    released = job_budget.apply(batches, paid_from=None if payer is None else dict(monitor_starts or {}))
    if parts is not None:
        for name, rows in released.items():
            indices = (emitted or {}).get(name, streaming_io.emissions(job_budget.plan[name], job.window))
            one_row = isinstance(job_budget.plan[name], SvtPlan)
            release_payer = None if payer is None else payer.for_release(job_budget.plan[name])
            rows | f"Write windows {name}" >> streaming_io.WriteWindowParts(job.window, indices, parts[name],
                                                                            release_payer, one_row, on_written)
        return pipeline
    for name, rows in released.items():
        (
            rows
            | f"Unwindow {name}" >> beam.WindowInto(GlobalWindows())
            | f"Collect {name}" >> beam.combiners.ToList()
            | f"Write {name}" >> beam.Map(write_rows, files[name], job.output.format)
        )
    return pipeline


def pipeline_error(err: Exception) -> RunError:
    """One line for a failed computation: the input error, or the release file that could not be written (a full
    filesystem), inside the runner's wrapping when there is one."""
    cause = _input_error(err)
    consequence = "nothing was published or debited"
    if str(err).startswith("KeyboardInterrupt"):  # Beam re-raises Ctrl-C in a worker as RuntimeError
        return RunError(f"interrupted; {consequence}", EXIT_INTERRUPTED)
    if cause is not None:
        return RunError(f"{cause}; {consequence}")
    return RunError(f"pipeline failed: {type(err).__name__}: {first_line(err)}; {consequence}", EXIT_INTERNAL)


def _input_error(err: BaseException) -> InputError | OutputError | None:
    """The innermost InputError or OutputError of the chain (Beam re-raises it with "[while running ...]"
    appended)."""
    found, seen = None, set()
    link: BaseException | None = err
    while link is not None and id(link) not in seen:
        if isinstance(link, (InputError, OutputError)):
            found = link
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return found
