"""Calendar periods: local days, ISO weeks, months and years as period-scope periods, `unit_period` and peak
periods, checked against a datetime oracle, with daylight-saving days of 23 and 25 hours; and a daily schedule on
a local-day period scope whose runs each debit only their own day."""
from __future__ import annotations

import json
import math
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import numpy as np
import pytest

from dpstream.accounting.ledger import Ledger, LedgerError, PeriodGrid, Periods
from dpstream.pipelines.cli import main as cli
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.config.specs import ContributionBounds, HistogramSpec, PeakSpec, WindowSpec
from dpstream.pipelines.planning import PlanningError, plan_job
from dpstream.pipelines.planning.windows import peak_groups, unit_periods, unit_runs

ZONES = ("UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Sao_Paulo", "Asia/Kathmandu")
HOUR = 3600


def _first_day(day: date, unit: str) -> date:
    """The oracle's first day of the unit holding `day`."""
    if unit == "day":
        return day
    if unit == "week":
        return day - timedelta(days=day.weekday())
    return day.replace(day=1) if unit == "month" else day.replace(month=1, day=1)


def _midnight(day: date, zone: str) -> float:
    return datetime.combine(day, time(), tzinfo=ZoneInfo(zone)).timestamp()


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("unit", ("day", "week", "month", "year"))
def test_calendar_periods_match_a_datetime_oracle(zone, unit):
    """For 2,000 instants from 1965 to 2035 (Sao Paulo's old midnight DST jumps included), the period holding
    each starts at the local midnight that begins its day, week, month or year, and the next period starts where
    the unit after it begins; consecutive indices tile time."""
    grid = PeriodGrid(calendar=(1, unit), timezone=zone)
    rng = np.random.default_rng(7)
    for instant in rng.uniform(-5 * 365 * 86400, 65 * 365 * 86400, 2000).round():
        local = datetime.fromtimestamp(instant, ZoneInfo(zone)).date()
        first = _first_day(local, unit)
        index = grid.index(instant)
        assert grid.start(index) == _midnight(first, zone) <= instant < grid.start(index + 1)
        following = _first_day(first + timedelta(days=32 if unit in ("month", "year") else 7 if unit == "week" else 1)
                                if unit != "year" else first.replace(year=first.year + 1), unit)
        assert grid.start(index + 1) == _midnight(following, zone)
        assert grid.is_boundary(grid.start(index)) and not grid.is_boundary(grid.start(index) + 1)


def test_new_york_days_have_23_and_25_hours_and_multi_unit_periods_count_from_1970():
    days = PeriodGrid.of("1day", "America/New_York")
    spring, autumn = days.index(_midnight(date(2026, 3, 8), "America/New_York")), \
        days.index(_midnight(date(2026, 11, 1), "America/New_York"))
    assert [(days.start(k + 1) - days.start(k)) / HOUR for k in (spring - 1, spring, autumn, autumn + 1)] == [24, 23, 25, 24]
    quarters = PeriodGrid(calendar=(3, "month"), timezone="UTC")
    assert [datetime.fromtimestamp(quarters.start(quarters.index(_midnight(date(2026, m, 15), "UTC"))),
                                   ZoneInfo("UTC")).month for m in (1, 3, 4, 12)] == [1, 1, 4, 10]
    assert PeriodGrid.from_dict(days.to_dict()) == days and days.options == "--unit-period 1day --timezone America/New_York"
    assert PeriodGrid.from_dict({"period_s": 86400}) == PeriodGrid.of(86400)  # what ledgers before calendars stored


def test_calendar_periods_overlapping_a_range():
    days = PeriodGrid.of("1day", "America/New_York")
    start, end = _midnight(date(2026, 3, 7), "America/New_York"), _midnight(date(2026, 3, 10), "America/New_York")
    periods = Periods.overlapping(start, end, days)
    assert periods.count == 3 and (periods.start(), periods.end()) == (start, end)
    assert Periods.overlapping(start, start + 1, days).count == 1
    assert periods.describe() == ("2026-03-07T05:00:00Z..2026-03-10T04:00:00Z (3 periods of 1 day (America/New_York))")
    assert Periods.from_json(json.loads(json.dumps(periods.to_json()))) == periods


