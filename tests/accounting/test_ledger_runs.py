"""Runs on the ledger (`Ledger.open_run` .. `commit_run`), on SQLite and PostgreSQL: admitted when they open,
debited only when they publish, leases on monitors and outputs that end, expire and fence, outcomes recorded.
Proof: docs/proofs/pipelines.run.budget.Budget.md."""
from __future__ import annotations

import pytest

from dpstream.accounting.events import ApproxDP, Composed, Gaussian, PureDP
from dpstream.accounting.filters import FSRCFilter
from dpstream.accounting.filters.fsrc import basel_delta
from dpstream.accounting.ledger import Ledger, LedgerConflict, LedgerError, MonitorRecord, Periods
from tests.accounting.test_ledger import (  # noqa: F401  (fixtures)
    FakeClock,
    _scope_name,
    ledger_url,
    postgres_url,
    postgresql_url_fresh,
)

DAY = 86400


def _scope(ledger: Ledger, epsilon: float = 1.0) -> str:
    scope = _scope_name()
    ledger.init_scope(scope, epsilon, 1e-6, "approx:release_delta=1e-7")
    return scope


def _record(instances: int = 1) -> MonitorRecord:
    monitor = FSRCFilter(0.5, 1e-8)
    for t in range(1, instances + 1):
        assert monitor.admits(0.02, basel_delta(1e-8, t))
        monitor.charge(0.01)
    return MonitorRecord({"filter": monitor.to_dict()}, 100.0)


def test_a_run_is_debited_only_when_it_commits_and_a_failed_one_never(ledger_url):
    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope(ledger)
        failed = ledger.open_run(scope, PureDP(0.6), "fails")
        assert failed.admitted and ledger.show(scope).state["spent_epsilon"] == 0
        ledger.end_run(failed.run_id, "a bad row")
        published = ledger.open_run(scope, PureDP(0.6), "publishes")
        assert ledger.commit_run(published.run_id).admitted
        assert ledger.show(scope).state["spent_epsilon"] == pytest.approx(0.6)
        assert [(r.run_id, r.status, r.reason) for r in ledger.runs_of(scope)] == [
            (failed.run_id, "failed", "a bad row"), (published.run_id, "published", None)]
        assert [r.label for r in ledger.history(scope)] == ["publishes"]


def test_admission_is_checked_when_the_run_opens_and_again_when_it_commits(ledger_url):
    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope(ledger)
        first, second = (ledger.open_run(scope, PureDP(0.6), name) for name in ("first", "second"))
        assert first.admitted and second.admitted  # each fits alone: neither is debited yet
        assert ledger.commit_run(first.run_id).admitted
        late = ledger.commit_run(second.run_id)
        assert not late.admitted and "would exceed the budget" in late.message and "nothing was published" in late.message
        refused = ledger.open_run(scope, PureDP(0.6), "third")
        assert not refused.admitted and "nothing was read or debited" in refused.message
        assert [r.status for r in ledger.runs_of(scope)] == ["published", "refused", "refused"]
        assert ledger.show(scope).state["spent_epsilon"] == pytest.approx(0.6)


def test_a_monitor_is_leased_to_one_run_and_comes_back_unchanged_after_a_failure(ledger_url):
    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope(ledger, 5.0)
        monitors = {"alerts": (0.5, 1e-8, None)}
        opener = ledger.open_run(scope, ApproxDP(0.5, 1e-8), "open", monitors=monitors)
        with pytest.raises(LedgerError, match=r"monitor 'alerts' on scope .* is leased to run 1 until .*budget release"):
            ledger.open_run(scope, ApproxDP(0.5, 1e-8), "rival", monitors=monitors)
        ledger.commit_run(opener.run_id, {"alerts": (_record(1), False)})
        sealed = ledger.monitor_record(scope, "alerts")
        continued = {"alerts": (0.5, 1e-8, sealed)}
        failing = ledger.open_run(scope, PureDP(0.1), "continue, fails", monitors=continued)
        ledger.end_run(failing.run_id, "worker lost")
        assert ledger.monitor_record(scope, "alerts") == sealed  # its answers were never published
        again = ledger.open_run(scope, PureDP(0.1), "continue", monitors=continued)
        ledger.commit_run(again.run_id, {"alerts": (_record(2), False)})
        view = ledger.show(scope)
    assert view.monitors[0].instances == 2 and view.monitors[0].checked_out is None
    assert view.state["spent_epsilon"] == pytest.approx(0.6)  # the monitor once and the published run; not the failed one


def test_a_run_that_opens_a_monitor_must_carry_its_budget(ledger_url):
    """The event of a run opening an svt monitor must cover the monitor's budget (basic composition): an event of
    the releases alone would open the monitor for less than it may spend. A continued monitor needs nothing."""
    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope(ledger, 5.0)
        monitors = {"alerts": (0.5, 1e-8, None)}
        for releases_only in (PureDP(0.4), Gaussian(1.0)):  # Gaussian noise, whatever its cost, is not a budget
            with pytest.raises(LedgerError, match="does not cover the new svt monitors' budgets .*epsilon 0.5"):
                ledger.open_run(scope, releases_only, "releases only", monitors=monitors)
        assert ledger.runs_of(scope) == [] and ledger.monitor_record(scope, "alerts") is None
        opener = ledger.open_run(scope, Composed((Gaussian(3.0), PureDP(0.4), ApproxDP(0.5, 1e-8))),
                                 "with the budget", monitors=monitors)
        assert opener.admitted
        ledger.commit_run(opener.run_id, {"alerts": (_record(1), False)})
        continued = {"alerts": (0.5, 1e-8, ledger.monitor_record(scope, "alerts"))}
        assert ledger.open_run(scope, PureDP(0.1), "continue", monitors=continued).admitted


