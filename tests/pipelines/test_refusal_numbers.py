"""A refused run says what it costs, what the scope has left, and the fix; `budget show` says what is left.

Oracle for the fix: the suggested epsilon is admitted by the same scope, and 2% more is refused (the search
stops within 0.4% and rounds down to 3 significant digits)."""
from __future__ import annotations

import re

import pytest

from dpstream.accounting.ledger import Ledger
from dpstream.pipelines import Budget, ContributionBounds, HistogramSpec, WindowSpec
from dpstream.pipelines.cli import main as cli
from dpstream.pipelines.run.errors import EXIT_REFUSED, RunError

START = 1356998400  # 2013-01-01


def _budget(url: str, epsilon: float, scope: str = "s", unit_period: float | None = None) -> Budget:
    return Budget(scope=scope, epsilon=epsilon, delta=1e-6, bounds=ContributionBounds(2, 1),
                  window=WindowSpec(size=86400, start=START, end=START + 3 * 86400),
                  releases=[HistogramSpec("daily", partitions=("A", "B", "C"))], ledger=url, unit_period=unit_period)


def _refusal(budget: Budget) -> str:
    with pytest.raises(RunError) as refused:
        budget.admit("probe")
    assert refused.value.exit_code == EXIT_REFUSED
    return str(refused.value)


def _admitted(budget: Budget) -> bool:
    try:
        admission = budget.admit("probe")
    except RunError as err:
        assert err.exit_code == EXIT_REFUSED, err
        return False
    budget.abandon(admission, "probe only")
    return True


def test_a_scope_made_with_the_jobs_own_budget_gives_numbers_and_the_fix(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("s", 4.0, 1e-6)  # the default price: a run at delta 1e-7, a tenth of the scope's
    message = _refusal(_budget(url, 4.0))
    cost = re.search(r"it costs epsilon=([\d.]+), delta=1e-07 and the scope has epsilon=4, delta=1e-06 left", message)
    assert cost and float(cost.group(1)) > 4.0, message
    assert "a scope made with `--filter approx:release_delta=1e-06` prices it at the job's own delta" in message
    suggestion = float(re.search(r"privacy\.epsilon = ([\d.]+) or less fits \(this run asks for 4\)", message).group(1))
    assert _admitted(_budget(url, suggestion)) and not _admitted(_budget(url, suggestion * 1.02))


def test_the_fix_follows_what_earlier_runs_spent_and_show_prints_what_is_left(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("s", 5.0, 1e-5, "approx:release_delta=1e-6")
    _budget(url, 3.0).debit("first")
    assert cli.main(["budget", "show", "--ledger", url, "--scope", "s"]) == 0
    out = capsys.readouterr().out
    spent = float(re.search(r"spent_epsilon=([\d.]+)", out).group(1))
    left = re.search(r"  left: epsilon=([\d.]+), delta=([\de.-]+)", out)
    assert left and float(left.group(1)) == pytest.approx(5.0 - spent, rel=1e-6) and float(left.group(2)) == pytest.approx(9e-6)
    message = _refusal(_budget(url, 3.0))
    assert f"the scope has epsilon={float(left.group(1)):.6g}, delta=9e-06 left" in message
    assert "release_delta" not in message  # priced at the job's own delta already: no price hint
    suggestion = float(re.search(r"privacy\.epsilon = ([\d.]+) or less fits", message).group(1))
    assert suggestion < 3.0 and _admitted(_budget(url, suggestion)) and not _admitted(_budget(url, suggestion * 1.02))


def test_a_period_scope_names_the_fullest_period(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("p", 2.0, 1e-6, "approx:release_delta=1e-6", unit_period=86400)
    message = _refusal(_budget(url, 3.0, scope="p", unit_period=86400))
    assert re.search(r"in 3 of its 3 periods .* it costs epsilon=[\d.]+, delta=1e-06 per period, and the fullest of "
                     r"those periods has epsilon=2, delta=1e-06 left", message), message
    suggestion = float(re.search(r"privacy\.epsilon = ([\d.]+) or less fits", message).group(1))
    assert _admitted(_budget(url, suggestion, "p", 86400)) and not _admitted(_budget(url, suggestion * 1.02, "p", 86400))


def test_a_retired_scope_gets_no_epsilon_suggestion(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("s", 5.0, 1e-5, "approx:release_delta=1e-6")
        ledger.retire_scope("s", "superseded")
    message = _refusal(_budget(url, 1.0))
    assert "was retired at" in message and "(superseded)" in message and "fits" not in message