@pytest.mark.parametrize("bad, message", [
    (dict(calendar=(0, "day")), "a count of days, weeks, months or years"),
    (dict(calendar=(1, "fortnight")), "a count of days, weeks, months or years"),
    (dict(calendar=(1, "day"), timezone="Mars/Olympus"), "IANA time zone"),
    (dict(seconds=1.5), "whole number of seconds"),
    (dict(), "either fixed"),
])
def test_bad_grids_are_refused(bad, message):
    with pytest.raises(LedgerError, match=message):
        PeriodGrid(**bad)


def _hourly(start: str, end: str) -> WindowSpec:
    return WindowSpec.of("1h", start, end, timezone="America/New_York")


def test_a_local_day_unit_composes_the_windows_of_its_longest_day():
    """Hourly windows under a New York local-day unit: a unit touches 25 windows on the fall-back day, 23 on the
    spring-forward day, so the plan composes over 25 and 24 windows; fixed 1d periods compose over 24."""
    day = PeriodGrid.of("1day", "America/New_York")
    assert unit_runs(_hourly("2026-10-31", "2026-11-03"), day) == 25
    assert unit_runs(_hourly("2026-03-07", "2026-03-10"), day) == 24
    assert unit_runs(_hourly("2026-03-08", "2026-03-09"), day) == 23
    releases = (HistogramSpec("h", partitions=("A",)),)
    autumn = plan_job(releases, ContributionBounds(), _hourly("2026-10-31", "2026-11-03"), 1.0, 1e-6, unit_period=day)
    fixed = plan_job(releases, ContributionBounds(), WindowSpec.of("1h", "2026-10-31", "2026-11-03"), 1.0, 1e-6,
                     unit_period=86400)
    assert autumn["h"].noise > fixed["h"].noise  # 25 compositions cost more than 24


def test_windows_that_cross_a_local_midnight_are_refused():
    """24-hour windows from UTC midnight cross New York midnights: a unit would span two local days."""
    window = WindowSpec.of("1d", "2026-03-01T05:00:00+00:00", "2026-03-12T05:00:00+00:00")
    with pytest.raises(PlanningError, match=r"window 2026-03-08T05:00:00Z..2026-03-09T05:00:00Z crosses the period "
                                            r"boundary 2026-03-09T04:00:00Z"):
        plan_job((HistogramSpec("h", partitions=("A",)),), ContributionBounds(), window, 1.0, 1e-6,
                 unit_period=PeriodGrid.of("1day", "America/New_York"))


def test_peak_periods_on_the_calendar():
    """Busiest month of each year: monthly windows, yearly periods; busiest day of each month: local days."""
    months = WindowSpec.of("1mo", "2012-01-01", "2015-01-01")
    sizes, bounds = peak_groups(months, "1y")
    assert sizes == (12, 12, 12) and [datetime.fromtimestamp(a, ZoneInfo("UTC")).year for a, _ in bounds] == [2012, 2013, 2014]
    days = WindowSpec.of("1day", "2024-01-15", "2024-04-01", timezone="America/New_York")
    sizes, bounds = peak_groups(days, "1month")
    assert sizes == (17, 29, 31)  # from the 15th of January; leap February
    assert bounds[2] == (_midnight(date(2024, 3, 1), "America/New_York"), _midnight(date(2024, 4, 1), "America/New_York"))
    plan = plan_job((PeakSpec("busiest", period="1y", maximum=100.0),), ContributionBounds(), months, 1.0, 1e-6)
    assert plan["busiest"].period_sizes == (12, 12, 12) and plan["busiest"].last_windows == (11, 23, 35)
    assert plan["busiest"].runs == 3 and "periods of 1 year" in plan["busiest"].describe()
    with pytest.raises(PlanningError, match="must be a calendar length"):
        plan_job((PeakSpec("p", period=86400.0 * 30, maximum=100.0),), ContributionBounds(), months, 1.0, 1e-6)


PEAK_JOB = """[input]
format = "csv"
path = "events.csv"
user = "user"
timestamp = "time"
partition = "dest"
partitions = ["A"]
[window]
size = "1mo"
start = 2012-01-01
end = 2014-01-01
[privacy]
scope = "s"
epsilon = 50
delta = 1e-6
max_contributions = 1
[[release]]
kind = "peak"
name = "busiest"
period = "1y"
maximum = 1000
[output]
format = "jsonl"
[beam]
seed = 3
"""


