"""Quantiles releases (`kind = "quantiles"`): the job-file keys, the planner's events and refusals, exact bucket
counts from bounding, and DirectRunner runs over known and unknown partitions, batch and TestStream (equal rows
for a fixed seed), whose draws at a large epsilon are the best grid points of the true ranks."""
from __future__ import annotations

import apache_beam as beam
import numpy as np
import pandas as pd
import pytest

from dpstream.accounting.events import BoundedRange, SelfComposed
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.config.specs import ContributionBounds, HistogramSpec, QuantilesSpec, SpecError, WindowSpec
from dpstream.pipelines.mechanisms.noise import SecureRandom
from dpstream.pipelines.mechanisms.quantiles import ValueGrid
from dpstream.pipelines.planning import PlanningError, plan_job
from dpstream.pipelines.planning.utility import expected_utility
from tests.pipelines.helpers import (
    DAY,
    START,
    bounded_sums,
    events,
    graph_rows,
    out_of_order_stream,
    random_events,
)

W = 3
WINDOW = WindowSpec(size=DAY, start=START, end=START + W * DAY)
PARTITIONS = ("A", "B", "C")
BOUNDS = ContributionBounds(max_partitions=3, max_contributions=10, min_value=-5.0, max_value=5.0)
SEED = 31


def _frame(batch) -> pd.DataFrame:
    frame = batch.to_pandas()
    frame["window"] = (frame["timestamp"] // 1_000_000 - START) // DAY
    return frame


def test_spec_sorts_and_checks_quantiles():
    spec = QuantilesSpec("q", quantiles=[0.9, 0.5], partitions=["A"])
    assert spec.quantiles == (0.5, 0.9) and spec.buckets == 1000
    for bad in ([], [0.0], [1.2], [0.5, 0.5], ["half"]):
        with pytest.raises(SpecError, match="quantile"):
            QuantilesSpec("q", quantiles=bad)
    with pytest.raises(SpecError, match="buckets"):
        QuantilesSpec("q", quantiles=[0.5], buckets=1)


def _job(tmp_path, release: str) -> str:
    path = tmp_path / "job.toml"
    path.write_text(f"""
[input]
path = "events.csv"
user = "u"
timestamp = "t"
partition = "p"
value = "v"
[window]
size = "1d"
start = "2013-01-01"
end = "2013-01-04"
[privacy]
scope = "s"
epsilon = 1.0
delta = 1e-6
min_value = 0
max_value = 100
[[release]]
{release}
[output]
path = "out"
""")
    return str(path)


def test_job_file_keys(tmp_path):
    job = jobfile.load(_job(tmp_path, 'kind = "quantiles"\nname = "delay"\nquantiles = [0.9, 0.5]\nbuckets = 200'))
    (spec,) = job.releases
    assert isinstance(spec, QuantilesSpec) and spec.quantiles == (0.5, 0.9) and spec.buckets == 200
    assert spec.partitions is None
    with pytest.raises(jobfile.JobFileError, match=r"release\.delay\.quantiles is required"):
        jobfile.load(_job(tmp_path, 'kind = "quantiles"\nname = "delay"'))
    with pytest.raises(jobfile.JobFileError, match="quantiles must be a list of 1 to 32 numbers"):
        jobfile.load(_job(tmp_path, 'kind = "quantiles"\nname = "delay"\nquantiles = [50]'))
    with pytest.raises(jobfile.JobFileError, match=r"buckets applies to quantiles releases only"):
        jobfile.load(_job(tmp_path, 'kind = "histogram"\nname = "h"\nbuckets = 10'))


def test_plan_events_and_text():
    spec = QuantilesSpec("q", quantiles=[0.5, 0.9], partitions=PARTITIONS, buckets=100)
    plan = plan_job((spec,), BOUNDS, WINDOW, 1.0, 1e-6)
    planned = plan["q"]
    assert planned.event == SelfComposed(BoundedRange(planned.epsilon), 3 * 2)
    # the job's whole cost is windows x partitions x quantiles bounded-range draws
    assert plan.calibrated.releases[0].release.count == W * 3 * 2
    assert plan.epsilon <= 1.0
    text = planned.describe()
    assert "grid of 100 equal steps of 0.1 over [-5, 5]" in text and "score range 2 x 10" in text
    utility = expected_utility(planned, BOUNDS)
    assert "quantile 0.5: rank off by at most" in utility and "quantile 0.9" in utility
    assert planned.rank_error(0.9) == pytest.approx(1.8 * planned.rank_error(0.5))


def test_unknown_partitions_are_priced_as_a_selection_too():
    spec = QuantilesSpec("q", quantiles=[0.5])
    plan = plan_job((spec, HistogramSpec("h")), BOUNDS, WINDOW, 1.0, 1e-6)
    planned = plan["q"]
    assert planned.selects and planned.selection.sigma > 0
    assert planned.selection.delta == plan["h"].selection_delta  # two selections share SELECTION_DELTA_SHARE
    assert planned.selection.event.sensitivity == pytest.approx(np.sqrt(3))  # L0 users, each adding 1
    assert "noisy number of distinct privacy units" in planned.describe()


def test_refusals():
    counting = ContributionBounds(max_partitions=1, max_contributions=1)
    with pytest.raises(PlanningError, match="min_value < privacy.max_value"):
        plan_job((QuantilesSpec("q", quantiles=[0.5], partitions=PARTITIONS),), counting, WINDOW, 1.0, 1e-6)
    capped = ContributionBounds(max_partitions=1, max_contributions=1, min_value=0.0, max_value=1.0, max_windows=1)
    with pytest.raises(PlanningError, match="do not apply privacy.max_windows"):
        plan_job((QuantilesSpec("q", quantiles=[0.5], partitions=PARTITIONS),), capped, WINDOW, 1.0, 1e-6)


def test_bucket_counts_are_exact():
    """With bounds that bind nowhere, the bounded bucket counts are the clipped values' histogram per cell; a
    user with 80 records in a partition keeps max_contributions of them."""
    batch = random_events(3000, W, 100, list(PARTITIONS), seed=4, values=True)
    heavy = events(["heavy"] * 80, START + np.linspace(10, 1000, 80), ["A"] * 80, np.full(80, 4.99))
    grid = ValueGrid(-5.0, 5.0, 20)
    got = bounded_sums([batch], BOUNDS, WINDOW, seed=2, grid=grid)
    frame = _frame(batch)
    frame["bucket"] = grid.bucket(frame["value"].to_numpy())
    expected = frame.groupby(["window", "partition", "bucket"]).size()
    flat = {(int(i), p, int(b)): int(n) for i, counts in got.items() for (p, b), n in counts.items()}
    assert flat == {(int(w), str(p), int(b)): int(n) for (w, p, b), n in expected.items()}
    with_heavy = bounded_sums([batch, heavy], BOUNDS, WINDOW, seed=2, grid=grid)
    assert int(with_heavy[0].sum()) - int(got[0].sum()) == BOUNDS.max_contributions


def _best_points(values: np.ndarray, q: float, grid: ValueGrid) -> set[float]:
    """The grid points whose rank error |C_j - q n| is smallest (the oracle at a large epsilon)."""
    row = np.bincount(grid.bucket(values), minlength=grid.buckets)
    below = np.concatenate([[0], np.cumsum(row)])
    error = np.abs(below - q * below[-1])
    return set(grid.points(np.flatnonzero(error == error.min())).tolist())


RELEASES = (QuantilesSpec("known", quantiles=[0.25, 0.5, 0.9], partitions=PARTITIONS + ("Z",), buckets=10),
            QuantilesSpec("unknown", quantiles=[0.5], buckets=100))


def _data():
    """Busy partitions A-C; "rare" has one user (it never passes the selection)."""
    common = random_events(4000, W, 300, list(PARTITIONS), seed=9, values=True)
    rare = events(["loner"], [START + 0.5 * DAY], ["rare"], [1.0])
    return [common.slice(i, 1000) for i in range(0, common.num_rows, 1000)] + [rare]


@pytest.fixture(scope="module")
def plan():
    return plan_job(RELEASES, BOUNDS, WINDOW, 2000.0, 1e-6)


@pytest.fixture(scope="module")
def batch_rows(plan):
    return graph_rows(beam.Create(_data()), RELEASES, plan, BOUNDS, WINDOW, SEED)


def test_a_run_draws_the_best_grid_points_at_a_large_epsilon(plan, batch_rows):
    """epsilon 2000: each draw's epsilon is above 20 over a score range of at most 18, and neighbouring grid
    points' ranks differ by about 45 records (10 buckets), so the released point is one of the best grid points
    of the true ranks (bounds bind nowhere: the kept values are all values)."""
    assert plan["known"].epsilon > 20
    frame = pd.concat([_frame(batch) for batch in _data()[:-1]])
    assert frame.groupby(["window", "partition", "user"]).size().max() <= BOUNDS.max_contributions
    grid = ValueGrid(-5.0, 5.0, 10)
    rows = batch_rows["known"]
    assert len(rows) == W * 4 * 3  # every listed partition, Z (no records) included, every window and quantile
    starts = {pd.Timestamp(WINDOW.bounds(i)[0], unit="s", tz="UTC"): i for i in range(W)}
    for row in rows:
        if row["partition"] == "Z":
            continue
        index = starts[pd.Timestamp(row["window_start"])]
        values = frame[(frame["window"] == index) & (frame["partition"] == row["partition"])]["value"].to_numpy()
        assert row["value"] in _best_points(values, row["quantile"], grid), row
    for (start, partition), group in pd.DataFrame(rows).groupby(["window_start", "partition"]):
        assert list(group.sort_values("quantile")["value"]) == sorted(group["value"])  # released in order


def test_unknown_partitions_release_only_selected_ones(batch_rows):
    rows = batch_rows["unknown"]
    assert {r["partition"] for r in rows} == set(PARTITIONS)  # busy ones pass; "rare" (one user) never
    assert len(rows) == W * 3


def test_streaming_equals_batch(plan, batch_rows):
    assert graph_rows(out_of_order_stream(_data()), RELEASES, plan, BOUNDS, WINDOW, SEED, streaming=True) == batch_rows


def test_a_grid_finer_than_the_value_rounding_is_refused():
    """Values are rounded to the bounds' quantum before they are bucketed: a grid step below it would count values
    buckets away from their own (found by review: [1e5, 1e5 + 1e-3] in 1,000 buckets kept 9 of them)."""
    narrow = ContributionBounds(max_partitions=1, max_contributions=1, min_value=1e5, max_value=1e5 + 1e-3)
    with pytest.raises(PlanningError, match=r"finer than .* use at most 8 buckets"):
        plan_job((QuantilesSpec("q", quantiles=[0.5], partitions=PARTITIONS),), narrow, WINDOW, 1.0, 1e-6)
    plan_job((QuantilesSpec("q", quantiles=[0.5], partitions=PARTITIONS, buckets=8),), narrow, WINDOW, 1.0, 1e-6)


def test_partitions_are_drawn_in_blocks(monkeypatch):
    """Blocks of partitions bound a window's memory and change nothing else: at an epsilon where every draw is
    its best grid point, blocks of one partition release what one block does."""
    from dpstream.pipelines.transforms import quantiles as transform

    spec = QuantilesSpec("q", quantiles=[0.5, 0.9], partitions=PARTITIONS, buckets=10)
    plan = plan_job((spec,), BOUNDS, WINDOW, 2000.0, 1e-6)["q"]
    grid = ValueGrid(-5.0, 5.0, 10)
    values = np.random.default_rng(3).uniform(-5, 5, 3000)
    labels = np.array(list(PARTITIONS))[np.arange(3000) % 3]
    counts = pd.Series(1, index=pd.MultiIndex.from_arrays([labels, grid.bucket(values)])).groupby(level=[0, 1]).sum()
    whole = transform.quantiles_release(plan, list(PARTITIONS), counts, SecureRandom(1))
    monkeypatch.setattr(transform, "CHUNK_CELLS", 11)
    assert (transform.quantiles_release(plan, list(PARTITIONS), counts, SecureRandom(2)) == whole).all()
