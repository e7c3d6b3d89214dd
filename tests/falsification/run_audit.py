"""End-to-end privacy audits of whole `dpstream run`s: trials batched inside one pipeline.

Per-window kinds (histograms, top-k, peak). A job whose privacy unit is user x day (`unit_period = "1d"`)
releases, per day, a mechanism that reads only that day's records and draws its own noise. So a run over n days
whose every day holds the same input x gives n independent samples of the per-day mechanism M(x), through the
whole run path (job file, readers, bounding, aggregation, mechanism, writer), in one pipeline. x' adds one user
(one privacy unit per day) with its records. The harness (`harness.audit`) turns samples of M(x) and M(x') into a
lower bound on epsilon at a stated confidence, to compare with the epsilon the run accounted per user-day.

svt. A monitor's output is one sequence over all the run's windows, so one run is one trial, and its only
randomness is the monitor's (the window queries are exact functions of the data). `svt_sampler` runs
`dpstream run` once per side, captures the queries the pipeline hands to `MonitorRun` (the Beam-free class both
of the svt DoFns call), checks them against a second run, and then draws trials by running `MonitorRun` on those
queries with the production CSPRNG: the same code and the same inputs as the pipeline's monitor step.
"""
from __future__ import annotations

import itertools
import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.run import runner
from dpstream.pipelines.transforms import svt

PARTITIONS = ("A", "B", "C")
_seeds = itertools.count(1000)


@dataclass(frozen=True)
class Inputs:
    """One day's records: `base` (user, hour, partition) rows, and in x' the target user's `target` (hour,
    partition) rows; `value` (a job with value bounds): each record's value, the base's by position, the
    target's `target_value`."""

    base: tuple[tuple[str, int, str], ...]
    target: tuple[tuple[int, str], ...]
    values: tuple[float, ...] | None = None
    target_value: float = 0.0


def one_record_users(per_partition: dict[str, int], hour: int = 12) -> tuple[tuple[str, int, str], ...]:
    """`count` users with one record each at `hour` in each partition."""
    return tuple((f"{p}{i}", hour, p) for p, count in per_partition.items() for i in range(count))


@dataclass(frozen=True)
class AuditJob:
    """A release kind to audit: its [[release]] table, the job's window, noise and privacy unit, and how a day's
    rows become one number (the sample)."""

    release: str
    statistic: str  # "count_A": A's value (-inf if not released); "top": rank-1 index; "peak": 12-hour window of the
    # day; "median_A": A's released median
    min_share: float  # the search considers sets holding at least this share of one side's outputs
    epsilon: float = 1.0
    delta: float = 1e-6
    window: str = "1d"
    unit_period: str | None = "1d"
    partitions: tuple[str, ...] | None = PARTITIONS
    value_range: tuple[float, float] | None = None  # the job reads a value column, clipped to this range


JOB = """[input]
format = "csv"
path = "events.csv"
user = "user"
timestamp = "time"
partition = "dest"
{value}{partitions}
[window]
size = "{window}"
start = 2000-01-01
end = {end}
max_count = 100000
[privacy]
scope = "audit"
epsilon = {epsilon}
delta = {delta}
{unit_period}
max_partitions = 1
max_contributions = 1
{value_range}{release}
[output]
format = "jsonl"
[beam]
seed = {seed}
"""


def _events(inputs: Inputs, with_target: bool, days: int) -> str:
    rows = list(inputs.base) + ([("target", hour, partition) for hour, partition in inputs.target] if with_target else [])
    values = [*(inputs.values or [0.0] * len(inputs.base)), *[inputs.target_value] * (len(rows) - len(inputs.base))]
    lines = ["user,time,dest,value"]
    for day in range(days):
        stamp = (np.datetime64("2000-01-01") + day).astype(str)
        lines += [f"{user},{stamp}T{hour:02d}:30:00Z,{partition},{value!r}"
                  for (user, hour, partition), value in zip(rows, values)]
    return "\n".join(lines) + "\n"


