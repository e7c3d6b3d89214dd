"""What a plan can be expected to deliver, from public values only (reading the data would itself cost privacy).

For each release, in the units of its outputs:
- histogram: the noise's standard deviation (the RMSE of an unclamped value) and the half-width of its 95%
  interval; over unknown partitions also the cutoff a partition's noisy sum must clear to appear at all; with
  `clamp`, the mean bias of a cell whose truth is 0, sigma / sqrt(2 pi), which sums over partitions add up;
- top-k: the margin between two partitions' scores that the exponential mechanism orders right 90% of the time,
  ln(9) Delta / epsilon (a pick with logits epsilon score / Delta, Dong–Durfee–Rogers);
- peak: the noise on window totals (sigma times the maximum) and the lead over a rival window that is picked
  90% of the time, z_0.9 sqrt(2) sigma maximum (two windows, Gaussian report-noisy-max);
- quantiles: per quantile q, the rank error (in records) a draw stays within 90% of the time beyond the best
  grid point's, range_q (ln(G + 1) + ln 10) / epsilon (`QuantilesPlan.rank_error`);
- svt: the threshold and the query noise in window totals (for the share metric, as a share), and the smallest
  sigma_threshold the monitor's budget admits (bisection on the monitor's own admission rule, to 0.1%).
`dpstream validate` prints these under each release.
"""
from __future__ import annotations

import math

from scipy.stats import norm

from dpstream.pipelines.config.specs import ContributionBounds
from dpstream.pipelines.mechanisms.noise import granularity
from dpstream.pipelines.mechanisms.thresholds import gaussian_threshold_cutoff
from dpstream.pipelines.planning import svt
from dpstream.pipelines.planning.histogram import HistogramPlan
from dpstream.pipelines.planning.job import ReleasePlan
from dpstream.pipelines.planning.peak import PeakPlan
from dpstream.pipelines.planning.quantiles import QuantilesPlan
from dpstream.pipelines.planning.svt import SvtPlan
from dpstream.pipelines.planning.topk import TopKPlan

Z90, Z975 = float(norm.ppf(0.9)), float(norm.ppf(0.975))  # 90% one-sided and 95% two-sided normal quantiles


def expected_utility(plan: ReleasePlan, bounds: ContributionBounds) -> str:
    """One line on what `plan` can be expected to show (module docstring)."""
    if isinstance(plan, HistogramPlan):
        return _histogram(plan, bounds)
    if isinstance(plan, TopKPlan):
        return f"two partitions whose totals differ by {topk_margin(plan):.4g} are ranked right 90% of the time"
    if isinstance(plan, QuantilesPlan):
        return "; ".join(f"quantile {q:g}: rank off by at most {plan.rank_error(q):.4g} records 90% of the time (beyond "
                         f"the grid step {plan.step:.4g})" for q in plan.spec.quantiles)
    if isinstance(plan, PeakPlan):
        text = f"noise on each window total: standard deviation {plan.sigma * plan.spec.maximum:.4g}; "
        if peak_margin(plan) > plan.spec.maximum:  # totals are clipped to [0, maximum]: no lead is that large
            best = float(norm.cdf(1.0 / (math.sqrt(2.0) * plan.sigma)))
            return text + (f"even a window at the maximum {plan.spec.maximum:g} against an empty rival is picked only "
                           f"{100 * best:.0f}% of the time: raise epsilon or this release's weight")
        return text + f"a window ahead of its rival by {peak_margin(plan):.4g} is picked 90% of the time"
    return _svt(plan)


def topk_margin(plan: TopKPlan) -> float:
    """The score gap two partitions need to be picked in the right order with probability 0.9."""
    return math.log(9.0) * plan.sensitivity / plan.epsilon


def peak_margin(plan: PeakPlan) -> float:
    """The lead (in window totals) a window needs over one rival to be picked with probability 0.9."""
    return Z90 * math.sqrt(2.0) * plan.sigma * plan.spec.maximum


def selection_cutoff(plan: HistogramPlan, bounds: ContributionBounds) -> float:
    """The cutoff of Gaussian thresholding for this plan, as the pipeline's int64 sums meet it."""
    exact = granularity(plan.noise) <= bounds.quantum
    return gaussian_threshold_cutoff(plan.noise, plan.sensitivity, plan.max_partitions, plan.selection_delta or 0.0,
                                     exact)


def smallest_sigma_threshold(plan: SvtPlan) -> float:
    """The smallest sigma_threshold the plan's monitor budget admits (`planning.svt.smallest_sigma_threshold`)."""
    return svt.smallest_sigma_threshold(plan.spec, plan.sensitivity, plan.epsilon, plan.delta)


def _histogram(plan: HistogramPlan, bounds: ContributionBounds) -> str:
    if plan.mechanism in ("mean", "variance"):
        lower, upper = plan.value_range
        return (f"a {plan.mechanism} over n records: error about {plan.noise_stddev:.4g} / n or less (RMSE; for n well "
                f"above the count's noise standard deviation {plan.part_stddev(plan.noise):.4g}), never outside "
                f"[{lower:g}, {upper:g}]")
    text = (f"each value's error: RMSE {plan.noise_stddev:.4g} (unclamped), within +-{Z975 * plan.noise_stddev:.4g} "
            f"95% of the time")
    if plan.mechanism == "gaussian_threshold":
        text += f"; a partition appears only if its noisy total clears {selection_cutoff(plan, bounds):.4g}"
    if plan.value_range != (-math.inf, math.inf):
        text += (f"; clamped to the range a sum can take: a cell whose truth is on its edge (a count of 0) is off by "
                 f"{clamp_bias(plan):.4g} on average, always inward, and sums over partitions add that up (clamp = false "
                 f"is unbiased)")
    return text


def clamp_bias(plan: HistogramPlan) -> float:
    """E[max(Z, 0)] for Z ~ N(0, s^2), s the noise's standard deviation: the mean bias clamping adds to a cell
    whose truth lies at the edge of the range (a count of 0), s / sqrt(2 pi) (close for discrete noise)."""
    return plan.noise_stddev / math.sqrt(2.0 * math.pi)


def _svt(plan: SvtPlan) -> str:
    spec = plan.spec
    scale, units = (1.0, "as a share") if spec.metric == "share" else (spec.maximum, "in window totals")
    return (f"alert threshold {spec.threshold * scale:.4g} {units}, query noise standard deviation "
            f"{plan.monitor().sigma_query * scale:.4g} and threshold noise {spec.sigma_threshold * scale:.4g}; the "
            f"budget admits sigma_threshold down to {smallest_sigma_threshold(plan):.4g} (this job: "
            f"{spec.sigma_threshold:g})")
