"""dpstream inside your own Beam pipeline: two private releases sharing one privacy budget (README, "Library use").

The pipeline reads the demo's flights table with Beam's own Parquet reader, turns the rows into dpstream events
(`ToEvents`), and adds two releases planned together under one budget of epsilon 2 and delta 1e-6 per
aircraft-day: the daily departures per destination (Gaussian noise) and the daily top 5 destinations
(exponential mechanism). `budget.run` runs the pipeline into staging, debits the ledger scope once when it
succeeded, and publishes OUTPUT_DIR/releases; a pipeline that fails debits nothing. The same two releases in a job
file give the same rows for the same seed (tests/test_library_example.py).

Run: python -m dpstream.examples.library OUTPUT_DIR [--ledger URL] [--end 2013-02-01] [--seed N]
(without --ledger, a fresh SQLite ledger in OUTPUT_DIR holds a scope with exactly this budget; --seed is for
tests only: it fixes every noise draw).
"""
from __future__ import annotations

import argparse
import os
import tomllib
from importlib import resources

import apache_beam as beam

import dpstream.pipelines as dp
from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.cli.demo import DEMO_FILE, cache_dir, export_flights

SCOPE, EPSILON, DELTA = "flights-library", 2.0, 1e-6
# The public list of destinations served from New York in 2013 (the bundled job's, the published route network).
RELEASES = ("daily_departures", "daily_top5")
DESTINATIONS = tuple(tomllib.loads(resources.files("dpstream.examples").joinpath("flights.toml").read_text())
                     ["input"]["partitions"])


def budget(ledger: str, end: str, seed: int | None, output: str) -> dp.Budget:
    """One budget for both releases: their noise is planned together, the scope is debited once, and the release
    files are published into `output` only after that debit."""
    return dp.Budget(
        scope=SCOPE, epsilon=EPSILON, delta=DELTA, ledger=ledger, seed=seed, output=output,
        bounds=dp.ContributionBounds(max_partitions=2, max_contributions=1),
        window=dp.WindowSpec.of("1d", "2013-01-01", end, timezone="America/New_York"),
        unit_period=86400.0,  # privacy unit: one aircraft during one day
        releases=[dp.HistogramSpec("daily_departures", partitions=DESTINATIONS, clamp=True),
                  dp.TopKSpec("daily_top5", k=5, partitions=DESTINATIONS, weight=2.0)],
    )


def main(argv: list[str] | None = None) -> dict[str, str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output")
    parser.add_argument("--ledger")
    parser.add_argument("--end", default="2014-01-01")
    parser.add_argument("--seed", type=int)
    args = parser.parse_args(argv)
    os.makedirs(args.output, exist_ok=True)
    flights = cache_dir() / DEMO_FILE
    if not flights.exists():
        export_flights(flights)
    ledger = args.ledger or _fresh_ledger(args.output)
    private = budget(ledger, args.end, args.seed, os.path.join(args.output, "releases"))
    for name, text in private.describe().items():
        print(f"{name}: {text}")
    pipeline = beam.Pipeline()
    events = (pipeline
              | "Read flights" >> beam.io.ReadFromParquetBatched(str(flights), columns=["tailnum", "time_hour", "dest"])
              | "To events" >> dp.ToEvents(user="tailnum", timestamp="time_hour", partition="dest", tables=True))
    for name in RELEASES:
        (events
         | f"Release {name}" >> private.release(name)  # dict rows, each in its event-time window
         | f"Write {name}" >> private.write(name))     # staged, published after the debit
    debit = private.run(pipeline)
    print(debit.message)
    return {name: os.path.join(args.output, "releases", f"{name}.parquet") for name in RELEASES}


def _fresh_ledger(output: str) -> str:
    """A new SQLite ledger in `output` whose scope holds exactly this example's budget."""
    path = os.path.join(output, "library-ledger.db")
    if os.path.exists(path):
        os.remove(path)
    url = f"sqlite:///{path}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope(SCOPE, EPSILON, DELTA, f"approx:release_delta={DELTA!r}")
    return url


if __name__ == "__main__":
    main()