def run_job(job: AuditJob, inputs: Inputs, with_target: bool, days: int) -> tuple[list[dict], float]:
    """(every released row, the epsilon the run accounted) from one in-process `dpstream run` over `days` days."""
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        end = (np.datetime64("2000-01-01") + days).astype(str)
        (root / "events.csv").write_text(_events(inputs, with_target, days))
        partitions = "" if job.partitions is None else f"partitions = {json.dumps(list(job.partitions))}"
        unit_period = "" if job.unit_period is None else f'unit_period = "{job.unit_period}"'
        value, value_range = ("", "") if job.value_range is None else (
            'value = "value"\n', f"min_value = {job.value_range[0]!r}\nmax_value = {job.value_range[1]!r}\n")
        (root / "job.toml").write_text(JOB.format(
            partitions=partitions, window=job.window, end=end, epsilon=job.epsilon, delta=job.delta,
            unit_period=unit_period, release=job.release, seed=next(_seeds), value=value, value_range=value_range))
        url = f"sqlite:///{root / 'ledger.db'}"
        with Ledger(url, create=True) as ledger:
            ledger.init_scope("audit", 1000.0, 0.5, f"approx:release_delta={job.delta}")
        outcome = runner.run(jobfile.load(str(root / "job.toml")), str(root / "out"), url, log=lambda _: None)
        rows = [json.loads(line) for path in outcome.files.values() for line in Path(path).read_text().splitlines()]
        return rows, float(outcome.report["plan"]["epsilon"])


def sample_run(job: AuditJob, inputs: Inputs, with_target: bool, days: int) -> tuple[np.ndarray, float]:
    """(one sample per day, the epsilon the run accounted per user-day) from one in-process `dpstream run`."""
    rows, accounted = run_job(job, inputs, with_target, days)
    return _statistic(job.statistic, rows, days), accounted


def _day(row: dict) -> str:
    return row.get("period_start", row["window_start"])[:10]


def _statistic(kind: str, rows: list[dict], days: int) -> np.ndarray:
    """One number per day; every day must have released something (a day's row set is never empty)."""
    index = {(np.datetime64("2000-01-01") + day).astype(str): day for day in range(days)}
    out = np.full(days, np.nan)
    if kind == "count_A":
        out[:] = -math.inf  # A not released that day
    for row in rows:
        day = index[_day(row)]
        if kind == "count_A" and row["partition"] == "A":
            out[day] = row["value"]
        elif kind == "top" and row["rank"] == 1:
            out[day] = PARTITIONS.index(row["partition"])
        elif kind == "peak":
            out[day] = int(row["window_start"][11:13]) // 12
        elif kind == "median_A" and row["partition"] == "A" and row["quantile"] == 0.5:
            out[day] = row["value"]
    assert not np.isnan(out).any(), "a day without its release"
    return out


@dataclass(frozen=True)
class SvtTrials:
    """What one side of an svt audit draws from: the pipeline's window queries and the monitor's plan."""

    queries: tuple[float, ...]
    plan: object  # planning.SvtPlan
    window: object  # config.specs.WindowSpec

    def sample(self, n: int) -> np.ndarray:
        """n monitor runs over the queries (production CSPRNG); each encoded as its alert bits, window i = bit i."""
        out = np.empty(n)
        for trial in range(n):
            run = svt.MonitorRun(self.plan, self.window, None, None)
            bits = 0
            for index, value in enumerate(self.queries):
                rows = run.answer(index, value)
                bits |= int(rows[0]["alert"]) << index
            out[trial] = bits
        return out


def svt_trials(job: AuditJob, inputs: Inputs, with_target: bool, windows: int) -> SvtTrials:
    """The queries the pipeline hands to its monitor on one side, captured from two runs that must agree."""
    captured: list[tuple[int, float]] = []
    plans: list[tuple[object, object]] = []
    answer: Callable = svt.MonitorRun.answer

    def recording(self, index, value):
        captured.append((index, value))
        plans.append((self._plan, self._window))
        return answer(self, index, value)

    svt.MonitorRun.answer = recording
    try:
        runs = []
        for _ in range(2):
            captured.clear()
            run_job(job, inputs, with_target, windows)
            runs.append(tuple(value for _, value in sorted(captured)))
    finally:
        svt.MonitorRun.answer = answer
    assert runs[0] == runs[1] and len(runs[0]) == windows, runs
    plan, window = plans[0]
    return SvtTrials(runs[0], plan, window)
