"""The library API is a transaction too (issue 33): a `Budget` whose releases all go to `budget.write` sinks
debits only when the pipeline succeeded and every written release is staged, then publishes exactly the files its
debit journaled; a pipeline that fails inside a user's DoFn debits nothing and `budget history` says failed. When
rows flow into the user's own transforms, Beam cannot tell whether they published, so the debit comes first and
stands (the safe default), with a note that says so. On SQLite and PostgreSQL."""
from __future__ import annotations

import hashlib

import apache_beam as beam
import pytest
from apache_beam.typehints.decorators import TypeCheckError

import dpstream.pipelines as dp
from dpstream.accounting.ledger import Ledger
from dpstream.connectors.writers import read_rows
from tests.accounting.test_ledger import ledger_url, postgres_url, postgresql_url_fresh  # noqa: F401  (fixtures)

SCOPE = "library"
PARTITIONS = ("a", "b")


def _scope(url: str) -> None:
    with Ledger(url, create=True) as ledger:
        ledger.init_scope(SCOPE, 10.0, 1e-5, "approx:release_delta=1e-06")


def _budget(url: str, output) -> dp.Budget:
    return dp.Budget(scope=SCOPE, epsilon=1.0, delta=1e-6, ledger=url, seed=3, output=str(output),
                     bounds=dp.ContributionBounds(max_partitions=1, max_contributions=1),
                     window=dp.WindowSpec.of("1d", "2013-01-01", "2013-01-03"),
                     releases=[dp.HistogramSpec("daily", partitions=PARTITIONS),
                               dp.TopKSpec("top", k=1, partitions=PARTITIONS)])


def _events(fail_at: int | None = None):
    def check(row):
        if row["user"] == fail_at:
            raise ValueError("the user's DoFn failed")
        return row

    rows = [{"user": u, "time": f"2013-01-0{1 + u % 2}T10:00:00Z", "dest": PARTITIONS[u % 2]} for u in range(40)]
    return (beam.Create(rows) | "User DoFn" >> beam.Map(check)
            | dp.ToEvents(user="user", timestamp="time", partition="dest"))


def _pipeline(budget: dp.Budget, fail_at: int | None = None, own_sink: bool = False) -> beam.Pipeline:
    pipeline = beam.Pipeline()
    events = pipeline | "Events" >> _events(fail_at)
    for name in ("daily", "top"):
        rows = events | f"Release {name}" >> budget.release(name)
        if own_sink:
            rows | f"Print {name}" >> beam.Map(lambda row: None)
        else:
            rows | f"Write {name}" >> budget.write(name, "jsonl")
    return pipeline


def _runs(url: str) -> list[tuple[str, bool]]:
    with Ledger(url) as ledger:
        return [(run.status, run.release_id is not None) for run in ledger.runs_of(SCOPE)]


def _spent(url: str) -> int:
    with Ledger(url) as ledger:
        return len(ledger.history(SCOPE))


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgresql"], indirect=True)
def test_a_pipeline_that_fails_in_a_users_dofn_debits_nothing_and_publishes_nothing(tmp_path, ledger_url):
    _scope(ledger_url)
    budget = _budget(ledger_url, tmp_path / "out")
    with pytest.raises(dp.RunError, match=r"ValueError: the user's DoFn failed .*; nothing was published or debited"):
        budget.run(_pipeline(budget, fail_at=7))
    assert _spent(ledger_url) == 0 and _runs(ledger_url) == [("failed", False)]
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if "staging" in p.name]

    budget = _budget(ledger_url, tmp_path / "out")  # the same pipeline without the fault: one debit, published
    debit = budget.run(_pipeline(budget))
    assert _spent(ledger_url) == 1 and _runs(ledger_url) == [("failed", False), ("published", True)]
    published = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert published == ["daily.jsonl", "report.json", "top.jsonl"]
    with Ledger(ledger_url) as ledger:
        journaled = {f.name: f.digest for f in ledger.run_files(debit.run_id)}
    assert journaled == {name: hashlib.sha256((tmp_path / "out" / name).read_bytes()).hexdigest()
                         for name in published}
    assert len(read_rows(str(tmp_path / "out" / "daily.jsonl"), "jsonl")) == 2 * len(PARTITIONS)


