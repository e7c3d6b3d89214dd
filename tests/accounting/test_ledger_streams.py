"""Streams that pay a period scope one period at a time, or a plain scope one window at a time
(`Ledger.open_stream`, `debit_stream`), on SQLite and the local PostgreSQL: each (stream, step) is decided once
whatever asks again or races, the charges equal an up-front debit of the same steps, refusals are final, resumes
keep what was paid, and stale sessions cannot debit. PostgreSQL skips only when no server is reachable, and fails instead when CI=true."""
from __future__ import annotations

import pytest

from dpstream.accounting.events import Composed, Gaussian, PureDP, SelfComposed
from dpstream.accounting.ledger import Ledger, LedgerError, Periods
from tests.accounting.ledger_race import race
from tests.accounting.test_ledger import (  # noqa: F401  (fixtures)
    FakeClock,
    _scope_name,
    ledger_url,
    postgres_url,
    postgresql_url_fresh,
)

HOUR = 3600
FIRST = 1356998400 // HOUR  # 2013-01-01T00:00:00Z
EVENT = PureDP(0.4)


def _hours(first: int, count: int = 1) -> Periods:
    return Periods(HOUR, FIRST + first, FIRST + first + count - 1)


def _scope(ledger: Ledger, epsilon: float = 1.0) -> str:
    scope = _scope_name()
    ledger.init_scope(scope, epsilon, 0.0, unit_period=HOUR)
    return scope


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgresql"], indirect=True)
def test_each_period_is_debited_once_and_equals_an_up_front_debit(ledger_url):
    with Ledger(ledger_url, create=True) as ledger:
        scope, reference = _scope(ledger), _scope(ledger)
        ticket = ledger.open_stream(scope, EVENT, "job", output="/out/a", job="j1")
        assert (ticket.session, ticket.resumed, ticket.debited) == (1, False, ())
        assert ledger.debit_stream(ticket.stream_id, 1, _hours(0)) == {FIRST: None}
        assert ledger.debit_stream(ticket.stream_id, 1, _hours(0, 2)) == {FIRST: None, FIRST + 1: None}
        assert ledger.debit_stream(ticket.stream_id, 1, _hours(1)) == {FIRST + 1: None}
        assert len(ledger.history(scope)) == 2  # one release per period, however often asked
        assert ledger.spend(reference, EVENT, "job", _hours(0, 2)).admitted
        states = [{k: v for k, v in p.items() if k != "releases"} for p in ledger.period_states(scope)]
        expected = [{k: v for k, v in p.items() if k != "releases"} for p in ledger.period_states(reference)]
        assert states == expected
        record = ledger.stream(ticket.stream_id)
        assert sorted(record.debited) == [FIRST, FIRST + 1] and record.refused == {}


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_refusal_is_recorded_once_and_later_periods_are_still_decided(ledger_url):
    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope(ledger)
        assert ledger.spend(scope, PureDP(0.8), "other job", _hours(1)).admitted
        ticket = ledger.open_stream(scope, EVENT, "job", output="/out/a", job="j1")
        answers = ledger.debit_stream(ticket.stream_id, 1, _hours(0, 3))
        assert answers[FIRST] is None and answers[FIRST + 2] is None
        assert "would exceed" in answers[FIRST + 1]
        assert ledger.debit_stream(ticket.stream_id, 1, _hours(1)) == {FIRST + 1: answers[FIRST + 1]}
        assert len(ledger.history(scope)) == 3  # the other job's and two stream periods


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_resume_keeps_paid_periods_and_refuses_stale_sessions_and_other_jobs(ledger_url):
    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope(ledger)
        first = ledger.open_stream(scope, EVENT, "job", output="/out/a", job="j1", lease_seconds=60)
        ledger.debit_stream(first.stream_id, 1, _hours(0))
        with pytest.raises(LedgerError, match="being written by stream"):
            ledger.open_stream(scope, EVENT, "job", output="/out/a", job="j1")
        with pytest.raises(LedgerError, match="being written by stream"):
            ledger.open_run(scope, EVENT, "batch", periods=_hours(5), output="/out/a")
        ledger.end_stream(first.stream_id, 1, finished=False, reason="stopped at max_seconds")
        with pytest.raises(LedgerError, match="another job"):
            ledger.open_stream(scope, EVENT, "job", output="/out/a", job="j2")
        resumed = ledger.open_stream(scope, EVENT, "job", output="/out/a", job="j1")
        assert (resumed.stream_id, resumed.session, resumed.resumed, resumed.debited) == (
            first.stream_id, 2, True, (FIRST,))
        with pytest.raises(LedgerError, match="not streaming in session 1"):
            ledger.debit_stream(first.stream_id, 1, _hours(1))
        assert ledger.debit_stream(resumed.stream_id, 2, _hours(0, 2)) == {FIRST: None, FIRST + 1: None}
        assert len(ledger.history(scope)) == 2
        ledger.end_stream(resumed.stream_id, 2, finished=True)
        with pytest.raises(LedgerError, match="finished"):
            ledger.debit_stream(resumed.stream_id, 2, _hours(2))
        fresh = ledger.open_stream(scope, EVENT, "job", output="/out/a", job="j1")  # after finishing: a new stream
        assert fresh.stream_id != first.stream_id and fresh.debited == ()


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_an_expired_lease_lets_a_new_session_resume(ledger_url):
    clock = FakeClock()
    with Ledger(ledger_url, create=True, clock=clock) as ledger:
        scope = _scope(ledger)
        first = ledger.open_stream(scope, EVENT, "job", output="/out/a", job="j1", lease_seconds=0.2)
        clock.advance(0.3)
        assert ledger.streams_of(scope)[0].status == "stopped"
        resumed = ledger.open_stream(scope, EVENT, "job", output="/out/a", job="j1")
        assert resumed.session == 2 and resumed.stream_id == first.stream_id


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_streams_need_an_event_one_step_can_admit(ledger_url):
    with Ledger(ledger_url, create=True) as ledger:
        plain = _scope_name()
        ledger.init_scope(plain, 0.3, 0.0)
        with pytest.raises(LedgerError, match="too little left for even one window"):
            ledger.open_stream(plain, EVENT, "job", output="/out/a", job="j1")
        scope = _scope(ledger, epsilon=0.3)
        with pytest.raises(LedgerError, match="cannot admit"):
            ledger.open_stream(scope, EVENT, "job", output="/out/a", job="j1")
        with pytest.raises(LedgerError):  # a pure scope cannot price a Gaussian event at all
            ledger.open_stream(_scope(ledger), Gaussian(1.0, 1.0), "job", output="/out/b", job="j1")


