"""Issue 33: a runner dpstream has not verified (`preflight.VERIFIED_RUNNERS`) is refused before the ledger is asked
unless the job names it in [beam] allow_unverified_runner; the opt-in admits that runner only, spelled as the job
spells it. The unverified runner of most tests is a DirectRunner subclass in a module of the test's own (a Beam
runner anyone can make, verified by no one), so an admitted run completes here."""
import json
import sys

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import DirectRunner

from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.cli import main as cli
from dpstream.pipelines.run.errors import RunError
from dpstream.pipelines.run.preflight import check_runner, check_verified_runner
from tests.pipelines.test_runner import JOB, _events

STUB = "dpstream_unverified_runner_stub"
STUB_RUNNER = f"{STUB}.DaskRunner"


@pytest.fixture()
def stub_runner(tmp_path, monkeypatch):
    """`STUB_RUNNER`, importable: a DirectRunner subclass standing in for a runner nobody verified."""
    (tmp_path / f"{STUB}.py").write_text("from apache_beam.runners.direct.direct_runner import DirectRunner\n\n\n"
                                         "class DaskRunner(DirectRunner):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, STUB, raising=False)
    yield STUB_RUNNER
    sys.modules.pop(STUB, None)


def _job(tmp_path, beam: str = "") -> str:
    """The runner tests' job with `beam` lines added to its [beam] section, and a scope with room for a run."""
    (tmp_path / "events.csv").write_text(_events(10))
    path = tmp_path / "job.toml"
    path.write_text(JOB.replace("[beam]\nseed = 7", f"[beam]\nseed = 7\n{beam}"))
    with Ledger(_ledger(tmp_path), create=True) as book:
        book.init_scope("test", 20.0, 1e-5, "approx:release_delta=1e-6")
    return str(path)


def _ledger(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


def _run(tmp_path, job: str, *beam_args: str) -> int:
    args = ["run", job, "--output", str(tmp_path / "out"), "--ledger", _ledger(tmp_path)]
    return cli.main(args + (["--", *beam_args] if beam_args else []))


def _runs_and_debits(tmp_path) -> tuple[list, list]:
    with Ledger(_ledger(tmp_path)) as book:
        return book.runs_of("test"), book.history("test")


def _refused(tmp_path, capsys, runner: str) -> None:
    """The one line of an unverified runner's refusal, and a ledger and an output that nothing touched."""
    err = capsys.readouterr().err.strip()
    assert err == (f"dpstream run: runner {runner} is not verified for dpstream (verified: DirectRunner, "
                   f"BundleBasedDirectRunner, SwitchingDirectRunner, PortableRunner, DataflowRunner, FlinkRunner): "
                   f"its windows, side inputs, grouping or state may differ from Beam's model (DaskRunner's do); to "
                   f"run on it anyway, opt in with [beam] allow_unverified_runner = \"{runner}\"; nothing was "
                   f"debited"), err
    assert _runs_and_debits(tmp_path) == ([], [])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["after --", "[beam] runner"])
def test_an_unverified_runner_is_refused_before_the_ledger(tmp_path, capsys, stub_runner, where):
    if where == "after --":
        code = _run(tmp_path, _job(tmp_path), f"--runner={stub_runner}")
    else:
        code = _run(tmp_path, _job(tmp_path, f'runner = "{stub_runner}"'))
    assert code == 2
    _refused(tmp_path, capsys, stub_runner)


@pytest.mark.parametrize("other", ["SparkRunner", "DaskRunner", f"{STUB}.SparkRunner", STUB_RUNNER.lower()])
def test_an_opt_in_admits_no_other_runner(tmp_path, capsys, stub_runner, other):
    """Another runner, the class's bare name, a namesake module path, another spelling: all still refused."""
    job = _job(tmp_path, f'allow_unverified_runner = "{other}"')
    assert _run(tmp_path, job, f"--runner={stub_runner}") == 2
    _refused(tmp_path, capsys, stub_runner)


@pytest.mark.parametrize("where", ["after --", "[beam] runner"])
def test_the_opt_in_admits_the_runner_it_names_end_to_end(tmp_path, stub_runner, where):
    if where == "after --":
        code = _run(tmp_path, _job(tmp_path, f'allow_unverified_runner = "{stub_runner}"'), f"--runner={stub_runner}")
    else:
        code = _run(tmp_path, _job(tmp_path, f'runner = "{stub_runner}"\nallow_unverified_runner = "{stub_runner}"'))
    assert code == 0
    runs, debits = _runs_and_debits(tmp_path)
    assert [run.status for run in runs] == ["published"] and len(debits) == 1
    assert json.loads((tmp_path / "out" / "report.json").read_text())["runner"]["name"] == stub_runner


@pytest.mark.parametrize("runner", ["SparkRunner", "PrismRunner"])
def test_beam_s_unverified_runners_are_refused(tmp_path, capsys, runner):
    assert _run(tmp_path, _job(tmp_path), f"--runner={runner}") == 2
    _refused(tmp_path, capsys, runner)


@pytest.mark.parametrize("beam", ['runner = "DaskRunner"', 'runner = "DaskRunner"\nallow_unverified_runner = "DaskRunner"'])
def test_dask_runner_by_name_is_not_a_runner_beam_can_make(tmp_path, capsys, beam):
    """Beam (2.77) knows no runner named DaskRunner, and its module path needs dask, which is not installed here:
    the run is refused as naming no Beam runner, opted in or not (the opt-in skips no other check)."""
    assert _run(tmp_path, _job(tmp_path, beam)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dpstream run: --runner=DaskRunner is not a Beam runner: neither a known runner name nor a "
                          "module path; give DirectRunner, ") and err.endswith("nothing was debited"), err
    assert _runs_and_debits(tmp_path) == ([], [])


@pytest.mark.parametrize("args", [
    ["--runner=direct"],
    ["--runner=apache_beam.runners.direct.direct_runner.BundleBasedDirectRunner"],
    ["--runner=PortableRunner", "--job_endpoint=localhost:8099"],
    ["--runner=FlinkRunner"],
    ["--runner=DataflowRunner", "--project=p", "--region=r", "--temp_location=gs://b/t"],
])
def test_verified_runners_pass_in_any_spelling_beam_takes(args):
    check_runner(PipelineOptions(args))


def test_a_runner_object_is_verified_by_its_class_and_opted_in_by_its_module_path(stub_runner):
    """The library's check (`Budget.run` on a pipeline whose runner Beam has made)."""
    from dpstream_unverified_runner_stub import DaskRunner

    check_verified_runner(DirectRunner())
    with pytest.raises(RunError, match=rf'^runner {STUB_RUNNER} is not verified .* allow_unverified_runner = '
                                       rf'"{STUB_RUNNER}"; nothing was debited$') as caught:
        check_verified_runner(DaskRunner(), allow_unverified="DaskRunner")
    assert caught.value.exit_code == 2
    check_verified_runner(DaskRunner(), allow_unverified=STUB_RUNNER)


@pytest.mark.parametrize("beam, code", [(f'runner = "{STUB_RUNNER}"', 2),
                                         (f'runner = "{STUB_RUNNER}"\nallow_unverified_runner = "{STUB_RUNNER}"', 0),
                                         ("allow_unverified_runner = 3", 2)])
def test_validate_checks_the_job_s_runner(tmp_path, capsys, stub_runner, beam, code):
    job = _job(tmp_path, beam)
    assert cli.main(["validate", job]) == code
    err = capsys.readouterr().err.strip()
    if beam.startswith("allow"):
        assert err == f"dpstream validate: {job}: beam.allow_unverified_runner must be a non-empty string, got 3"
    elif code == 2:
        assert err.startswith(f"dpstream validate: runner {STUB_RUNNER} is not verified") and "opt in with" in err
    assert _runs_and_debits(tmp_path) == ([], [])


def test_the_direct_runner_is_kept_off_the_prism_engine():
    """Review of issue 33: Beam's SwitchingDirectRunner hands a pipeline to the PrismRunner (not verified here)
    whenever it can download it; a pinned update_compatibility_version is Beam's own condition for skipping it."""
    from apache_beam.options.pipeline_options import PipelineOptions, StreamingOptions
    from apache_beam.version import __version__

    from dpstream.pipelines.run.preflight import pin_direct_engine

    for runner in (None, "DirectRunner", "SwitchingDirectRunner"):
        options = PipelineOptions([] if runner is None else [f"--runner={runner}"])
        pin_direct_engine(options)
        assert options.view_as(StreamingOptions).update_compatibility_version == __version__
    for args in (["--runner=DataflowRunner"], ["--update_compatibility_version=2.60.0"]):
        options = PipelineOptions(args)
        pin_direct_engine(options)
        expected = "2.60.0" if "2.60.0" in args[0] else None
        assert options.view_as(StreamingOptions).update_compatibility_version == expected
