"""Noise that survives the grid: enlarging a planned noise so that rounding to the noise grid never raises the
privacy loss, and the sensitivity of queries normalised by a public maximum.

Proof: docs/proofs/pipelines.planning.job.plan_job.md ("Grid" and "Normalised queries").
"""
from __future__ import annotations

import math
from typing import Callable

from dpstream.pipelines.mechanisms.fixedpoint import QUOTIENT_ROUNDING
from dpstream.pipelines.mechanisms.noise import granularity, grid_sensitivity
from dpstream.pipelines.planning.errors import PlanningError


def grid_noise(noise: float, sensitivity: float, quantum: float, changed: int, norm: int,
               bound: Callable[[float, float, bool, int, int], float] = grid_sensitivity) -> tuple[float, float]:
    """(noise', sensitivity') with noise' >= noise, sensitivity'/noise' <= sensitivity/noise after grid rounding.

    The mechanisms round their inputs, integers in units of the power of two
    `quantum`, to the grid of step granularity(noise'), which can raise the
    sensitivity (`noise.grid_sensitivity`); the noise is scaled up by the same
    factor, so the privacy of a run (a function of the ratio only) is never
    above the planned one. On a grid of step <= quantum nothing is rounded
    (`noise.to_grid`), and nothing changes. `bound` prices the grid: by
    default `noise.grid_sensitivity` (for a continuous Laplace or Gaussian event);
    `noise.rounded_sensitivity` where the event is exact for discrete noise
    (zCDP of the discrete Gaussian, Canonne–Kamath–Steinke 2020 Thm 4).
    """
    current = noise
    for _ in range(8):
        step = granularity(current)
        effective = bound(sensitivity, step, step <= quantum, changed, norm)
        if effective / current <= sensitivity / noise:
            return current, effective
        # strictly above the last try, so a ratio that float rounding leaves 1 ulp high cannot stall the loop
        current = max(math.nextafter(current, math.inf), math.nextafter(noise * effective / sensitivity, math.inf))
    raise PlanningError(f"grid adjustment of noise {noise!r} for sensitivity {sensitivity!r} did not settle")


def normalised_sensitivity(sensitivity: float, maximum: float) -> float:
    """How far one unit moves a query clip(total / maximum, 0, 1) whose exact total moves by at most `sensitivity`.

    The query divides an exact total with one correct rounding
    (`fixedpoint.rounded_quotient`), off by at most 2**-54 inside [0, 1], and
    clipping is 1-Lipschitz, so the computed queries of neighbours differ by at
    most sensitivity / maximum + QUOTIENT_ROUNDING (docs/proofs/pipelines.planning.job.plan_job.md,
    "Normalised queries"); rounded up, and at most 1 when sensitivity <= maximum
    (queries lie in [0, 1]). Above 1 only when maximum < sensitivity, which callers refuse.
    """
    bound = math.nextafter(math.nextafter(sensitivity / maximum, math.inf) + QUOTIENT_ROUNDING, math.inf)
    return bound if sensitivity > maximum else min(bound, 1.0)