def _debit_worker(url: str, scope: str, index: int, queue) -> None:
    with Ledger(url) as ledger:
        stream = ledger.streams_of(scope)[0]
        ledger.debit_stream(stream.stream_id, stream.session, _hours(0, 3))
        queue.put(index)


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgresql"], indirect=True)
def test_racing_workers_debit_each_period_once(ledger_url):
    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope(ledger)
        ledger.open_stream(scope, EVENT, "job", output="/out/a", job="j1")
    race(_debit_worker, ledger_url, scope, workers=6, timeout=120)
    with Ledger(ledger_url) as ledger:
        assert len(ledger.history(scope)) == 3
        assert [p["releases"] for p in ledger.period_states(scope)] == [1, 1, 1]


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_payment_keeps_a_detached_session_live(ledger_url):
    clock = FakeClock()
    with Ledger(ledger_url, create=True, clock=clock) as ledger:
        scope = _scope(ledger)
        ticket = ledger.open_stream(scope, EVENT, "job", output="/out/a", job="j1", lease_seconds=0.2)
        ledger.debit_stream(ticket.stream_id, 1, _hours(0), lease_seconds=60)
        clock.advance(0.3)
        assert ledger.stream(ticket.stream_id).status == "streaming"
        with pytest.raises(LedgerError, match="being written by stream"):
            ledger.open_stream(scope, EVENT, "job", output="/out/a", job="j1")


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_an_expired_session_cannot_debit_and_a_changed_plan_cannot_resume(ledger_url):
    """Regressions from an adversarial review: a session whose lease ran out was still allowed to debit and
    renew; a resume under another plan's event (another dpstream's planner) was charged the stored event."""
    clock = FakeClock()
    with Ledger(ledger_url, create=True, clock=clock) as ledger:
        scope = _scope(ledger)
        ticket = ledger.open_stream(scope, EVENT, "job", output="/out/a", job="j1", lease_seconds=0.2)
        clock.advance(0.3)
        with pytest.raises(LedgerError, match="expired in session 1"):
            ledger.debit_stream(ticket.stream_id, 1, _hours(0), lease_seconds=60)
        with pytest.raises(LedgerError, match="was not renewed"):
            ledger.renew_stream(ticket.stream_id, 1)
        assert ledger.history(scope) == []
        with pytest.raises(LedgerError, match="resumes only under its own plan"):
            ledger.open_stream(scope, PureDP(0.1), "job", output="/out/a", job="j1")
        assert ledger.open_stream(scope, EVENT, "job", output="/out/a", job="j1").session == 2


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgresql"], indirect=True)
def test_a_plain_scope_stream_pays_each_window_once_and_resumes_without_paying_again(ledger_url):
    window = Gaussian(8.0, 1.0)
    with Ledger(ledger_url, create=True) as ledger:
        scope, reference = _scope_name(), _scope_name()
        for name in (scope, reference):
            ledger.init_scope(name, 1.0, 1e-6, "gdp")
        ticket = ledger.open_stream(scope, window, "job", output="/out/p", job="j1", lease_seconds=60)
        assert ticket.grid is None and "pays each window when it is released" in ticket.message
        assert ledger.debit_stream(ticket.stream_id, 1, (0,)) == {0: None}
        assert ledger.debit_stream(ticket.stream_id, 1, (0, 1)) == {0: None, 1: None}  # window 0 not again
        with pytest.raises(LedgerError, match="window indices"):
            ledger.debit_stream(ticket.stream_id, 1, _hours(0))
        with pytest.raises(LedgerError, match="window indices"):
            ledger.debit_stream(ticket.stream_id, 1, (True,))
        assert ledger.debit_stream(ticket.stream_id, 1, (1, 1)) == {1: None}  # a repeated window, decided once
        ledger.end_stream(ticket.stream_id, 1, finished=False)
        resumed = ledger.open_stream(scope, window, "job", output="/out/p", job="j1")
        assert resumed.debited == (0, 1) and "2 window(s) paid before" in resumed.message
        assert ledger.debit_stream(resumed.stream_id, 2, (1, 2)) == {1: None, 2: None}
        assert [r.label.endswith(f"window {i})") for i, r in enumerate(
            sorted(ledger.history(scope), key=lambda r: r.release_id))] == [True] * 3
        ledger.spend(reference, Gaussian(8.0 / 3 ** 0.5, 1.0), "three windows at once")
        paid, once = ledger.show(scope).state, ledger.show(reference).state
    assert paid["remaining_mu"] == pytest.approx(once["remaining_mu"], rel=1e-12), (paid, once)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_plain_scope_window_the_scope_cannot_admit_is_refused_for_good(ledger_url):
    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope_name()
        ledger.init_scope(scope, 1.0, 0.0)
        ticket = ledger.open_stream(scope, EVENT, "job", output="/out/p", job="j1")
        assert ledger.debit_stream(ticket.stream_id, 1, (0, 1)) == {0: None, 1: None}
        answers = ledger.debit_stream(ticket.stream_id, 1, (2,))
        assert answers[2] is not None and answers[2].startswith("refused:")
        ledger.spend(scope, PureDP(0.1), "another job")  # the residue still admits smaller releases
        assert ledger.debit_stream(ticket.stream_id, 1, (2,)) == answers  # the recorded answer, not a new one
        assert len(ledger.history(scope)) == 3