def test_rows_that_reach_the_users_own_transforms_are_debited_before_the_run_and_the_debit_stands(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    _scope(url)
    budget = _budget(url, tmp_path / "out")
    with pytest.raises(dp.RunError, match=r"the debit \(ledger run 1\) stands"):
        budget.run(_pipeline(budget, fail_at=7, own_sink=True))
    assert "releases daily, top go to transforms of your own" in capsys.readouterr().err
    assert _spent(url) == 1
    assert not (tmp_path / "out").exists()


def test_a_release_written_twice_or_without_an_output_is_refused_before_anything_runs(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    budget = _budget(url, tmp_path / "out")
    budget.write("daily")
    with pytest.raises(dp.RunError, match="release 'daily' is written once"):
        budget.write("daily")
    with pytest.raises(dp.RunError, match="no such release; the budget's releases: daily, top"):
        budget.write("weekly")
    budget.close()
    assert not [p for p in tmp_path.iterdir() if "staging" in p.name]
    unplaced = dp.Budget(scope=SCOPE, epsilon=1.0, delta=1e-6, ledger=url, bounds=budget.bounds,
                         window=budget.window, releases=budget.releases)
    with pytest.raises(dp.RunError, match=r"needs the budget's output directory: Budget\(..., output=DIRECTORY\)"):
        unplaced.write("daily")


def test_a_column_typo_in_to_events_debits_nothing_and_history_says_failed(tmp_path):
    """Issue 33, case 3: the typo used to fail the pipeline after the debit, recorded as published."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    _scope(url)
    budget = _budget(url, tmp_path / "out")
    pipeline = beam.Pipeline()
    rows = [{"user": u, "time": "2013-01-01T10:00:00Z", "dest": "a"} for u in range(5)]
    events = pipeline | beam.Create(rows) | dp.ToEvents(user="usr", timestamp="time", partition="dest")
    for name in ("daily", "top"):
        events | f"Release {name}" >> budget.release(name) | f"Write {name}" >> budget.write(name)
    with pytest.raises(dp.RunError, match=r"column 'usr'.*; nothing was published or debited"):
        budget.run(pipeline)
    assert _spent(url) == 0 and _runs(url) == [("failed", False)]
    with Ledger(url) as ledger:
        (run,) = ledger.runs_of(SCOPE)
    assert "column 'usr'" in run.reason and not (tmp_path / "out").exists()


def _release_twice(budget: dp.Budget, events) -> None:
    for label in ("first", "second"):  # two applications: two noise draws, one debit
        events | f"Daily {label}" >> budget.release("daily") | f"Show {label}" >> beam.Map(lambda row: None)


def _label_prefix(budget: dp.Budget, events) -> None:
    for name in ("daily", "top"):
        rows = events | f"Release {name}" >> budget.release(name)
        rows | f"Write {name}" >> budget.write(name)
    rows | "Write top/leak" >> beam.Map(lambda row: None)  # a user step whose label looks inside the sink


def _other_data(budget: dp.Budget, events) -> None:
    events | "Raw" >> budget.write("daily")  # the raw events under a release's name
    events | "Release top" >> budget.release("top") | "Write top" >> budget.write("top")


def _sink_reused(budget: dp.Budget, events) -> None:
    sink = budget.write("daily")
    for name in ("daily", "top"):
        events | f"Release {name}" >> budget.release(name) | f"Write {name}" >> sink


@pytest.mark.parametrize("build, message", [
    (_release_twice, r"release 'daily' is applied 2 times in the pipeline; .*nothing was debited"),
    (_label_prefix, r"releases daily, top go to budget.write and top to transforms of your own: .*nothing was debited"),
    (_other_data, r"budget.write\('daily'\) must be applied to the rows of budget.release\('daily'\)"),
    (_sink_reused, r"budget.write\('daily'\) is applied 2 times"),
], ids=["release applied twice", "a user step labelled inside a sink", "raw data written", "a sink reused"])
def test_graphs_that_could_publish_unpaid_or_doubly_noised_rows_are_refused_before_anything_runs(tmp_path, build,
                                                                                                   message):
    """Review of issue 33 (privacy): each of these used to take the debit-after path, or publish twice the noise
    for one debit, or publish other data under a release's name. Now refused with no ledger run at all."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    _scope(url)
    budget = _budget(url, tmp_path / "out")
    pipeline = beam.Pipeline()
    build(budget, pipeline | "Events" >> _events())
    with pytest.raises(dp.RunError, match=message):
        budget.run(pipeline)
    assert _runs(url) == [] and not (tmp_path / "out").exists()


def test_a_sink_s_output_cannot_be_read():
    budget = _budget("sqlite:///unused.db", "/tmp/dpstream-unused-out")
    try:
        pipeline = beam.Pipeline()
        rows = pipeline | "Events" >> _events() | budget.release("daily")
        with pytest.raises(TypeCheckError, match="produces no PCollections"):
            rows | budget.write("daily") | beam.Map(lambda count: count)
    finally:
        budget.close()


def test_a_sink_inside_the_users_own_composite_is_still_a_sink(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    _scope(url)
    budget = _budget(url, tmp_path / "out")

    class Publish(beam.PTransform):  # a user's composite wrapping the budget's sink (a common Beam style)
        def __init__(self, name):
            super().__init__()
            self.name = name

        def expand(self, rows):
            return rows | budget.write(self.name)

    pipeline = beam.Pipeline()
    events = pipeline | "Events" >> _events()
    for name in ("daily", "top"):
        events | f"Release {name}" >> budget.release(name) | f"Publish {name}" >> Publish(name)
    budget.run(pipeline)
    assert _runs(url) == [("published", True)]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["daily.parquet", "report.json", "top.parquet"]


def test_the_ledger_records_a_failing_dofns_exception_type_and_step_never_its_message(tmp_path):
    """Review of issue 33 (privacy): a user's exception can quote a row; the ledger's views are public."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    _scope(url)
    budget = _budget(url, tmp_path / "out")
    pipeline = beam.Pipeline()

    def enrich(row):
        raise KeyError(f"{row['user']}@example.com")

    events = (pipeline | beam.Create([{"user": "alice", "time": "2013-01-01T10:00:00Z", "dest": "a"}])
              | "Enrich" >> beam.Map(enrich) | dp.ToEvents(user="user", timestamp="time", partition="dest"))
    for name in ("daily", "top"):
        events | f"Release {name}" >> budget.release(name) | f"Write {name}" >> budget.write(name)
    with pytest.raises(dp.RunError, match="alice@example.com") as caught:
        budget.run(pipeline)
    assert caught.value.exit_code == 5
    with Ledger(url) as ledger:
        (run,) = ledger.runs_of(SCOPE)
    assert "alice" not in run.reason
    assert run.reason.startswith("pipeline failed: KeyError in step 'Enrich' (its message is not recorded")
