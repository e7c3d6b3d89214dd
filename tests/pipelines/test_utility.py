"""`planning.utility`: what `dpstream validate` promises before a run, checked against the mechanisms themselves.

Statistical checks draw N = 40,000 outputs and accept within 4.5 standard errors of 0.9 (false alarm about 7e-6
per check); fixed seeds make them deterministic."""
from __future__ import annotations

import numpy as np

from dpstream.pipelines import mechanisms
from dpstream.pipelines.config.specs import ContributionBounds, HistogramSpec, PeakSpec, SvtSpec, TopKSpec, WindowSpec
from dpstream.pipelines.mechanisms.monitor import SparseVectorMonitor
from dpstream.pipelines.mechanisms.noise import SecureRandom
from dpstream.pipelines.planning import plan_job
from dpstream.pipelines.planning.utility import (
    expected_utility,
    peak_margin,
    selection_cutoff,
    smallest_sigma_threshold,
    topk_margin,
)

N = 40_000
BOUNDS = ContributionBounds(max_partitions=2, max_contributions=3)
WINDOW = WindowSpec(size=86400, start=0, end=4 * 86400)
PLAN = plan_job((HistogramSpec("known", partitions=("A", "B")), HistogramSpec("selected"),
                 TopKSpec("top", k=1, partitions=("A", "B")), PeakSpec("peak", period=2 * 86400, maximum=60.0),
                 SvtSpec("alerts", maximum=100.0, threshold=0.5, sigma_threshold=2.0)),
                BOUNDS, WINDOW, 2.0, 1e-6)


def _near_090(hits: int) -> bool:
    return abs(hits / N - 0.9) <= 4.5 * np.sqrt(0.09 / N)


def test_topk_margin_orders_two_partitions_right_90_percent_of_the_time():
    plan = PLAN["top"]
    scores = np.array([100.0 + topk_margin(plan), 100.0])
    rng = SecureRandom(1)
    hits = sum(mechanisms.exponential_top_k(scores, 1, plan.epsilon, plan.sensitivity, rng).value[0] == 0
               for _ in range(N))
    assert _near_090(hits)


def test_peak_margin_picks_the_leading_window_90_percent_of_the_time():
    plan = plan_job((PeakSpec("peak", period=2 * 86400, maximum=60.0),), BOUNDS, WINDOW, 8.0, 1e-6)["peak"]
    assert peak_margin(plan) < plan.spec.maximum
    totals = np.array([20.0 + peak_margin(plan), 20.0]) / plan.spec.maximum
    rng = SecureRandom(2)
    hits = sum(mechanisms.report_noisy_max(totals, plan.sigma, rng, sensitivity=plan.sensitivity, lower=0.0,
                                           upper=1.0).value == 0 for _ in range(N))
    assert _near_090(hits)


def test_selection_cutoff_is_the_mechanisms_own():
    plan = PLAN["selected"]
    release = mechanisms.gaussian_threshold(np.array([5, 50], dtype=np.int64), plan.noise, plan.sensitivity,
                                            SecureRandom(3), delta=plan.selection_delta,
                                            max_partitions=plan.max_partitions, quantum=BOUNDS.quantum)
    assert selection_cutoff(plan, BOUNDS) == release.parameters["cutoff"]


def test_smallest_sigma_threshold_is_admitted_and_a_little_less_is_not():
    plan = PLAN["alerts"]
    smallest = smallest_sigma_threshold(plan)
    ratio = plan.monitor().sigma_query / plan.spec.sigma_threshold

    def monitor(sigma):
        return SparseVectorMonitor(0.5, sigma, plan.sensitivity, plan.epsilon, plan.delta, sigma_query=ratio * sigma)

    monitor(smallest)
    try:
        monitor(smallest / 1.002)
    except ValueError:
        pass
    else:
        raise AssertionError(f"sigma_threshold {smallest / 1.002} is admitted too")
    assert smallest < plan.spec.sigma_threshold


def test_every_release_kind_has_a_line():
    lines = {release.name: expected_utility(release, BOUNDS) for release in PLAN.releases}
    assert "RMSE" in lines["known"] and "clears" in lines["selected"] and "90%" in lines["top"]
    assert "admits sigma_threshold down to" in lines["alerts"]
    assert PLAN["peak"].sigma > 1 and "is picked only 72% of the time: raise epsilon" in lines["peak"]  # hopeless


def test_a_refused_sigma_threshold_names_the_smallest_that_fits():
    import re

    import pytest

    from dpstream.pipelines.planning import PlanningError

    releases = (SvtSpec("alerts", maximum=100.0, threshold=0.5, sigma_threshold=0.05),)
    with pytest.raises(PlanningError, match="admits no fsrc instance") as refused:
        plan_job(releases, BOUNDS, WINDOW, 1.0, 1e-6)
    smallest = float(re.search(r"sigma_threshold = ([\d.e+-]+) or more fits this budget", str(refused.value)).group(1))
    plan_job((SvtSpec("alerts", maximum=100.0, threshold=0.5, sigma_threshold=smallest),), BOUNDS, WINDOW, 1.0, 1e-6)
    with pytest.raises(PlanningError):
        plan_job((SvtSpec("alerts", maximum=100.0, threshold=0.5, sigma_threshold=smallest / 1.01),), BOUNDS, WINDOW,
                 1.0, 1e-6)


def test_clamp_bias_is_the_mean_of_clamped_noise_on_zero_counts():
    """100,000 clamped releases of a zero count: their mean is within 5 standard errors (plus 0.01 for the
    discrete noise) of the stated bias; an unclamped plan states none."""
    from dpstream.pipelines.planning.utility import clamp_bias

    plans = plan_job((HistogramSpec("c", partitions=("A",), clamp=True), HistogramSpec("u", partitions=("A",))),
                     BOUNDS, WINDOW, 2.0, 1e-6)
    plan = plans["c"]
    noisy = mechanisms.gaussian(np.zeros(100_000), plan.noise, SecureRandom(4), sensitivity=plan.sensitivity,
                                max_partitions=plan.max_partitions).value
    clamped = np.maximum(noisy, 0.0)
    assert abs(clamped.mean() - clamp_bias(plan)) <= 5 * clamped.std() / np.sqrt(clamped.size) + 0.01
    assert "off by" in expected_utility(plan, BOUNDS) and "off by" not in expected_utility(plans["u"], BOUNDS)
