"""Differentially private mechanisms on numpy arrays, each returning what may be released and its event.

Every mechanism takes the data-dependent input (noise-free aggregates), public
parameters and a `SecureRandom`, and returns a `Release`: the value that is
safe to publish and the `dpstream.accounting.events` event that states its
privacy cost. The Beam transforms and the tests share these functions; nothing
here imports Beam, so they work from a notebook.

Neighbouring relation throughout: add or remove all records of one privacy
unit; the caller states how far that moves the input (`sensitivity`, and the
number of coordinates it can change, `max_partitions`).

Mechanisms that release noisy *values* (laplace, gaussian, gaussian_threshold,
distinct_threshold, truncated_gaussian, count_mle) add integer noise on a
power-of-two grid (`noise`), so the released numbers are exact multiples of
the grid step. Their inputs may be integer units of a power-of-two `quantum`
(the exact bounded sums of contribution bounding, `fixedpoint`): they then
reach the grid by exact integer arithmetic, with no rounding at all when
quantum >= the grid step (`noise.to_grid`). Mechanisms that release only
*indices* (exponential_top_k, exponential_quantiles, report_noisy_max, above_threshold,
laplace_above_threshold) use continuous noise from the same CSPRNG: the noisy
scores are never released, so their low bits cannot leak.

Modules: `release` (the `Release` record and shared argument checks),
`additive` (Laplace and Gaussian noise, clamping), `thresholds` (selection of
unknown partitions), `ranking` (top-k, report-noisy-max, consistent counts),
`quantiles` (exponential-mechanism quantiles on a grid),
`sparse_vector` (AboveThreshold), `monitor` (the sparse-vector monitor over
windows), `noise` (randomness and the grid), `fixedpoint` (exact sums).
"""
from __future__ import annotations

from dpstream.pipelines.mechanisms.additive import clamp_to_range, gaussian, laplace
from dpstream.pipelines.mechanisms.quantiles import exponential_quantiles
from dpstream.pipelines.mechanisms.ranking import (
    TOP_K_METHODS,
    count_mle,
    exponential_top_k,
    order_consistent_counts,
    report_noisy_max,
)
from dpstream.pipelines.mechanisms.release import Release
from dpstream.pipelines.mechanisms.sparse_vector import (
    above_threshold,
    laplace_above_threshold,
    laplace_above_threshold_epsilon,
)
from dpstream.pipelines.mechanisms.thresholds import (
    distinct_threshold,
    gaussian_threshold,
    selection_margin,
    truncated_gaussian,
    truncation_level,
)

__all__ = [
    "Release",
    "TOP_K_METHODS",
    "above_threshold",
    "clamp_to_range",
    "count_mle",
    "distinct_threshold",
    "exponential_quantiles",
    "exponential_top_k",
    "gaussian",
    "gaussian_threshold",
    "laplace",
    "laplace_above_threshold",
    "laplace_above_threshold_epsilon",
    "order_consistent_counts",
    "report_noisy_max",
    "selection_margin",
    "truncated_gaussian",
    "truncation_level",
]
