"""Kill anywhere (issue 32, must-show): `dpstream run` is SIGKILLed at seeded random moments of its life, then the
same job is run again into the same output. Whatever the moment, the output ends up published exactly once, its
release files byte-identical to one clean run with the same seed and every file equal to what the ledger journaled
with the run's debit; the scope is debited once per output (one clean run's worth); nothing outside dpstream's own
files is deleted.

`make test` kills at DPSTREAM_KILLS (default 3) moments, `make audit` at 30. The moments are stratified over one
clean run's duration measured in the same test (one drawn uniformly in each KILLS-th of it, seeded), so they land
in start-up, planning, the pipeline, the debit and the publication alike."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

from dpstream.accounting.ledger import FileDigest, Ledger
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.run import runner
from tests.pipelines.test_runner import JOB, _events

KILLS = int(os.environ.get("DPSTREAM_KILLS", "3"))
RELEASES = ("busiest.jsonl", "daily.jsonl", "top.jsonl")


def _command(job: str, url: str, out: str) -> list[str]:
    return [sys.executable, "-m", "dpstream.pipelines.cli.main", "run", job, "--ledger", url, "--output", out,
            "--lease-seconds", "1"]


def _files(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_a_run_killed_anywhere_and_run_again_publishes_once_what_one_clean_run_publishes(tmp_path):
    (tmp_path / "events.csv").write_text(_events(10))
    (tmp_path / "job.toml").write_text(JOB)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("test", 1000.0, 1e-3, "approx:release_delta=1e-6")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "keep.txt").write_text("not dpstream's")
    began = time.monotonic()
    subprocess.run(_command("job.toml", url, "clean"), cwd=tmp_path, check=True, capture_output=True)
    clean_s = time.monotonic() - began
    reference = _files(tmp_path / "clean")
    rng = random.Random(32)
    outcomes = []
    for attempt in range(KILLS):
        out = f"out{attempt}"
        moment = (attempt + rng.random()) / KILLS * clean_s  # one moment in each KILLS-th of the run's life
        child = subprocess.Popen(_command("job.toml", url, out), cwd=tmp_path, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        time.sleep(moment)
        child.send_signal(signal.SIGKILL)
        child.wait()
        killed_published = (tmp_path / out).exists()
        time.sleep(1.2)  # its one-second lease runs out
        try:
            runner.run(jobfile.load(str(tmp_path / "job.toml")), str(tmp_path / out), url, log=lambda _: None)
            again = "published"
        except runner.RunError as err:
            assert "holds a published run" in str(err), (moment, err)
            again = "recovered or already published"
        outcomes.append((round(moment, 2), killed_published, again))
        published = _files(tmp_path / out)
        assert {name: published[name] for name in RELEASES} == {name: reference[name] for name in RELEASES}, moment
        with Ledger(url) as ledger:
            runs = [r for r in ledger.runs_of("test") if r.output == str(tmp_path / out) and r.status == "published"]
            assert len(runs) == 1, (moment, runs)
            journaled = ledger.run_files(runs[0].run_id)
        assert tuple(sorted((FileDigest.of(n, b) for n, b in published.items()), key=lambda f: f.name)) == journaled
    with Ledger(url) as ledger:
        assert len(ledger.history("test")) == KILLS + 1, "one debit per output, the clean run's included"
    assert (tmp_path / "theirs" / "keep.txt").read_text() == "not dpstream's"
    assert not [p for p in tmp_path.iterdir() if ".dpstream-staging-" in p.name], outcomes
    print(f"kill moments (s of a {clean_s:.1f} s clean run), published by the killed run?, the next run:", outcomes)
