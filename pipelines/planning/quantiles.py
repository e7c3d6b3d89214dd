"""Planning windowed quantiles: per partition and window, each asked quantile of the bounded values by the
exponential mechanism on a public grid of [min_value, max_value] (`mechanisms.exponential_quantiles`).

What it takes: per window and partition, each quantile scores every one of the G + 1 grid points (a logit and a
Gumbel draw, about 50 ns of CPU: `SCORE_SECONDS`); a release over public partitions whose `scores` exceed its
max_scores (`DEFAULT_MAX_QUANTILE_SCORES`) is refused when planned, before the ledger is asked.

What it costs: one `BoundedRange(epsilon)` draw per (window, partition, quantile) a unit can change, i.e.
windows x min(L0, partitions) x len(quantiles) draws, composed by the accountant's bounded-range bounds
(Dong–Durfee–Rogers). Over unknown partitions, partitions are first selected by Gaussian thresholding of their
noisy number of distinct units (`histogram.UserSelection`), and only selected
partitions get quantiles.

Why the exponential mechanism rather than a quantile tree (Google's, PipelineDP's PERCENTILE): a tree spends its
budget on every level of a hierarchy of counts whatever quantiles are asked, and its rank error grows with the
tree's height (about log_b G levels) to the power 1.5 over epsilon; the exponential mechanism spends it on the
asked quantiles only, with a rank error of range_q ln(G + 1) / epsilon, smaller for the few quantiles a job asks
(benchmarks/statistics.py measures both on the flights data).
Proof: docs/proofs/pipelines.mechanisms.quantiles.exponential_quantiles.md.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Mapping

from dpstream.accounting.calibrate import CalibratedRelease, Release
from dpstream.accounting.events import BoundedRange, Event, SelfComposed
from dpstream.pipelines.config.specs import QuantilesSpec
from dpstream.pipelines.mechanisms.quantiles import ValueGrid, quantile_score_range
from dpstream.pipelines.planning.context import Draft, PlanningContext
from dpstream.pipelines.planning.errors import PlanningError
from dpstream.pipelines.planning.histogram import UserSelection
from dpstream.pipelines.planning.windows import window_cap


@dataclass(frozen=True)
class QuantilesPlan:
    """Per window and partition, `spec.quantiles` of the bounded values, each an exponential-mechanism draw
    among the G + 1 points of the grid over value_range (G = spec.buckets).

    epsilon: of each draw (bounded range); max_contributions: records one unit adds to a partition, which sets
    each quantile's score range (`quantile_score_range`); event: one window's draws, SelfComposed(
    BoundedRange(epsilon), changed partitions x quantiles). selection: how unknown partitions are selected (None
    over public partitions).
    """

    spec: QuantilesSpec
    runs: int
    epsilon: float
    max_contributions: int
    max_partitions: int
    value_range: tuple[float, float]
    event: Event
    selection: UserSelection | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def selects(self) -> bool:
        return self.spec.partitions is None

    @property
    def grid(self) -> ValueGrid:
        """The public grid the quantiles are drawn on (and the values bucketed on)."""
        return ValueGrid(*self.value_range, self.spec.buckets)

    @property
    def step(self) -> float:
        """The grid's step (max_value - min_value) / G: the released values are multiples of it from min_value."""
        lower, upper = self.value_range
        return (upper - lower) / self.spec.buckets

    def rank_error(self, quantile: float, probability: float = 0.9) -> float:
        """How many records' rank a draw for `quantile` misses by at most, beyond the best grid point's, with
        `probability`: range_q (ln(G + 1) + ln(1 / (1 - probability))) / epsilon (the exponential mechanism's
        utility bound, McSherry–Talwar)."""
        spread = math.log(self.spec.buckets + 1) + math.log(1.0 / (1.0 - probability))
        return quantile_score_range(quantile, self.max_contributions) * spread / self.epsilon

    def describe(self) -> str:
        lower, upper = self.value_range
        levels = ", ".join(f"{q:g}" for q in self.spec.quantiles)
        where = ("partitions not known in advance" if self.selects else
                 f"{len(self.spec.partitions or ())} public partitions")
        text = (f"Quantiles {self.name!r} ({levels}) of the bounded values over {where}, one release per window "
                f"({self.runs} windows composed per privacy unit): per partition each quantile is a point of the grid "
                f"of {self.spec.buckets} equal steps of {self.step:.6g} over [{lower:g}, {upper:g}], drawn by the "
                f"exponential mechanism on the records' rank (epsilon={self.epsilon:.6g} bounded-range per draw, score "
                f"range 2 x {self.max_contributions} x max(q, 1 - q) records); the quantiles of a partition are "
                f"released in order (per window {self.event!r}).")
        return text + (self.selection.describe() if self.selection is not None else "")


