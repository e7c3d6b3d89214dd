"""`PrivateTopK`: per window, the k partitions with the largest bounded sums, by the exponential mechanism.

Candidates are the public partition list. Per window, k peeled exponential
mechanisms implemented by one-shot Gumbel noise (`mechanisms.exponential_top_k`);
optionally the chosen partitions' sums with discrete Gaussian noise, made
consistent with the released order (`mechanisms.count_mle`, Cesar–Rogers
Algorithm 1).

Privacy: per window SelfComposed(BoundedRange(epsilon), k) (Dong–Durfee–Rogers
Prop 2; score range = Linf for monotone sums, 2 Linf otherwise), plus
Gaussian(sigma, Linf sqrt(min(k, L0))) for the counts; all composed by the plan.
Proof: the mechanisms' (`exponential_top_k`, `count_mle`); sensitivities from `BoundContributions`
(docs/proofs/pipelines.transforms.bounding.BoundContributions.md).
Caller must ensure: the partition list is public; `seed` only in tests.
Numerics: the bounded sums are exact integer units of the bounds' quantum (int64 or Python ints); the
counts reach the grid exactly (`mechanisms.count_mle` with the quantum), the
scores are their float64 values (idealised, as the mechanism's logits).
Runtime: O(number of partitions) per window.
"""
from __future__ import annotations

import apache_beam as beam
import numpy as np

from dpstream.pipelines import mechanisms
from dpstream.pipelines.config.specs import WindowSpec
from dpstream.pipelines.planning import TopKPlan
from dpstream.pipelines.transforms.aggregation import WindowedRelease
from dpstream.pipelines.transforms.windowing import release_rng, window_bounds_iso


def topk_release(plan: TopKPlan, sums, rng, quantum: float) -> tuple[list[str], mechanisms.Release, mechanisms.Release | None]:
    """(chosen partitions in rank order, selection release, counts release or None) for one window.

    `sums`: integer units of `quantum` by partition (int64 or Python ints; `BoundContributions`).
    """
    partitions = list(plan.spec.partitions)
    units = sums.reindex(partitions, fill_value=0).to_numpy()
    scores = units.astype(np.float64) * quantum
    selection = mechanisms.exponential_top_k(scores, plan.spec.k, plan.epsilon, plan.sensitivity, rng)
    chosen = [int(i) for i in selection.value]
    counts = None
    if plan.count_sigma is not None and plan.count_sensitivity is not None:
        counts = mechanisms.count_mle(units[chosen], plan.count_sigma, rng, sensitivity=plan.count_sensitivity,
                                      max_partitions=min(plan.spec.k, plan.max_partitions), quantum=quantum)
    return [partitions[i] for i in chosen], selection, counts


class _TopKMechanism(beam.DoFn):
    def __init__(self, plan: TopKPlan, window: WindowSpec, seed: int | None, quantum: float):
        self._plan = plan
        self._window = window
        self._seed = seed
        self._quantum = quantum

    def process(self, element):
        index, sums = element
        chosen, _, counts = topk_release(self._plan, sums, release_rng(self._seed, self._plan.name, index), self._quantum)
        start, end = window_bounds_iso(self._window, index)
        for rank, partition in enumerate(chosen, start=1):
            row = {"release": self._plan.name, "window_start": start, "window_end": end, "rank": rank,
                   "partition": partition}
            if counts is not None:
                row["value"] = float(counts.value[rank - 1])
                row["noise_stddev"] = self._plan.count_sigma
            yield row


class PrivateTopK(WindowedRelease):
    """Record batches -> dict rows (release, window_start, window_end, rank, partition[, value, noise_stddev])."""

    @classmethod
    def columns(cls, plan) -> tuple[str, ...]:
        counted = ("value", "noise_stddev") if plan.count_sigma is not None else ()
        return ("release", "window_start", "window_end", "rank", "partition", *counted)

    def default_label(self) -> str:
        return f"PrivateTopK({self._plan.name}, k={self._plan.spec.k})"

    def display_data(self):
        return {"release": self._plan.name, "k": self._plan.spec.k, "epsilon_per_pick": self._plan.epsilon,
                "score_range": self._plan.sensitivity, "windows": self._plan.runs}

    def expand(self, batches):
        sums = self._window_sums(batches, self._plan.spec.partitions)
        return sums | "Select top k" >> beam.ParDo(_TopKMechanism(self._plan, self._window, self._seed,
                                                                  self._bounds.quantum))
