"""Issue 33: the runners in `preflight.VERIFIED_HERE` pass the conformance test (`runner_conformance`), each in the
modes dpstream runs it in; and the test can fail: with the windowing dropped, as DaskRunner drops it, it reports
('a', 4) in the global window. The PortableRunner runs against Beam's Python job service in this process
(--job_endpoint=embed) with an in-process SDK worker (LOOPBACK)."""
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import create_runner

from dpstream.pipelines.run.preflight import VERIFIED_HERE
from tests.pipelines.runner_conformance import global_window, run_conformance, windowed_combine

RUNNERS = {
    "DirectRunner": ["--runner=DirectRunner"],
    "BundleBasedDirectRunner": ["--runner=BundleBasedDirectRunner"],
    "DirectRunner streaming": ["--runner=DirectRunner", "--streaming"],
    "PortableRunner": ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"],
}


@pytest.mark.parametrize("args", RUNNERS.values(), ids=RUNNERS.keys())
def test_the_runner_conforms(args):
    assert run_conformance(PipelineOptions(args)) == []


@pytest.mark.parametrize("args", RUNNERS.values(), ids=RUNNERS.keys())
def test_the_windowed_combine_check_fails_when_the_windowing_is_dropped(args):
    dropped = {"windowed combine": lambda pipeline, streaming: windowed_combine(pipeline, streaming, global_window())}
    [failure] = run_conformance(PipelineOptions(args), dropped)
    assert failure.startswith("windowed combine: ") and "('a', 4, 'global')" in failure, failure


def test_every_runner_verified_here_is_one_the_conformance_test_runs_on():
    """A runner added to VERIFIED_HERE must be added to RUNNERS too (DirectRunner is SwitchingDirectRunner)."""
    tested = {type(create_runner(PipelineOptions(args).view_as(StandardOptions).runner)) for args in RUNNERS.values()}
    assert {type(create_runner(name)) for name in VERIFIED_HERE} == tested