def test_a_run_releases_the_busiest_month_of_each_year(tmp_path):
    """600 users in June 2012 and 600 in October 2013, 20 in every other month: with epsilon 50 the peak of each
    calendar year is that month, and the rows name the years as periods."""
    lines = ["user,time,dest"]
    for year in (2012, 2013):
        for month in range(1, 13):
            busy = (year, month) in ((2012, 6), (2013, 10))
            lines += [f"u{year}{month}-{i},{year}-{month:02d}-10T12:00:00,A" for i in range(600 if busy else 20)]
    (tmp_path / "events.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "job.toml").write_text(PEAK_JOB)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("s", 50.0, 1e-5, "approx:release_delta=1e-6")
    from dpstream.pipelines.run import runner

    outcome = runner.run(jobfile.load(str(tmp_path / "job.toml")), str(tmp_path / "out"), url, log=lambda _: None)
    rows = sorted((json.loads(line) for line in open(outcome.files["busiest"])), key=lambda r: r["period_start"])
    assert [(r["period_start"][:10], r["period_end"][:10], r["window_start"][:10]) for r in rows] == [
        ("2012-01-01", "2013-01-01", "2012-06-01"), ("2013-01-01", "2014-01-01", "2013-10-01")]


SCHEDULE_JOB = """[input]
format = "csv"
path = "events.csv"
user = "user"
timestamp = "time"
partition = "dest"
partitions = ["A", "B"]
timezone = "America/New_York"
[window]
size = "6h"
start = 2026-03-07
end = 2026-03-08
[privacy]
scope = "daily"
epsilon = 1
delta = 1e-6
max_contributions = 1
unit_period = "1day"
[[release]]
kind = "histogram"
name = "counts"
[output]
format = "jsonl"
"""


def _period_rows(ledger: str, capsys) -> list[dict]:
    assert cli.main(["budget", "show", "--ledger", ledger, "--scope", "daily", "--json"]) == 0
    return json.loads(capsys.readouterr().out)["periods"]


def test_a_daily_schedule_on_a_local_day_scope_debits_each_run_its_own_day(tmp_path, capsys):
    """Three scheduled runs with --start/--end over the New York days around spring-forward: each run is charged
    to its own local day only (the 23-hour day included), a re-run of a day is refused, and the scope's periods
    are the three local days. The 6-hour windows do not tile the 23-hour day, so that day's run is refused
    first, with the reason, and runs with hourly windows instead."""
    rng = np.random.default_rng(5)
    start = _midnight(date(2026, 3, 7), "America/New_York")
    stamps = rng.uniform(start, start + 3 * 86400 - HOUR, 900)
    lines = ["user,time,dest"] + [
        f"u{i % 150},{datetime.fromtimestamp(s, ZoneInfo('UTC')).isoformat()},{'AB'[i % 2]}" for i, s in enumerate(stamps)]
    (tmp_path / "events.csv").write_text("\n".join(lines) + "\n")
    job = tmp_path / "job.toml"
    job.write_text(SCHEDULE_JOB)
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert cli.main(["budget", "init", "--ledger", ledger, "--scope", "daily", "--epsilon", "1", "--delta", "1e-5",
                     "--filter", "approx:release_delta=1e-6", "--unit-period", "1day",
                     "--timezone", "America/New_York"]) == 0
    assert "per 1 day (America/New_York) period" in capsys.readouterr().out

    def run(day: str, following: str, name: str) -> int:
        return cli.main(["run", str(job), "--ledger", ledger, "--output", str(tmp_path / name),
                         "--start", day, "--end", following])

    assert run("2026-03-07", "2026-03-08", "day1") == 0
    capsys.readouterr()
    assert [(p["start"], p["end"], p["releases"]) for p in _period_rows(ledger, capsys)] == [
        ("2026-03-07T05:00:00Z", "2026-03-08T05:00:00Z", 1)]
    assert run("2026-03-08", "2026-03-09", "day2") == 2  # 6-hour windows cannot tile a 23-hour day
    assert "is not a window boundary" in capsys.readouterr().err
    job.write_text(SCHEDULE_JOB.replace('size = "6h"', 'size = "1h"'))
    assert run("2026-03-08", "2026-03-09", "day2") == 0
    assert run("2026-03-09", "2026-03-10", "day3") == 0
    capsys.readouterr()
    periods = _period_rows(ledger, capsys)
    assert [(p["start"], p["end"], p["releases"]) for p in periods] == [
        ("2026-03-07T05:00:00Z", "2026-03-08T05:00:00Z", 1),
        ("2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z", 1),  # 23 hours
        ("2026-03-09T04:00:00Z", "2026-03-10T04:00:00Z", 1)]
    report = json.loads((tmp_path / "day2" / "report.json").read_text())
    assert report["window"]["count"] == 23
    assert report["budget"]["periods"] == {"period": "1day", "timezone": "America/New_York", "count": 1,
                                           "start": "2026-03-08T05:00:00Z", "end": "2026-03-09T04:00:00Z"}
    assert run("2026-03-08", "2026-03-09", "again") == 3  # the day's budget holds one run
    assert "refused" in capsys.readouterr().err
    assert [p["releases"] for p in _period_rows(ledger, capsys)] == [1, 1, 1]


def test_manual_spends_name_local_days_on_a_calendar_scope(tmp_path, capsys):
    """`budget spend --periods` reads dates without an offset in the scope's time zone: 2026-11-01 is the
    25-hour New York day, and a fixed --unit-period refuses --timezone."""
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert cli.main(["budget", "init", "--ledger", ledger, "--scope", "daily", "--epsilon", "1", "--delta", "0",
                     "--unit-period", "1day", "--timezone", "America/New_York"]) == 0
    assert cli.main(["budget", "spend", "--ledger", ledger, "--scope", "daily", "--event", "pure:epsilon=0.5",
                     "--label", "backfill", "--periods", "2026-11-01"]) == 0
    capsys.readouterr()
    assert [(p["start"], p["end"]) for p in _period_rows(ledger, capsys)] == [
        ("2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z")]
    assert cli.main(["budget", "init", "--ledger", ledger, "--scope", "other", "--epsilon", "1", "--delta", "0",
                     "--unit-period", "1d", "--timezone", "America/New_York"]) == 2
    assert "--timezone applies to calendar periods" in capsys.readouterr().err


@pytest.mark.parametrize("zone, first, days", [
    ("America/St_Johns", "2010-11-06", 2),  # clocks fell back across midnight: local dates go 11-07 -> 11-06 -> 11-07
    ("America/St_Johns", "1987-10-24", 2),
    ("America/Toronto", "1919-03-30", 2),  # 23:30 -> 00:30: midnight of 03-31 fell in the gap
    ("Antarctica/Casey", "2010-03-03", 2),
    ("Pacific/Apia", "2011-12-28", 4),  # 2011-12-30 did not happen there
])
def test_periods_bracket_every_window_where_local_dates_misbehave(zone, first, days):
    """Found by an adversarial review: where local dates are not monotone or a midnight is skipped, the period
    holding an instant must still be the k with start(k) <= t < start(k+1), or the ledger would charge fewer
    periods than a run reads. Checked for half-hour windows against the starts themselves: every window lies in
    its unit period, the composition count is the most windows between two starts, and the periods charged are
    exactly those the windows fall in."""
    grid = PeriodGrid.of("1day", zone)
    start = grid.start(grid.index(_midnight(date.fromisoformat(first), zone) + 1))
    end = grid.start(grid.index(start) + days)
    window = WindowSpec(size=1800.0, start=start, end=start + math.ceil((end - start) / 1800) * 1800)
    periods = unit_periods(window, grid)
    for i, k in enumerate(periods):
        begin, finish = window.bounds(i)
        assert grid.start(k) <= begin and finish <= grid.start(k + 1)
        assert grid.index(begin) == k and grid.start(grid.index(begin - 1)) <= begin - 1 < grid.start(grid.index(begin - 1) + 1)
    assert unit_runs(window, grid) == max(periods.count(k) for k in set(periods))
    charged = Periods.overlapping(window.start, window.end, grid)
    assert set(charged.indices()) >= set(periods) and charged.first == min(periods) and charged.last == max(periods)


def test_a_skipped_day_holds_no_calendar_window():
    days = WindowSpec.of("1day", "2011-12-28", "2012-01-01", timezone="Pacific/Apia")
    assert days.count == 3 and all(b > a for a, b in (days.bounds(i) for i in range(days.count)))
