"""Try to prove each mechanism not private; the estimated epsilon must stay at or below its claim.

Every audit runs the real mechanism from pipelines.mechanisms on a worst-case
pair of neighbouring inputs and asks the harness (harness.py) for a lower
bound on epsilon that holds with confidence 1 - ALPHA; the claim is what the
release's own event says (through the accountant for approximate-DP events).
False-alarm rate: a correct mechanism fails one audit with probability at
most ALPHA = 1e-3 (seeds are fixed, so runs are reproducible).

Negative controls: deliberately broken variants (AboveThreshold without
threshold noise, the exponential mechanism with half the sensitivity, the
Gaussian mechanism with too small a sigma, Gaussian thresholding whose cutoff
forgets a unit's own contribution) claim the event of the correct
mechanism, and distinct thresholding is held to a broken claim (the event of
its units part alone, forgetting the noisy extra records' mu); the same
harness must find an epsilon (or delta) above that claim.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from dpstream.accounting.accountant import Accountant
from dpstream.accounting.bounds.basic import basic_totals
from dpstream.accounting.composition import Composition
from dpstream.pipelines import mechanisms
from dpstream.pipelines.mechanisms.noise import SecureRandom
from tests.falsification.harness import audit, audit_outcome, clopper_pearson_lower
from tests.mechanism_baselines import laplace_report_noisy_max

ALPHA = 1e-3
NONE = -math.inf


def pure_claim(event) -> float:
    """The pure epsilon an event claims (basic composition over its parts)."""
    epsilon, delta = basic_totals(Composition().plus(event))
    assert delta == 0.0
    return epsilon


def approx_claim(event, delta: float) -> float:
    return Accountant().compose(event).epsilon(delta)


def loop_sampler(run):
    def sample(data, n):
        out = np.empty(n)
        for i in range(n):
            value = run(data)
            out[i] = NONE if value is None else float(value)
        return out

    return sample


def check(result, claim: float) -> None:
    assert result.epsilon_lower <= claim, f"{result}; claimed {claim:.4f}"


# ---- noisy values (vectorised: n independent one-coordinate releases per call) ----

def test_laplace():
    rng = SecureRandom(101)

    def sample(value, n):
        return mechanisms.laplace(np.full(n, value), 1.0, rng, sensitivity=1.0, max_partitions=1).value

    claim = pure_claim(mechanisms.laplace(np.zeros(1, dtype=np.int64), 1.0, rng, sensitivity=1.0).event)
    result = audit(sample, 0, 1, n_search=20_000, n_estimate=200_000, alpha=ALPHA)
    check(result, claim)
    assert result.epsilon_lower > 0.5 * claim  # the harness has power: it gets within a factor 2


def gaussian_sampler(sigma: float, seed: int):
    rng = SecureRandom(seed)

    def sample(value, n):
        return mechanisms.gaussian(np.full(n, value), sigma, rng, sensitivity=1.0, max_partitions=1).value

    return sample


def test_gaussian():
    claim_event = mechanisms.gaussian(np.zeros(1, dtype=np.int64), 1.0, SecureRandom(0), sensitivity=1.0).event
    delta = 1e-3
    result = audit(gaussian_sampler(1.0, 102), 0, 1, n_search=20_000, n_estimate=200_000, delta=delta, alpha=ALPHA)
    check(result, approx_claim(claim_event, delta))
    assert result.epsilon_lower > 1.0


def test_count_mle():
    rng = SecureRandom(103)

    def sample(value, n):
        # one count per release: CountMLE is the non-negative part of the Gaussian count
        return np.array([mechanisms.count_mle([value], 1.0, rng, sensitivity=1.0).value[0] for _ in range(n)])

    claim = approx_claim(mechanisms.count_mle([0], 1.0, rng, sensitivity=1.0).event, 1e-2)
    check(audit(sample, 0, 1, n_search=2_000, n_estimate=8_000, delta=1e-2, alpha=ALPHA), claim)


def test_truncated_gaussian():
    sigma, tau, delta_trunc = 2.0, 1, 1e-4
    rng = SecureRandom(104)
    probe = mechanisms.truncated_gaussian(np.zeros(1, dtype=np.int64), sigma, tau, rng, delta=delta_trunc)
    count = int(round(probe.parameters["cutoff"]))  # worst case: releases hinge on the extra tau

    def sample(value, n):
        indices, values = mechanisms.truncated_gaussian(np.full(n, value, dtype=np.int64), sigma, tau, rng,
                                                        delta=delta_trunc).value
        out = np.full(n, NONE)
        out[indices] = values
        return out

    delta = 1e-3
    claim = approx_claim(probe.event, delta)
    result = audit(sample, count - tau, count, n_search=20_000, n_estimate=200_000, delta=delta, alpha=ALPHA)
    check(result, claim)
    # a partition only the neighbour has, with count <= tau, is never released
    indices, _ = mechanisms.truncated_gaussian(np.full(100_000, tau, dtype=np.int64), sigma, tau, rng,
                                               delta=delta_trunc).value
    assert indices.size == 0


def threshold_sampler(sigma: float, tau: int, selection_delta: float, seed: int, offset: int = 0):
    """n one-partition Gaussian-thresholding releases (NONE when not released); `offset` breaks the cutoff."""
    rng = SecureRandom(seed)

    def sample(value, n):
        counts = np.full(n, value + offset, dtype=np.int64)
        indices, values = mechanisms.gaussian_threshold(counts, sigma, tau, rng, delta=selection_delta).value
        out = np.full(n, NONE)
        out[indices] = values - offset
        return out

    return sample


def test_gaussian_threshold_shared_partition():
    sigma, tau, selection_delta = 2.0, 1, 1e-4
    probe = mechanisms.gaussian_threshold(np.zeros(1, dtype=np.int64), sigma, tau, SecureRandom(0), delta=selection_delta)
    count = int(round(probe.parameters["cutoff"]))  # worst case: releases hinge on the unit's contribution
    delta = 1e-3
    result = audit(threshold_sampler(sigma, tau, selection_delta, 105), count - tau, count,
                   n_search=20_000, n_estimate=200_000, delta=delta, alpha=ALPHA)
    check(result, approx_claim(probe.event, delta))


def threshold_event(sigma: float, tau: int, selection_delta: float):
    return mechanisms.gaussian_threshold(np.zeros(1, dtype=np.int64), sigma, tau, SecureRandom(0),
                                         delta=selection_delta).event


def own_partition_release_rate(sample, tau: int, n: int) -> float:
    """A (1 - ALPHA) lower confidence bound on how often a unit's own partition (sum tau, absent without it) appears."""
    released = int(np.count_nonzero(sample(tau, n) != NONE))
    return clopper_pearson_lower(released, n, ALPHA)


