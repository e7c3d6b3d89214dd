"""End-to-end privacy audits of whole `dpstream run`s: trials batched inside one pipeline.

A job whose privacy unit is user x day (`unit_period = "1d"`) with daily windows releases, per window, a
mechanism that reads only that window's records and draws its own noise. So a run over n days whose every day
holds the same input x gives n independent samples of the per-window mechanism M(x), through the whole run path
(job file, readers, bounding, aggregation, mechanism, writer), in one pipeline. x' adds one user (one privacy
unit per day) with `extra` records in partition A. The harness (`harness.audit`) turns samples of M(x) and
M(x') into a lower bound on epsilon at a stated confidence, to compare with the epsilon the run accounted.
"""
from __future__ import annotations

import itertools
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.run import runner

PARTITIONS = ("A", "B", "C")
_seeds = itertools.count(1000)


@dataclass(frozen=True)
class Inputs:
    """One day's records: `base` users per partition (each one record), and in x' one more user with `extra`
    records in A."""

    base: dict[str, int]
    extra: int


@dataclass(frozen=True)
class AuditJob:
    """A release kind to audit: its [[release]] table, the job's noise and bounds, and how a window's rows become
    one number (the sample)."""

    release: str
    statistic: str  # "count_A": the released value of A; "top": the index of the rank-1 partition
    min_share: float  # the search considers sets holding at least this share of one side's outputs
    epsilon: float = 1.0


JOB = """[input]
format = "csv"
path = "events.csv"
user = "user"
timestamp = "time"
partition = "dest"
partitions = ["A", "B", "C"]
[window]
size = "1d"
start = 2000-01-01
end = {end}
max_count = {days}
[privacy]
scope = "audit"
epsilon = {epsilon}
delta = 1e-6
unit_period = "1d"
max_partitions = 1
max_contributions = 1
{release}
[output]
format = "jsonl"
[beam]
seed = {seed}
"""


def _events(inputs: Inputs, with_target: bool, days: int) -> str:
    lines = ["user,time,dest"]
    day_users = [(f"{p}{i}", p) for p, count in inputs.base.items() for i in range(count)]
    if with_target:
        day_users += [("target", "A")] * inputs.extra
    for day in range(days):
        stamp = (np.datetime64("2000-01-01") + day).astype(str)
        lines += [f"{user},{stamp}T12:00:00Z,{partition}" for user, partition in day_users]
    return "\n".join(lines) + "\n"


def sample_run(job: AuditJob, inputs: Inputs, with_target: bool, days: int) -> tuple[np.ndarray, float]:
    """(one sample per day, the epsilon the run accounted per user-day) from one in-process `dpstream run`."""
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        end = (np.datetime64("2000-01-01") + days).astype(str)
        (root / "events.csv").write_text(_events(inputs, with_target, days))
        (root / "job.toml").write_text(JOB.format(end=end, days=days, epsilon=job.epsilon, release=job.release,
                                                  seed=next(_seeds)))
        url = f"sqlite:///{root / 'ledger.db'}"
        with Ledger(url, create=True) as ledger:
            ledger.init_scope("audit", 1000.0, 1e-3, "approx:release_delta=1e-6")
        outcome = runner.run(jobfile.load(str(root / "job.toml")), str(root / "out"), url, log=lambda _: None)
        rows = [json.loads(line) for path in outcome.files.values() for line in Path(path).read_text().splitlines()]
        accounted = float(outcome.report["plan"]["epsilon"])
    return _statistic(job.statistic, rows, days), accounted


def _statistic(kind: str, rows: list[dict], days: int) -> np.ndarray:
    starts = sorted({row["window_start"] for row in rows})
    assert len(starts) == days, (len(starts), days)
    index = {start: i for i, start in enumerate(starts)}
    out = np.full(days, np.nan)
    for row in rows:
        if kind == "count_A" and row["partition"] == "A":
            out[index[row["window_start"]]] = row["value"]
        elif kind == "top" and row["rank"] == 1:
            out[index[row["window_start"]]] = PARTITIONS.index(row["partition"])
    assert not np.isnan(out).any()
    return out
