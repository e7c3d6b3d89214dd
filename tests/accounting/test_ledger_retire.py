"""Retiring a scope (`Ledger.retire_scope`, `dpstream budget retire`): it refuses everything afterwards, shows when
and why, cannot be retired twice or while a run holds it, and older ledgers gain the table when opened."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from dpstream.accounting.events import PureDP
from dpstream.accounting.ledger import Ledger, LedgerError
from dpstream.pipelines.cli import main as cli
from tests.accounting.test_ledger import ledger_url, postgres_url, postgresql_url_fresh  # noqa: F401  (fixtures)


def test_a_retired_scope_refuses_spends_and_runs(ledger_url):  # noqa: F811
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope("old", 2.0, 1e-6, "approx:release_delta=1e-6")
        assert ledger.spend("old", PureDP(0.5), "before").admitted
        message = ledger.retire_scope("old", "dataset replaced by flights-2014")
        assert message.startswith("retired scope 'old' at ") and "admits nothing more" in message
        refused = ledger.spend("old", PureDP(0.1), "after")
        assert not refused.admitted and "scope 'old' was retired at " in refused.message
        assert "(dataset replaced by flights-2014); it admits nothing more: use a new scope" in refused.message
        ticket = ledger.open_run("old", PureDP(0.1), "a run")
        assert not ticket.admitted and "was retired" in ticket.message
        view = ledger.show("old")
        assert view.retired and view.retired.endswith("(dataset replaced by flights-2014)") and view.releases == 1
        assert view.to_dict()["retired"] == view.retired
        with pytest.raises(LedgerError, match="scope 'old' was already retired at"):
            ledger.retire_scope("old", "again")
        with pytest.raises(LedgerError, match="already exists"):
            ledger.init_scope("old", 2.0, 1e-6)  # never reset: the name stays taken
        assert len(ledger.history("old")) == 1


def test_a_scope_with_a_running_run_is_not_retired(ledger_url):  # noqa: F811
    with Ledger(ledger_url, create=True) as ledger:
        ledger.init_scope("busy", 2.0, 0.0)
        ticket = ledger.open_run("busy", PureDP(0.5), "running")
        with pytest.raises(LedgerError, match=rf"scope 'busy' has run {ticket.run_id} running"):
            ledger.retire_scope("busy", "no")
        ledger.end_run(ticket.run_id, "ended")
        ledger.retire_scope("busy", "now")


def test_an_older_ledger_gains_the_table(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("s", 1.0, 0.0)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE dpstream_retired")
    engine.dispose()
    with Ledger(url) as ledger:
        assert ledger.show("s").retired is None
        ledger.retire_scope("s", "done")
        assert ledger.show("s").retired is not None


def test_cli_retire_and_show(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert cli.main(["budget", "init", "--ledger", url, "--scope", "s", "--epsilon", "1", "--delta", "0"]) == 0
    assert cli.main(["budget", "retire", "--ledger", url, "--scope", "s", "--reason", "superseded"]) == 0
    assert cli.main(["budget", "show", "--ledger", url, "--scope", "s"]) == 0
    out = capsys.readouterr().out
    assert "retired scope 's' at " in out and "  retired: " in out and "(superseded)" in out
    assert cli.main(["budget", "spend", "--ledger", url, "--scope", "s", "--event", "pure:epsilon=0.1",
                     "--label", "late"]) == 3
    assert "was retired" in capsys.readouterr().out
