"""`planning.size`: the rows a plan writes (checked against what a run writes) and the memory estimate (checked
against a measured run: the estimate must not be below it)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.planning.size import plan_size
from dpstream.pipelines.run import runner
from dpstream.pipelines.run.errors import RunError
from dpstream.pipelines.run.preflight import check_memory

JOB = """[input]
format = "csv"
path = "events.csv"
user = "user"
timestamp = "time"
partition = "dest"
[window]
size = "{size}"
start = 2000-01-01
end = {end}
max_count = 1000000
[privacy]
scope = "s"
epsilon = 4
delta = 1e-6
[[release]]
kind = "histogram"
name = "known"
partitions = {partitions}
[[release]]
kind = "histogram"
name = "selected"
[[release]]
kind = "topk"
name = "top"
k = 2
partitions = {partitions}
[[release]]
kind = "peak"
name = "busiest"
period = "{period}"
maximum = 100
[[release]]
kind = "svt"
name = "alerts"
maximum = 100
threshold = 0.5
sigma_threshold = 0.2
[output]
format = "jsonl"
"""


def _job(directory: Path, size="1d", end="2000-01-08", period="2d", partitions=("A", "B", "C")) -> Path:
    (directory / "events.csv").write_text("user,time,dest\n" + "".join(
        f"u{i},2000-01-0{1 + i % 7}T10:00:00Z,{'ABC'[i % 3]}\n" for i in range(60)))
    path = directory / "job.toml"
    path.write_text(JOB.format(size=size, end=end, period=period, partitions=json.dumps(list(partitions))))
    return path


def test_rows_are_what_a_run_writes(tmp_path):
    job = jobfile.load(str(_job(tmp_path)))
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("s", 100.0, 1e-3, "approx:release_delta=1e-6")
    outcome = runner.run(job, str(tmp_path / "out"), url, log=lambda _: None)
    written = {name: len(Path(path).read_text().splitlines()) for name, path in outcome.files.items()}
    size = plan_size(runner.plan(job))
    assert size.rows == {"known": 7 * 3, "selected": None, "top": 7 * 2, "busiest": 4, "alerts": 7}
    assert {name: written[name] for name in written if name != "selected"} == {
        name: rows for name, rows in size.rows.items() if name != "selected"}
    assert size.known_rows == 21 + 14 + 4 + 7
    assert size.describe().startswith("46 output rows (about 0.5 GB on the DirectRunner), plus the privately "
                                      "selected partitions of selected")


def test_the_limit_refuses_only_the_direct_runner_and_can_be_raised(tmp_path):
    job = jobfile.load(str(_job(tmp_path, size="1m", end="2000-03-01", partitions=[f"p{i}" for i in range(500)])))
    size = plan_size(runner.plan(job))
    assert size.rows["known"] == 60 * 1440 * 500 and size.memory_bytes > 8 * 2**30
    with pytest.raises(RunError, match=r"above \[beam\] max_memory_gb = 8: raise it") as refused:
        check_memory(size, PipelineOptions([]), job.beam.max_memory_gb)
    assert refused.value.exit_code == 2
    check_memory(size, PipelineOptions([]), size.memory_bytes / 2**30)  # raised to the estimate: admitted
    check_memory(size, PipelineOptions(["--runner=DataflowRunner"]), 8.0)  # a cluster runner: not refused
    with pytest.raises(jobfile.JobFileError, match=r"beam\.max_memory_gb must be a positive number"):
        (tmp_path / "bad.toml").write_text((tmp_path / "job.toml").read_text() + "[beam]\nmax_memory_gb = 0\n")
        jobfile.load(str(tmp_path / "bad.toml"))


MEASURE = """
import sys
from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.run import runner
root = sys.argv[1]
with Ledger(f"sqlite:///{root}/ledger.db", create=True) as ledger:
    ledger.init_scope("s", 1e6, 0.5, "approx:release_delta=1e-6")
runner.run(jobfile.load(f"{root}/job.toml"), f"{root}/out", f"sqlite:///{root}/ledger.db", log=lambda _: None)
# The process's own peak (VmHWM, reset at exec): ru_maxrss would carry over the forking pytest process's peak.
print(next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


def test_the_estimate_is_not_below_a_measured_run(tmp_path):
    """500 hourly windows x 50 partitions (25,000 histogram rows, and the other four releases) on the DirectRunner."""
    job_path = _job(tmp_path, size="1h", end="2000-01-22T20:00:00", period="10h",
                    partitions=[f"p{i}" for i in range(50)])
    size = plan_size(runner.plan(jobfile.load(str(job_path))))
    measured = int(subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path)], check=True, capture_output=True,
                                  text=True).stdout.split()[-1])
    print(f"\n{size.describe()}: measured peak RSS {measured / 2**20:.0f} MB, estimate {size.memory_bytes / 2**20:.0f} MB")
    assert measured <= size.memory_bytes
