"""Pure DP of Gaussian report-noisy-max on bounded queries (Lebensold–Precup–Balle 2024, Thm 8 = Thm 12)."""
from __future__ import annotations

import numpy as np

from dpstream.accounting.selection.arguments import require_counts, require_positive, require_range
from dpstream.accounting.selection.quadrature import log_gaussian_expectation, rounded_up_log_ratio


def report_noisy_max_epsilon(d, sigma, sensitivity, lower=0.0, upper=1.0):
    """Pure DP epsilon of Gaussian report-noisy-max over d queries with values in [lower, upper].

    M(D) = argmax_i q_i(D) + Z_i with Z_i ~ N(0, sigma^2) independent.

    Privacy: epsilon-DP, for neighbours on which every query moves by at most
    `sensitivity`; epsilon = log of the largest ratio Pr[M(D)=i] / Pr[M(D')=i].
    Proof: Lebensold–Precup–Balle 2024, Thm 8 (= Thm 12): with c = upper - lower,
        epsilon = log E[Phi(z - (c - 2 Delta)/sigma)^(d-1)] - log E[Phi(z - c/sigma)^(d-1)],
    z ~ N(0, 1); the paper prints the ratio, its log is the privacy parameter.
    Lemma 13 reduces every neighbouring pair to that ratio with free offsets,
    Lemma 16 puts the supremum at q_1..q_{d-1} = upper - Delta, q_d = lower + Delta
    on D and upper, lower on D'; the value is attained, so the bound is tight.
    Checks: d integer(s) >= 2; sigma > 0; lower < upper; 0 <= sensitivity <= upper - lower.
    Caller must ensure: every query maps into [lower, upper] (clip before adding
    noise) and has sensitivity at most `sensitivity`; the noise is fresh.
    Numerics: log-space adaptive Gauss–Legendre (module docstring); before
    rounding up it agrees with 40-digit mpmath to 1e-10 relative on the test
    grid (d up to 10^5), after rounding within 2e-7 and never below.
    Runtime: about 0.08 ms per call; `d` may be a numpy array (vectorised,
    about 0.03 ms per d value).
    Returns a float for scalar d, else an array shaped like d.
    """
    owner = "report_noisy_max_epsilon"
    counts, shape = require_counts(owner, "d", d, 2)
    sigma = require_positive(owner, "sigma", sigma)
    sensitivity, lower, upper = require_range(owner, sensitivity, lower, upper)
    width = upper - lower
    size = counts.size
    n = np.concatenate([counts, counts])[:, None] - 1.0
    c = np.empty_like(n)
    c[:size] = -(width - 2.0 * sensitivity) / sigma
    c[size:] = -width / sigma
    log_values = log_gaussian_expectation(n, np.ones_like(n), c)
    return rounded_up_log_ratio(log_values[:size], log_values[size:], shape)
