"""Mechanism throughput: dpstream's hardened noise and top-k against plain numpy and PipelineDP, same machine.

Cases (median wall time of `--repeats` runs, reported as values per second):
- Laplace and Gaussian noise on 10^7 values: dpstream (OS-CSPRNG bits, and the
  seeded test mode), numpy's float samplers (`Generator.laplace` / `normal`,
  not hardened), PipelineDP's `LaplaceMechanism` / `GaussianMechanism`
  (PyDP's secure samplers called per element through `np.vectorize`; measured
  on fewer values, the count is recorded).
- Top-10 of 10^6 scores: dpstream's exponential_top_k (Gumbel one-shot and
  peeling), numpy float Gumbel-max top-k, PipelineDP's `ExponentialMechanism`
  peeled 10 times (it selects one item per call; measured on fewer scores).
PipelineDP is a bench extra (`pip install pipeline-dp`), never a runtime import;
when it is missing its rows say so.

Writes `benchmarks/results/mechanisms.json` and prints a Markdown table.
Run: `python -m benchmarks.mechanisms [--repeats N]`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np

from dpstream.pipelines import mechanisms
from dpstream.pipelines.mechanisms.noise import SecureRandom

RESULTS = Path(__file__).parent / "results" / "mechanisms.json"
NOISE_VALUES = 10**7
SCORES = 10**6
TOP_K = 10
PIPELINE_DP_NOISE_VALUES = 10**5
PIPELINE_DP_SCORES = 10**5


def _median_seconds(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _row(case: str, system: str, items: int, seconds: float, unit: str, note: str = "") -> dict:
    return {"case": case, "system": system, "items": items, "seconds": seconds,
            f"{unit}_per_second": items / seconds, "note": note}


def _pipeline_dp():
    try:
        from pipeline_dp import dp_computations  # noqa: PLC0415 (bench extra, optional)
    except ImportError:
        return None
    return dp_computations


def noise_rows(repeats: int) -> list[dict]:
    values = np.arange(NOISE_VALUES, dtype=np.float64)
    rows = []
    for case, ours, plain in (
        ("laplace noise, 10^7 values", mechanisms.laplace, lambda g: g.laplace(values, 1.0)),
        ("gaussian noise, 10^7 values", mechanisms.gaussian, lambda g: g.normal(values, 1.0)),
    ):
        production, seeded, generator = SecureRandom(), SecureRandom(1), np.random.default_rng(1)
        rows.append(_row(case, "dpstream (OS CSPRNG, grid)", NOISE_VALUES,
                         _median_seconds(lambda: ours(values, 1.0, production, max_partitions=1), repeats), "values"))
        rows.append(_row(case, "dpstream (seeded test mode, grid)", NOISE_VALUES,
                         _median_seconds(lambda: ours(values, 1.0, seeded, max_partitions=1), repeats), "values"))
        rows.append(_row(case, "numpy float sampler (not hardened)", NOISE_VALUES,
                         _median_seconds(lambda: plain(generator), repeats), "values"))
    dp = _pipeline_dp()
    small = values[:PIPELINE_DP_NOISE_VALUES]
    for case, build in (
        ("laplace noise, 10^7 values", lambda: dp and dp.LaplaceMechanism.create_from_epsilon(1.0, 1.0)),
        ("gaussian noise, 10^7 values", lambda: dp and dp.GaussianMechanism.create_from_std_deviation(1.0, 1.0)),
    ):
        mechanism = build()
        if mechanism is None:
            rows.append({"case": case, "system": "PipelineDP", "note": "pipeline-dp not installed"})
            continue
        rows.append(_row(case, "PipelineDP (PyDP, per element)", small.size,
                         _median_seconds(lambda: mechanism.add_noise(small), repeats), "values",
                         f"measured on {small.size} values"))
    return rows


def top_k_rows(repeats: int) -> list[dict]:
    case = "top-10 of 10^6 scores"
    scores = np.random.default_rng(7).uniform(0, 1000, SCORES)
    production = SecureRandom()
    generator = np.random.default_rng(2)

    def numpy_gumbel():
        noisy = scores + generator.gumbel(0.0, 1.0, scores.size)
        top = np.argpartition(-noisy, TOP_K - 1)[:TOP_K]
        return top[np.argsort(-noisy[top])]

    rows = [
        _row(case, "dpstream exponential_top_k (gumbel)", SCORES,
             _median_seconds(lambda: mechanisms.exponential_top_k(scores, TOP_K, 1.0, 1.0, production), repeats), "scores"),
        _row(case, "dpstream exponential_top_k (peel)", SCORES,
             _median_seconds(lambda: mechanisms.exponential_top_k(scores, TOP_K, 1.0, 1.0, production, method="peel"),
                             repeats), "scores"),
        _row(case, "numpy float Gumbel top-k (not hardened)", SCORES, _median_seconds(numpy_gumbel, repeats), "scores"),
    ]
    dp = _pipeline_dp()
    if dp is None:
        rows.append({"case": case, "system": "PipelineDP", "note": "pipeline-dp not installed"})
        return rows
    small = scores[:PIPELINE_DP_SCORES]
    scale = [1.0]  # PipelineDP's softmax is not stabilised: try the real scores, then scores / 1000

    class Score(dp.ExponentialMechanism.ScoringFunction):
        def score(self, k):
            return small[k] * scale[0]

        @property
        def global_sensitivity(self):
            return 1.0

        @property
        def is_monotonic(self):
            return True

    def pipeline_dp_top_k():
        candidates = list(range(small.size))
        chosen = []
        for _ in range(TOP_K):  # PipelineDP selects one item per call: peel by hand
            pick = dp.ExponentialMechanism(Score()).apply(1.0, candidates)
            chosen.append(pick)
            candidates.remove(pick)
        return chosen

    note = f"measured on {small.size} scores"
    try:
        pipeline_dp_top_k()
    except ValueError as err:  # exp overflow -> NaN probabilities
        note += f"; fails on scores in [0, 1000] ({err}), timed on scores / 1000"
        scale[0] = 1e-3
    rows.append(_row(case, "PipelineDP ExponentialMechanism x10 (peeled)", small.size,
                     _median_seconds(pipeline_dp_top_k, repeats), "scores", note))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    rows = noise_rows(args.repeats) + top_k_rows(args.repeats)
    report = {
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                    "python": platform.python_version(), "numpy": np.__version__},
        "repeats": args.repeats,
        "rows": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print("| case | system | items/s | note |\n| --- | --- | --- | --- |")
    for row in rows:
        rate = next((v for k, v in row.items() if k.endswith("_per_second")), None)
        print(f"| {row['case']} | {row['system']} | {'' if rate is None else f'{rate:.3g}'} | {row.get('note', '')} |")
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
