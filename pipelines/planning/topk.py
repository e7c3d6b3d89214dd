"""Planning a windowed top-k: k exponential-mechanism picks per window among the public partitions, and
optionally the chosen partitions' Gaussian noisy sums.

What it costs per window: `BoundedRange(epsilon)` k times (Dong–Durfee–Rogers Prop 2; score range Linf for
one-signed sums, 2 Linf otherwise), plus `Gaussian(sigma, Linf sqrt(min(k, L0)))` when counts are asked for;
the weight is split evenly between the picks and the counts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from dpstream.accounting.calibrate import CalibratedRelease, Release
from dpstream.accounting.events import BoundedRange, Event, Gaussian, SelfComposed
from dpstream.pipelines.config.specs import ContributionBounds, TopKSpec
from dpstream.pipelines.planning.context import Draft, PlanningContext
from dpstream.pipelines.planning.grid import grid_noise


def score_range(bounds: ContributionBounds) -> float:
    """Range of score changes for the exponential mechanism: Linf when sums are monotone, else 2 Linf.

    Monotone: every quantised value has one sign, so the bounded sums have one (`ContributionBounds.sum_range`).
    """
    lower, upper = bounds.sum_range
    return bounds.linf if lower == 0.0 or upper == 0.0 else 2.0 * bounds.linf


@dataclass(frozen=True)
class TopKPlan:
    """Per window, the k highest partitions by k peeled exponential mechanisms (one-shot Gumbel).

    epsilon: per pick; sensitivity: the score range. count_sigma / count_sensitivity / count_event:
    the optional Gaussian counts of the chosen keys (CountMLE post-processing).
    """

    spec: TopKSpec
    runs: int  # windows
    epsilon: float
    sensitivity: float
    event: Event  # one window: SelfComposed(BoundedRange(epsilon), k)
    max_partitions: int
    count_sigma: float | None = None
    count_sensitivity: float | None = None
    count_event: Event | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def describe(self) -> str:
        text = (
            f"Top-{self.spec.k} {self.name!r} among {len(self.spec.partitions)} public partitions, once per window "
            f"({self.runs} windows composed per privacy unit): {self.spec.k} exponential-mechanism picks per window (one-shot Gumbel), each "
            f"epsilon={self.epsilon:.6g}-bounded-range with score range {self.sensitivity:.6g} (Dong–Durfee–Rogers)."
        )
        if self.count_sigma is not None:
            text += (
                f" The chosen partitions' bounded sums are released with discrete Gaussian noise sigma={self.count_sigma:.6g} "
                f"(L2 sensitivity {self.count_sensitivity:.6g}), made consistent with the ranking (Cesar–Rogers Algorithm 1)."
            )
        return text


def draft(spec: TopKSpec, context: PlanningContext) -> Draft[TopKPlan]:
    """k exponential-mechanism picks per window a unit can touch, and, with `counts`, one Gaussian per window."""
    bounds, windows = context.bounds, context.windows
    share = spec.weight / 2 if spec.counts else spec.weight
    entries = [Release(spec.name, "exponential", share, score_range(bounds), windows * spec.k)]
    if spec.counts:
        count_l2 = bounds.linf * math.sqrt(min(spec.k, bounds.max_partitions))
        entries.append(Release(_counts_name(spec), "gaussian", share, count_l2, windows))
    return Draft(tuple(entries), (), lambda calibrated: _plan(spec, context, calibrated))


def _counts_name(spec: TopKSpec) -> str:
    return f"{spec.name}.counts"


def _plan(spec: TopKSpec, context: PlanningContext, calibrated: Mapping[str, CalibratedRelease]) -> TopKPlan:
    bounds = context.bounds
    pick = calibrated[spec.name].event
    if not isinstance(pick, BoundedRange):
        raise TypeError(f"top-k {spec.name!r} was calibrated to {pick!r}, not a bounded-range pick")
    selection = (spec, context.windows, pick.epsilon, score_range(bounds), SelfComposed(pick, spec.k),
                 bounds.max_partitions)
    if not spec.counts:
        return TopKPlan(*selection)
    count_event = calibrated[_counts_name(spec)].event
    if not isinstance(count_event, Gaussian):
        raise TypeError(f"top-k {spec.name!r} counts were calibrated to {count_event!r}, not Gaussian noise")
    sigma, _ = grid_noise(count_event.sigma, count_event.sensitivity, bounds.quantum,
                          min(spec.k, bounds.max_partitions), 2)
    return TopKPlan(*selection, sigma, count_event.sensitivity, count_event)
