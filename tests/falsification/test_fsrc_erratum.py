"""The FSRC erratum, computed exactly: the published rule leaks on the counterexample, dpstream's filter does not.

Counterexample (docs/proofs/accounting.filters.fsrc.FSRCFilter.md): mechanism M(d) outputs "bad" with probability d
on D and d e^-B on D', "ok" otherwise. It is (e_ok(d), d)-pDP with e_ok(d) = log((1 - d e^-B) / (1 - d)), and
its ex-post losses are B ("bad") and e_ok(d) ("ok"). An analyst runs M(d_t) at step t, with d_t the delta the
filter's rule gives instance t, for as long as the filter admits it (or up to a horizon).

The whole run's output is ok^k bad (the filter halts after "bad", since B > epsilon) or ok^K (the filter halted,
or the horizon was reached). Both distributions are products of known factors, so the run's privacy profile
delta(epsilon) = sum over outputs of max(0, P_D(o) - e^epsilon P_D'(o)) (and the same with D, D' swapped) is
computed exactly, in log space, by walking the all-"ok" path of the real filter object.

- Published rule (Lebensold–Precup–Balle Thm 11): every instance at d = delta, delta charged once. The filter
  admits about epsilon/delta instances and the run's true delta(epsilon) is about 1 - e^-epsilon: 0.632 for a
  (1, 1e-6) budget, 0.095 for (0.1, 1e-6). Flagged: far above the claimed delta.
- dpstream's `FSRCFilter` with the `basel_delta` schedule: d_t = delta 6 / (pi^2 t^2), deltas adding up. The
  run's delta(epsilon) stays within delta at every horizon, and is close to it (the bound is nearly tight).
No randomness: exact values, so no false-alarm rate.
"""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from dpstream.accounting.filters import FSRCFilter
from dpstream.accounting.filters.fsrc import basel_delta

B = 50.0  # ex-post loss of "bad"; above every epsilon below, so the filter halts after a "bad"


def ok_loss(d: float) -> float:
    """e_ok(d) = log((1 - d e^-B) / (1 - d)) rounded up: the pDP epsilon at d and the ex-post loss of "ok"."""
    return math.nextafter(math.log1p(-d * math.exp(-B)) - math.log1p(-d), math.inf)


class PublishedFSRC(FSRCFilter):
    """LPB Thm 11 as printed: every instance is (eps_max, delta)-pDP at the filter's own delta, charged once."""

    def admits(self, eps_max: float, delta: float) -> bool:
        return super().admits(eps_max, 0.0)


def published_schedule(delta: float, _instance: int) -> float:
    return delta


def run_deltas(filter_: FSRCFilter, schedule, horizon: int) -> np.ndarray:
    """The deltas d_1..d_K of the instances the filter admits on the all-"ok" path (K <= horizon)."""
    deltas = []
    for t in range(1, horizon + 1):
        d = schedule(filter_.delta, t)
        if not filter_.admits(ok_loss(d), d):
            break
        deltas.append(d)
        filter_.charge(ok_loss(d))
    return np.asarray(deltas)


def exact_profile(deltas: np.ndarray, epsilon: float) -> float:
    """max over both directions of sum_o max(0, P(o) - e^epsilon Q(o)) over the run's outputs (log space)."""
    log_ok_d = np.concatenate([[0.0], np.cumsum(np.log1p(-deltas))])  # log P_D(ok^k), k = 0..K
    log_ok_d2 = np.concatenate([[0.0], np.cumsum(np.log1p(-deltas * math.exp(-B)))])  # log P_D'(ok^k)
    log_bad_d = log_ok_d[:-1] + np.log(deltas)  # ok^(t-1) bad, t = 1..K
    log_bad_d2 = log_ok_d2[:-1] + np.log(deltas) - B
    log_p = np.concatenate([log_bad_d, log_ok_d[-1:]])
    log_q = np.concatenate([log_bad_d2, log_ok_d2[-1:]])

    def one_way(log_p, log_q):
        gap = np.exp(log_p) * -np.expm1(np.minimum(epsilon + log_q - log_p, 0.0))
        return float(math.fsum(gap))

    return max(one_way(log_p, log_q), one_way(log_q, log_p))


@pytest.mark.parametrize("epsilon, delta, expected", [(1.0, 1e-6, 0.632), (0.1, 1e-6, 0.095)])
def test_published_rule_is_far_above_its_claimed_delta(epsilon, delta, expected):
    deltas = run_deltas(PublishedFSRC(epsilon, delta), published_schedule, horizon=10**7)
    assert 0.9 * epsilon / delta < deltas.size < 1.1 * epsilon / delta  # about epsilon / delta instances
    true_delta = exact_profile(deltas, epsilon)
    assert true_delta == pytest.approx(-math.expm1(-epsilon), rel=2e-3) and round(true_delta, 3) == expected
    assert true_delta > 1e4 * delta  # flagged: the claim (epsilon, delta) is false


@pytest.mark.parametrize("epsilon, delta", [(1.0, 1e-6), (0.1, 1e-6), (1.0, 1e-3)])
@pytest.mark.parametrize("horizon", [10, 1_000, 100_000])
def test_dpstream_filter_stays_within_its_delta_on_the_counterexample(epsilon, delta, horizon):
    deltas = run_deltas(FSRCFilter(epsilon, delta), basel_delta, horizon)
    assert deltas.size == horizon  # tiny ex-post losses: only the horizon stops the run
    true_delta = exact_profile(deltas, epsilon)
    assert true_delta <= delta
    # Nearly tight: the run leaks almost all of the deltas it was given.
    assert true_delta >= 0.99 * math.fsum(deltas) * -math.expm1(epsilon - B)


def test_exact_profile_agrees_with_mpmath_enumeration():
    """The log-space profile against a direct 50-digit sum over the outputs of a short published-rule run."""
    epsilon, delta = 0.5, 1e-3
    deltas = run_deltas(PublishedFSRC(epsilon, delta), published_schedule, horizon=10**5)
    assert 400 < deltas.size < 600
    with mpmath.workdps(50):
        e_b, e_eps = mpmath.exp(-B), mpmath.exp(epsilon)
        outputs, p_ok, q_ok = [], mpmath.mpf(1), mpmath.mpf(1)
        for d in map(mpmath.mpf, deltas):
            outputs.append((p_ok * d, q_ok * d * e_b))  # ok^(t-1) bad on D and on D'
            p_ok, q_ok = p_ok * (1 - d), q_ok * (1 - d * e_b)
        outputs.append((p_ok, q_ok))
        forward = mpmath.fsum(max(0, p - e_eps * q) for p, q in outputs)
        backward = mpmath.fsum(max(0, q - e_eps * p) for p, q in outputs)
        assert exact_profile(deltas, epsilon) == pytest.approx(float(max(forward, backward)), rel=1e-10)
