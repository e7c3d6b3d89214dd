"""Sparse vector at equal budget: FSRC with ex-post accounting against the Whitehouse filter and Laplace SVT.

Every run feeds one synthetic stream of `--windows` bounded values (in [0, 1],
threshold rho = 0.5) to a `pipelines.mechanisms.monitor.SparseVectorMonitor` and records
how many windows it processed before halting and the F1 score of its alert
bits against the noise-free run (which alerts exactly on the windows with
value >= rho and never halts; windows after a halt count as "no alert").
Results are averaged over `--seeds` seeds (stream and noise both vary).

Streams (the kind of the experiments of Lebensold–Precup–Balle 2024, Sec 4.1):
- sparse_spikes: background 0.3 + N(0, 0.05^2); 2% of windows, at random,
  jump to U(0.65, 0.9). Long instances, few TOPs.
- change_points: piecewise-constant level with planted change points,
  alternating low stretches of 60-200 windows at U(0.2, 0.4) and high
  stretches of 10-30 windows at U(0.6, 0.8), plus N(0, 0.03^2). Bursts of
  consecutive TOPs, i.e. many short instances.

Methods (all at the same (epsilon, delta), delta = 1e-6; sigma_query = sqrt(3) sigma_threshold):
- fsrc: FSRC filter with a delta budget, instance t admitted at the Zhu–Wang
  pDP bound at delta_t = delta 6/(pi^2 t^2), ex-post charges (dpstream's monitor);
- fsrc_uniform: the same with delta_t = delta / N, N the most instances the
  epsilon budget can admit (the alternative schedule; benchmark only);
- fsrc_published: UNSOUND reference, the rule of Lebensold–Precup–Balle
  Thm 11 as printed (every instance at the pDP bound at delta, delta charged
  once; docs/proofs/accounting.filters.fsrc.FSRCFilter.md): it measures what the
  correction costs and is never offered to users;
- whitehouse: Zhu–Wang RDP -> (eps_i, delta_i) per instance under the
  Whitehouse et al. filter (constant per-instance price chosen to admit the
  most instances);
- laplace: Laplace AboveThreshold with the same noise variances, fixed pure
  epsilon per instance, pure-DP filter (a pure epsilon-DP guarantee, stronger
  than the others' (epsilon, delta)).
A budget that admits not even one instance counts as 0 windows processed.
Grid: sigma_threshold in {0.04, 0.08, 0.12, 0.16} times (epsilon, sensitivity)
in {(1, 1e-3), (1, 1e-4), (4, 1e-3)} (sensitivity 1/N for N = 1,000 or 10,000
privacy units contributing to every window).

Writes `benchmarks/results/svt_filters.json` and prints a Markdown table.
Run: `python -m benchmarks.svt_filters [--seeds N] [--windows N]` (default 20 seeds of 1,000 windows, under a minute).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path

import numpy as np

from dpstream.accounting.selection import above_threshold_expost_epsilon
from dpstream.pipelines.mechanisms.monitor import LOWER, UPPER, SparseVectorMonitor, _pdp_epsilon
from dpstream.pipelines.mechanisms.noise import SecureRandom

RESULTS = Path(__file__).parent / "results" / "svt_filters.json"
THRESHOLD = 0.5
DELTA = 1e-6
SIGMAS = (0.04, 0.08, 0.12, 0.16)
BUDGETS = ((1.0, 1e-3), (1.0, 1e-4), (4.0, 1e-3))  # (epsilon, sensitivity)


def sparse_spikes(n: int, gen: np.random.Generator) -> np.ndarray:
    values = 0.3 + 0.05 * gen.standard_normal(n)
    spikes = gen.choice(n, max(1, n // 50), replace=False)
    values[spikes] = gen.uniform(0.65, 0.9, spikes.size)
    return np.clip(values, 0.0, 1.0)


def change_points(n: int, gen: np.random.Generator) -> np.ndarray:
    levels = np.empty(n)
    position, high = 0, False
    while position < n:
        length = int(gen.integers(10, 31)) if high else int(gen.integers(60, 201))
        levels[position:position + length] = gen.uniform(0.6, 0.8) if high else gen.uniform(0.2, 0.4)
        position, high = position + length, not high
    return np.clip(levels + 0.03 * gen.standard_normal(n), 0.0, 1.0)


STREAMS = {"sparse_spikes": sparse_spikes, "change_points": change_points}


class UniformFSRCMonitor(SparseVectorMonitor):
    """FSRC with delta_t = delta / N, N = the most instances the epsilon budget can ever admit.

    Every instance is charged at least c = the smaller ex-post loss of one window (TOP, or BOT closed), so
    instance t is admitted only if (t - 1) c < epsilon: t <= floor(epsilon / c) + 1 = N.
    """

    def instance_price(self, instance: int) -> tuple[float, float]:
        common = (self.sigma_threshold, self.sigma_query, self.threshold, self.sensitivity)
        cheapest = min(above_threshold_expost_epsilon(1, *common, LOWER, UPPER, halted=halted) for halted in (True, False))
        delta = math.nextafter(self.delta / (math.floor(self.epsilon / cheapest) + 1), 0.0)
        return _pdp_epsilon(delta, *common), delta


class PublishedFSRCMonitor(SparseVectorMonitor):
    """UNSOUND, for measurement only: every instance priced at eps_max(delta) with delta charged once (LPB Thm 11
    as printed). The filter is handed delta 0 per instance, so its delta budget never binds."""

    def instance_price(self, instance: int) -> tuple[float, float]:
        return _pdp_epsilon(self.delta, self.sigma_threshold, self.sigma_query, self.threshold, self.sensitivity), 0.0


MONITORS = {"fsrc": SparseVectorMonitor, "fsrc_uniform": UniformFSRCMonitor, "fsrc_published": PublishedFSRCMonitor,
            "whitehouse": SparseVectorMonitor, "laplace": SparseVectorMonitor}
"""Benchmark method -> (monitor class); the fsrc variants run the monitor's "fsrc" method."""
METHODS = tuple(MONITORS)


