"""End-to-end privacy audits of whole runs (`run_audit`): each release kind through `dpstream run`'s code path,
on neighbouring inputs, with a lower bound on epsilon at confidence 1 - ALPHA compared to the accounted epsilon.

A correct run's lower bound must stay at or below what it accounted. A broken variant (bounding skipped, noise
halved, threshold noise not refreshed) is flagged when its lower bound exceeds what was accounted; `FLAGGED` lists
the pairs the audit must flag, and the others are not asserted, because no audit of a few thousand trials can
flag them (docs/audits.md, "What a black-box audit cannot see", says why for each).

The reduced form runs in CI (SEARCH + ESTIMATE trials per side, fewer where `TRIALS` says); `make audit` sets DPSTREAM_AUDIT=long for 10x
the trials, and `python -m tests.falsification.test_run_audit` prints the whole table, flaggable or not. The
false-alarm rate of an honest audit is at most ALPHA (`harness.audit`); the runs are seeded, so each audit is
deterministic (the svt trials draw from the OS CSPRNG: see `run_audit`)."""
from __future__ import annotations

import dataclasses
import os
import sys

import pytest

from dpstream.pipelines.mechanisms import additive
from dpstream.pipelines.mechanisms.monitor import SparseVectorMonitor
from dpstream.pipelines.mechanisms.noise import SecureRandom
from dpstream.pipelines.transforms import bounding
from tests.falsification.harness import audit
from tests.falsification.run_audit import AuditJob, Inputs, one_record_users, sample_run, svt_trials

LONG = os.environ.get("DPSTREAM_AUDIT") == "long"
SEARCH, ESTIMATE = (6000, 20000) if LONG else (600, 2000)
ALPHA = 1e-3
SVT_WINDOWS = 6
TRIALS = {} if LONG else {"correct": (200, 600), "bounding skipped": (200, 600)}
"""Trials per side (search, estimate) where the CI form takes fewer: an honest run's false-alarm rate is ALPHA at any
number of trials (fewer only lower its power), and bounding skipped is flagged by a wide margin; noise halved keeps
SEARCH and ESTIMATE, which it needs to be flagged."""

JOBS = {
    "histogram, known partitions, Laplace": (
        AuditJob('[[release]]\nkind = "histogram"\nname = "counts"\nnoise = "laplace"', "count_A", 0.05),
        Inputs(one_record_users({"A": 5, "B": 5, "C": 5}), target=((12, "A"),) * 20)),
    "histogram, unknown partitions, Gaussian": (
        AuditJob('[[release]]\nkind = "histogram"\nname = "counts"', "count_A", 0.05, epsilon=2.0, delta=0.01,
                 partitions=None),
        Inputs(one_record_users({"A": 20}), target=((12, "A"),) * 20)),
    "top-1, exponential mechanism": (
        AuditJob('[[release]]\nkind = "topk"\nname = "top"\nk = 1', "top", 0.02),
        Inputs(one_record_users({"A": 7, "B": 8, "C": 8}), target=((12, "A"),) * 20)),
    "peak, report-noisy-max": (
        AuditJob('[[release]]\nkind = "peak"\nname = "busiest"\nperiod = "1d"\nmaximum = 10', "peak", 0.05,
                 window="12h", partitions=None),
        Inputs(tuple((f"u{i}", 14, "A") for i in range(10)), target=((2, "A"),) * 20)),
    "quantiles, exponential mechanism": (
        AuditJob('[[release]]\nkind = "quantiles"\nname = "median"\nquantiles = [0.5]\nbuckets = 10', "median_A", 0.02,
                 value_range=(0.0, 10.0)),
        Inputs(one_record_users({"A": 9, "B": 3}), target=((12, "A"),) * 20,
               values=(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 5.0, 5.0, 5.0), target_value=10.0)),
    "svt, Gaussian monitor (FSRC)": (
        AuditJob('[[release]]\nkind = "svt"\nname = "alerts"\nmaximum = 1000\nthreshold = 0.5\n'
                 'sigma_threshold = 0.05', "alerts", 0.02, unit_period=None, partitions=None),
        Inputs(one_record_users({"A": 300}), target=((12, "A"),) * 400)),
}


def _skip_bounding(monkeypatch) -> None:
    """A broken run: bounding keeps every record (the noise was planned for one per user and window)."""
    build = bounding.BoundContributions.__init__

    def unbounded(self, bounds, *args, **kwargs):
        build(self, dataclasses.replace(bounds, max_contributions=10**6, max_partitions=10**6), *args, **kwargs)

    monkeypatch.setattr(bounding.BoundContributions, "__init__", unbounded)


