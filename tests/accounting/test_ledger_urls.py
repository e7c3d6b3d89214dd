"""Ledger URLs never show their secrets: `masked_url` on every credential form, the Ledger's own messages, and
`dpstream run`'s reports, `dpstream status` and `dpstream budget` on a URL that carries a password.

The PostgreSQL tests use the local server of tests/accounting/test_ledger.py; its trust authentication ignores
the password the URLs carry."""
from __future__ import annotations

import json
import traceback

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.accounting.ledger import Ledger, LedgerError, UnknownScopeError
from dpstream.accounting.ledger.urls import masked_url
from dpstream.pipelines.cli import main as cli
from tests.accounting.test_ledger import postgres_url, postgresql_url_fresh  # noqa: F401  (fixtures)
from tests.pipelines.test_hostile_runs import JOB, _events

SECRET = "s3cret"

MASKED = [
    ("postgresql://u:s3cret@db.example:5432/ledger", "postgresql://u:***@db.example:5432/ledger"),
    ("postgresql+psycopg://u@h/db?password=s3cret", "postgresql+psycopg://u@h/db?password=***"),
    ("postgresql://u@h/db?sslmode=require&sslpassword=s3cret", "postgresql://u@h/db?sslmode=require&sslpassword=***"),
    ("postgresql://u@h/db?PASSWORD=s3cret&Passwd=s3cret&pwd=s3cret", "postgresql://u@h/db?PASSWORD=***&Passwd=***&pwd=***"),
    ("postgresql://u@h/db?sslkey=/home/u/s3cret.key&sslcert=/etc/pg/client.crt&sslrootcert=/etc/pg/root.crt",
     "postgresql://u@h/db?sslkey=***&sslcert=/etc/pg/client.crt&sslrootcert=/etc/pg/root.crt"),
    ("postgresql://u:%73%33cret@h/db?pass%77ord=%73%33cret", "postgresql://u:***@h/db?pass%77ord=***"),
    ("postgresql://u:p@s3cret@h/db", "postgresql://u:***@h/db"),  # an unencoded @ in the password
    ("postgresql://u:p?s3cret@h/db", "postgresql://u:***@h/db"),  # an unencoded ? in the password
    ("postgresql://u@h:5432/db?password=p@s3cret&sslmode=require",
     "postgresql://u@h:5432/db?password=***&sslmode=require"),
    ("postgresql://u@h/db?a=1?password=s3cret", "postgresql://u@h/db?a=1?password=***"),  # a stray ?
    # SQLAlchemy cannot parse these: the whole userinfo and every value are masked
    ("postgresql://u:s3cret@h:abc/db?password=s3cret&sslmode=require", "postgresql://***@h:abc/db?password=***&sslmode=***"),
    ("postgresql://u:p@s3:cret@h/db", "postgresql://***@h/db"),  # SQLAlchemy's own error quotes `cret@h`
    ("host=h password=s3cret", "host=***"),  # libpq's keyword form, not a URL
    ("mysql://root:s3cret@h/db", "mysql://root:***@h/db"),
    # nothing to mask
    ("sqlite:///dpstream-ledger.db", "sqlite:///dpstream-ledger.db"),
    ("sqlite:////home/me@corp/ledger.db", "sqlite:////home/me@corp/ledger.db"),
    ("postgresql://u@h/db?sslmode=require&options=-csearch_path%3Dx", "postgresql://u@h/db?sslmode=require&options=-csearch_path%3Dx"),
    ("postgresql://h/db?password=", "postgresql://h/db?password="),
]


@pytest.mark.parametrize("url, shown", MASKED, ids=[url for url, _ in MASKED])
def test_masked_url_hides_every_credential_form(url, shown):
    assert masked_url(url) == shown
    assert masked_url(shown) == shown


_PIECES = st.sampled_from(["postgresql://", "sqlite:///", "u", ":", "@", "/", "?", "&", "=", ";", "%40", "+", " ",
                           "password", "PassWord", "sslkey", "host", ":5432", ":abc", "db", "*", "***", "http://"])


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(), st.lists(_PIECES, max_size=12).map("".join)))
def test_masked_url_never_raises_and_is_idempotent(url):
    once = masked_url(url)
    assert masked_url(once) == once


_JUNK = st.lists(st.sampled_from([*"@/?:#&=;%+ ", "x", "40"]), max_size=5).map("".join)


