"""Falsification of the whole sparse-vector monitor on neighbouring streams, and a broken variant flagged.

Streams of four windows; neighbours differ by the sensitivity in every
window, at the worst case of Lebensold–Precup–Balle Lemma 18 (BOT windows at
the top of [0, 1], TOP windows at the bottom). The outcome audited is the
alert pattern TOP, BOT, TOP, BOT: the FSRC filter charges it the ex-post
losses eps_post(1) + eps_post(1) + BOT^1 closing, and LPB Thm 11 rests on
that per-outcome claim, so the estimated log-probability ratio of the outcome
must not exceed it. The broken variant keeps the noisy threshold after a TOP
(no fresh threshold noise per instance) but claims the same charges; the
harness must find a ratio above them.
False-alarm rate: each audit errs with probability at most ALPHA = 1e-3
(fixed seeds, so runs are reproducible).
"""
from __future__ import annotations

import numpy as np

from dpstream.pipelines.mechanisms.monitor import SparseVectorMonitor, _expost_epsilon
from dpstream.pipelines.mechanisms.noise import SecureRandom
from tests.falsification.harness import audit_outcome

ALPHA = 1e-3
SIGMA, SENSITIVITY, THRESHOLD = 0.3, 0.3, 0.5
PATTERN = (1, 0, 1, 0)
X = np.array([0.0 if top else 1.0 for top in PATTERN])  # D: the pattern's worst case
X_PRIME = np.array([SENSITIVITY if top else 1.0 - SENSITIVITY for top in PATTERN])  # D': every window moved by Delta
CODE = float(sum(bit << i for i, bit in enumerate(PATTERN)))


def _claim() -> float:
    """What the monitor's FSRC filter charges the pattern (TOP, BOT TOP, then BOT closed at the end)."""
    sigma_query = SIGMA * np.sqrt(3.0)
    tops = _expost_epsilon(1, SIGMA, sigma_query, THRESHOLD, SENSITIVITY, True) + \
        _expost_epsilon(2, SIGMA, sigma_query, THRESHOLD, SENSITIVITY, True)
    return tops + _expost_epsilon(1, SIGMA, sigma_query, THRESHOLD, SENSITIVITY, False)


def _encode(alerts) -> float:
    return float(sum(int(bit) << i for i, bit in enumerate(alerts)))


def test_whole_monitor_within_its_ex_post_charges():
    rng = SecureRandom(2031)

    # One monitor with a budget it never reaches; `close()` after each stream of four windows ends the open
    # instance, so every stream starts a fresh instance with fresh noise: independent runs of the whole monitor.
    monitor = SparseVectorMonitor(THRESHOLD, SIGMA, SENSITIVITY, 1e9, 1e-6, rng=rng)

    def sample(values, n):
        out = np.empty(n)
        for i in range(n):
            outputs = [monitor.process(value) for value in values]
            monitor.close()
            out[i] = _encode(o.alert for o in outputs)
        assert not monitor.halted
        return out

    result = audit_outcome(sample, X, X_PRIME, CODE, n=30_000, alpha=ALPHA)
    assert result.epsilon_lower <= _claim(), f"{result}; claimed {_claim():.4f}"


def _broken_sample(seed: int):
    """The monitor's outputs without a threshold refresh after TOP, vectorised (n runs at once)."""
    generator = np.random.default_rng(seed)

    def sample(values, n):
        threshold = THRESHOLD + SIGMA * generator.standard_normal(n)  # drawn once, kept after every TOP
        code = np.zeros(n)
        for window, value in enumerate(values):
            top = value + SIGMA * np.sqrt(3.0) * generator.standard_normal(n) >= threshold
            code += top * float(1 << window)
        return code

    return sample


def test_flags_monitor_without_threshold_refresh():
    claim = _claim()
    result = audit_outcome(_broken_sample(2032), X, X_PRIME, CODE, n=3_000_000, alpha=ALPHA)
    assert result.epsilon_lower > claim, f"{result}; claimed {claim:.4f}"
