"""What a run debits for its svt monitors: each new monitor's budget exactly once, whatever the other monitors'
parameters; continued monitors nothing. Monitors are told apart by name, never by their (equal) events.

Regression: two svt releases with equal parameters have equal events. When the plan paired monitors with events
by value, a run holding a continued monitor B and a new monitor A with B's parameters debited nothing for A
(or, with the releases in the other order, B's budget twice).
"""
from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.accounting.accountant import Accountant
from dpstream.accounting.events import ApproxDP, Composed, SelfComposed
from dpstream.accounting.filters.fsrc import basel_delta
from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.cli.main import main
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.config.specs import ContributionBounds, HistogramSpec, SvtSpec, TopKSpec, WindowSpec
from dpstream.pipelines.planning import SvtPlan, plan_job
from dpstream.pipelines.run import runner
from tests.pipelines.helpers import DAY, START

JOB = """
[input]
format = "csv"
path = "events.csv"
user = "user"
timestamp = "time"
partition = "dest"
value = "value"
partitions = ["A", "B"]
[window]
size = "1d"
start = {start}
end = {end}
[privacy]
scope = "test"
epsilon = 4.0
delta = 1e-6
{releases}
[output]
format = "jsonl"
[beam]
seed = 3
"""
SVT = """
[[release]]
kind = "svt"
name = "{name}"
metric = "count"
maximum = 100
threshold = 0.5
sigma_threshold = 0.3
"""
HISTOGRAM = """
[[release]]
kind = "histogram"
name = "{name}"
"""


def _run(tmp_path, url, releases, start, end, out):
    lines = ["user,time,dest,value"]
    lines += [f"u{u},2013-01-{day:02d}T10:00:00Z,{'AB'[u % 2]},1" for day in range(1, 8) for u in range(20)]
    (tmp_path / "events.csv").write_text("\n".join(lines) + "\n")
    body = "".join((SVT if kind == "svt" else HISTOGRAM).format(name=name) for kind, name in releases)
    (tmp_path / "job.toml").write_text(JOB.format(start=start, end=end, releases=body))
    return runner.run(jobfile.load(str(tmp_path / "job.toml")), str(tmp_path / out), url, log=lambda _: None)