@settings(max_examples=500, deadline=None)
@given(scheme=st.sampled_from(["postgresql://", "postgresql+psycopg://", "mysql://", "post gres://"]),
       user=st.sampled_from(["", "u", "me@corp", "u?x"]), port=st.sampled_from(["", ":5432", ":abc", ":"]),
       before=_JUNK, after=_JUNK, in_userinfo=st.booleans(),
       name=st.sampled_from(["password", "PASSWORD", "pass%77ord", "sslpassword", "sslkey", "pwd"]),
       others=st.lists(st.sampled_from(["sslmode=require", "application_name=a@b", "a=1?", "b=;"]), max_size=3))
def test_a_password_anywhere_is_hidden(scheme, user, port, before, after, in_userinfo, name, others):
    query = "&".join(others)
    if in_userinfo:
        url = f"{scheme}{user}:{before}{SECRET}{after}@host{port}/db" + (f"?{query}" if query else "")
    else:
        value = f"{before}{SECRET}{after}".replace("&", "")
        url = f"{scheme}{user}@host{port}/db?" + "&".join([*others, f"{name}={value}"])
    assert SECRET not in masked_url(url)


@pytest.mark.parametrize("url, message", [
    ("mysql://root:s3cret@h/db",
     "ledger URL 'mysql://root:***@h/db': backend 'mysql' is not supported; use sqlite or postgresql"),
    ("postgresql://u:s3cret@h:abc/db",
     "ledger URL 'postgresql://***@h:abc/db' is not a database URL (sqlite:///FILE or postgresql://...)"),
    ("postgresql://u:p@s3:cret@h/db",
     "ledger URL 'postgresql://***@h/db' is not a database URL (sqlite:///FILE or postgresql://...)"),
])
def test_ledger_errors_hide_the_password(url, message):
    with pytest.raises(LedgerError) as err:
        Ledger(url)
    assert str(err.value) == message
    assert "cret" not in "".join(traceback.format_exception(err.value))  # nor does a chained parser error


def test_ledger_display_url_hides_a_password_parameter(postgresql_url_fresh):
    url = f"{postgresql_url_fresh}&password={SECRET}"
    with Ledger(url, create=True) as ledger:
        assert ledger.display_url.endswith("&password=***") and SECRET not in ledger.display_url
        with pytest.raises(UnknownScopeError) as err:
            ledger.show("absent")
    assert SECRET not in str(err.value)


def test_budget_cli_hides_the_password_of_an_unsupported_url(capsys):
    assert cli.main(["budget", "show", "--ledger", f"mysql://root:{SECRET}@h/db", "--scope", "test"]) == 2
    err = capsys.readouterr().err
    assert err == ("dpstream budget show: ledger URL 'mysql://root:***@h/db': backend 'mysql' is not supported; use "
                   "sqlite or postgresql\n")


def test_run_on_a_malformed_port_fails_in_one_line_without_the_password(tmp_path, capsys):
    job = _job(tmp_path)
    assert cli.main(["run", str(job), "--ledger", f"postgresql://u:{SECRET}@h:abc/db"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a database URL" in err and SECRET not in err


def test_run_reports_and_status_hide_a_password_parameter(postgresql_url_fresh, tmp_path, capsys):
    url = f"{postgresql_url_fresh}&password={SECRET}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("test", 100.0, 1e-4, "approx:release_delta=1e-6")
    job, out = _job(tmp_path), tmp_path / "out"
    assert cli.main(["run", str(job), "--output", str(out), "--ledger", url]) == 0
    assert SECRET not in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert report["budget"]["ledger"].endswith("&password=***")
    assert SECRET not in (out / "report.json").read_text() and SECRET not in (out / "report.md").read_text()
    for extra in ([], ["--json"]):
        assert cli.main(["status", str(job), "--output", str(out), "--ledger", url, *extra]) == 0
        printed = capsys.readouterr().out
        assert "password=***" in printed and SECRET not in printed


def test_run_on_a_missing_scope_hints_without_the_password(postgresql_url_fresh, tmp_path, capsys):
    url = f"{postgresql_url_fresh}&password={SECRET}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("elsewhere", 1.0, 1e-6)
    assert cli.main(["run", str(_job(tmp_path)), "--ledger", url]) == 2
    err = capsys.readouterr().err
    assert "create it with `dpstream budget init --ledger " in err and "password=***" in err and SECRET not in err


def _job(directory):
    (directory / "events.csv").write_text(_events())
    path = directory / "job.toml"
    path.write_text(JOB)
    return path