def draft(spec: QuantilesSpec, context: PlanningContext) -> Draft[QuantilesPlan]:
    """The quantile draws (one exponential entry over every draw a unit can change) and, over unknown partitions,
    the selection entry; `PlanningError` when the bounds cannot support quantiles."""
    bounds = context.bounds
    _check_bounds(spec, context)
    _check_scores(spec, context)
    changed = bounds.max_partitions if spec.partitions is None else min(bounds.max_partitions, len(spec.partitions))
    widest = max(quantile_score_range(q, bounds.max_contributions) for q in spec.quantiles)
    share = spec.weight / 2 if spec.partitions is None else spec.weight
    entries: tuple[Release, ...] = (
        Release(spec.name, "exponential", share, widest, context.windows * changed * len(spec.quantiles)),)
    if spec.partitions is None:
        entries += (UserSelection.entry(spec.name, share, context),)
    return Draft(entries, (), lambda calibrated: _plan(spec, context, changed, calibrated))


def _check_bounds(spec: QuantilesSpec, context: PlanningContext) -> None:
    bounds = context.bounds
    if not bounds.min_value < bounds.max_value:
        raise PlanningError(f"release {spec.name!r}: quantiles need privacy.min_value < privacy.max_value (the "
                            f"grid the quantiles are drawn on), got [{bounds.min_value:g}, {bounds.max_value:g}]")
    step = (bounds.max_value - bounds.min_value) / spec.buckets
    if step < bounds.quantum:  # values are rounded to the quantum before they are bucketed
        most = int((bounds.max_value - bounds.min_value) // bounds.quantum)
        raise PlanningError(f"release {spec.name!r}: {spec.buckets} buckets make grid steps of {step:.4g}, finer than "
                            f"the {bounds.quantum:.4g} values are rounded to; use at most {most} buckets")
    if window_cap(context.window, context.unit_period, bounds) is not None:
        raise PlanningError(f"release {spec.name!r}: quantiles do not apply privacy.max_windows, "
                            f"max_partitions_total or max_contributions_total; drop those caps or move the quantiles "
                            f"to a job of their own")


SCORE_SECONDS = 50e-9
"""CPU per scored grid point (`mechanisms.exponential_quantiles`: measured 45 to 100 ns on one core, Python 3.11)."""


def scores(spec: QuantilesSpec, windows: int) -> int | None:
    """The grid points the release's draws score over `windows` windows: windows x partitions x (buckets + 1) x
    quantiles; None over unknown partitions, whose number per window the data decides."""
    if spec.partitions is None:
        return None
    return windows * len(spec.partitions) * (spec.buckets + 1) * len(spec.quantiles)


def _check_scores(spec: QuantilesSpec, context: PlanningContext) -> None:
    windows = context.window.count
    total = scores(spec, windows)
    if total is None or total <= spec.max_scores:
        return
    count = len(spec.quantiles)
    raise PlanningError(
        f"release {spec.name!r}: its draws score {total:,} grid points ({windows:,} windows x "
        f"{len(spec.partitions or ()):,} partitions x {spec.buckets + 1:,} grid points x {count} "
        f"quantile{'s' if count > 1 else ''}, about {total * SCORE_SECONDS / 60:,.0f} minutes of CPU), more than "
        f"max_scores = {spec.max_scores:,}: use fewer buckets (the rank error grows only with ln(buckets + 1)), "
        f"partitions or windows, or raise max_scores in its [[release]] table if the run may take that long")


def _plan(spec: QuantilesSpec, context: PlanningContext, changed: int,
          calibrated: Mapping[str, CalibratedRelease]) -> QuantilesPlan:
    bounds = context.bounds
    draw = calibrated[spec.name].event
    if not isinstance(draw, BoundedRange):
        raise TypeError(f"quantiles {spec.name!r} were calibrated to {draw!r}, not a bounded-range draw")
    plan = QuantilesPlan(spec, context.windows, draw.epsilon, bounds.max_contributions, changed,
                         (bounds.min_value, bounds.max_value), SelfComposed(draw, changed * len(spec.quantiles)))
    if spec.partitions is None:
        return dataclasses.replace(plan, selection=UserSelection.calibrated(spec.name, calibrated, bounds))
    return plan