def _run_with_monitor_b(tmp_path) -> str:
    """A fresh scope (approx filter) and a first run opening svt monitor B beside histogram H; the ledger URL."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("test", 100.0, 1e-4, "approx:release_delta=1e-6")
    _run(tmp_path, url, (("svt", "B"), ("histogram", "H")), "2013-01-01", "2013-01-04", "run1")
    return url


@pytest.mark.parametrize("second", [(("svt", "A"), ("svt", "B")), (("svt", "B"), ("svt", "A"))],
                         ids=["new-first", "continued-first"])
def test_a_new_monitor_with_a_continued_monitors_parameters_is_debited_once(tmp_path, second):
    url = _run_with_monitor_b(tmp_path)
    with Ledger(url) as ledger:
        opened = ledger.history("test")[-1].event
    assert sum(isinstance(e, ApproxDP) for e in opened.events) == 1  # run 1 debits B's budget once
    monitor_b = next(e for e in opened.events if isinstance(e, ApproxDP))

    _run(tmp_path, url, second, "2013-01-04", "2013-01-07", "run2")
    with Ledger(url) as ledger:
        history = ledger.history("test")
        view = ledger.show("test")
    assert len(history) == 2
    # Run 2 opens A (same parameters as B, so the same event value) and continues B: exactly A's budget.
    assert history[-1].event == Composed((monitor_b,))
    assert [m.name for m in view.monitors] == ["A", "B"]
    assert all(m.checked_out is None and m.instances >= 1 for m in view.monitors)
    b = view.monitors[1]  # B ran 6 windows over two runs: its instances used their scheduled deltas
    assert b.delta_used == pytest.approx(math.fsum(basel_delta(b.delta, t) for t in range(1, b.instances + 1)))


def test_budget_show_prints_a_monitors_instances_and_delta_used(tmp_path, capsys):
    url = _run_with_monitor_b(tmp_path)
    with Ledger(url) as ledger:
        (monitor,) = ledger.show("test").monitors
    capsys.readouterr()
    assert main(["budget", "show", "--ledger", url, "--scope", "test"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "monitor B" in line)
    assert line.strip() == (f"monitor B: epsilon={monitor.epsilon:g}, delta={monitor.delta:g}, "
                            f"{monitor.instances} instances admitted using delta={monitor.delta_used:.6g}, running")


WINDOW = WindowSpec(size=DAY, start=START, end=START + 6 * DAY)
BOUNDS = ContributionBounds(max_partitions=2, max_contributions=1)
SVT_PARAMETERS = ({"threshold": 0.5, "sigma_threshold": 0.3}, {"threshold": 0.4, "sigma_threshold": 0.35})


@st.composite
def _jobs(draw):
    kinds = draw(st.lists(st.sampled_from(["svt", "svt", "histogram", "topk"]), min_size=1, max_size=4))
    releases = []
    for i, kind in enumerate(kinds):
        weight = draw(st.sampled_from([1.0, 2.0]))
        if kind == "svt":
            parameters = draw(st.sampled_from(SVT_PARAMETERS))  # often equal: equal events
            releases.append(SvtSpec(f"r{i}", metric="count", maximum=200.0, weight=weight, **parameters))
        elif kind == "topk":
            releases.append(TopKSpec(f"r{i}", partitions=("A", "B", "C"), k=1, weight=weight))
        else:
            releases.append(HistogramSpec(f"r{i}", partitions=("A", "B", "C"), weight=weight))
    monitors = [r.name for r in releases if r.kind == "svt"]
    continued = frozenset(draw(st.lists(st.sampled_from(monitors), unique=True))) if monitors else frozenset()
    return tuple(releases), continued


@settings(max_examples=25, deadline=None)
@given(_jobs())
def test_the_debit_is_the_new_releases_and_the_new_monitors_events(job):
    releases, continued = job
    plan = plan_job(releases, BOUNDS, WINDOW, 8.0, 1e-6)
    expected = [SelfComposed(r.event, r.release.count) for r in plan.calibrated.releases]
    expected += [p.event for p in plan.releases if isinstance(p, SvtPlan) and p.name not in continued]
    debited = plan.events(continued)
    assert Counter(map(repr, debited)) == Counter(map(repr, expected))
    new_monitors = sum(isinstance(p, SvtPlan) and p.name not in continued for p in plan.releases)
    assert sum(isinstance(e, ApproxDP) for e in debited) == new_monitors

    def epsilon(events):
        accountant = Accountant()
        for event in events:
            accountant.compose(event)
        return accountant.epsilon(1e-6)

    if expected:
        assert epsilon(debited) == epsilon(expected)


def test_continuing_a_monitor_the_plan_does_not_have_is_an_error():
    plan = plan_job((SvtSpec("alerts", metric="count", maximum=200.0, threshold=0.5, sigma_threshold=0.3),),
                    BOUNDS, WINDOW, 8.0, 1e-6)
    assert plan.events(frozenset({"alerts"})) == ()
    with pytest.raises(ValueError, match="no fixed events named \\['other'\\]"):
        plan.events(frozenset({"other"}))


def test_a_monitor_sealed_under_the_printed_rule_is_shown_and_refused_before_any_debit(tmp_path, capsys):
    """Its state lacks the delta budget: `budget show` says so, a run continuing it is refused with nothing
    debited, and the rest of the scope stays usable."""
    url = _run_with_monitor_b(tmp_path)
    with Ledger(url) as ledger:
        record = ledger.monitor_record("test", "B")
        state = record.state["filter"]["state"]
        record.state["filter"]["state"] = {"spent_epsilon": state["spent_epsilon"], "open": state["open"]}
        with ledger.engine.begin() as conn:
            conn.execute(ledger.monitors.update().where(ledger.monitors.c.name == "B")
                         .values(sealed_state=record.to_json()))
        debits = len(ledger.history("test"))
    capsys.readouterr()
    assert main(["budget", "show", "--ledger", url, "--scope", "test"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "monitor B" in line)
    assert "cannot be continued" in line and "predates the filter's delta budget" in line
    with pytest.raises(runner.RunError, match="monitor 'B' on scope 'test' cannot be continued.*nothing was debited"):
        _run(tmp_path, url, (("svt", "B"), ("histogram", "H")), "2013-01-04", "2013-01-07", "run2")
    _run(tmp_path, url, (("histogram", "H2"),), "2013-01-04", "2013-01-07", "run3")
    with Ledger(url) as ledger:
        assert len(ledger.history("test")) == debits + 1  # only the histogram-only run
