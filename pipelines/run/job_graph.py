"""A job's Beam graph: read -> the budget's private releases -> one staged file per release (batch runs and streams)."""
from __future__ import annotations

from typing import Mapping

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from dpstream.connectors.beam_io import ReadEvents, WriteRelease
from dpstream.pipelines.config.jobfile import PUBSUB, Job
from dpstream.pipelines.planning import SvtPlan
from dpstream.pipelines.run import streaming as streaming_io
from dpstream.pipelines.run.budget import Budget
from dpstream.pipelines.transforms.graph import release_columns
from dpstream.pipelines.transforms.input_range import CountRange


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
        batches | "Count rows" >> CountRange(job.window)  # for the operator's log only (`input_range`)
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
        rows | f"Write {name}" >> WriteRelease(files[name], job.output.format, release_columns(job_budget.plan[name]))
    return pipeline

