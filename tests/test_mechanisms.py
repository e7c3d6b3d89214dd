"""Tests of pipelines.mechanisms: outputs, events, grids and output distributions.

False-alarm rate: each statistical test rejects at p < ALPHA = 1e-4 with a fixed seed.
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import mpmath
import numpy as np
import pytest
from scipy import integrate, optimize, stats

from dpstream.accounting.events import ZCDP, BoundedRange, Gaussian, GaussianThreshold, Laplace, PureDP, SelfComposed
from dpstream.pipelines import mechanisms
from dpstream.pipelines.mechanisms import (
    clamp_to_range,
    count_mle,
    distinct_threshold,
    exponential_top_k,
    gaussian,
    gaussian_threshold,
    laplace,
    laplace_above_threshold,
    order_consistent_counts,
    selection_margin,
    truncated_gaussian,
    truncation_level,
)
from dpstream.pipelines.mechanisms.noise import SecureRandom, granularity
from tests.mechanism_baselines import laplace_report_noisy_max

ALPHA = 1e-4


def on_grid(values: np.ndarray, step: float) -> bool:
    units = np.asarray(values) / step
    return bool(np.array_equal(units, np.round(units)))


class TestLaplaceAndGaussian:
    def test_laplace_release(self):
        release = laplace(np.array([3, 10, 0]), 2.0, SecureRandom(1), sensitivity=1.0)
        # integer input on a fine grid: no rounding slack; the discrete Laplace adds one grid step per changed
        # coordinate (all 3 here: max_partitions unset), where the continuous Laplace dominates it
        step = granularity(2.0)
        assert release.event == Laplace(2.0, math.nextafter(1.0 + 3 * step, math.inf))
        assert on_grid(release.value, granularity(2.0))
        assert release.parameters["granularity"] == granularity(2.0)
        assert not release.value.flags.writeable
        with pytest.raises(dataclasses.FrozenInstanceError):
            release.event = None

    def test_gaussian_release(self):
        release = gaussian(np.array([3.0, 10.25]), 5.0, SecureRandom(2), sensitivity=2.0, max_partitions=2)
        step = granularity(5.0)
        assert on_grid(release.value, step)
        # float input: L2 sensitivity grows by sqrt(2) grid steps for rounding, sqrt(2) for discreteness
        assert isinstance(release.event, Gaussian) and release.event.sigma == 5.0
        assert 2.0 + 2 * math.sqrt(2) * step <= release.event.sensitivity <= 2.0 + 2 * math.sqrt(2) * step + 1e-15
        assert "gaussian(sigma=5.0" in release.describe()

    def test_float_laplace_sensitivity_counts_all_coordinates_by_default(self):
        release = laplace(np.array([0.3, 0.7, 0.1]), 1.0, SecureRandom(3))
        step = granularity(1.0)
        # L1 grows by 3 grid steps for rounding, 3 for discreteness
        assert 1.0 + 6 * step <= release.event.sensitivity <= 1.0 + 6 * step + 1e-15

    def test_noise_distribution(self):
        # the released value minus the input is Laplace(scale) / N(0, sigma^2) (KS at the fine grid)
        values = np.full(100_000, 7.0)
        lap = laplace(values, 1.5, SecureRandom(4), sensitivity=1.0, max_partitions=1).value - 7.0
        gau = gaussian(values, 0.5, SecureRandom(5), sensitivity=1.0, max_partitions=1).value - 7.0
        assert stats.kstest(lap, "laplace", args=(0, 1.5)).pvalue > ALPHA
        assert stats.kstest(gau, "norm", args=(0, 0.5)).pvalue > ALPHA

    @pytest.mark.parametrize(
        "call, message",
        [
            (lambda r: laplace([1.0], 0.0, r), "laplace: scale must be a positive finite number, got 0.0"),
            (lambda r: laplace([1.0], 1.0, r, sensitivity=-1), "laplace: sensitivity must be a positive"),
            (lambda r: laplace([[1.0]], 1.0, r), r"laplace: values must be a 1-d numeric array"),
            (lambda r: gaussian([np.nan], 1.0, r), "gaussian: values must be finite"),
            (lambda r: gaussian([1.0], 1.0, r, max_partitions=0), "max_partitions must be an integer >= 1, got 0"),
            (lambda r: gaussian(["a"], 1.0, r), "1-d numeric array"),
        ],
    )
    def test_errors(self, call, message):
        with pytest.raises(ValueError, match=message):
            call(SecureRandom(0))

    def test_rng_type(self):
        with pytest.raises(TypeError, match="rng must be a pipelines.mechanisms.noise.SecureRandom, got Generator"):
            laplace([1.0], 1.0, np.random.default_rng(0))


class TestTruncatedGaussian:
    # Cesar–Rogers eq. (10) reference values (tau = 1), computed in the shared note.
    @pytest.mark.parametrize(
        "sigma, partitions, delta, expected",
        [(1, 1, 1e-10, 7.361201), (5, 1, 1e-10, 32.565051), (10, 1, 1e-10, 63.460889),
         (10, 10, 1e-10, 67.020462), (13.1, 25, 1e-6, 68.693428), (20, 5, 1e-6, 96.469045)],
    )
    def test_truncation_level_reference_values(self, sigma, partitions, delta, expected):
        level = truncation_level(sigma, 1.0, partitions, delta)
        assert expected - 1e-6 <= level <= expected + 1e-6

    def test_truncation_level_is_rounded_up(self):
        # at the returned T the failure probability is at most delta; slightly below T it is above
        sigma, tau, partitions, delta = 3.0, 2.0, 4, 1e-9
        level = truncation_level(sigma, tau, partitions, delta)

        def failure(level):
            inside = stats.norm.cdf(level / sigma) - stats.norm.cdf(-level / sigma)
            return partitions * (stats.norm.cdf((tau - level) / sigma) - stats.norm.cdf(-level / sigma)) / inside

        assert failure(level) <= delta < failure(level * (1 - 1e-6))

    def test_scales_with_threshold(self):
        # the paper's sigma is ours divided by tau: T scales linearly
        assert truncation_level(30.0, 3.0, 2, 1e-8) == pytest.approx(3 * truncation_level(10.0, 1.0, 2, 1e-8), rel=1e-9)

    def test_small_counts_never_released(self):
        counts = np.concatenate([np.ones(5000, dtype=np.int64), np.zeros(5000, dtype=np.int64)])
        release = truncated_gaussian(counts, 0.5, 1, SecureRandom(6), delta=1e-3, max_partitions=1)
        indices, values = release.value
        assert indices.size == 0 and values.size == 0

    def test_release_and_event(self):
        counts = np.array([500, 3, 80, 0, 2])
        release = truncated_gaussian(counts, 4.0, 2, SecureRandom(7), delta=1e-8, max_partitions=3)
        indices, values = release.value
        assert list(indices) == [0, 2]  # cutoff 2 + T is about 29 here
        assert release.event == ZCDP(rho=3 * 4 / (2 * 16.0), delta=1e-8)
        assert on_grid(values, release.parameters["granularity"])
        assert np.all(values > release.parameters["cutoff"])
        assert np.all(np.abs(values - counts[indices]) <= release.parameters["truncation"])

    def test_noise_is_truncated_gaussian(self):
        counts = np.full(100_000, 1000)
        release = truncated_gaussian(counts, 3.0, 1, SecureRandom(8), delta=0.2, max_partitions=1)
        indices, values = release.value
        level = release.parameters["truncation"]
        assert indices.size == counts.size
        noise = values - 1000
        reference = stats.truncnorm(-level / 3.0, level / 3.0, scale=3.0)
        assert np.abs(noise).max() <= level
        assert stats.kstest(noise, reference.cdf).pvalue > ALPHA

    def test_errors(self):
        with pytest.raises(ValueError, match=r"truncation_level: delta must lie in \(0, 1\), got 0"):
            truncated_gaussian([5], 1.0, 1, SecureRandom(0), delta=0)
        with pytest.raises(ValueError, match="truncated_gaussian: threshold must be a positive"):
            truncated_gaussian([5], 1.0, 0, SecureRandom(0), delta=1e-6)


def exact_top_k(scores: np.ndarray, k: int, epsilon: float, sensitivity: float) -> dict[tuple, float]:
    """Probability of every ordered k-tuple under k peeled exponential mechanisms."""
    weights = np.exp(epsilon * scores / sensitivity)
    out = {}
    for order in itertools.permutations(range(scores.size), k):
        p, remaining = 1.0, weights.sum()
        for i in order:
            p *= weights[i] / remaining
            remaining -= weights[i]
        out[order] = p
    return out


def discrete_gaussian_tail(s: float, m: int) -> float:
    """Pr[X >= m] for P[X = j] proportional to exp(-j^2 / 2 s^2), summed at 40 digits."""
    weight = lambda j: mpmath.exp(-mpmath.mpf(j) ** 2 / (2 * mpmath.mpf(s) ** 2))  # noqa: E731
    span = int(60 * s) + 60
    total = weight(0) + 2 * mpmath.fsum(weight(j) for j in range(1, span))
    return float(mpmath.fsum(weight(j) for j in range(m, m + span)) / total)


class TestGaussianThreshold:
    @pytest.mark.parametrize("s", [0.8, 3.0, 25.0])
    @pytest.mark.parametrize("partitions, delta", [(1, 0.1), (5, 1e-3), (3, 1e-9)])
    def test_margin_bounds_the_exact_discrete_tail(self, s, partitions, delta):
        m = selection_margin(s, partitions, delta)
        one = discrete_gaussian_tail(s, m + 1)  # a unit's own partition needs X >= m + 1
        assert -math.expm1(partitions * math.log1p(-one)) <= delta
        p1 = -math.expm1(math.log1p(-delta) / partitions)
        assert m == math.ceil(s * -stats.norm.ppf(p1) - 1e-9)  # no more margin than the continuous bound needs

    def test_release_and_event(self):
        counts = np.array([500, 3, 80, 0, 2])
        release = gaussian_threshold(counts, 4.0, 2, SecureRandom(7), delta=1e-8, max_partitions=3)
        indices, values = release.value
        assert list(indices) == [0, 2]  # cutoff 2 + about 4 * 5.9 here
        step = release.parameters["granularity"]
        # integer counts are not rounded; the discrete Gaussian adds sqrt(L0) grid steps (noise.grid_sensitivity)
        assert release.event == GaussianThreshold(4.0, math.nextafter(math.sqrt(3) * 2 + step * math.sqrt(3), math.inf), 1e-8)
        assert release.parameters["cutoff"] == 2 + selection_margin(4.0 / step, 3, 1e-8) * step
        assert on_grid(values, step) and np.all(values > release.parameters["cutoff"])

    def test_grid_rounding_raises_threshold_and_sensitivity(self):
        release = gaussian_threshold(np.array([10.3, 0.25]), 4.0, 1.5, SecureRandom(9), delta=1e-6, max_partitions=2)
        step = release.parameters["granularity"]
        assert release.parameters["threshold"] > 1.5 and release.event.sensitivity > math.sqrt(2) * 1.5
        assert release.parameters["threshold"] <= 1.5 + 2 * step

    def test_noise_is_unbiased_gaussian(self):
        counts = np.full(100_000, 1000)
        indices, values = gaussian_threshold(counts, 3.0, 1, SecureRandom(8), delta=0.2).value
        assert indices.size == counts.size
        assert stats.kstest(values - 1000, stats.norm(scale=3.0).cdf).pvalue > ALPHA

    def test_errors(self):
        with pytest.raises(ValueError, match=r"gaussian_threshold: delta must lie in \(0, 1\), got 0"):
            gaussian_threshold([5], 1.0, 1, SecureRandom(0), delta=0)
        with pytest.raises(ValueError, match="gaussian_threshold: threshold must be a positive"):
            gaussian_threshold([5], 1.0, 0, SecureRandom(0), delta=1e-6)
        with pytest.raises(ValueError, match="gaussian_threshold: max_partitions must be an integer >= 1"):
            gaussian_threshold([5], 1.0, 1, SecureRandom(0), delta=1e-6, max_partitions=0)


class TestExponentialTopK:
    SCORES = np.array([0.0, 1.0, 2.5, 0.5])
    TRIALS = 8_000

    def sample(self, method: str, k: int, seed: int) -> list[tuple]:
        rng = SecureRandom(seed)
        return [tuple(exponential_top_k(self.SCORES, k, 0.8, 1.0, rng, method=method).value) for _ in range(self.TRIALS)]

    @pytest.mark.parametrize("k", [1, 2, 3])
    def test_gumbel_and_peel_match_exact_and_each_other(self, k):
        exact = exact_top_k(self.SCORES, k, 0.8, 1.0)
        outcomes = list(exact)
        expected = np.array([exact[o] for o in outcomes]) * self.TRIALS
        tables = []
        for method, seed in (("gumbel", 20 + k), ("peel", 30 + k)):
            draws = self.sample(method, k, seed)
            observed = np.array([draws.count(o) for o in outcomes], dtype=float)
            assert stats.chisquare(observed, expected).pvalue > ALPHA, method
            tables.append(observed)
        # two-sample test: the two methods give the same distribution over ordered outputs
        assert stats.chi2_contingency(np.array(tables)).pvalue > ALPHA

    def test_event_and_output(self):
        release = exponential_top_k(np.arange(1000.0), 10, 0.5, 2.0, SecureRandom(9))
        assert release.event == SelfComposed(BoundedRange(0.5), 10)
        assert release.value.shape == (10,) and len(set(release.value.tolist())) == 10
        full = exponential_top_k(np.arange(5.0), 5, 1.0, 1.0, SecureRandom(9))
        assert sorted(full.value.tolist()) == [0, 1, 2, 3, 4]

    def test_high_epsilon_recovers_the_true_order(self):
        scores = np.array([5.0, 50.0, 10.0, 40.0, 0.0])
        for method in ("gumbel", "peel"):
            release = exponential_top_k(scores, 3, 100.0, 1.0, SecureRandom(10), method=method)
            assert release.value.tolist() == [1, 3, 2]

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            (dict(k=0), "k must be an integer >= 1, got 0"),
            (dict(k=9), "k must be at most the number of scores 4, got 9"),
            (dict(epsilon=-1.0), "epsilon must be a positive"),
            (dict(method="softmax"), r"method must be one of \('gumbel', 'peel'\), got 'softmax'"),
        ],
    )
    def test_errors(self, kwargs, message):
        args = dict(scores=self.SCORES, k=2, epsilon=1.0, sensitivity=1.0, rng=SecureRandom(0))
        args.update(kwargs)
        with pytest.raises(ValueError, match=message):
            exponential_top_k(**args)


class TestCountMLE:
    def test_projection_matches_constrained_least_squares(self):
        # Cesar–Rogers eq. (9) solved by nnls: x = U y with U upper-triangular ones, y >= 0
        rng = np.random.default_rng(11)
        for _ in range(200):
            k = rng.integers(1, 12)
            noisy = rng.normal(5, 4, size=k)
            upper = np.triu(np.ones((k, k)))
            y, _ = optimize.nnls(upper, noisy)
            assert np.allclose(order_consistent_counts(noisy), upper @ y, atol=1e-8)

    def test_count_mle_release(self):
        release = count_mle(np.array([40, 12, 11, 2]), 3.0, SecureRandom(12), sensitivity=2.0)
        # integer counts, not rounded; the discrete Gaussian adds sqrt(4) grid steps over the 4 counts
        assert release.event == Gaussian(3.0, math.nextafter(2.0 + 2 * granularity(3.0), math.inf))
        assert np.all(np.diff(release.value) <= 0) and np.all(release.value >= 0)
        assert release.mechanism == "count_mle"


class TestDistinctThreshold:
    UNITS = np.array([0, 1, 2, 40, 300])
    SUMS = np.array([0, 3, 2, 100, 700])  # unit_value 1, linf 3: each unit adds 1..3

    def test_event_is_the_whitened_pair_of_units_and_extra(self):
        release = distinct_threshold(self.UNITS, self.SUMS, 2.0, 5.0, SecureRandom(3), unit_value=1.0, linf=3.0,
                                     delta=1e-6, max_partitions=4)
        selection = gaussian_threshold(self.UNITS, 2.0, 1.0, SecureRandom(3), delta=1e-6, max_partitions=4)
        units_event = selection.event
        extra_event = gaussian(np.zeros(2, dtype=np.int64), 5.0, SecureRandom(3), sensitivity=2 * 2.0, max_partitions=4).event
        mu = math.hypot(units_event.mu, extra_event.mu)
        assert isinstance(release.event, GaussianThreshold) and release.event.delta == units_event.delta
        assert mu <= release.event.mu <= mu * (1 + 1e-14)
        kept, values = release.value
        assert release.parameters["cutoff"] == selection.parameters["cutoff"] < 40  # one unit plus the margin
        assert list(kept) == [3, 4] and np.all(np.abs(values - self.SUMS[kept]) < 30)

    def test_one_record_per_unit_is_gaussian_thresholding_of_the_units(self):
        units = np.array([0, 1, 5, 30, 100])
        release = distinct_threshold(units, 2 * units, 3.0, None, SecureRandom(4), unit_value=2.0, linf=2.0,
                                     delta=1e-6, max_partitions=3)
        reference = gaussian_threshold(units, 3.0, 1.0, SecureRandom(4), delta=1e-6, max_partitions=3)
        assert np.array_equal(release.value[0], reference.value[0])
        assert np.array_equal(release.value[1], 2.0 * reference.value[1])
        assert math.isclose(release.event.mu, reference.event.mu, rel_tol=1e-14) and release.event.mu >= reference.event.mu

    def test_released_values_are_unbiased_with_the_planned_variance(self):
        # every partition far above the cutoff: value = units + noise_u + (sums - units) + noise_e ~ N(sums, su^2 + se^2)
        n, sigma_units, sigma_extra = 20_000, 2.0, 3.0
        release = distinct_threshold(np.full(n, 200), np.full(n, 450), sigma_units, sigma_extra, SecureRandom(5),
                                     unit_value=1.0, linf=3.0, delta=1e-6, max_partitions=2)
        kept, values = release.value
        assert kept.size == n
        scale = math.hypot(sigma_units, sigma_extra)
        assert stats.kstest(values, stats.norm(450, scale).cdf).pvalue > ALPHA

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            (dict(sums=[1, 2]), "units and sums must have the same length, got 3 and 2"),
            (dict(extra_sigma=None), "extra_sigma is required when linf=3.0 exceeds"),
            (dict(unit_value=4.0), r"unit_value must be non-zero with \|unit_value\| <= linf=3.0, got 4.0"),
            (dict(unit_value=0.0), "unit_value must be non-zero"),
            (dict(delta=0.0), "delta must lie in"),
        ],
    )
    def test_errors(self, kwargs, message):
        args = dict(units=[1, 2, 3], sums=[1, 2, 3], sigma=1.0, extra_sigma=1.0, rng=SecureRandom(0), unit_value=1.0,
                    linf=3.0, delta=1e-6)
        args.update(kwargs)
        with pytest.raises(ValueError, match=message):
            distinct_threshold(**args)


class TestClampToRange:
    def test_error_never_grows_and_shrinks_where_noise_left_the_range(self):
        rng = np.random.default_rng(21)
        truth = rng.integers(0, 4, size=10_000).astype(float)  # small counts, the case clamping is for
        noisy = truth + rng.normal(0, 3, size=truth.size)
        clamped = clamp_to_range(noisy, 0.0, math.inf)
        assert np.array_equal(clamped, np.maximum(noisy, 0.0))
        assert np.all(np.abs(clamped - truth) <= np.abs(noisy - truth))
        outside = noisy < 0
        assert outside.any() and np.all(np.abs(clamped - truth)[outside] < np.abs(noisy - truth)[outside])

    def test_two_sided_and_unbounded_ranges(self):
        values = np.array([-5.0, -0.5, 0.0, 2.0, 9.0])
        assert np.array_equal(clamp_to_range(values, -1.0, 3.0), [-1.0, -0.5, 0.0, 2.0, 3.0])
        assert np.array_equal(clamp_to_range(values, -math.inf, 0.0), [-5.0, -0.5, 0.0, 0.0, 0.0])
        assert np.array_equal(clamp_to_range(values, -math.inf, math.inf), values)
        with pytest.raises(ValueError, match="lower must be <= upper, got 1.0 > 0.0"):
            clamp_to_range(values, 1.0, 0.0)


class TestLaplaceBaselines:
    def test_report_noisy_max_distribution(self):
        # two candidates (0, 1): P[argmax = 1] = P[L0 - L1 < 1] = 1 - exp(-1/b)(1 + 1/(2b)) / 2
        scale, trials = 1.5, 15_000
        rng = SecureRandom(13)
        wins = sum(laplace_report_noisy_max([0.0, 1.0], scale, rng).value for _ in range(trials))
        p = 1 - math.exp(-1 / scale) * (1 + 1 / (2 * scale)) / 2
        assert stats.binomtest(wins, trials, p).pvalue > ALPHA

    def test_report_noisy_max_event(self):
        assert laplace_report_noisy_max([1, 2], 2.0, SecureRandom(0)).event == PureDP(1.0)
        assert laplace_report_noisy_max([1, 2], 2.0, SecureRandom(0), monotone=True).event == PureDP(0.5)

    def test_above_threshold_distribution(self):
        # one query v against threshold r: P[TOP] = P[v + Lq >= r + Lt], by quadrature
        bt, bq, v, r, trials = 1.0, 2.0, 0.5, 1.0, 15_000
        p_top = integrate.quad(lambda z: stats.laplace.pdf(z, scale=bt) * stats.laplace.sf(r + z - v, scale=bq),
                               -60, 60, points=[0.0, v - r], limit=200)[0]
        rng = SecureRandom(14)
        tops = sum(laplace_above_threshold([v], bt, bq, r, rng).value == 0 for _ in range(trials))
        assert stats.binomtest(tops, trials, p_top).pvalue > ALPHA

    def test_above_threshold_event_and_halting(self):
        release = laplace_above_threshold([0.0, 0.0, 100.0, 100.0], 1.0, 2.0, 50.0, SecureRandom(15))
        assert release.value == 2
        assert release.event == PureDP(1.0 / 1.0 + 2 * 1.0 / 2.0)
        none = laplace_above_threshold([0.0, 0.0], 1.0, 1.0, 100.0, SecureRandom(15), monotone=True)
        assert none.value is None and none.event == PureDP(2.0)


def test_public_names():
    for name in ("laplace", "gaussian", "gaussian_threshold", "truncated_gaussian", "exponential_top_k", "report_noisy_max",
                 "above_threshold", "laplace_above_threshold", "count_mle", "clamp_to_range", "distinct_threshold"):
        assert callable(getattr(mechanisms, name))
    assert set(mechanisms.__all__) <= set(dir(mechanisms))
