"""End-to-end privacy audits of whole runs (`run_audit`): each release kind through `dpstream run`'s code path,
on neighbouring inputs, with a lower bound on epsilon at confidence 1 - ALPHA compared to the accounted epsilon.
Broken variants (bounding skipped, noise halved) must be flagged: their lower bound exceeds what was accounted.

The reduced form runs in CI (SEARCH + ESTIMATE windows per side, about 40 s per audit); `make audit` sets
DPSTREAM_AUDIT=long for 10x the windows. The false-alarm rate of an honest audit is at most ALPHA
(`harness.audit`); the runs are seeded, so each audit is deterministic."""
from __future__ import annotations

import dataclasses
import os

import pytest

from dpstream.pipelines.mechanisms import additive
from dpstream.pipelines.mechanisms.noise import SecureRandom
from dpstream.pipelines.transforms import bounding
from tests.falsification.harness import audit
from tests.falsification.run_audit import AuditJob, Inputs, sample_run

LONG = os.environ.get("DPSTREAM_AUDIT") == "long"
SEARCH, ESTIMATE = (6000, 20000) if LONG else (600, 2000)
ALPHA = 1e-3

JOBS = {
    "histogram, known partitions, Laplace": (
        AuditJob('[[release]]\nkind = "histogram"\nname = "counts"\nnoise = "laplace"', "count_A", 0.05),
        Inputs({"A": 5, "B": 5, "C": 5}, extra=20)),
    "top-1, exponential mechanism": (
        AuditJob('[[release]]\nkind = "topk"\nname = "top"\nk = 1', "top", 0.02),
        Inputs({"A": 7, "B": 8, "C": 8}, extra=20)),
}


def _skip_bounding(monkeypatch) -> None:
    """A broken run: bounding keeps every record (the noise was planned for one per user and window)."""
    build = bounding.BoundContributions.__init__

    def unbounded(self, bounds, *args, **kwargs):
        build(self, dataclasses.replace(bounds, max_contributions=10**6, max_partitions=10**6), *args, **kwargs)

    monkeypatch.setattr(bounding.BoundContributions, "__init__", unbounded)


def _halve_noise(monkeypatch) -> None:
    """A broken run: additive noise at half its planned scale, and Gumbel noise halved (twice the epsilon)."""
    noisy = additive.noisy_on_grid
    monkeypatch.setattr(additive, "noisy_on_grid", lambda owner, values, scale, *rest, **kw: noisy(
        owner, values, scale / 2, *rest, **kw))
    gumbel = SecureRandom.gumbel
    monkeypatch.setattr(SecureRandom, "gumbel", lambda self, n: gumbel(self, n) / 2)


VARIANTS = {"correct": None, "bounding skipped": _skip_bounding, "noise halved": _halve_noise}


def _audit(job: AuditJob, inputs: Inputs):
    accounted = {}

    def sample(with_target: bool, n: int):
        samples, accounted[with_target] = sample_run(job, inputs, with_target, n)
        return samples

    result = audit(sample, False, True, n_search=SEARCH, n_estimate=ESTIMATE, alpha=ALPHA, min_hits=int(job.min_share * SEARCH))
    return result, max(accounted.values())


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("kind", list(JOBS))
def test_whole_run_audit(kind, variant, monkeypatch, record_property):
    if VARIANTS[variant] is not None:
        VARIANTS[variant](monkeypatch)
    job, inputs = JOBS[kind]
    result, accounted = _audit(job, inputs)
    record_property("audit", f"{kind} / {variant}: {result}; accounted epsilon {accounted:.4g}")
    print(f"{kind} / {variant}: {result}; accounted epsilon {accounted:.4g}")
    if variant == "correct":
        assert result.epsilon_lower <= accounted, result
    else:
        assert result.epsilon_lower > accounted, f"broken variant not flagged: {result}"