def f1_score(alerts: np.ndarray, truth: np.ndarray) -> float:
    """F1 of alert bits against the noise-free alerts; 1 when neither has an alert."""
    true_pos = int(np.sum(alerts & truth))
    wrong = int(np.sum(alerts != truth))
    return 1.0 if true_pos + wrong == 0 else 2 * true_pos / (2 * true_pos + wrong)


def monitor_alerts(values: np.ndarray, threshold: float, method: str, sigma: float, epsilon: float, delta: float,
                   sensitivity: float, seed: int) -> tuple[np.ndarray, int]:
    """(alert bits, windows processed before halting) of one monitor run over `values`.

    A budget that admits not even one instance gives no alerts and 0 windows.
    """
    try:
        monitor = MONITORS[method](threshold, sigma, sensitivity, epsilon, delta, method=method.split("_")[0],
                                   rng=SecureRandom(seed))
    except ValueError as err:
        if "admits no" not in str(err):
            raise
        return np.zeros(values.size, dtype=bool), 0
    outputs = monitor.process_many(values)
    alerts = np.array([o.alert for o in outputs])
    return alerts, next((o.window for o in outputs if o.halted), values.size)


def run_once(values: np.ndarray, method: str, sigma: float, epsilon: float, sensitivity: float, seed: int) -> dict:
    """Windows processed before halting, alert count and F1 of one monitor run."""
    truth = values >= THRESHOLD
    alerts, processed = monitor_alerts(values, THRESHOLD, method, sigma, epsilon, DELTA, sensitivity, seed)
    return {"windows": processed, "alerts": int(alerts.sum()), "f1": f1_score(alerts, truth),
            "f1_processed": f1_score(alerts[:processed], truth[:processed]) if processed else 0.0}


def setting_row(stream: str, method: str, sigma: float, epsilon: float, sensitivity: float, seeds: int,
                windows: int) -> dict:
    runs = [
        run_once(STREAMS[stream](windows, np.random.default_rng(10_000 + seed)), method, sigma, epsilon,
                 sensitivity, seed)
        for seed in range(seeds)
    ]
    row = {"stream": stream, "method": method, "sigma_threshold": sigma, "epsilon": epsilon, "delta": DELTA,
           "sensitivity": sensitivity, "seeds": seeds}
    for key in ("windows", "alerts", "f1", "f1_processed"):
        column = np.array([run[key] for run in runs], dtype=float)
        row[key] = float(column.mean())
        row[f"{key}_stderr"] = float(column.std(ddof=1) / math.sqrt(seeds)) if seeds > 1 else 0.0
    row["halted_runs"] = sum(run["windows"] < windows for run in runs)
    return row


def markdown(rows: list[dict], windows: int) -> str:
    """One line per (stream, budget, sigma): windows processed and F1 per method."""
    head = " | ".join(f"{m} windows | {m} F1" for m in METHODS)
    lines = [f"| stream | epsilon | sensitivity | sigma_threshold | {head} |",
             "| --- | --- | --- | --- |" + " --- |" * (2 * len(METHODS))]
    keyed = {(r["stream"], r["epsilon"], r["sensitivity"], r["sigma_threshold"], r["method"]): r for r in rows}
    for stream in STREAMS:
        for epsilon, sensitivity in BUDGETS:
            for sigma in SIGMAS:
                cells = []
                for method in METHODS:
                    r = keyed[(stream, epsilon, sensitivity, sigma, method)]
                    cells += [f"{r['windows']:.0f}", f"{r['f1']:.2f}"]
                lines.append(f"| {stream} | {epsilon:g} | {sensitivity:g} | {sigma:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\n(windows processed out of {windows}; F1 against the noise-free run)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--windows", type=int, default=1000)
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.windows < 100:
        parser.error(f"need --seeds >= 1 and --windows >= 100, got {args.seeds} and {args.windows}")
    start = time.perf_counter()
    rows = [
        setting_row(stream, method, sigma, epsilon, sensitivity, args.seeds, args.windows)
        for stream in STREAMS for epsilon, sensitivity in BUDGETS for sigma in SIGMAS for method in METHODS
    ]
    report = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__},
        "threshold": THRESHOLD, "delta": DELTA, "windows": args.windows, "seeds": args.seeds,
        "sigma_query": "sqrt(3) * sigma_threshold", "seconds": round(time.perf_counter() - start, 1),
        "rows": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(rows, args.windows))
    print(f"\nwrote {RESULTS} in {report['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
