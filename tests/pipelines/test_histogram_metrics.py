"""A histogram's `metric`: the bounded values' sum (the default), the bounded records, or the distinct privacy
units per partition and window, each bounded and planned under `specs.metric_bounds`.

Exact oracles (pandas counts of distinct users and of min(records, Linf)), the plan's sensitivities, the
noise's law (KS, false-alarm rate 1e-3), a run on the DirectRunner, the job file key, and a DP audit of the
users metric in which one user adds many records to a partition, with bounding by the count metric's bounds
(the records, not the user, bounded) as the broken variant."""
from __future__ import annotations

import dataclasses
import math

import apache_beam as beam
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from scipy import stats

from dpstream.accounting.events import Laplace
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.config.specs import (
    ContributionBounds,
    HistogramSpec,
    Metric,
    WindowSpec,
    centred_bounds,
    metric_bounds,
    moment_bounds,
)
from dpstream.pipelines.mechanisms.noise import SecureRandom
from dpstream.pipelines.planning import PlanningError, plan_job
from dpstream.pipelines.planning.utility import expected_utility
from dpstream.pipelines.transforms.histogram import histogram_release, mean_release, variance_release
from tests.falsification.harness import audit
from tests.pipelines.helpers import (
    DAY,
    START,
    bounded_sums,
    events,
    graph_rows,
    out_of_order_stream,
    random_events,
)

W = 5
WINDOW = WindowSpec(size=DAY, start=START, end=START + W * DAY)
PARTITIONS = ("A", "B", "C")
VALUES = ContributionBounds(max_partitions=3, max_contributions=4, min_value=0.0, max_value=50.0)


