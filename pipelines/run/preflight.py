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

from dpstream.pipelines.run.errors import RunError

_PORTABLE = ("PortableRunner", "FlinkRunner", "SparkRunner", "PrismRunner")


def check_runner(options: PipelineOptions) -> None:
    """RunError (exit 2) for runner options that cannot produce a published run."""
    try:
        runner = options.view_as(StandardOptions).runner or "DirectRunner"
        direct = options.view_as(DirectOptions)
        portable = options.view_as(PortableOptions)
        cloud = options.view_as(GoogleCloudOptions)
        dry_run = options.view_as(TestOptions).dry_run
    except SystemExit as err:  # argparse rejects a malformed value by exiting
        raise RunError("Beam options after --: a value is malformed (see the line above); nothing was debited") from err
    name = runner if isinstance(runner, str) else type(runner).__name__
    if name in ("DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner"):
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
