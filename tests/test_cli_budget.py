"""`dpstream budget` end to end (in process, SQLite): exit codes, one-line errors, nothing written on bad input."""
from __future__ import annotations

import json
import sqlite3

import pytest

from accounting.ledger import LEDGER_ENV
from pipelines.cli import main


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