def test_gaussian_threshold_own_partition_appears_at_most_delta():
    sigma, tau, selection_delta = 2.0, 3, 0.02
    claim = Accountant().compose(threshold_event(sigma, tau, selection_delta)).delta(math.inf)
    assert claim == pytest.approx(selection_delta, rel=1e-12)  # the event's delta at eps = infinity
    assert own_partition_release_rate(threshold_sampler(sigma, tau, selection_delta, 106), tau, 200_000) <= claim


def test_flags_gaussian_threshold_without_the_unit_offset():
    sigma, tau, selection_delta = 2.0, 3, 0.02
    broken = threshold_sampler(sigma, tau, selection_delta, 114, offset=tau)  # cutoff no longer covers tau
    assert own_partition_release_rate(broken, tau, 200_000) > selection_delta


# ---- selections (one mechanism call per output) ----

D_EM = 20


def em_sampler(k: int, epsilon: float, sensitivity: float, method: str, seed: int, d: int = D_EM):
    rng = SecureRandom(seed)

    def run(scores):
        chosen = mechanisms.exponential_top_k(scores, k, epsilon, sensitivity, rng, method=method).value
        return sum(int(i) * d**pos for pos, i in enumerate(chosen))  # ordered tuple -> integer

    return loop_sampler(run)


def em_neighbours(d: int = D_EM):
    x = np.zeros(d)
    x_prime = x.copy()
    x_prime[0] = 1.0  # one score rises by the sensitivity (monotone scores: range = sensitivity)
    return x, x_prime


def test_exponential_top_1_gumbel():
    x, x_prime = em_neighbours()
    claim = pure_claim(mechanisms.exponential_top_k(x, 1, 1.0, 1.0, SecureRandom(0)).event)
    result = audit(em_sampler(1, 1.0, 1.0, "gumbel", 105), x, x_prime, n_search=4_000, n_estimate=20_000, alpha=ALPHA)
    check(result, claim)
    assert result.epsilon_lower > 0.6  # the true worst-case ratio here is log(20e / (e + 19)) = 0.92


def test_exponential_top_2_peel():
    d = 5
    x, x_prime = em_neighbours(d)
    claim = pure_claim(mechanisms.exponential_top_k(x, 2, 0.7, 1.0, SecureRandom(0)).event)
    result = audit(em_sampler(2, 0.7, 1.0, "peel", 106, d), x, x_prime, n_search=4_000, n_estimate=15_000, alpha=ALPHA)
    check(result, claim)