def _monitor(record=None, start: float = 0.0):
    from dpstream.accounting.ledger import MonitorRecord, StreamMonitor

    return StreamMonitor(0.5, 1e-7, record, MonitorRecord({"window": 0, "filter": None}, start))


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgresql"], indirect=True)
def test_a_stream_opens_its_monitor_with_one_debit_and_seals_it_after_each_window(ledger_url):
    """The monitor's budget is debited once, when the stream opens it (not per window, not again on resume); each
    sealed record replaces the stored one only if it continues later; the monitor is leased to the live stream
    (a run cannot open it meanwhile) and free once the stream stops; a stale session cannot seal."""
    from dpstream.accounting.events import ApproxDP
    from dpstream.accounting.ledger import MonitorRecord

    opening = ApproxDP(0.5, 1e-7)
    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope_name()
        ledger.init_scope(scope, 1.0, 1e-6)
        with pytest.raises(LedgerError, match="needs their budgets"):
            ledger.open_stream(scope, EVENT, "job", output="/out/m", job="j1", monitors={"busy": _monitor()})
        ticket = ledger.open_stream(scope, EVENT, "job", output="/out/m", job="j1", monitors={"busy": _monitor()},
                                    opening=opening, lease_seconds=60)
        (opened,) = ledger.history(scope)
        assert "opening svt monitor(s) busy" in opened.label
        assert ledger.monitor_record(scope, "busy") == MonitorRecord({"window": 0, "filter": None}, 0.0)
        assert ledger.stream(ticket.stream_id).monitors == ("busy",)
        assert [m.stream for m in ledger.show(scope).monitors] == [ticket.stream_id]  # `budget show`, `status`
        with pytest.raises(LedgerError, match="answered by stream"):
            ledger.open_run(scope, PureDP(0.1), "a run", monitors={"busy": (0.5, 1e-7, ledger.monitor_record(
                scope, "busy"))})
        after = [MonitorRecord({"window": i + 1, "filter": None}, float(i + 1)) for i in range(3)]
        assert ledger.seal_stream_monitor(ticket.stream_id, 1, "busy", after[1], False)
        assert not ledger.seal_stream_monitor(ticket.stream_id, 1, "busy", after[0], False)  # older: kept
        assert ledger.monitor_record(scope, "busy") == after[1]
        with pytest.raises(LedgerError, match="does not answer"):
            ledger.seal_stream_monitor(ticket.stream_id, 1, "other", after[2], False)
        ledger.end_stream(ticket.stream_id, 1, finished=False)
        assert [m.stream for m in ledger.show(scope).monitors] == [None]
        with pytest.raises(LedgerError, match="not streaming in session 1"):
            ledger.seal_stream_monitor(ticket.stream_id, 1, "busy", after[2], False)
        with pytest.raises(LedgerError, match="changed since it was read"):  # the caller's stale read
            ledger.open_stream(scope, EVENT, "job", output="/out/m", job="j1", monitors={"busy": _monitor(after[0])})
        resumed = ledger.open_stream(scope, EVENT, "job", output="/out/m", job="j1",
                                     monitors={"busy": _monitor(after[1])})
        assert ledger.seal_stream_monitor(resumed.stream_id, 2, "busy", after[2], True)
        assert len(ledger.history(scope)) == 1  # only the opening
        assert [m.halted for m in ledger.show(scope).monitors] == [True]


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_refused_monitor_opening_records_nothing(ledger_url):
    from dpstream.accounting.events import ApproxDP

    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope_name()
        ledger.init_scope(scope, 1.0, 1e-6)
        with pytest.raises(LedgerError, match="refused"):
            ledger.open_stream(scope, EVENT, "job", output="/out/m", job="j1", monitors={"busy": _monitor()},
                               opening=ApproxDP(2.0, 1e-7))
        assert ledger.history(scope) == [] and ledger.monitor_record(scope, "busy") is None
        assert ledger.streams_of(scope) == []
        gdp = _scope_name()
        ledger.init_scope(gdp, 1.0, 1e-6, "gdp")
        with pytest.raises(LedgerError, match="does not support svt monitors"):
            ledger.open_stream(gdp, Gaussian(8.0, 1.0), "job", output="/out/g", job="j1",
                               monitors={"busy": _monitor()}, opening=ApproxDP(0.5, 1e-7))


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_retired_scope_stops_a_live_streams_monitor_and_refuses_its_resume(ledger_url):
    """Review finding: retiring a scope while a stream ran let its monitor seal and publish on. Now the seal is
    refused (the alert is not published), and so is resuming the stream; an opening smaller than the monitors'
    budgets is refused too (it would under-charge the scope)."""
    from dpstream.accounting.events import ApproxDP, PureDP
    from dpstream.accounting.ledger import MonitorRecord

    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope_name()
        ledger.init_scope(scope, 4.0, 1e-6)
        with pytest.raises(LedgerError, match="does not cover the new svt monitors' budgets"):
            ledger.open_stream(scope, EVENT, "job", output="/out/r", job="j1", monitors={"busy": _monitor()},
                               opening=PureDP(1e-6))
        assert ledger.history(scope) == [] and ledger.streams_of(scope) == []
        ticket = ledger.open_stream(scope, EVENT, "job", output="/out/r", job="j1", monitors={"busy": _monitor()},
                                    opening=ApproxDP(0.5, 1e-7), lease_seconds=60)
        first = MonitorRecord({"window": 1, "filter": None}, 1.0)
        assert ledger.seal_stream_monitor(ticket.stream_id, 1, "busy", first, False)
        ledger.retire_scope(scope, "audit")
        with pytest.raises(LedgerError, match="retired.*not published"):
            ledger.seal_stream_monitor(ticket.stream_id, 1, "busy", MonitorRecord({"window": 2, "filter": None}, 2.0),
                                       False)
        assert ledger.monitor_record(scope, "busy") == first
        ledger.end_stream(ticket.stream_id, 1, finished=False)
        with pytest.raises(LedgerError, match="retired"):
            ledger.open_stream(scope, EVENT, "job", output="/out/r", job="j1", monitors={"busy": _monitor(first)})
        with pytest.raises(LedgerError, match="was never opened"):
            ledger.open_stream(_scope_other(ledger), EVENT, "job", output="/out/x", job="j2",
                               monitors={"busy": _monitor(first)})


