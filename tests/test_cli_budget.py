"""`dpstream budget` end to end (in process, SQLite): exit codes, one-line errors, nothing written on bad input."""
from __future__ import annotations

import json
import sqlite3

import pytest

from dpstream.accounting.ledger import LEDGER_ENV
from dpstream.pipelines.cli.main import main


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(LEDGER_ENV, raising=False)
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert main(["budget", "init", "--ledger", url, "--scope", "flights", "--epsilon", "1", "--delta", "1e-6"]) == 0
    return url


def _dump(url: str) -> list:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return [
            conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
            for table in ("dpstream_scopes", "dpstream_releases", "dpstream_monitors")
        ]


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def test_spend_exit_codes_and_messages(ledger, capsys):
    spend = ["budget", "spend", "--ledger", ledger, "--scope", "flights"]
    assert main(spend + ["--event", "gaussian:sigma=20,sensitivity=1", "--count", "3", "--label", "day 1"]) == 0
    assert capsys.readouterr().out.startswith("admitted: release 'day 1'")
    assert main(spend + ["--event", "laplace:scale=10", "--label", "day 2"]) == 0
    capsys.readouterr()
    assert main(spend + ["--event", "pure:epsilon=0.95", "--label", "day 3"]) == 3
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("refused: release 'day 3' would exceed the budget")
    assert main(["budget", "history", "--ledger", ledger, "--scope", "flights", "--json"]) == 0
    history = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in history] == ["day 1", "day 2"]
    assert history[0]["events"] == {"type": "SelfComposed", "event": {"type": "Gaussian", "sigma": 20.0, "sensitivity": 1.0}, "count": 3}
    assert main(["budget", "show", "--ledger", ledger, "--scope", "flights", "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["filter"] == "approx" and view["releases"] == 2
    assert view["state"]["spent_delta"] == pytest.approx(1e-7)  # Gaussian release at the 1e-7 share; Laplace is pure
    assert main(["budget", "show", "--ledger", ledger, "--scope", "flights"]) == 0
    assert "releases: 2" in capsys.readouterr().out


def test_every_event_kind_of_the_issue(ledger, capsys):
    for spec in ("pure:epsilon=0.01", "gaussian:sigma=200,sensitivity=1", "laplace:scale=100",
                 "exponential:epsilon=0.01", "approx:epsilon=0.01,delta=1e-9"):
        assert main(["budget", "spend", "--ledger", ledger, "--scope", "flights", "--event", spec, "--label", spec]) == 0
    assert capsys.readouterr().out.count("admitted") == 5


def test_default_ledger_and_environment(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(LEDGER_ENV, raising=False)
    assert main(["budget", "init", "--scope", "s", "--epsilon", "2", "--delta", "0", "--filter", "pure"]) == 0
    default = tmp_path / "dpstream-ledger.db"
    assert default.exists() and default.stat().st_mode & 0o777 == 0o600
    other = tmp_path / "env.db"
    monkeypatch.setenv(LEDGER_ENV, f"sqlite:///{other}")
    assert main(["budget", "init", "--scope", "s", "--epsilon", "1", "--delta", "1e-6", "--filter", "gdp-residue"]) == 0
    assert other.exists()
    capsys.readouterr()
    assert main(["budget", "show", "--scope", "s", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["filter"] == "gdp-residue"
    assert main(["budget", "show", "--scope", "s", "--json", "--ledger", f"sqlite:///{default}"]) == 0
    assert json.loads(capsys.readouterr().out)["filter"] == "pure"


@pytest.mark.parametrize(
    "args,message",
    [
        (["spend", "--scope", "nope", "--event", "pure:epsilon=0.1", "--label", "x"], "unknown scope 'nope'"),
        (["spend", "--scope", "flights", "--event", "pure", "--label", "x"], "pure needs"),
        (["spend", "--scope", "flights", "--event", "gauss:sigma=1", "--label", "x"], "unknown kind 'gauss'"),
        (["spend", "--scope", "flights", "--event", "gaussian:sigma", "--label", "x"], "expected NAME=VALUE"),
        (["spend", "--scope", "flights", "--event", "gaussian:sigma=abc", "--label", "x"], "must be a number"),
        (["spend", "--scope", "flights", "--event", "pure:epsilon=-0.1", "--label", "x"], "positive finite"),
        (["spend", "--scope", "flights", "--event", "laplace:scale=nan", "--label", "x"], "NaN"),
        (["spend", "--scope", "flights", "--event", "approx:epsilon=0.1,delta=2", "--label", "x"], r"\[0, 1\)"),
        (["spend", "--scope", "flights", "--event", "pure:epsilon=0.1", "--count", "0", "--label", "x"], "--count"),
        (["init", "--scope", "flights", "--epsilon", "1", "--delta", "0"], "already exists"),
        (["init", "--scope", "new", "--epsilon", "nan", "--delta", "0"], "epsilon must be a positive"),
        (["init", "--scope", "new", "--epsilon", "1", "--delta=-1e-6"], r"delta must lie in \[0, 1\)"),
        (["init", "--scope", "new", "--epsilon", "1", "--delta", "0", "--filter", "natural"], "unknown kind"),
        (["init", "--scope", "new", "--epsilon", "1", "--delta", "0", "--filter", "gdp"], "needs delta > 0"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(ledger, capsys, args, message):
    before = _dump(ledger)
    assert main(["budget", args[0], "--ledger", ledger, *args[1:]]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"dpstream budget {args[0]}: ")
    assert __import__("re").search(message, line), line
    assert _dump(ledger) == before


def test_corrupt_or_missing_database(tmp_path, capsys):
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not an SQLite database\n" * 100)
    content = corrupt.read_bytes()
    for args in (["show", "--scope", "s"], ["spend", "--scope", "s", "--event", "pure:epsilon=1", "--label", "x"],
                 ["init", "--scope", "s", "--epsilon", "1", "--delta", "0"], ["history", "--scope", "s"]):
        assert main(["budget", args[0], "--ledger", f"sqlite:///{corrupt}", *args[1:]]) == 2
        assert "file is not a database" in _one_error_line(capsys)
    assert corrupt.read_bytes() == content
    missing = tmp_path / "missing.db"
    assert main(["budget", "show", "--ledger", f"sqlite:///{missing}", "--scope", "s"]) == 2
    assert "does not exist" in _one_error_line(capsys)
    assert not missing.exists()


# -- period scopes -------------------------------------------------------------------------------


@pytest.fixture
def periodic(ledger, capsys):
    """The `ledger` file with a second, pure period scope `daily`: 1.0 per UTC day."""
    assert main(["budget", "init", "--ledger", ledger, "--scope", "daily", "--epsilon", "1", "--delta", "0",
                 "--unit-period", "1d"]) == 0
    assert capsys.readouterr().out.startswith("created period scope 'daily': epsilon=1, delta=0 per 1d period; ")
    return ledger


def _period_dump(url: str) -> list:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return _dump(url) + [conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
                             for table in ("dpstream_periods", "dpstream_release_periods")]


def test_period_scope_spend_show_and_history(periodic, capsys):
    spend = ["budget", "spend", "--ledger", periodic, "--scope", "daily", "--event", "pure:epsilon=0.6"]
    assert main(spend + ["--label", "run 1", "--periods", "2013-01-01..2013-01-04"]) == 0
    assert capsys.readouterr().out.strip() == (
        "admitted: release 'run 1' (id 1) on scope 'daily', periods 2013-01-01T00:00:00Z..2013-01-04T00:00:00Z "
        "(3 periods of 1d)")
    assert main(spend + ["--label", "run 2", "--periods", "2013-01-04..2013-01-06"]) == 0  # new days: admitted
    capsys.readouterr()
    # A single instant names the period holding it; 2013-01-04T01:00:00+02:00 is still 2013-01-03 in UTC.
    assert main(spend + ["--label", "rerun", "--periods", "2013-01-04T01:00:00+02:00"]) == 3
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("refused: release 'rerun' would exceed the budget of scope 'daily' "
                                               "in 1 of its 1 periods (2013-01-03T00:00:00Z..2013-01-04T00:00:00Z")
    assert main(spend[:-1] + ["pure:epsilon=0.4", "--label", "top up", "--periods", "2013-01-03T06:00..2013-01-03T07:00"]) == 0
    capsys.readouterr()

    assert main(["budget", "show", "--ledger", periodic, "--scope", "daily"]) == 0
    text = capsys.readouterr().out
    assert "scope daily: epsilon=1, delta=0 per 1d period, filter=pure" in text
    assert ("periods: 1d (86400 s) each; spent on 5, the first starting 2013-01-01T00:00:00Z, "
            "the last starting 2013-01-05T00:00:00Z") in text
    assert "largest spent in one period: spent_epsilon=1" in text and "releases: 3" in text
    assert main(["budget", "show", "--ledger", periodic, "--scope", "daily", "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["unit_period"] == "1d" and view["unit_period_grid"] == {"period_s": 86400} and view["periods_spent"] == 5
    assert view["largest_spent"] == {"max_spent_epsilon": 1.0}
    assert [(p["start"], p["releases"], p["state"]["spent_epsilon"]) for p in view["periods"]] == [
        ("2013-01-01T00:00:00Z", 1, 0.6), ("2013-01-02T00:00:00Z", 1, 0.6), ("2013-01-03T00:00:00Z", 2, 1.0),
        ("2013-01-04T00:00:00Z", 1, 0.6), ("2013-01-05T00:00:00Z", 1, 0.6)]

    assert main(["budget", "history", "--ledger", periodic, "--scope", "daily"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "run 2  periods 2013-01-04T00:00:00Z..2013-01-06T00:00:00Z (2 periods of 1d)" in lines[1]
    assert "top up  periods 2013-01-03T00:00:00Z..2013-01-04T00:00:00Z (1 period of 1d)" in lines[2]
    assert main(["budget", "history", "--ledger", periodic, "--scope", "daily", "--json"]) == 0
    history = json.loads(capsys.readouterr().out)
    assert [r["periods"] for r in history][0] == [
        {"period_s": 86400, "start": "2013-01-01T00:00:00Z", "end": "2013-01-04T00:00:00Z", "count": 3}]
    # The plain scope of the same file shows and lists as before: no period keys in its history.
    assert main(["budget", "history", "--ledger", periodic, "--scope", "flights", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


@pytest.mark.parametrize(
    "args,message",
    [
        (["spend", "--scope", "flights", "--event", "pure:epsilon=0.1", "--label", "x", "--periods", "2013-01-01"],
         r"scope 'flights' has one budget for all its releases \(no unit period\); --periods applies"),
        (["spend", "--scope", "daily", "--event", "pure:epsilon=0.1", "--label", "x"],
         r"budget per 1d period: name the periods the release touches \(`dpstream budget spend --periods"),
        (["spend", "--scope", "daily", "--event", "pure:epsilon=0.1", "--label", "x", "--periods", "yesterday"],
         "expected an ISO date or date-time"),
        (["spend", "--scope", "daily", "--event", "pure:epsilon=0.1", "--label", "x", "--periods",
          "2013-01-05..2013-01-05"], "END must be after START"),
        (["spend", "--scope", "daily", "--event", "gaussian:sigma=1", "--label", "x", "--periods", "2013-01-05"],
         "cannot price Gaussian"),
        (["init", "--scope", "new", "--epsilon", "1", "--delta", "0", "--unit-period", "soon"],
         r"--unit-period must be a positive duration such as \"1d\""),
        (["init", "--scope", "new", "--epsilon", "1", "--delta", "0", "--unit-period", "0.5s"],
         "whole number of seconds, got 0.5"),
        (["init", "--scope", "daily", "--epsilon", "1", "--delta", "0", "--unit-period", "1d"], "already exists"),
        (["show", "--scope", "nope"], "unknown scope 'nope'"),
    ],
)
def test_period_bad_input_is_one_line_and_writes_nothing(periodic, capsys, args, message):
    before = _period_dump(periodic)
    assert main(["budget", args[0], "--ledger", periodic, *args[1:]]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"dpstream budget {args[0]}: ")
    assert __import__("re").search(message, line), line
    assert _period_dump(periodic) == before


def test_unit_period_durations_match_the_job_file(ledger, capsys):
    for name, text, seconds in (("six", "6h", 21600), ("week", "2w", 1209600), ("raw", "3600", 3600)):
        assert main(["budget", "init", "--ledger", ledger, "--scope", name, "--epsilon", "1", "--delta", "0",
                     "--unit-period", text]) == 0
        capsys.readouterr()
        assert main(["budget", "show", "--ledger", ledger, "--scope", name, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["unit_period_grid"] == {"period_s": seconds}
