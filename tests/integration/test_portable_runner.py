"""The PortableRunner path (DESIGN.md §7): `deploy/run-portable.sh` starts Beam's Python job service and an
SDK worker pool in separate processes, runs a seeded job through the Job API, and stops both; the releases
must equal a DirectRunner run of the same job and seed, byte for byte.

Both services ship with apache_beam, so this test never skips. It runs the script in its own process
group and kills the whole group if it overruns, so no service outlives the test.
"""
import json
import os
import signal
import subprocess
import sys

from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.cli import main as cli
from tests.pipelines.test_runner import JOB, _events

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "deploy", "run-portable.sh")
RELEASES = ("daily.jsonl", "top.jsonl", "busiest.jsonl")
DEADLINE_S = 100


def _run_script(args, env):
    process = subprocess.Popen([SCRIPT, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        out, _ = process.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        raise AssertionError(f"run-portable.sh did not finish within {DEADLINE_S}s; output:\n{out}")
    return process.returncode, out


def test_portable_runner_matches_the_direct_runner(tmp_path):
    (tmp_path / "events.csv").write_text(_events(10))
    job = tmp_path / "job.toml"
    job.write_text(JOB)
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(ledger, create=True) as book:
        book.init_scope("test", 20.0, 1e-5, "approx:release_delta=1e-6")

    direct = tmp_path / "direct"
    assert cli.main(["run", str(job), "--output", str(direct), "--ledger", ledger, "--", "--runner=DirectRunner"]) == 0

    portable = tmp_path / "portable"
    env = dict(os.environ, PYTHON=sys.executable)
    code, out = _run_script([str(job), "--output", str(portable), "--ledger", ledger], env)
    assert code == 0, out
    runner = json.loads((portable / "report.json").read_text())["runner"]
    assert runner["name"] == "PortableRunner" and "--environment_type=EXTERNAL" in runner["beam_args"]
    for name in RELEASES:
        assert (portable / name).read_bytes() == (direct / name).read_bytes(), name
    with Ledger(ledger) as book:
        assert len(book.history("test")) == 2  # one debit per run, nothing more
