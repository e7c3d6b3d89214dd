"""Exponential-mechanism quantiles (`mechanisms.exponential_quantiles`): the draw distribution, the score range
that makes each draw epsilon-bounded-range (brute force over neighbour pairs, with the halved range as the broken
variant), a sampled DP audit, and the stated utility bound."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from dpstream.accounting.events import BoundedRange, SelfComposed
from dpstream.pipelines.mechanisms.noise import SecureRandom
from dpstream.pipelines.mechanisms.quantiles import ValueGrid, exponential_quantiles, quantile_score_range
from tests.falsification.harness import audit

ALPHA = 1e-3  # false-alarm rate of every statistical check here


def log_probabilities(row: np.ndarray, q: float, epsilon: float, score_range: float) -> np.ndarray:
    """The oracle: log P[j] for j = 0..G, proportional to exp(-epsilon |C_j - q n| / score_range)."""
    below = np.concatenate([[0], np.cumsum(row)])
    logits = -epsilon * np.abs(below - q * below[-1]) / score_range
    return logits - logsumexp(logits)


def test_value_grid_buckets_and_points():
    grid = ValueGrid(-30.0, 120.0, 150)
    assert grid.bucket([-30.0, -29.5, 0.0, 119.99, 120.0, 500.0, -100.0]).tolist() == [0, 0, 30, 149, 149, 149, 0]
    assert grid.points([0, 30, 150]).tolist() == [-30.0, 0.0, 120.0]
    with pytest.raises(ValueError, match="finite lower < upper"):
        ValueGrid(1.0, 1.0, 10)


def test_score_range():
    assert quantile_score_range(0.5, 3) == 3.0
    assert quantile_score_range(0.9, 2) == pytest.approx(3.6)
    assert quantile_score_range(0.1, 2) == pytest.approx(3.6)


def test_draws_follow_the_softmax():
    """Chi-square of 40,000 draws (one call, one row per draw) against the oracle's probabilities."""
    row = np.array([3, 0, 5, 1, 0, 2, 4, 1])
    epsilon, q, m, n = 1.5, 0.7, 2, 40_000
    drawn = exponential_quantiles(np.tile(row, (n, 1)), [q], epsilon, SecureRandom(11), max_contributions=m).value
    observed = np.bincount(drawn[:, 0], minlength=row.size + 1)
    expected = n * np.exp(log_probabilities(row, q, epsilon, quantile_score_range(q, m)))
    assert stats.chisquare(observed, expected).pvalue > ALPHA


def test_rows_are_sorted_and_event_counts_every_draw():
    counts = np.array([[0, 5, 5, 0], [10, 0, 0, 10]])
    release = exponential_quantiles(counts, [0.9, 0.1, 0.5], 2.0, SecureRandom(3), max_contributions=1,
                                    max_partitions=1)
    assert (np.diff(release.value, axis=1) >= 0).all()
    assert release.event == SelfComposed(BoundedRange(2.0), 3)


def neighbour_pairs(buckets: int, largest: int, m: int):
    """Every (x', x) with x' of at most `largest` records over `buckets` buckets and x adding 1..m records."""
    def rows(total: int):
        for chosen in itertools.combinations_with_replacement(range(buckets), total):
            yield np.bincount(np.array(chosen, dtype=np.int64), minlength=buckets)
    smaller = [row for total in range(largest + 1) for row in rows(total)]
    added = [row for total in range(1, m + 1) for row in rows(total)]
    for base in smaller:
        for extra in added:
            yield base, base + extra