def _frame(batch) -> pd.DataFrame:
    frame = batch.to_pandas()
    frame["window"] = (frame["timestamp"] // 1_000_000 - START) // DAY
    return frame


def _released_rows(batch, releases, plan, bounds: ContributionBounds, name: str) -> list[dict]:
    """The rows release `name` publishes from `batch`, by the release graph on the DirectRunner (seed 8)."""
    return graph_rows(beam.Create([batch]), releases, plan, bounds, WINDOW, 8)[name]


def test_metric_bounds_and_sensitivities():
    assert metric_bounds(Metric.SUM, VALUES) == VALUES
    count, users = metric_bounds(Metric.COUNT, VALUES), metric_bounds(Metric.USERS, VALUES)
    assert (count.min_value, count.max_value, count.max_contributions) == (1.0, 1.0, 4) and count.counting
    assert (users.min_value, users.max_value, users.max_contributions) == (1.0, 1.0, 1) and users.counting
    releases = tuple(HistogramSpec(m, partitions=PARTITIONS, metric=m) for m in ("sum", "count", "users"))
    plan = plan_job(releases, VALUES, WINDOW, 1.0, 1e-6)
    root = math.sqrt(3)
    assert [plan[m].sensitivity for m in ("sum", "count", "users")] == pytest.approx([root * 200, root * 4, root])
    # equal weights: the noise scales with the sensitivity (up to each grid's discreteness term, 1e-4 here)
    assert plan["users"].noise * 200 == pytest.approx(plan["sum"].noise, rel=1e-3)
    assert "distinct privacy units counted" in plan["users"].describe()
    assert "bounded records counted" in plan["count"].describe()


@pytest.mark.parametrize("seed", [1, 2])
def test_users_and_count_bounded_sums_are_exact(seed):
    """With max_partitions >= the partitions present, users: the distinct users per (window, partition); count:
    the sum over users of min(records, max_contributions), whatever the values."""
    batch = random_events(3000, W, 200, list(PARTITIONS), seed=seed, values=True)
    frame = _frame(batch)
    per_cell = frame.groupby(["window", "partition", "user"]).size()
    for metric, expected in ((Metric.USERS, per_cell.groupby(level=[0, 1]).size()),
                             (Metric.COUNT, per_cell.clip(upper=4).groupby(level=[0, 1]).sum())):
        got = bounded_sums([batch], metric_bounds(metric, VALUES), WINDOW, seed=seed)
        flat = {(int(i), str(p)): int(v) for i, sums in got.items() for p, v in sums.items()}
        assert flat == {(int(w), str(p)): int(n) for (w, p), n in expected.items()}


def test_users_noise_has_the_planned_law():
    """The users release's value minus the distinct count is discrete Gaussian with the planned sigma: KS
    against N(0, sigma^2) over 3,000 windows' draws (false-alarm rate 1e-3)."""
    plan = plan_job((HistogramSpec("u", partitions=PARTITIONS, metric="users"),), VALUES, WINDOW, 1.0, 1e-6)["u"]
    sums = pd.Series([7, 0, 31], index=list(PARTITIONS))
    rng = SecureRandom(5)
    errors = np.concatenate([histogram_release(plan, sums, rng, 1.0)[1].value - sums.to_numpy() for _ in range(1000)])
    assert stats.kstest(errors / plan.noise, "norm").pvalue > 1e-3


def test_a_run_releases_distinct_users_per_partition_and_window():
    """On the DirectRunner at epsilon 1000 (noise below 0.5): every listed partition in every window, and the
    rounded values are the distinct users; the sum release of the same job keeps its own (value) bounds."""
    batch = random_events(2000, W, 150, list(PARTITIONS), seed=3, values=True)
    frame = _frame(batch)
    distinct = frame.groupby(["window", "partition"])["user"].nunique()
    releases = (HistogramSpec("users", partitions=PARTITIONS, metric="users"),
                HistogramSpec("sum", partitions=PARTITIONS))
    plan = plan_job(releases, VALUES, WINDOW, 1000.0, 1e-6)
    assert plan["users"].noise < 0.2
    rows = _released_rows(batch, releases, plan, VALUES, "users")
    assert len(rows) == W * len(PARTITIONS)
    starts = {pd.Timestamp(WINDOW.bounds(i)[0], unit="s", tz="UTC"): i for i in range(W)}
    for row in rows:
        index = starts[pd.Timestamp(row["window_start"])]
        assert round(row["value"]) == distinct.get((index, row["partition"]), 0)


def test_the_job_file_reads_metric(tmp_path):
    from tests.pipelines.test_jobfile import BASE

    text = BASE + '[[release]]\nkind = "histogram"\nname = "users"\nmetric = "users"\n'
    path = tmp_path / "job.toml"
    path.write_text(text)
    assert jobfile.load(str(path)).releases[-1].metric == Metric.USERS
    path.write_text(text.replace('metric = "users"', 'metric = "people"'))
    with pytest.raises(jobfile.JobFileError, match="metric must be one of"):
        jobfile.load(str(path))
    path.write_text(text.replace('name = "top_k"\nk = 1', 'name = "top_k"\nk = 1\nmetric = "users"'))
    with pytest.raises(jobfile.JobFileError, match="metric"):
        jobfile.load(str(path))


def test_audit_one_user_many_records_moves_the_users_metric_by_one():
    """Laplace users metric of one partition and one window at epsilon 1. The target adds 6 records to A:
    bounded as a user (max_contributions 1) the count moves by 1 and the audit's lower bound (confidence
    0.999) stays below 1; bounded as records (the count metric's bounds, Linf 4, the broken variant) it moves
    by 4 and the bound is far above 1."""
    window = WindowSpec(size=DAY, start=START, end=START + DAY)
    plan = plan_job((HistogramSpec("u", partitions=("A",), metric="users", noise="laplace"),), VALUES, window,
                    1.0, 1e-6)
    scale = plan["u"].noise
    base = [random_events(300, 1, 80, ["A"], seed=4)]
    target = events(["target"] * 6, [START + 60 * i for i in range(6)], ["A"] * 6)
    rng = np.random.default_rng(21)
    for metric, broken in ((Metric.USERS, False), (Metric.COUNT, True)):
        bounds = metric_bounds(metric, VALUES)
        x, x_prime = (float(bounded_sums(b, bounds, window, seed=2)[0]["A"]) for b in (base, base + [target]))
        assert x_prime - x == (4 if broken else 1)

        def sample(with_target: bool, n: int, x=x, x_prime=x_prime) -> np.ndarray:
            return np.round((x_prime if with_target else x) + rng.laplace(0.0, scale, n) - x)

        result = audit(sample, False, True, n_search=100_000, n_estimate=200_000, delta=1e-6)
        assert (result.epsilon_lower > 1.0) == broken, str(result)


MEAN_BOUNDS = ContributionBounds(max_partitions=3, max_contributions=4, min_value=100.0, max_value=110.0)


def test_a_mean_is_planned_as_one_gaussian_over_a_count_and_a_centred_sum():
    """sigma_sum / sigma_count = (max - min) / 2 = 5 (up to the grid), the event's L2 is sqrt(2) x the count's
    (sqrt(3) x 4), and shifts of (4 sqrt(3), 20 sqrt(3)) over the two sigmas add up to the event's mu."""
    plan = plan_job((HistogramSpec("m", partitions=PARTITIONS, metric="mean"),), MEAN_BOUNDS, WINDOW, 1.0, 1e-6)["m"]
    assert plan.mechanism == "mean" and plan.middle == 105.0 and plan.value_range == (100.0, 110.0)
    assert plan.event.sensitivity == pytest.approx(math.sqrt(2) * math.sqrt(3) * 4)
    assert plan.extra_noise / plan.noise == pytest.approx(5.0, rel=1e-4)
    mu = math.hypot(math.sqrt(3) * 4 / plan.noise, math.sqrt(3) * 20 / plan.extra_noise)
    assert mu <= plan.event.sensitivity / plan.event.sigma
    assert "bounded values averaged" in plan.describe()


def test_a_mean_selects_unknown_partitions_by_users_and_needs_values():
    spec = HistogramSpec("m", metric="mean", selection="truncated")
    with pytest.raises(PlanningError, match="does not apply"):
        plan_job((spec,), MEAN_BOUNDS, WINDOW, 1.0, 1e-6)
    with pytest.raises(PlanningError, match="min_value < max_value"):
        plan_job((HistogramSpec("m", partitions=PARTITIONS, metric="mean"),), VALUES.__class__(), WINDOW, 1.0, 1e-6)


@pytest.mark.parametrize("metric", ["mean", "variance"])
def test_over_unknown_partitions_a_selection_by_users_is_planned_beside_the_parts(metric):
    """Half the weight to the parts, half to a GaussianThreshold of the distinct users (L2 sqrt(L0)), whose delta
    is shared with every other selection of the job."""
    releases = (HistogramSpec("m", metric=metric), HistogramSpec("h"))
    plan = plan_job(releases, MEAN_BOUNDS, WINDOW, 1.0, 1e-6)
    planned = plan["m"]
    assert planned.selects and planned.user_selection is not None
    assert planned.user_selection.event.sensitivity == pytest.approx(math.sqrt(3))
    assert planned.user_selection.delta == plan["h"].selection_delta
    weights = {r.release.name: r.release.weight for r in plan.calibrated.releases}
    assert weights["m"] == weights["m.selection"] == 0.5
    assert "partitions not known in advance" in planned.describe() and "distinct privacy units" in planned.describe()


def test_a_run_over_unknown_partitions_releases_the_selected_means_and_variances():
    """On the DirectRunner at epsilon 1000: the busy partitions are selected in every window, the one-user
    partition "rare" never, and each released mean and variance is within 5 stated standard deviations of the
    clipped values' (false-alarm rate 1e-5 per cell)."""
    batch = _run_batch()
    rare = events(["loner"], [START + DAY / 2], ["rare"], [1.0])
    truths = {"mean": _clipped_cells(batch).mean(), "variance": _clipped_cells(batch).var(ddof=0)}
    releases = (HistogramSpec("mean", metric="mean"), HistogramSpec("variance", metric="variance"))
    plan = plan_job(releases, RUN_BOUNDS, WINDOW, 1000.0, 1e-6)
    merged = pa.concat_batches([batch, rare])
    for name in ("mean", "variance"):
        rows = _released_rows(merged, releases, plan, RUN_BOUNDS, name)
        assert sorted(_cell(r) for r in rows) == [(w, p) for w in range(W) for p in PARTITIONS]
        _assert_near(rows, truths[name], 5)


RUN_BOUNDS = ContributionBounds(max_partitions=3, max_contributions=8, min_value=-4.0, max_value=3.0)
"""Bounds under which `_run_batch()` keeps every record (checked in test_a_run_releases_the_bounded_means)."""


def _run_batch():
    return random_events(2000, W, 150, list(PARTITIONS), seed=6, values=True)


def _clipped_cells(batch):
    """The batch's values clipped to RUN_BOUNDS, grouped per (window, partition)."""
    return _frame(batch).assign(value=lambda f: f["value"].clip(-4.0, 3.0)).groupby(["window", "partition"])["value"]


def _cell(row: dict) -> tuple[int, str]:
    """A released row's (window index, partition)."""
    return round((pd.Timestamp(row["window_start"]).timestamp() - START) / DAY), row["partition"]


def _assert_near(rows: list[dict], truth: pd.Series, deviations: float) -> None:
    """Every row's value within `deviations` of its stated standard deviations of its cell's truth."""
    for row in rows:
        assert abs(row["value"] - truth[_cell(row)]) <= deviations * row["noise_stddev"], row


def test_a_run_releases_the_bounded_means():
    """On the DirectRunner at epsilon 1000 with bounds that keep every record: each released mean is within 5 of
    its stated standard deviations of the mean of the clipped values (false-alarm rate 1e-5 over the 15 cells),
    and that deviation is below 0.05."""
    batch = _run_batch()
    assert _frame(batch).groupby(["user", "window", "partition"]).size().max() <= 8  # nothing is dropped
    releases = (HistogramSpec("mean", partitions=PARTITIONS, metric="mean"),)
    plan = plan_job(releases, RUN_BOUNDS, WINDOW, 1000.0, 1e-6)
    rows = _released_rows(batch, releases, plan, RUN_BOUNDS, "mean")
    assert len(rows) == W * len(PARTITIONS)
    _assert_near(rows, _clipped_cells(batch).mean(), 5)
    assert all(0 < row["noise_stddev"] < 0.05 for row in rows)


def test_mean_errors_have_the_stated_spread():
    """500 records of mean 108 (centred 3) in a partition: over 3,000 draws the released mean's error is normal
    with standard deviation sqrt(sigma_sum^2 + 3^2 sigma_count^2) / 500 (KS, false-alarm rate 1e-3; the
    ratio's second-order terms are below 1e-5 of it here)."""
    plan = plan_job((HistogramSpec("m", partitions=("A",), metric="mean"),), MEAN_BOUNDS, WINDOW, 1.0, 1e-6)["m"]
    centred = centred_bounds(MEAN_BOUNDS)
    counts = pd.Series([500], index=["A"])
    sums = pd.Series([int(round(1500 / centred.quantum))], index=["A"])  # 500 x (108 - 105) in units
    rng = SecureRandom(3)
    errors = np.array([mean_release(plan, counts, sums, rng, centred)[0][0] - 108.0 for _ in range(3000)])
    spread = math.hypot(plan.extra_noise, 3.0 * plan.noise) / 500
    assert stats.kstest(errors / spread, "norm").pvalue > 1e-3


def test_audit_a_mean_with_the_values_not_centred_is_caught():
    """One partition, one window, epsilon 1. The target adds 4 records of value 110 (max_contributions 4):
    centred, the count moves by 4 and the sum by 4 x 5; the audit's lower bound (confidence 0.999) stays below
    1. Broken variant: the sum of the raw values (moved by 4 x 110) under the same noise: far above 1."""
    window = WindowSpec(size=DAY, start=START, end=START + DAY)
    bounds = dataclasses.replace(MEAN_BOUNDS, max_partitions=1)
    plan = plan_job((HistogramSpec("m", partitions=("A",), metric="mean"),), bounds, window, 1.0, 1e-6)["m"]
    rng = np.random.default_rng(17)
    for sum_shift, broken in ((4 * 5.0, False), (4 * 110.0, True)):
        shift = np.array([4.0 / plan.noise, sum_shift / plan.extra_noise])  # in units of each noise's sigma

        def sample(with_target: bool, n: int, shift=shift) -> np.ndarray:
            z = rng.standard_normal((n, 2)) + (shift if with_target else 0.0)
            return z @ shift / np.linalg.norm(shift)  # the likelihood ratio's direction

        result = audit(sample, False, True, n_search=100_000, n_estimate=200_000, delta=1e-6)
        assert (result.epsilon_lower > 1.0) == broken, str(result)


def test_a_variance_is_planned_as_one_gaussian_over_three_parts():
    """sigma_sum / sigma_count = r = 5 and sigma_squares / sigma_count = r^2 / 2 = 12.5 (up to the grid); the
    event's L2 is sqrt(3) x the count's, and the three shifts over their sigmas add up to the event's mu."""
    plan = plan_job((HistogramSpec("v", partitions=PARTITIONS, metric="variance"),), MEAN_BOUNDS, WINDOW, 1.0,
                    1e-6)["v"]
    assert plan.mechanism == "variance" and plan.middle == 105.0 and plan.value_range == (0.0, 25.0)
    assert plan.event.sensitivity == pytest.approx(math.sqrt(3) * math.sqrt(3) * 4)
    assert plan.extra_noise / plan.noise == pytest.approx(5.0, rel=1e-4)
    assert plan.square_noise / plan.noise == pytest.approx(12.5, rel=1e-4)
    root = math.sqrt(3) * 4  # the count's L2
    mu = math.sqrt(sum((root * r / sigma) ** 2 for r, sigma in ((1, plan.noise), (5, plan.extra_noise),
                                                                  (12.5, plan.square_noise))))
    assert mu <= plan.event.sensitivity / plan.event.sigma
    assert "bounded values' variance" in plan.describe() and "a variance over n records" in expected_utility(
        plan, MEAN_BOUNDS)


def test_a_run_releases_the_bounded_variances():
    """On the DirectRunner at epsilon 1000 with bounds that keep every record: each released variance is within 5
    of its stated standard deviations of the population variance of the clipped values (false-alarm rate 1e-5
    over the 15 cells), and that deviation (a worst case over the variance's position in its range) is below 0.5."""
    batch = _run_batch()
    releases = (HistogramSpec("variance", partitions=PARTITIONS, metric="variance"),)
    plan = plan_job(releases, RUN_BOUNDS, WINDOW, 1000.0, 1e-6)
    rows = _released_rows(batch, releases, plan, RUN_BOUNDS, "variance")
    assert len(rows) == W * len(PARTITIONS)
    _assert_near(rows, _clipped_cells(batch).var(ddof=0), 5)
    assert all(0 < row["noise_stddev"] < 0.5 for row in rows)


def test_variance_errors_have_the_stated_spread():
    """n = 50,000 records, half at 108 and half at 102 (centred +-3: variance 9, sum 0, squares n (9 - 12.5)):
    over 3,000 draws the released variance's error is normal with standard deviation sqrt(sigma_squares^2 +
    (9 - 12.5 - 2 x 0)^2 sigma_count^2) / n (the linearisation at these parts, whose second-order terms, about
    (sigma_sum / n)^2, are below 1e-3 of it here; KS, false-alarm rate 1e-3)."""
    plan = plan_job((HistogramSpec("v", partitions=("A",), metric="variance"),), MEAN_BOUNDS, WINDOW, 1.0,
                    1e-6)["v"]
    parts_bounds = moment_bounds(Metric.VARIANCE, MEAN_BOUNDS)
    n = 50_000
    units = [n, 0, int(round(n * (9 - 12.5) / parts_bounds[2].quantum))]
    parts = [pd.Series([u], index=["A"]) for u in units]
    rng = SecureRandom(4)
    errors = np.array([variance_release(plan, parts, rng, parts_bounds)[0][0] - 9.0 for _ in range(3000)])
    spread = math.hypot(plan.square_noise, 3.5 * plan.noise) / n
    assert stats.kstest(errors / spread, "norm").pvalue > 1e-3


def test_audit_a_variance_with_the_squares_not_centred_is_caught():
    """One partition, one window, epsilon 1. The target adds 4 records of value 110: the count moves by 4, the
    centred sum by 4 x 5 and the centred squares by 4 x 12.5; the audit's lower bound (confidence 0.999) stays
    below 1. Broken variant: squares of the raw values (moved by 4 x 110^2) under the same noise."""
    window = WindowSpec(size=DAY, start=START, end=START + DAY)
    bounds = dataclasses.replace(MEAN_BOUNDS, max_partitions=1)
    plan = plan_job((HistogramSpec("v", partitions=("A",), metric="variance"),), bounds, window, 1.0, 1e-6)["v"]
    rng = np.random.default_rng(19)
    for squares_shift, broken in ((4 * 12.5, False), (4 * 110.0 ** 2, True)):
        shift = np.array([4.0 / plan.noise, 4 * 5.0 / plan.extra_noise, squares_shift / plan.square_noise])

        def sample(with_target: bool, n: int, shift=shift) -> np.ndarray:
            z = rng.standard_normal((n, 3)) + (shift if with_target else 0.0)
            return z @ shift / np.linalg.norm(shift)  # the likelihood ratio's direction

        result = audit(sample, False, True, n_search=100_000, n_estimate=200_000, delta=1e-6)
        assert (result.epsilon_lower > 1.0) == broken, str(result)


@pytest.mark.parametrize("metric, parts", [("mean", 2), ("variance", 3)])
def test_laplace_means_and_variances_are_one_laplace_event_per_part_and_cell(metric, parts):
    """Laplace: each part's scale is proportional to its Linf (5 and 12.5 times the count's for [100, 110]), and
    the plan composes `parts` Laplace events of the count's Linf per (window, partition) cell a unit can change."""
    spec = HistogramSpec("m", partitions=PARTITIONS, metric=metric, noise="laplace")
    plan = plan_job((spec,), MEAN_BOUNDS, WINDOW, 1.0, 1e-6)
    planned = plan["m"]
    assert isinstance(planned.event, Laplace) and planned.event.sensitivity == 4.0  # max_contributions x 1
    assert planned.cells == W * 3 and plan.calibrated.releases[0].release.count == W * 3 * parts
    assert planned.extra_noise / planned.noise == pytest.approx(5.0, rel=1e-4)
    if metric == "variance":
        assert planned.square_noise / planned.noise == pytest.approx(12.5, rel=1e-4)
    assert "discrete Laplace" in planned.describe() and f"{parts} Laplace events per" in planned.describe()


def test_a_run_releases_laplace_means():
    """On the DirectRunner at epsilon 1000 (Laplace): every released mean within 8 stated standard deviations of
    the clipped values' mean (Laplace tails: false-alarm rate below 1e-4 per cell)."""
    batch = _run_batch()
    releases = (HistogramSpec("mean", partitions=PARTITIONS, metric="mean", noise="laplace"),)
    plan = plan_job(releases, RUN_BOUNDS, WINDOW, 1000.0, 1e-6)
    rows = _released_rows(batch, releases, plan, RUN_BOUNDS, "mean")
    assert len(rows) == W * len(PARTITIONS)
    _assert_near(rows, _clipped_cells(batch).mean(), 8)


def test_audit_a_laplace_mean_with_the_values_not_centred_is_caught():
    """One partition, one window, epsilon 1, Laplace. The target adds 4 records of value 110: the count moves by
    4 and the centred sum by 4 x 5; the privacy-loss statistic's audit bound (confidence 0.999) stays below 1.
    Broken variant: the raw sum (moved by 4 x 110) under the same scales."""
    window = WindowSpec(size=DAY, start=START, end=START + DAY)
    bounds = dataclasses.replace(MEAN_BOUNDS, max_partitions=1)
    plan = plan_job((HistogramSpec("m", partitions=("A",), metric="mean", noise="laplace"),), bounds, window, 1.0,
                    1e-6)["m"]
    scales = np.array([plan.noise, plan.extra_noise])
    rng = np.random.default_rng(23)
    for sum_shift, broken in ((4 * 5.0, False), (4 * 110.0, True)):
        shift = np.array([4.0, sum_shift])

        def sample(with_target: bool, n: int, shift=shift) -> np.ndarray:
            z = rng.laplace(0.0, scales, (n, 2)) + (shift if with_target else 0.0)
            loss = ((np.abs(z) - np.abs(z - shift)) / scales).sum(axis=1)  # the privacy loss of the outcome
            return np.round(loss, 9)  # its extreme values are reached on both sides: equal them across float rounding

        result = audit(sample, False, True, n_search=100_000, n_estimate=200_000)
        assert (result.epsilon_lower > 1.0) == broken, str(result)


def test_streaming_means_and_variances_equal_batch():
    """Means and variances over known and unknown partitions: a TestStream of the batches, out of order, gives the
    batch run's rows (fixed seed: the same kept records and the same noise per window)."""
    bounds = RUN_BOUNDS
    common = random_events(1500, W, 120, list(PARTITIONS), seed=12, values=True)
    chunks = [common.slice(i, 500) for i in range(0, common.num_rows, 500)]
    releases = (HistogramSpec("mean", partitions=PARTITIONS, metric="mean"), HistogramSpec("variance", metric="variance"))
    plan = plan_job(releases, bounds, WINDOW, 8.0, 1e-6)
    batch = graph_rows(beam.Create(chunks), releases, plan, bounds, WINDOW, 8)
    assert graph_rows(out_of_order_stream(chunks), releases, plan, bounds, WINDOW, 8, streaming=True) == batch
    assert all(batch.values())


def test_a_variance_whose_squares_the_grid_cannot_hold_is_refused_in_one_line():
    """Bounds of +-2^200 square to 2^400 / 2 (found by review: the error named a number the job never wrote)."""
    wide = ContributionBounds(max_partitions=1, max_contributions=1, min_value=-2.0 ** 200, max_value=2.0 ** 200)
    with pytest.raises(PlanningError, match="sums squared centred values up to .* narrow privacy.min_value"):
        plan_job((HistogramSpec("v", partitions=PARTITIONS, metric="variance"),), wide, WINDOW, 1.0, 1e-6)
