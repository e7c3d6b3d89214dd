"""A user x period privacy unit: contributions bounded per period, and the planner composes one period's runs only."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from accounting.accountant import Accountant
from pipelines import jobfile
from pipelines.planning import PlanningError, plan_job, unit_runs
from pipelines.spec import ContributionBounds, ReleaseSpec, WindowSpec
from tests.pipelines.helpers import DAY, START, bounded_sums, events, random_events

LETTERS = tuple("ABCDEF")
BOUNDS = ContributionBounds(max_partitions=2, max_contributions=3)
WINDOW = WindowSpec(size=DAY, start=START, end=START + 28 * DAY)
RELEASES = (
    ReleaseSpec("counts", "histogram", partitions=LETTERS),
    ReleaseSpec("rough", "histogram", noise="laplace", partitions=LETTERS),
    ReleaseSpec("unknown", "histogram"),
    ReleaseSpec("top", "topk", k=2, partitions=LETTERS),
    ReleaseSpec("peak", "peak", period=7 * DAY, maximum=5000.0),
)


@pytest.mark.parametrize("days, peak_runs", [(1, 1), (7, 1), (14, 2)])
def test_the_planner_composes_only_the_windows_of_one_period(days, peak_runs):
    plan = plan_job(RELEASES, BOUNDS, WINDOW, 1.0, 1e-6, unit_period=days * DAY)
    assert [plan[n].runs for n in ("counts", "rough", "unknown", "top")] == [days] * 4
    assert plan["peak"].runs == peak_runs
    accountant = Accountant()
    for event in plan.events():
        accountant.compose(event)
    assert accountant.epsilon(1e-6) <= 1.0
    # Without the peak, the same releases over a range of exactly one period, user-level, get the same noise.
    per_unit = plan_job(RELEASES[:4], BOUNDS, WINDOW, 1.0, 1e-6, unit_period=days * DAY)
    alone = plan_job(RELEASES[:4], BOUNDS, WindowSpec(size=DAY, start=START, end=START + days * DAY), 1.0, 1e-6)
    for name in ("counts", "rough", "unknown"):
        assert per_unit[name].noise == pytest.approx(alone[name].noise, rel=1e-9)
    user_level = plan_job(RELEASES, BOUNDS, WINDOW, 1.0, 1e-6)
    assert plan["counts"].noise < user_level["counts"].noise


def test_unit_runs_counts_overlapping_groups_for_a_ragged_last_period():
    window = WindowSpec(size=DAY, start=START, end=START + 10 * DAY)
    assert unit_runs(window, None) == 10
    assert unit_runs(window, 4 * DAY) == 4  # periods [0, 4), [4, 8), [8, 10)
    assert unit_runs(window, 4 * DAY, group=3) == 2  # [4, 8) overlaps groups [3, 6) and [6, 9)
    assert unit_runs(window, 20 * DAY) == 10


@pytest.mark.parametrize("window, period, message", [
    (WindowSpec(size=2 * DAY, start=START, end=START + 10 * DAY, period=DAY), 2 * DAY, "needs fixed windows"),
    (WindowSpec(size=2 * DAY, start=START, end=START + 10 * DAY), 3 * DAY, "multiple of window.size"),
    (WindowSpec(size=2 * DAY, start=START, end=START + 10 * DAY), DAY, "multiple of window.size"),
])
def test_unit_period_must_be_whole_fixed_windows(window, period, message):
    with pytest.raises(PlanningError, match=message):
        plan_job(RELEASES[:1], BOUNDS, window, 1.0, 1e-6, unit_period=period)


def _without(batch: pa.RecordBatch, user: str, first: float, last: float) -> pa.RecordBatch:
    users = np.asarray(batch.column(0).to_pylist(), dtype=object)
    seconds = batch.column(1).to_numpy() / 1e6
    keep = ~((users == user) & (seconds >= first) & (seconds < last))
    return batch.filter(pa.array(keep))


def test_removing_one_user_period_moves_only_that_periods_windows_within_the_sensitivities():
    """A user with 10^4 events over 28 days; the unit is user x week. Removing one unit (the heavy user in
    week 2) changes only the 7 windows of week 2, each by at most L1 and Linf of the bounds."""
    rng = np.random.default_rng(3)
    heavy = events(["heavy"] * 10_000, START + rng.uniform(0, 28 * DAY, 10_000), rng.choice(list(LETTERS), 10_000))
    others = random_events(3000, 28, 150, LETTERS, seed=4)
    batches = [others, heavy]
    week = (START + 7 * DAY, START + 14 * DAY)
    full = bounded_sums(batches, BOUNDS, WINDOW, seed=9)
    neighbour = bounded_sums([others, _without(heavy, "heavy", *week)], BOUNDS, WINDOW, seed=9)
    changed = set()
    for index in range(WINDOW.count):
        a = full.get(index)
        b = neighbour.get(index)
        difference = (a.reindex(LETTERS, fill_value=0) - b.reindex(LETTERS, fill_value=0)).abs()
        if difference.sum() > 0:
            changed.add(index)
        assert difference.max() <= BOUNDS.linf and difference.sum() <= BOUNDS.l1
        assert np.sqrt((difference ** 2).sum()) <= BOUNDS.l2 + 1e-12
    assert changed == set(range(7, 14))  # the heavy user is in every day of the week, so all 7 change


def test_job_file_reads_unit_period(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text("""
[input]
path = "events.parquet"
user = "user"
timestamp = "time"
partition = "dest"
[window]
size = "1d"
start = 2013-01-01
end = 2013-01-08
[privacy]
scope = "s"
epsilon = 1.0
delta = 1e-6
unit_period = "1d"
[[release]]
kind = "histogram"
name = "h"
""")
    job = jobfile.load(str(path))
    assert job.privacy.unit_period == DAY
    path.write_text(path.read_text().replace('unit_period = "1d"', 'unit_period = "soon"'))
    with pytest.raises(jobfile.JobFileError, match=r"privacy.unit_period must be a positive duration .* got 'soon'"):
        jobfile.load(str(path))