def test_an_expired_lease_frees_the_monitor_and_fences_the_old_run(ledger_url):
    clock = FakeClock()
    with Ledger(ledger_url, create=True, clock=clock) as ledger:
        scope = _scope(ledger, 5.0)
        monitors = {"alerts": (0.5, 1e-8, None)}
        killed = ledger.open_run(scope, ApproxDP(0.5, 1e-8), "killed", monitors=monitors, output="/out",
                                 lease_seconds=0.2)
        clock.advance(0.3)
        assert [r.status for r in ledger.runs_of(scope)] == ["expired"]  # shown so before anyone ends it
        successor = ledger.open_run(scope, ApproxDP(0.5, 1e-8), "next", monitors=monitors, output="/out")
        assert successor.admitted
        with pytest.raises(LedgerError, match="no longer running .*expired"):
            ledger.commit_run(killed.run_id, {"alerts": (_record(), False)})
        with pytest.raises(LedgerError, match="no longer running"):
            ledger.renew_run(killed.run_id)
        assert ledger.commit_run(successor.run_id, {"alerts": (_record(), False)}).admitted
        assert len(ledger.history(scope)) == 1


def test_a_renewed_lease_outlives_its_first_term(ledger_url):
    clock = FakeClock()
    with Ledger(ledger_url, create=True, clock=clock) as ledger:
        scope = _scope(ledger)
        run = ledger.open_run(scope, PureDP(0.1), "long", output="/out", lease_seconds=0.3)
        for _ in range(3):
            clock.advance(0.15)
            ledger.renew_run(run.run_id, 0.3)
        with pytest.raises(LedgerError, match="output /out is leased to run"):
            ledger.open_run(scope, PureDP(0.1), "rival", output="/out")
        assert ledger.commit_run(run.run_id).admitted


def test_an_operator_releases_a_dead_run_and_a_published_one_only_by_force(ledger_url):
    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope(ledger, 5.0)
        monitors = {"alerts": (0.5, 1e-8, None)}
        dead = ledger.open_run(scope, ApproxDP(0.5, 1e-8), "dead", monitors=monitors)
        assert "released" in ledger.release_run(scope, dead.run_id)
        library = ledger.open_run(scope, ApproxDP(0.5, 1e-8), "library", monitors=monitors)
        ledger.commit_run(library.run_id, None)  # debited before its pipeline ran; the monitor stays leased
        with pytest.raises(LedgerError, match="leased to run .* until its pipeline checks it in"):
            ledger.open_run(scope, PureDP(0.1), "rival", monitors={"alerts": (0.5, 1e-8, ledger.monitor_record(scope, "alerts"))})
        with pytest.raises(LedgerError, match="may have published alerts .* --force"):
            ledger.release_run(scope, library.run_id)
        ledger.release_run(scope, library.run_id, force=True)
        assert ledger.show(scope).monitors[0].checked_out is None
        assert [r.status for r in ledger.runs_of(scope)] == ["released", "published"]


def test_a_commit_after_a_preview_is_refused_when_the_scope_changed_in_between(ledger_url):
    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope(ledger)
        run = ledger.open_run(scope, PureDP(0.3), "run")
        after, token = ledger.preview_run(run.run_id)
        assert after.state["spent_epsilon"] == pytest.approx(0.3) and ledger.show(scope).state["spent_epsilon"] == 0
        ledger.spend(scope, PureDP(0.2), "meanwhile")
        with pytest.raises(LedgerConflict):
            ledger.commit_run(run.run_id, None, token)
        after, token = ledger.preview_run(run.run_id)
        assert ledger.commit_run(run.run_id, None, token).admitted
        assert ledger.show(scope) == after


def test_period_scope_runs_charge_their_periods_at_commit(ledger_url):
    with Ledger(ledger_url, create=True) as ledger:
        scope = _scope_name()
        ledger.init_scope(scope, 1.0, 0.0, unit_period=DAY)
        periods = Periods(DAY, 15706, 15708)
        run = ledger.open_run(scope, PureDP(0.4), "days", periods=periods)
        assert ledger.period_states(scope) == []
        ledger.commit_run(run.run_id)
        assert [p["releases"] for p in ledger.period_states(scope)] == [1, 1, 1]
        with pytest.raises(LedgerError, match="name the periods"):
            ledger.open_run(scope, PureDP(0.4), "no periods")


def test_reads_do_not_wait_for_a_writer(tmp_path):
    """`show`, `history` and `runs_of` read a snapshot while another connection holds the write lock."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        scope = _scope(ledger)
        with ledger.engine.begin() as writer:  # BEGIN IMMEDIATE: holds the write lock until the block ends
            writer.exec_driver_sql("SELECT 1")
            with Ledger(url) as reader:  # a reader taking the write lock would fail after the 120 s timeout
                assert reader.show(scope).releases == 0 and reader.runs_of(scope) == []
