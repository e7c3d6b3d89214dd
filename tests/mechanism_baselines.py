"""Mechanisms that only the tests use: baselines the falsification harness and the mechanism tests run."""
from __future__ import annotations

import numpy as np

from dpstream.accounting.events import PureDP
from dpstream.pipelines.mechanisms.noise import SecureRandom
from dpstream.pipelines.mechanisms.release import Release, checked_rng, positive, release, vector
from dpstream.pipelines.mechanisms.sparse_vector import laplace_noise


def laplace_report_noisy_max(
    values, scale: float, rng: SecureRandom, *, sensitivity: float = 1.0, monotone: bool = False
) -> Release:
    """Baseline: the index of the largest value + Lap(scale).

    Privacy: each value moves by at most `sensitivity`. epsilon-DP with
    epsilon = 2 sensitivity / scale, or sensitivity / scale when the values are
    monotone (all move in the same direction between neighbours, e.g. counts
    under add/remove). Proof: Dwork–Roth 2014, Claim 3.9 (monotone); the
    general case by the same argument with a shift of 2 sensitivity.
    Event `PureDP(epsilon)`.
    Checks: at least 2 values; scale, sensitivity positive.
    Numerics: idealised float noise; only the index is released.
    Runtime: O(d).
    """
    owner = "laplace_report_noisy_max"
    scale = positive(owner, "scale", scale)
    sensitivity = positive(owner, "sensitivity", sensitivity)
    array = vector(owner, "values", values, minimum=2).astype(np.float64)
    rng = checked_rng(owner, rng)
    epsilon = (1.0 if monotone else 2.0) * sensitivity / scale
    index = int(np.argmax(array + laplace_noise(rng, scale, array.size)))
    return release(owner, index, PureDP(epsilon), scale=scale, sensitivity=sensitivity, monotone=bool(monotone))
