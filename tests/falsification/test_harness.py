"""Tests of the falsification harness itself on randomized response, whose epsilon is known exactly.

False-alarm rate: each audit is wrong with probability at most its alpha = 1e-3; seeds are fixed.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from tests.falsification.harness import audit, clopper_pearson_lower, clopper_pearson_upper


def randomized_response(epsilon: float, seed: int):
    rng = np.random.default_rng(seed)
    keep = math.exp(epsilon) / (1 + math.exp(epsilon))

    def sample(bit, n):
        return np.where(rng.random(n) < keep, bit, 1 - bit).astype(float)

    return sample


def test_clopper_pearson_brackets_the_proportion():
    assert clopper_pearson_lower(0, 100, 0.01) == 0.0 and clopper_pearson_upper(100, 100, 0.01) == 1.0
    lo, hi = clopper_pearson_lower(30, 100, 0.025), clopper_pearson_upper(30, 100, 0.025)
    assert 0.2 < lo < 0.3 < hi < 0.4
    # coverage: the one-sided bound misses p = 0.3 in at most ~alpha of repeated experiments
    rng = np.random.default_rng(1)
    misses = sum(clopper_pearson_lower(int(k), 200, 0.05) > 0.3 for k in rng.binomial(200, 0.3, size=2000))
    assert misses <= 2000 * 0.05 * 1.5


@pytest.mark.parametrize("epsilon", [0.5, 1.0])
def test_lower_bound_is_below_and_close_to_the_truth(epsilon):
    result = audit(randomized_response(epsilon, 2), 0, 1, n_search=5_000, n_estimate=100_000, alpha=1e-3)
    assert 0.9 * epsilon < result.epsilon_lower <= epsilon


def test_flags_a_mechanism_weaker_than_claimed():
    result = audit(randomized_response(1.3, 3), 0, 1, n_search=5_000, n_estimate=100_000, alpha=1e-3)
    assert result.epsilon_lower > 1.0


def test_delta_lowers_the_bound():
    plain = audit(randomized_response(1.0, 4), 0, 1, n_search=5_000, n_estimate=50_000, alpha=1e-3)
    relaxed = audit(randomized_response(1.0, 4), 0, 1, n_search=5_000, n_estimate=50_000, delta=0.05, alpha=1e-3)
    assert relaxed.epsilon_lower < plain.epsilon_lower