def _scope_other(ledger) -> str:
    scope = _scope_name()
    ledger.init_scope(scope, 4.0, 1e-6)
    return scope


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgresql"], indirect=True)
def test_a_window_is_journaled_with_its_debit_and_every_later_ask_gets_the_first_bytes(ledger_url):
    """`publish_stream_window`: the first artifact of (stream, release, window) is journaled in the transaction
    that debits the window; a retry, another release of the same window and a resumed session computing it again
    all get the journaled bytes back (the second release's window is journaled without a second debit); a
    refused window journals nothing; a stale session gets nothing."""
    from dpstream.accounting.ledger import Artifact

    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope_name()
        ledger.init_scope(scope, 1.0, 0.0)
        ticket = ledger.open_stream(scope, EVENT, "job", output="/out/j", job="j1")
        first = ledger.publish_stream_window(ticket.stream_id, 1, (0,), Artifact("h", 0, b"first\n", 1))
        assert (first.refusal, first.content) == (None, b"first\n")
        again = ledger.publish_stream_window(ticket.stream_id, 1, (0,), Artifact("h", 0, b"retry\n", 1))
        assert again.content == b"first\n"
        other = ledger.publish_stream_window(ticket.stream_id, 1, (0,), Artifact("top", 0, b"top\n", 1))
        assert other.content == b"top\n" and len(ledger.history(scope)) == 1
        ledger.end_stream(ticket.stream_id, 1, finished=False)
        resumed = ledger.open_stream(scope, EVENT, "job", output="/out/j", job="j1")
        with pytest.raises(LedgerError, match="not streaming in session 1"):
            ledger.publish_stream_window(ticket.stream_id, 1, (1,), Artifact("h", 1, b"stale\n", 1))
        assert ledger.publish_stream_window(resumed.stream_id, 2, (0,), Artifact("h", 0, b"fresh\n", 1)).content \
            == b"first\n"
        assert ledger.publish_stream_window(resumed.stream_id, 2, (1,), Artifact("h", 1, b"w1\n", 1)).content \
            == b"w1\n"
        refused = ledger.publish_stream_window(resumed.stream_id, 2, (2,), Artifact("h", 2, b"w2\n", 1))
        assert refused.content is None and refused.refusal is not None and refused.refusal.startswith("refused:")
        journal = ledger.stream_journal(ticket.stream_id)
        assert {name: {i: a.content for i, a in items.items()} for name, items in journal.items()} == {
            "h": {0: b"first\n", 1: b"w1\n"}, "top": {0: b"top\n"}}
        assert len(ledger.history(scope)) == 2 and ledger.show(scope).state["spent_epsilon"] == pytest.approx(0.8)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_an_svt_alert_is_journaled_with_its_seal_and_never_answered_again(ledger_url):
    """`seal_and_publish_stream_window`: the monitor's record after a window and that window's alert are stored in
    one transaction; asked again (a retried or resumed writer with a fresh answer and a later state), the ledger
    returns the journaled alert and keeps the record that covers it."""
    from dpstream.accounting.events import ApproxDP
    from dpstream.accounting.ledger import Artifact, MonitorRecord, StreamMonitor

    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope_name()
        ledger.init_scope(scope, 4.0, 1e-6)
        ticket = ledger.open_stream(scope, EVENT, "job", output="/out/s", job="j1",
                                    monitors={"busy": StreamMonitor(1.0, 1e-7, None, MonitorRecord({"w": 0}, 0.0))},
                                    opening=ApproxDP(1.0, 1e-7))
        answer = ledger.seal_and_publish_stream_window(ticket.stream_id, 1, "busy", MonitorRecord({"w": 1}, 10.0),
                                                       False, Artifact("busy", 0, b"no\n", 1))
        assert answer.content == b"no\n" and ledger.monitor_record(scope, "busy").state == {"w": 1}
        again = ledger.seal_and_publish_stream_window(ticket.stream_id, 1, "busy", MonitorRecord({"w": 9}, 20.0),
                                                      False, Artifact("busy", 0, b"yes\n", 1))
        assert again.content == b"no\n" and ledger.monitor_record(scope, "busy").next_start == 10.0


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgresql"], indirect=True)
def test_a_prepaid_stream_pays_its_whole_plan_once_what_one_run_of_it_is_charged(ledger_url):
    """A plain approx scope and 8 Gaussian windows, which the accountant prices together below the sum of their
    prices one at a time: a prepaid stream (its whole plan as its opening, steps of Composed(())) leaves the scope
    exactly where one run of the plan leaves a twin scope, however its windows are decided, resumed or asked
    again; a resume never pays the opening again, and a refused opening records no stream."""
    window = Gaussian(10.0, 1.0)
    plan = SelfComposed(window, 8)
    with Ledger(ledger_url, create=True) as ledger:
        scope, twin, split = _scope_name(), _scope_name(), _scope_name()
        for name in (scope, twin, split):
            ledger.init_scope(name, 4.0, 1e-5, "approx:release_delta=1e-6")
        assert ledger.spend(twin, plan, "one run").admitted
        for index in range(8):
            assert ledger.spend(split, window, f"window {index}").admitted
        assert ledger.show(split).state["spent_epsilon"] > 1.5 * ledger.show(twin).state["spent_epsilon"]
        first = ledger.open_stream(scope, Composed(()), "job", output="/out/a", job="j1", opening=plan, prepaid=plan)
        assert ledger.debit_stream(first.stream_id, 1, (0, 1, 2)) == {0: None, 1: None, 2: None}
        ledger.end_stream(first.stream_id, 1, finished=False)
        with pytest.raises(LedgerError, match="resumes only as it was opened"):
            ledger.open_stream(scope, window, "job", output="/out/a", job="j1")
        changed = Composed((SelfComposed(PureDP(0.1), 4), SelfComposed(window, 4)))  # another planner's plan
        with pytest.raises(LedgerError, match="prepaid another plan"):
            ledger.open_stream(scope, Composed(()), "job", output="/out/a", job="j1", opening=changed, prepaid=changed)
        resumed = ledger.open_stream(scope, Composed(()), "job", output="/out/a", job="j1", opening=plan, prepaid=plan)
        assert resumed.resumed and resumed.debited == (0, 1, 2)
        assert ledger.stream(resumed.stream_id).prepaid is not None and "whole plan" in first.message
        assert ledger.debit_stream(resumed.stream_id, 2, tuple(range(8)))[7] is None
        assert ledger.show(scope).state == ledger.show(twin).state
        assert sum("opening" in r.label for r in ledger.history(scope)) == 1
        with pytest.raises(LedgerError, match="refused"):
            ledger.open_stream(scope, Composed(()), "job", output="/out/b", job="j1",
                               opening=SelfComposed(window, 4000),
                               prepaid=SelfComposed(window, 4000))
        assert [s.output for s in ledger.streams_of(scope)] == ["/out/a"]


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_prepaid_stream_publishes_what_it_paid_for_after_its_filter_halts_and_nothing_once_retired(ledger_url):
    """Review finding: a whitehouse filter halts after it refuses anything, and then refused a prepaid stream's
    remaining windows although their price was debited when the stream opened. A prepaid window is recorded
    against that opening without asking the filter (no history row per window); a retired scope still refuses."""
    window = Gaussian(10.0, 1.0)
    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope_name()
        ledger.init_scope(scope, 4.0, 1e-5, "whitehouse")
        ticket = ledger.open_stream(scope, Composed(()), "job", output="/o", job="j",
                                    opening=SelfComposed(window, 4),
                                    prepaid=SelfComposed(window, 4))
        assert ledger.debit_stream(ticket.stream_id, 1, (0,)) == {0: None}
        assert not ledger.spend(scope, SelfComposed(window, 4000), "another job").admitted  # the filter halts
        assert not ledger.spend(scope, PureDP(1e-6), "a third job").admitted
        assert ledger.debit_stream(ticket.stream_id, 1, (1, 2)) == {1: None, 2: None}
        (opening,) = ledger.history(scope)
        assert set(ledger.stream(ticket.stream_id).debited.values()) == {opening.release_id}
        ledger.retire_scope(scope, "end of study")
        assert "retired" in ledger.debit_stream(ticket.stream_id, 1, (3,))[3]