def random_pairs(count: int, m: int, seed: int):
    """`count` random (x', x): up to 60 records over 5 buckets, x adding 1..m records anywhere."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        base = rng.multinomial(int(rng.integers(0, 61)), rng.dirichlet(np.ones(5)))
        yield base, base + rng.multinomial(int(rng.integers(1, m + 1)), np.ones(5) / 5)


def extreme_pair(q: float, m: int):
    """(x', x) whose loss spans the whole range: x' holds n' records low, enough that min(q, 1 - q) n' >=
    max(q, 1 - q) m, and x adds m records at the top (q >= 1/2) or the bottom (q < 1/2)."""
    base = np.zeros(3, dtype=np.int64)
    below = math.ceil(max(q, 1 - q) * m / min(q, 1 - q))
    added = np.zeros(3, dtype=np.int64)
    if q >= 0.5:
        base[0], added[2] = below, m
    else:
        base[2], added[0] = below, m
    return base, base + added


def loss(pair, q: float, score_range: float, epsilon: float = 1.0) -> np.ndarray:
    """The privacy loss ln P_x[j] - ln P_x'[j] of every outcome."""
    without, with_unit = pair
    return (log_probabilities(with_unit, q, epsilon, score_range) - log_probabilities(without, q, epsilon, score_range))


def pairs(q: float, m: int):
    yield from neighbour_pairs(buckets=3, largest=5, m=m)
    yield from random_pairs(2_000, m, seed=round(100 * q))
    yield extreme_pair(q, m)


def widest_loss_range(q: float, score_range: float, m: int) -> float:
    """The largest sup_j L - inf_j L of the privacy loss (epsilon 1) over every checked neighbour pair."""
    return max(float(np.ptp(loss(pair, q, score_range))) for pair in pairs(q, m))


@pytest.mark.parametrize("q", [0.5, 0.9, 0.25])
def test_each_draw_is_epsilon_bounded_range_and_the_range_is_tight(q):
    m = 2
    assert widest_loss_range(q, quantile_score_range(q, m), m) <= 1 + 1e-12  # BR, hence epsilon-DP
    # the factor 2 in the range is needed: a pair spans it all
    assert np.ptp(loss(extreme_pair(q, m), q, quantile_score_range(q, m))) == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize("q", [0.5, 0.9])
def test_flags_the_halved_score_range(q):
    """The broken variant: range m max(q, 1 - q), the score's sensitivity without the factor 2."""
    m = 2
    assert widest_loss_range(q, quantile_score_range(q, m) / 2, m) > 1.5


def worst_pair(q: float, m: int, score_range: float):
    """The checked pair with the largest |L(j)| over outcomes j that both sides draw at least 5% of the time
    (what a sampled audit can see), and that loss."""
    def visible(pair) -> float:
        without, with_unit = pair
        common = np.minimum(log_probabilities(without, q, 1.0, score_range),
                            log_probabilities(with_unit, q, 1.0, score_range)) >= math.log(0.05)
        return float(np.abs(loss(pair, q, score_range))[common].max(initial=0.0))
    return max(((visible(pair), tuple(reversed(pair))) for pair in pairs(q, m)), key=lambda item: item[0])


def quantile_sampler(q: float, m: int, seed: int, halve: bool = False):
    rng = SecureRandom(seed)

    def sample(row, n):
        counts = np.tile(np.asarray(row), (n, 1))
        if halve:  # the broken variant: epsilon doubled stands for the halved score range
            return exponential_quantiles(counts, [q], 2.0, rng, max_contributions=m).value[:, 0].astype(float)
        return exponential_quantiles(counts, [q], 1.0, rng, max_contributions=m).value[:, 0].astype(float)

    return sample


def test_sampled_audit_stays_below_epsilon():
    q, m = 0.5, 2
    exact, (x, x_prime) = worst_pair(q, m, quantile_score_range(q, m))
    assert 0.85 < exact <= 1.0
    result = audit(quantile_sampler(q, m, 21), x, x_prime, n_search=20_000, n_estimate=200_000, alpha=ALPHA)
    assert result.epsilon_lower <= 1.0, str(result)
    assert result.epsilon_lower > 0.6, str(result)  # the audit sees most of the loss


def test_sampled_audit_flags_the_halved_range():
    q, m = 0.5, 2
    exact, (x, x_prime) = worst_pair(q, m, quantile_score_range(q, m) / 2)
    assert exact > 1.5
    result = audit(quantile_sampler(q, m, 22, halve=True), x, x_prime, n_search=20_000, n_estimate=200_000,
                   alpha=ALPHA)
    assert result.epsilon_lower > 1.0, str(result)


def test_rank_error_within_the_utility_bound():
    """With probability >= 0.9 a draw's rank error is at most range_q (ln(G + 1) + ln 10) / epsilon beyond the
    best grid point's; 2,000 draws, binomial test at ALPHA."""
    rng = np.random.default_rng(5)
    grid = ValueGrid(0.0, 100.0, 200)
    values = rng.normal(40.0, 15.0, 3_000)
    row = np.bincount(grid.bucket(values), minlength=grid.buckets)
    q, epsilon, m, draws = 0.5, 0.5, 3, 2_000
    drawn = exponential_quantiles(np.tile(row, (draws, 1)), [q], epsilon, SecureRandom(8), max_contributions=m).value
    below = np.concatenate([[0], np.cumsum(row)])
    error = np.abs(below - q * below[-1])
    bound = error.min() + quantile_score_range(q, m) * (math.log(grid.buckets + 1) + math.log(10)) / epsilon
    misses = int(np.count_nonzero(error[drawn[:, 0]] > bound))
    assert stats.binomtest(misses, draws, 0.1, alternative="greater").pvalue > ALPHA
    released = grid.points(drawn[:, 0])
    assert abs(np.median(released) - np.median(np.clip(values, 0, 100))) < 2.0


@pytest.mark.parametrize("counts, quantiles, match", [
    (np.array([1, 2]), [0.5], "2-d array"),
    (np.array([[1, -1]]), [0.5], "non-negative"),
    (np.array([[1.5, 1]]), [0.5], "integers"),
    (np.array([[1, 1]]), [1.0], r"in \(0, 1\)"),
    (np.array([[1, 1]]), [], r"in \(0, 1\)"),
])
def test_bad_inputs_are_refused(counts, quantiles, match):
    with pytest.raises(ValueError, match=match):
        exponential_quantiles(counts, quantiles, 1.0, SecureRandom(0), max_contributions=1)
