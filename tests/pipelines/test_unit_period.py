"""A user x period privacy unit: contributions bounded per period, and the planner composes one period's runs only."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from dpstream.accounting.accountant import Accountant
from dpstream.accounting.ledger import PeriodGrid
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.config.specs import ContributionBounds, HistogramSpec, PeakSpec, TopKSpec, WindowSpec
from dpstream.pipelines.planning import PlanningError, plan_job
from dpstream.pipelines.planning.windows import groups_per_unit, unit_runs
from tests.pipelines.helpers import DAY, START, bounded_sums, events, random_events

LETTERS = tuple("ABCDEF")
BOUNDS = ContributionBounds(max_partitions=2, max_contributions=3)
WINDOW = WindowSpec(size=DAY, start=START, end=START + 28 * DAY)
RELEASES = (
    HistogramSpec("counts", partitions=LETTERS),
    HistogramSpec("rough", noise="laplace", partitions=LETTERS),
    HistogramSpec("unknown"),
    TopKSpec("top", k=2, partitions=LETTERS),
    PeakSpec("peak", period=7 * DAY, maximum=5000.0),
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
    assert unit_runs(window, PeriodGrid(seconds=4 * DAY)) == 4  # periods [0, 4), [4, 8), [8, 10)
    assert unit_runs(window, PeriodGrid(seconds=20 * DAY)) == 10
    # peak groups of 3 windows: unit period [4, 8) holds windows of groups [3, 6) and [6, 9)
    assert max(map(len, groups_per_unit(window, PeriodGrid(seconds=4 * DAY), (3, 3, 3, 1)))) == 2


@pytest.mark.parametrize("window, period, message", [
    (WindowSpec(size=2 * DAY, start=START, end=START + 10 * DAY, period=DAY), 2 * DAY, "needs fixed windows"),
    (WindowSpec(size=2 * DAY, start=START, end=START + 10 * DAY), 3 * DAY,
     "window 2013-01-03T00:00:00Z..2013-01-05T00:00:00Z crosses the period boundary 2013-01-04T00:00:00Z"),
    (WindowSpec(size=2 * DAY, start=START, end=START + 10 * DAY), DAY, "crosses the period boundary"),
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
    assert job.privacy.unit_period == PeriodGrid(seconds=DAY)
    path.write_text(path.read_text().replace('unit_period = "1d"', 'unit_period = "soon"'))
    with pytest.raises(jobfile.JobFileError, match=r"privacy.unit_period must be a positive duration .* got 'soon'"):
        jobfile.load(str(path))


# -- period scopes in the runner -----------------------------------------------------------------

PERIOD_JOB = """
[input]
format = "csv"
path = "events.csv"
user = "user"
timestamp = "time"
partition = "dest"
partitions = ["A", "B", "C"]
timezone = "{timezone}"
[window]
size = "{size}"
start = {start}
end = {end}
[privacy]
scope = "daily"
epsilon = 4.0
delta = 1e-6
max_partitions = 2
{unit}
[[release]]
kind = "histogram"
name = "hist"
{extra}
[output]
format = "jsonl"
[beam]
seed = 3
"""


def _period_job(tmp_path, start="2013-01-01", end="2013-01-04", size="1d", unit='unit_period = "1d"',
                timezone="UTC", extra=""):
    lines = ["user,time,dest"] + [f"u{u},2013-01-0{d}T{10 + u}:00:00Z,{'AB'[u % 2]}" for d in range(1, 7) for u in range(6)]
    (tmp_path / "events.csv").write_text("\n".join(lines) + "\n")
    path = tmp_path / "job.toml"
    path.write_text(PERIOD_JOB.format(start=start, end=end, size=size, unit=unit, timezone=timezone, extra=extra))
    return jobfile.load(str(path))


def _scope(tmp_path, unit_period=DAY):
    from dpstream.accounting.ledger import Ledger

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("daily", 4.0, 1e-6, "approx:release_delta=1e-6", unit_period=unit_period)
    return url


def _history(url):
    from dpstream.accounting.ledger import Ledger

    with Ledger(url) as ledger:
        return ledger.history("daily"), ledger.show("daily")


@pytest.mark.parametrize("start, end, size, first_day, days", [
    ("2013-01-01", "2013-01-04", "1d", 0, 3),
    ("2013-01-02", "2013-01-03T06:00:00", "6h", 1, 2),  # five 6h windows, the last in day 2
    ("2013-01-02T00:00:00+00:00", "2013-01-02T01:00:00+00:00", "1h", 1, 1),
])
def test_a_job_is_charged_to_every_period_its_windows_overlap(tmp_path, start, end, size, first_day, days):
    from dpstream.accounting.ledger import Periods
    from dpstream.pipelines.run import runner

    job = _period_job(tmp_path, start=start, end=end, size=size)
    periods, note = runner.budget(job).scope_periods(PeriodGrid(seconds=DAY))
    assert note is None
    assert periods == Periods(DAY, START // DAY + first_day, START // DAY + first_day + days - 1)


@pytest.mark.parametrize("kwargs, scope_period, message", [
    (dict(timezone="America/New_York"), DAY,
     r"job.toml: budget scope 'daily' has a budget per 1d period: window.start 2013-01-01T05:00:00Z is not on "
     r"its period grid \(the period holding it starts 2013-01-01T00:00:00Z, the next 2013-01-02T00:00:00Z\); "
     r"nothing was debited"),
    (dict(start="2013-01-01T06:00:00", size="6h"), DAY, r"window.start 2013-01-01T06:00:00Z is not on its period grid"),
    (dict(), 6 * 3600,
     r"budget per 6h period, but \[privacy\] unit_period is 1d; they must be equal"),
    (dict(unit=""), DAY,
     r"budget per 1d period, but the job has no \[privacy\] unit_period: its privacy unit is a user over the whole "
     r"window range, which a per-period budget does not cover; set unit_period to the scope's 1d"),
    (dict(extra='[[release]]\nkind = "svt"\nname = "alerts"\nmetric = "count"\nmaximum = 10000\nthreshold = 0.5\n'
                'sigma_threshold = 0.05'), DAY,
     r"budget per 1d period, which svt releases \(alerts\) cannot use: a monitor's sealed state runs on across runs"),
])
def test_period_scope_mismatches_stop_the_run_before_any_debit(tmp_path, kwargs, scope_period, message):
    from dpstream.pipelines.run import runner

    job = _period_job(tmp_path, **kwargs)
    url = _scope(tmp_path, scope_period)
    with pytest.raises(runner.RunError, match=message) as caught:
        runner.run(job, str(tmp_path / "out"), url, log=lambda _: None)
    assert caught.value.exit_code == 2
    history, view = _history(url)
    assert history == [] and view.periods.spent == 0 and view.state["periods_halted"] == 0
    assert not (tmp_path / "out").exists()


def test_period_runs_renew_the_budget_and_a_rerun_is_refused(tmp_path):
    """Runner level: days 1-3 then 4-6 are both admitted on a period scope (one run per day fits), days 3-5 are
    refused with nothing debited; the report says which periods were charged."""
    from dpstream.pipelines.run import runner

    url = _scope(tmp_path)
    logs = []
    first = runner.run(_period_job(tmp_path), str(tmp_path / "a"), url, log=logs.append)
    second = runner.run(_period_job(tmp_path, start="2013-01-04", end="2013-01-07"), str(tmp_path / "b"), url,
                        log=logs.append)
    assert any("periods 2013-01-04T00:00:00Z..2013-01-07T00:00:00Z (3 periods of 1d)" in line for line in logs[2:])
    assert first.report["budget"]["periods"] == {"period_s": DAY, "start": "2013-01-01T00:00:00Z",
                                                 "end": "2013-01-04T00:00:00Z", "count": 3}
    assert second.report["budget"]["scope_after"]["periods_spent"] == 6
    assert "this debit was charged to each period the job's windows overlap: 2013-01-04T00:00:00Z to " \
           "2013-01-07T00:00:00Z (3 periods of 1d)" in (tmp_path / "b" / "report.md").read_text()
    before = _history(url)
    with pytest.raises(runner.RunError, match=r"in 3 of its 3 periods .* nothing was read or debited") as caught:
        runner.run(_period_job(tmp_path, start="2013-01-03", end="2013-01-06"), str(tmp_path / "c"), url,
                   log=logs.append)
    assert caught.value.exit_code == 3 and _history(url) == before and not (tmp_path / "c").exists()


def test_a_unit_period_job_on_a_plain_scope_debits_it_and_says_so(tmp_path):
    from dpstream.accounting.ledger import Ledger
    from dpstream.pipelines.run import runner

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("daily", 8.0, 2e-6, "approx:release_delta=1e-6")
    logs = []
    outcome = runner.run(_period_job(tmp_path), str(tmp_path / "out"), url, log=logs.append)
    assert logs[1].startswith("note: scope 'daily' has one budget for all its releases, so every run of this user x "
                              "1d job debits it") and "--unit-period 1d" in logs[1]
    assert outcome.report["budget"]["note"] == logs[1] and outcome.report["budget"]["periods"] is None
    with Ledger(url) as ledger:
        assert ledger.show("daily").state["spent_delta"] == pytest.approx(1e-6)