RNM = dict(sigma=0.3, sensitivity=0.2, lower=0.0, upper=1.0)


def test_gaussian_report_noisy_max():
    # Lebensold–Precup–Balle Lemma 16 worst case: D = (b - Delta, b - Delta, a + Delta), D' = (b, b, a)
    rng = SecureRandom(107)
    x = np.array([0.8, 0.8, 0.2])
    x_prime = np.array([1.0, 1.0, 0.0])
    claim = pure_claim(mechanisms.report_noisy_max(x, rng=rng, **RNM).event)
    sample = loop_sampler(lambda values: mechanisms.report_noisy_max(values, rng=rng, **RNM).value)
    check(audit(sample, x, x_prime, n_search=4_000, n_estimate=20_000, alpha=ALPHA), claim)


AT = dict(sigma_threshold=0.2, sigma_query=0.35, threshold=1.2)
AT_BOUNDS = dict(sensitivity=0.1, lower=0.0, upper=1.0)
AT_QUERIES = 10


def at_neighbours():
    # Lebensold–Precup–Balle Lemma 18 worst case for the all-BOT outcome: D' at b, D at b - Delta
    return np.full(AT_QUERIES, 0.9), np.full(AT_QUERIES, 1.0)


def stopped_claim(rng: SecureRandom) -> float:
    """The ex-post epsilon the real mechanism attaches to its all-BOT outcome, from a run that produced it."""
    x, _ = at_neighbours()
    while (release := mechanisms.above_threshold(x, rng=rng, **AT, **AT_BOUNDS)).value is not None:
        pass
    return release.ex_post_epsilon


def test_gaussian_above_threshold():
    rng = SecureRandom(108)
    x, x_prime = at_neighbours()
    release = mechanisms.above_threshold(x, rng=rng, **AT, **AT_BOUNDS)
    sample = loop_sampler(lambda values: mechanisms.above_threshold(values, rng=rng, **AT, **AT_BOUNDS).value)
    check(audit(sample, x, x_prime, n_search=3_000, n_estimate=12_000, alpha=ALPHA), pure_claim(release.event))
    # the per-outcome (ex-post) claim of the all-BOT outcome, which a filter relies on
    check(audit_outcome(sample, x, x_prime, NONE, n=20_000, alpha=ALPHA), stopped_claim(rng))


def test_laplace_report_noisy_max():
    # not monotone: one value rises and the other falls by the sensitivity
    rng = SecureRandom(109)
    claim = pure_claim(laplace_report_noisy_max([0.0, 0.0], 2.0, rng).event)
    sample = loop_sampler(lambda values: laplace_report_noisy_max(values, 2.0, rng).value)
    check(audit(sample, np.array([1.0, 0.0]), np.array([0.0, 1.0]), n_search=4_000, n_estimate=20_000, alpha=ALPHA), claim)


def test_laplace_above_threshold():
    rng = SecureRandom(110)
    claim = pure_claim(mechanisms.laplace_above_threshold([0.0], 2.0, 4.0, 2.0, rng).event)
    sample = loop_sampler(lambda values: mechanisms.laplace_above_threshold(values, 2.0, 4.0, 2.0, rng).value)
    check(audit(sample, np.zeros(5), np.ones(5), n_search=4_000, n_estimate=20_000, alpha=ALPHA), claim)


# ---- negative controls: the harness must flag these ----

def test_flags_above_threshold_without_threshold_noise():
    rng = SecureRandom(111)
    x, x_prime = at_neighbours()

    def broken(values):
        clipped = np.clip(values, AT_BOUNDS["lower"], AT_BOUNDS["upper"])
        tops = np.flatnonzero(clipped + AT["sigma_query"] * rng.standard_normal(clipped.size) >= AT["threshold"])
        return int(tops[0]) if tops.size else None

    claim = stopped_claim(rng)
    result = audit_outcome(loop_sampler(broken), x, x_prime, NONE, n=20_000, alpha=ALPHA)
    assert result.epsilon_lower > claim, f"{result}; claimed {claim:.4f}"


def test_flags_exponential_mechanism_with_half_sensitivity():
    x, x_prime = em_neighbours()
    claim = pure_claim(mechanisms.exponential_top_k(x, 1, 1.0, 1.0, SecureRandom(0)).event)
    result = audit(em_sampler(1, 1.0, 0.5, "gumbel", 112), x, x_prime, n_search=4_000, n_estimate=20_000, alpha=ALPHA)
    assert result.epsilon_lower > claim, f"{result}; claimed {claim:.4f}"


