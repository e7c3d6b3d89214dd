"""The README's library example (examples/library.py: a user's own Beam pipeline with two dpstream releases sharing
one budget) runs, debits its scope once, and gives the same release files as the equivalent job file for a fixed
seed: the job runner and the library are the same code path."""
from __future__ import annotations

import json

from dpstream.accounting.ledger import Ledger
from dpstream.examples import library
from dpstream.pipelines.cli.demo import DEMO_FILE, cache_dir
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.run import runner

SEED, END = 5, "2013-01-08"

JOB = """
[input]
format = "parquet"
path = "{path}"
user = "tailnum"
timestamp = "time_hour"
partition = "dest"
timezone = "America/New_York"
partitions = {partitions}
[window]
size = "1d"
start = 2013-01-01
end = {end}
[privacy]
scope = "{scope}"
unit_period = "1d"
epsilon = {epsilon}
delta = {delta}
max_partitions = 2
max_contributions = 1
[[release]]
kind = "histogram"
name = "daily_departures"
clamp = true
[[release]]
kind = "topk"
name = "daily_top5"
k = 5
weight = 2.0
[output]
format = "parquet"
[beam]
seed = {seed}
"""


def test_library_example_equals_the_job_file(tmp_path, capsys):
    files = library.main([str(tmp_path / "library"), "--end", END, "--seed", str(SEED)])
    printed = capsys.readouterr().out
    assert "admitted: release" in printed and "on scope 'flights-library'" in printed
    with Ledger(f"sqlite:///{tmp_path / 'library' / 'library-ledger.db'}") as ledger:
        (debit,) = ledger.history(library.SCOPE)  # one debit for both releases
    assert debit.label.endswith("daily_departures, daily_top5")

    job_path = tmp_path / "job.toml"
    job_path.write_text(JOB.format(path=cache_dir() / DEMO_FILE, partitions=json.dumps(list(library.DESTINATIONS)),
                                   end=END, scope=library.SCOPE, epsilon=library.EPSILON, delta=library.DELTA,
                                   seed=SEED))
    url = f"sqlite:///{tmp_path / 'job-ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope(library.SCOPE, library.EPSILON, library.DELTA, f"approx:release_delta={library.DELTA!r}")
    outcome = runner.run(jobfile.load(str(job_path)), str(tmp_path / "job"), url, log=lambda _: None)
    with Ledger(url) as ledger:
        assert ledger.history(library.SCOPE)[0].event == debit.event  # the same plan, debited the same
    for name, path in files.items():
        assert (tmp_path / "job" / f"{name}.parquet").read_bytes() == open(path, "rb").read(), name
    assert outcome.report["plan"]["epsilon"] <= library.EPSILON