def _halve_noise(monkeypatch) -> None:
    """A broken run: every noise at half its planned scale. Laplace on the grid (`noisy_on_grid`, norm 1), the
    discrete Gaussian, the continuous normal (report-noisy-max, the svt monitor) and Gumbel (top-k: twice the
    epsilon)."""
    noisy = additive.noisy_on_grid
    monkeypatch.setattr(additive, "noisy_on_grid", lambda owner, values, scale, rng, sensitivity, partitions, norm,
                        *rest, **kw: noisy(owner, values, scale / 2 if norm == 1 else scale, rng, sensitivity,
                                           partitions, norm, *rest, **kw))
    for name, halved in (("discrete_gaussian", lambda draw: lambda self, s, n: draw(self, s / 2, n)),
                         ("standard_normal", lambda draw: lambda self, n: draw(self, n) / 2),
                         ("gumbel", lambda draw: lambda self, n: draw(self, n) / 2)):
        monkeypatch.setattr(SecureRandom, name, halved(getattr(SecureRandom, name)))


def _keep_threshold(monkeypatch) -> None:
    """A broken monitor: after an alert the next AboveThreshold instance reuses the first instance's noisy
    threshold instead of drawing a fresh one."""
    noise = SparseVectorMonitor._noise

    def kept(self, rng, sigma):
        if sigma != self.sigma_threshold:
            return noise(self, rng, sigma)
        if not hasattr(self, "_kept_threshold_noise"):
            self._kept_threshold_noise = noise(self, rng, sigma)
        return self._kept_threshold_noise

    monkeypatch.setattr(SparseVectorMonitor, "_noise", kept)


VARIANTS = {"correct": None, "bounding skipped": _skip_bounding, "noise halved": _halve_noise,
            "threshold noise not refreshed": _keep_threshold}
APPLIES = {kind: ("correct", "bounding skipped", "noise halved") for kind in JOBS}
APPLIES["svt, Gaussian monitor (FSRC)"] += ("threshold noise not refreshed",)
FLAGGED = {
    ("histogram, known partitions, Laplace", "bounding skipped"),
    ("histogram, known partitions, Laplace", "noise halved"),
    ("histogram, unknown partitions, Gaussian", "bounding skipped"),
    ("histogram, unknown partitions, Gaussian", "noise halved"),
    ("top-1, exponential mechanism", "bounding skipped"),
    ("top-1, exponential mechanism", "noise halved"),
    ("peak, report-noisy-max", "bounding skipped"),
    ("quantiles, exponential mechanism", "bounding skipped"),
    ("svt, Gaussian monitor (FSRC)", "bounding skipped"),
}
"""(kind, broken variant) pairs the audit must flag; the rest are measured and reported, not asserted."""


def _audit(kind: str, variant: str):
    """(the audit's result, the accounted epsilon) for one kind under `variant` (already patched in)."""
    job, inputs = JOBS[kind]
    search, estimate = TRIALS.get(variant, (SEARCH, ESTIMATE))
    if job.statistic == "alerts":
        sides = {side: svt_trials(job, inputs, side, SVT_WINDOWS) for side in (False, True)}
        plan = sides[False].plan
        result = audit(lambda side, n: sides[side].sample(n), False, True, n_search=search, n_estimate=estimate,
                       delta=plan.delta, alpha=ALPHA, min_hits=int(job.min_share * search))
        return result, plan.epsilon
    accounted = {}

    def sample(with_target: bool, n: int):
        samples, accounted[with_target] = sample_run(job, inputs, with_target, n)
        return samples

    result = audit(sample, False, True, n_search=search, n_estimate=estimate, delta=job.delta, alpha=ALPHA,
                   min_hits=int(job.min_share * search))
    return result, max(accounted.values())


CASES = [(kind, variant) for kind in JOBS for variant in APPLIES[kind] if variant == "correct" or (kind, variant) in FLAGGED]


@pytest.mark.parametrize("kind, variant", CASES)
def test_whole_run_audit(kind, variant, monkeypatch, record_property):
    if VARIANTS[variant] is not None:
        VARIANTS[variant](monkeypatch)
    result, accounted = _audit(kind, variant)
    record_property("audit", f"{kind} / {variant}: {result}; accounted epsilon {accounted:.4g}")
    print(f"{kind} / {variant}: {result}; accounted epsilon {accounted:.4g}")
    if variant == "correct":
        assert result.epsilon_lower <= accounted, result
    else:
        assert result.epsilon_lower > accounted, f"broken variant not flagged: {result}"


def main() -> None:
    """Print the whole audit table (every applicable variant of every kind) as Markdown."""
    print(f"| kind | variant | epsilon lower bound (confidence {1 - ALPHA:g}) | accounted epsilon | flagged |")
    print("|---|---|---|---|---|")
    for kind in JOBS:
        for variant in APPLIES[kind]:
            with pytest.MonkeyPatch.context() as monkeypatch:
                if VARIANTS[variant] is not None:
                    VARIANTS[variant](monkeypatch)
                result, accounted = _audit(kind, variant)
            flagged = "yes" if result.epsilon_lower > accounted else "no"
            print(f"| {kind} | {variant} | {result.epsilon_lower:.3f} | {accounted:.4g} | {flagged} |", flush=True)
            print(f"  {result}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