def test_flags_gaussian_with_too_small_sigma():
    claim_event = mechanisms.gaussian(np.zeros(1, dtype=np.int64), 1.0, SecureRandom(0), sensitivity=1.0).event
    delta = 1e-3
    result = audit(gaussian_sampler(0.5, 113), 0, 1, n_search=20_000, n_estimate=200_000, delta=delta, alpha=ALPHA)
    claim = approx_claim(claim_event, delta)
    assert result.epsilon_lower > claim, f"{result}; claimed {claim:.4f}"


# ---- distinct_threshold: selection on distinct units, value = unit_value * noisy units + noisy extra ----
# A counting job with unit_value 1 and linf 3: a unit adds 1 to a partition's units and 0..2 to its extra
# (records beyond its first). Sigmas at the planner's split for mu = 1.5 (`planning.distinct_sigmas`,
# share f = 1/3): mu_units^2 = mu^2 / 3, mu_extra^2 = 2 mu^2 / 3, so the extra carries two thirds of mu^2
# and the released value alone is as informative as the claimed mu.

DISTINCT = dict(unit_value=1, linf=3)
DISTINCT_MU = 1.5
DISTINCT_SIGMAS = (math.sqrt(3.0) / DISTINCT_MU, math.sqrt(6.0) / DISTINCT_MU)  # (sigma units, sigma extra)


def distinct_sampler(sigma: float, extra_sigma: float, selection_delta: float, seed: int):
    """n one-partition distinct_threshold releases on data = (units, sums): the released value or NONE."""
    rng = SecureRandom(seed)

    def sample(data, n):
        units, sums = data
        indices, values = mechanisms.distinct_threshold(
            np.full(n, units, dtype=np.int64), np.full(n, sums, dtype=np.int64), sigma, extra_sigma, rng,
            delta=selection_delta, **DISTINCT).value
        out = np.full(n, NONE)
        out[indices] = values
        return out

    return sample


def distinct_probe(selection_delta: float) -> mechanisms.Release:
    return mechanisms.distinct_threshold(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64), *DISTINCT_SIGMAS,
                                         SecureRandom(0), delta=selection_delta, **DISTINCT)


def distinct_neighbours(selection_delta: float):
    """Worst case on a partition both hold: x has units c, extra 2; x' has units c - 1, extra 0 (sums differ by linf).

    c is the cutoff, so whether the partition appears hinges on the unit.
    """
    count = int(round(distinct_probe(selection_delta).parameters["cutoff"]))
    extra_linf = DISTINCT["linf"] - DISTINCT["unit_value"]
    return (count, DISTINCT["unit_value"] * count + extra_linf), (count - 1, DISTINCT["unit_value"] * (count - 1))


def test_distinct_threshold_shared_partition():
    selection_delta, delta = 1e-4, 1e-3
    event = distinct_probe(selection_delta).event
    assert event.mu == pytest.approx(DISTINCT_MU, rel=1e-5)  # mu = hypot(mu_units, mu_extra) at the grid sensitivities
    x, x_prime = distinct_neighbours(selection_delta)
    result = audit(distinct_sampler(*DISTINCT_SIGMAS, selection_delta, 115), x, x_prime,
                   n_search=20_000, n_estimate=200_000, delta=delta, alpha=ALPHA)
    claim = approx_claim(event, delta)
    check(result, claim)
    assert result.epsilon_lower > 0.5 * claim  # the harness has power


def test_distinct_threshold_own_partition_appears_at_most_delta():
    selection_delta = 0.02
    claim = Accountant().compose(distinct_probe(selection_delta).event).delta(math.inf)
    assert claim == pytest.approx(selection_delta, rel=1e-12)
    own = (1, DISTINCT["linf"])  # one unit with the most records it may keep; absent without it
    assert own_partition_release_rate(distinct_sampler(*DISTINCT_SIGMAS, selection_delta, 116), own, 200_000) <= claim


def test_flags_distinct_threshold_claiming_the_units_part_alone():
    # broken claim: the event of the selection on units alone (gaussian_threshold, threshold 1), forgetting mu_extra
    selection_delta, delta = 1e-4, 1e-3
    units_only = mechanisms.gaussian_threshold(np.zeros(1, dtype=np.int64), DISTINCT_SIGMAS[0], 1, SecureRandom(0),
                                               delta=selection_delta).event
    x, x_prime = distinct_neighbours(selection_delta)
    result = audit(distinct_sampler(*DISTINCT_SIGMAS, selection_delta, 117), x, x_prime,
                   n_search=20_000, n_estimate=200_000, delta=delta, alpha=ALPHA)
    claim = approx_claim(units_only, delta)
    assert result.epsilon_lower > claim, f"{result}; claimed {claim:.4f}"
