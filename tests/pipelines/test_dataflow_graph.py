"""The Dataflow graph of a stream that pays as it releases, built offline (issue 16: runners we cannot run here).

Dataflow cannot run on these machines, but its runner can translate a pipeline without submitting it
(`--dry_run=True`): the graph `dpstream run` builds for a Pub/Sub job on a period scope (read, the private
releases, one paid part per window) goes through the DataflowRunner's translation to a streaming job, with the
workers' payer opened on the ledger, and nothing is debited. Needs apache-beam[gcp] (the dev extra installs it).
"""
from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import StandardOptions

from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.run import runner
from dpstream.pipelines.run.budget import WINDOW
from dpstream.pipelines.run.job_graph import build_pipeline
from dpstream.pipelines.run.payment import StreamPayer

JOB = """
[input]
format = "pubsub"
subscription = "projects/demo-project/subscriptions/events"
timestamp = "time"
user = "user"
partition = "dest"
value = "delay"
partitions = ["A", "B", "C"]
[window]
size = "1h"
start = "2030-01-01T00:00:00Z"
end = "2030-01-03T00:00:00Z"
[privacy]
scope = "hourly"
epsilon = 2.0
delta = 1e-6
unit_period = "1d"
min_value = -30
max_value = 120
[[release]]
kind = "histogram"
name = "counts"
[[release]]
kind = "quantiles"
name = "delays"
quantiles = [0.5, 0.9]
[[release]]
kind = "peak"
name = "busiest"
period = "1d"
maximum = 1000
[output]
path = "gs://demo-bucket/out"
format = "jsonl"
"""
DATAFLOW = ["--runner=DataflowRunner", "--project=demo-project", "--region=us-central1",
            "--temp_location=gs://demo-bucket/tmp", "--dry_run=True"]


def test_a_paid_streams_graph_translates_for_dataflow_before_any_debit(tmp_path):
    (tmp_path / "job.toml").write_text(JOB)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("hourly", 100.0, 1e-4, "approx:release_delta=1e-6", unit_period=86400)
    job = jobfile.load(str(tmp_path / "job.toml"))
    options = runner.beam_options(job, DATAFLOW)
    assert options.view_as(StandardOptions).streaming  # a Pub/Sub job is a streaming job
    job_budget = runner.budget(job, url)
    ticket = job_budget.open_stream("graph", job.output.path)
    parts = {spec.name: f"{job.output.path}/windows/{spec.name}" for spec in job.releases}
    payer = StreamPayer(url, ticket.stream_id, ticket.session, job.window, job_budget.scope_grid(), None)
    pipeline = build_pipeline(job, job_budget, options, {}, parts, None, payer, None)
    result = pipeline.run()  # translated for Dataflow, not submitted
    assert result.job is not None and '"JOB_TYPE_STREAMING"' in result.job.json()
    names = {t.unique_name for t in pipeline.runner.proto_pipeline.components.transforms.values()}
    assert {"Read events", "Release counts", "Release delays", "Release busiest"} <= names
    assert {f"Write windows {spec.name}/Write part" for spec in job.releases} <= names
    with Ledger(url) as ledger:
        (stream,) = ledger.streams_of("hourly")
        assert ledger.history("hourly") == [] and not stream.debited and stream.status == "streaming"


SVT_JOB = """
[input]
format = "pubsub"
subscription = "projects/demo-project/subscriptions/events"
timestamp = "time"
user = "user"
partition = "dest"
partitions = ["A", "B", "C"]
[window]
size = "1h"
start = "2030-01-01T00:00:00Z"
end = "2030-01-01T04:00:00Z"
[privacy]
scope = "alerts"
epsilon = 4.0
delta = 1e-6
[[release]]
kind = "histogram"
name = "counts"
noise = "laplace"
[[release]]
kind = "svt"
name = "busy"
metric = "count"
maximum = 40
threshold = 0.5
sigma_threshold = 0.2
[output]
path = "gs://demo-bucket/alerts"
format = "jsonl"
"""


