"""Planning an svt release: a sparse-vector monitor whose whole budget is its weight share of the job's.

What it costs: `ApproxDP(epsilon_m, delta_m)` (`PureDP` for method laplace), (epsilon_m, delta_m) = weight / total
weight of the job's (epsilon, delta), a fixed event of the calibration. It is debited once, when the monitor is
opened on the scope; later scheduled runs debit nothing for it, because its filter
(`dpstream.pipelines.mechanisms.monitor`; FSRC with a delta budget) never lets the monitor's output exceed that
budget, however many runs and windows follow. The other releases are calibrated with it fixed in the composition
(named: `JobPlan.events` leaves out continued monitors by name), so their noise does not depend on whether the
monitor is new. Proof: docs/proofs/pipelines.mechanisms.monitor.SparseVectorMonitor.md (Claims 1 and 4).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from dpstream.accounting.calibrate import FixedEvent
from dpstream.accounting.events import ApproxDP, Event, PureDP
from dpstream.pipelines.config.specs import ContributionBounds, SvtMethod, SvtMetric, SvtSpec
from dpstream.pipelines.mechanisms.monitor import SparseVectorMonitor
from dpstream.pipelines.mechanisms.noise import SecureRandom
from dpstream.pipelines.planning.context import Draft, PlanningContext
from dpstream.pipelines.planning.errors import PlanningError
from dpstream.pipelines.planning.grid import normalised_sensitivity

MONITOR_SHARE_MARGIN = 1e-9
"""An svt monitor's budget is its weight share of the job's (epsilon, delta) times (1 - this margin)."""


def svt_sensitivity(spec: SvtSpec, bounds: ContributionBounds) -> float:
    """How far one privacy unit moves an svt release's normalised window query.

    count and share: L0 * max_contributions records (share: a record's
    partition for bounding is (partition, positive or not), still at most L0
    of them), over the maximum; sum: the L1 sensitivity of the window total
    over the maximum; each plus the rounding of the query's one division
    (`normalised_sensitivity`). Proof for share: docs/proofs/pipelines.transforms.svt.SparseVectorAlerts.md.
    """
    if spec.metric == SvtMetric.SUM:
        return normalised_sensitivity(bounds.l1, spec.maximum)
    return normalised_sensitivity(bounds.max_partitions * bounds.max_contributions, spec.maximum)


@dataclass(frozen=True)
class SvtPlan:
    """A sparse-vector monitor over the job's windows: one normalised query per window, alerts by `pipelines.transforms.svt`.

    sensitivity: how far one privacy unit moves the normalised query (L1 of the
    metric's total over the public maximum); epsilon, delta: the monitor's whole
    budget (its filter's); event: what opening the monitor debits from the scope.
    """

    spec: SvtSpec
    runs: int  # windows of this run
    sensitivity: float
    epsilon: float
    delta: float
    event: Event
    instance_epsilon: float  # ex-ante (pDP or pure) epsilon of the first AboveThreshold instance
    instance_delta: float  # its delta; fsrc: instance t gets delta 6 / (pi^2 t^2), at a larger epsilon
    monitor_text: str

    @property
    def name(self) -> str:
        return self.spec.name

    def monitor(self, rng: SecureRandom | None = None) -> SparseVectorMonitor:
        """A fresh monitor with this plan's parameters."""
        spec = self.spec
        return SparseVectorMonitor(spec.threshold, spec.sigma_threshold, self.sensitivity, self.epsilon, self.delta,
                                   sigma_query=spec.sigma_query, method=spec.method.value,
                                   persist_threshold=spec.persist_threshold, rng=rng)

    def describe(self) -> str:
        query = {
            "count": "the number of bounded records",
            "sum": "the sum of the bounded values",
            "share": "the share of bounded records whose value is positive (denominator at least the maximum)",
        }[self.spec.metric]
        return (
            f"Threshold alerts {self.name!r} over {self.runs} windows of this run: each window's {query}, divided by "
            f"the public {self.spec.maximum:g} and clipped to [0, 1] (sensitivity {self.sensitivity:.6g}), goes to a "
            f"{self.monitor_text}. The monitor's budget {self.event!r} is debited once, when it is opened on the "
            f"scope; it continues across scheduled runs until its filter halts it."
        )


def smallest_sigma_threshold(spec: SvtSpec, sensitivity: float, epsilon: float, delta: float) -> float:
    """The smallest sigma_threshold (to 0.1%, rounded up) whose monitor a budget of (epsilon, delta) admits, keeping
    the spec's sigma_query / sigma_threshold ratio (sqrt 3 by default); inf when none up to 1e12 does."""
    ratio = (spec.sigma_query or math.sqrt(3.0) * spec.sigma_threshold) / spec.sigma_threshold

    def admits(sigma: float) -> bool:
        try:
            SparseVectorMonitor(spec.threshold, sigma, sensitivity, epsilon, delta, sigma_query=ratio * sigma,
                                method=spec.method.value)
        except ValueError:
            return False
        return True

    low, high = spec.sigma_threshold, spec.sigma_threshold
    while admits(low) and low > 1e-12:
        low /= 2
    while not admits(high):
        if high > 1e12:
            return math.inf
        low, high = high, high * 2
    while high / low > 1.001:
        middle = math.sqrt(low * high)
        low, high = (low, middle) if admits(middle) else (middle, high)
    return high


def draft(spec: SvtSpec, context: PlanningContext) -> Draft[SvtPlan]:
    """The monitor's whole budget as a fixed event; its plan needs nothing from the calibration."""
    plan = _plan(spec, context)
    return Draft((), (FixedEvent(spec.name, plan.event),), lambda calibrated: plan)


def _plan(spec: SvtSpec, context: PlanningContext) -> SvtPlan:
    where = f"release {spec.name!r}"
    share = spec.weight / context.total_weight
    sensitivity = svt_sensitivity(spec, context.bounds)
    if not sensitivity <= 1.0:
        raise PlanningError(f"{where}: maximum must be at least the sensitivity {sensitivity * spec.maximum:g} of a "
                            f"window total (normalised sensitivity <= 1), got {spec.maximum!r}")
    # A hair below the exact share, so that the accountant's upward-rounded sums stay within the job's target.
    monitor_epsilon = context.epsilon * share * (1.0 - MONITOR_SHARE_MARGIN)
    laplace = spec.method == SvtMethod.LAPLACE
    monitor_delta = 0.0 if laplace else context.delta * share * (1.0 - MONITOR_SHARE_MARGIN)
    event: Event = PureDP(monitor_epsilon) if laplace else ApproxDP(monitor_epsilon, monitor_delta)
    try:
        monitor = SparseVectorMonitor(spec.threshold, spec.sigma_threshold, sensitivity, monitor_epsilon, monitor_delta,
                                      sigma_query=spec.sigma_query, method=spec.method.value,
                                      persist_threshold=spec.persist_threshold)
    except ValueError as err:
        smallest = smallest_sigma_threshold(spec, sensitivity, monitor_epsilon, monitor_delta)
        hint = f"; sigma_threshold = {smallest:.4g} or more fits this budget" if math.isfinite(smallest) else ""
        raise PlanningError(f"{where}: {err}{hint}") from err
    return SvtPlan(spec, context.window.count, sensitivity, monitor_epsilon, monitor_delta, event,
                   monitor.instance_epsilon, monitor.instance_delta, monitor.describe())