def test_a_live_svt_monitor_s_graph_translates_for_dataflow_with_only_its_opening_debited(tmp_path):
    """A plain-scope stream paid window by window with an svt monitor: the stateful monitor, the Reshuffle that
    hands the writer committed answers, and the sealing writer translate to a streaming job; the only debit is
    the monitor's budget, debited once when the stream opened it. (Four windows: over many more, the accountant
    prices the Laplace windows together below their sum, and the stream would prepay its whole plan instead.)"""
    (tmp_path / "job.toml").write_text(SVT_JOB)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("alerts", 100.0, 1e-4, "approx:release_delta=1e-6")
    job = jobfile.load(str(tmp_path / "job.toml"))
    options = runner.beam_options(job, DATAFLOW)
    job_budget = runner.budget(job, url)
    assert job_budget.stream_payment(job.output.path).mode == WINDOW
    ticket = job_budget.open_stream("graph", job.output.path)
    parts = {spec.name: f"{job.output.path}/windows/{spec.name}" for spec in job.releases}
    payer = StreamPayer(url, ticket.stream_id, ticket.session, job.window, None, None)
    pipeline = build_pipeline(job, job_budget, options, {}, parts, None, payer, None, job_budget.monitor_starts())
    result = pipeline.run()
    assert result.job is not None and '"JOB_TYPE_STREAMING"' in result.job.json()
    names = {t.unique_name for t in pipeline.runner.proto_pipeline.components.transforms.values()}
    assert {"Write windows busy/Commit the monitor's answers", "Write windows busy/Write part",
            "Write windows counts/Write part"} <= names
    with Ledger(url) as ledger:
        (opening,) = ledger.history("alerts")
        assert "opening svt monitor(s) busy" in opening.label
        assert ledger.streams_of("alerts")[0].monitors == ("busy",)


@pytest.mark.parametrize("runner_args, refused", [(DATAFLOW, True), (["--runner=FlinkRunner"], True),
                                                  (["--runner=DirectRunner"], False)])
def test_an_attribute_timestamp_is_refused_where_it_drives_the_watermark(tmp_path, runner_args, refused):
    """Issue 32, case 9: on Dataflow and Flink a Pub/Sub read's watermark follows the timestamp attribute of the
    backlog's messages, so one user's timestamps would decide which other users' records are dropped as late;
    there a job reading the attribute is refused before the ledger is asked (by `dpstream run` and by the
    connector's transform, for library pipelines), and a JSON-key timestamp, whose watermark follows publish
    times, is accepted. The DirectRunner holds its Pub/Sub watermark at the wall clock: accepted."""
    from dpstream.connectors.pubsub import ReadPubSubEvents

    (tmp_path / "job.toml").write_text(JOB.replace('timestamp = "time"', 'timestamp_attribute = "ts"'))
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("hourly", 100.0, 1e-4, "approx:release_delta=1e-6", unit_period=86400)
    job = jobfile.load(str(tmp_path / "job.toml"))
    options = runner.beam_options(job, runner_args)
    if refused:
        with pytest.raises(runner.RunError, match="sets the Pub/Sub watermark on|runs on Dataflow or the") as caught:
            runner._check_watermark(job, options)
        assert caught.value.exit_code == 2 and ("input.timestamp" in str(caught.value)) == ("Flink" not in str(caught.value))
        if "--dry_run=True" not in runner_args:  # `dpstream run` (a dry run is refused for another reason)
            with pytest.raises(runner.RunError, match="sets the Pub/Sub watermark on|runs on Dataflow or the"):
                runner.run(job, ledger_url=url, beam_args=runner_args, log=lambda _: None)
        with pytest.raises(ValueError, match="sets the Pub/Sub watermark|runs on Dataflow or the"):
            beam.Pipeline(options=options) | ReadPubSubEvents(job.input)
    else:
        runner._check_watermark(job, options)
        beam.Pipeline(options=options) | ReadPubSubEvents(job.input)
    with Ledger(url) as ledger:
        assert ledger.history("hourly") == [] and ledger.streams_of("hourly") == []
    (tmp_path / "keyed.toml").write_text(JOB)
    keyed = jobfile.load(str(tmp_path / "keyed.toml"))
    assert keyed.input.timestamp_attribute is None
    if "--runner=FlinkRunner" in runner_args:  # Beam's own Pub/Sub read: a heuristic watermark, refused anyway
        with pytest.raises(runner.RunError, match="a Pub/Sub stream runs on Dataflow or the DirectRunner"):
            runner._check_watermark(keyed, options)
    else:
        runner._check_watermark(keyed, options)  # a JSON key: its watermark follows publish times
