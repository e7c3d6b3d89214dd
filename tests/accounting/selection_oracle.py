"""40-digit mpmath reference for the selection bounds (a test oracle; never imported by accounting/).

Evaluates log E_{x~N(0,1)}[prod_j Phi(s_j x + c_j)^{n_j}] independently of
accounting.selection: the mode by bisection on the derivative, breakpoints where
the log integrand has dropped by 0.5 k^2 (k = 1..11, up to 60.5) on each side
(both located at 20 digits: they only place the pieces), then mpmath's tanh-sinh
quadrature at full precision on every piece and the two infinite tails.
The quadrature's own error estimate is returned so tests can insist on it.
"""
from __future__ import annotations

import mpmath as mp

DIGITS = 40
_DROPS = [0.5 * k * k for k in range(1, 12)]
_PLACEMENT_DIGITS = 20


def log_gaussian_expectation(terms, digits=DIGITS):
    """(log E, relative error estimate) for terms = [(n, s, c), ...], at `digits` significant digits."""
    def h(x):
        value = -x * x / 2
        for n, s, c in params:
            value += n * mp.log(mp.ncdf(s * x + c))
        return value

    def slope(x):
        value = -x
        for n, s, c in params:
            u = s * x + c
            value += n * s * mp.npdf(u) / mp.ncdf(u)
        return value

    with mp.workdps(_PLACEMENT_DIGITS):
        params = [(mp.mpf(n), mp.mpf(s), mp.mpf(c)) for n, s, c in terms if n != 0]
        lo, hi = mp.mpf(-1), mp.mpf(1)
        while slope(lo) < 0:
            lo *= 2
        while slope(hi) > 0:
            hi *= 2
        for _ in range(60):
            mid = (lo + hi) / 2
            if slope(mid) > 0:
                lo = mid
            else:
                hi = mid
        mode = (lo + hi) / 2
        peak = h(mode)
        points = [mode]
        for side in (-1, 1):
            for drop in _DROPS:
                near, far = mp.mpf(0), mp.mpf(1)
                while peak - h(mode + side * far) < drop:
                    far *= 2
                for _ in range(20):
                    mid = (near + far) / 2
                    if peak - h(mode + side * mid) < drop:
                        near = mid
                    else:
                        far = mid
                points.append(mode + side * far)
    with mp.workdps(digits):
        params = [(mp.mpf(n), mp.mpf(s), mp.mpf(c)) for n, s, c in terms if n != 0]
        points = [-mp.inf] + sorted(mp.mpf(p) for p in points) + [mp.inf]
        peak = h(mp.mpf(mode))
        value, error = mp.quad(lambda x: mp.exp(h(x) - peak), points, error=True)
        log_value = peak + mp.log(value) - mp.log(mp.sqrt(2 * mp.pi))
        return log_value, error / value


def report_noisy_max_epsilon(d, sigma, sensitivity, lower=0.0, upper=1.0, digits=DIGITS):
    """LPB Thm 8 at `digits` digits: (epsilon, largest relative quadrature error estimate)."""
    with mp.workdps(digits):
        width = mp.mpf(upper) - mp.mpf(lower)
        num, e1 = log_gaussian_expectation([(d - 1, 1, -(width - 2 * mp.mpf(sensitivity)) / mp.mpf(sigma))], digits)
        den, e2 = log_gaussian_expectation([(d - 1, 1, -width / mp.mpf(sigma))], digits)
        return num - den, max(e1, e2)


def above_threshold_expost_epsilon(
    t, sigma_threshold, sigma_query, threshold, sensitivity, lower=0.0, upper=1.0, halted=True, digits=DIGITS
):
    """LPB Thm 17 / Lemma 18 worst case (halted) or its BOT^t analogue, at `digits` digits."""
    with mp.workdps(digits):
        sx, sz, rho = mp.mpf(sigma_threshold), mp.mpf(sigma_query), mp.mpf(threshold)
        a, b, delta = mp.mpf(lower), mp.mpf(upper), mp.mpf(sensitivity)
        r = sx / sz

        def terms(shift):
            if halted:
                return [(t - 1, r, (rho - b + shift) / sz), (1, -r, (a - rho + shift) / sz)]
            return [(t, r, (rho - b + shift) / sz)]

        num, e1 = log_gaussian_expectation(terms(delta), digits)
        den, e2 = log_gaussian_expectation(terms(0), digits)
        return num - den, max(e1, e2)


# ----------------------------------------------------------------------------
# Reference grids. The full grids span the ranges the project needs (t up to
# 10^4, d up to 10^5, sensitivity down to 1e-5, sigmas 0.02 to 1, thresholds
# 0.1 to 0.9); `representative` picks a fixed-seed subset plus the extremes.

SQRT3 = 3.0**0.5
EXPOST_T = (1, 2, 10, 100, 1000, 10000)
EXPOST_SIGMAS = ((0.02, 0.02 * SQRT3), (0.1, 0.1 * SQRT3), (1.0, SQRT3), (0.02, 1.0), (1.0, 0.02), (0.3, 0.3))
THRESHOLDS = (0.1, 0.5, 0.9)
SENSITIVITIES = (1e-5, 1e-3, 0.1)
RNM_D = (2, 3, 10, 100, 1000, 10000, 100000)
RNM_SIGMAS = (0.02, 0.1, 0.3, 1.0)
RNM_SENSITIVITIES = (1e-5, 1e-3, 0.1, 0.5)


def expost_grid():
    """Every (t, sigma_threshold, sigma_query, threshold, sensitivity, halted) of the full ex-post grid."""
    return [
        (t, sx, sz, rho, delta, halted)
        for t in EXPOST_T
        for sx, sz in EXPOST_SIGMAS
        for rho in THRESHOLDS
        for delta in SENSITIVITIES
        for halted in (True, False)
    ]


def rnm_grid():
    """Every (d, sigma, sensitivity) of the full report-noisy-max grid."""
    return [(d, sigma, delta) for d in RNM_D for sigma in RNM_SIGMAS for delta in RNM_SENSITIVITIES]


def representative(grid, size, seed):
    """A fixed-seed subset of `size` rows that always contains the first and last row."""
    import random

    rng = random.Random(seed)
    middle = rng.sample(range(1, len(grid) - 1), size - 2)
    return [grid[0]] + [grid[i] for i in sorted(middle)] + [grid[-1]]


def reference_rows(expost_rows, rnm_rows):
    """Oracle values (as 40-digit strings) for the given rows, ready for JSON."""
    rows = []
    for t, sx, sz, rho, delta, halted in expost_rows:
        value, error = above_threshold_expost_epsilon(t, sx, sz, rho, delta, halted=halted)
        rows.append({"bound": "expost", "t": t, "sigma_threshold": sx, "sigma_query": sz, "threshold": rho,
                     "sensitivity": delta, "halted": halted, "epsilon": mp.nstr(value, DIGITS),
                     "quadrature_error": float(error)})
    for d, sigma, delta in rnm_rows:
        value, error = report_noisy_max_epsilon(d, sigma, delta)
        rows.append({"bound": "rnm", "d": d, "sigma": sigma, "sensitivity": delta,
                     "epsilon": mp.nstr(value, DIGITS), "quadrature_error": float(error)})
    return rows


FIXTURE = "tests/accounting/data/selection_reference.json"


def main():
    """Write the representative fixture the fast tests compare against (a few minutes)."""
    import json
    import os

    rows = reference_rows(representative(expost_grid(), 80, seed=3), representative(rnm_grid(), 40, seed=3))
    os.makedirs(os.path.dirname(FIXTURE), exist_ok=True)
    with open(FIXTURE, "w") as handle:
        json.dump({"digits": DIGITS, "rows": rows}, handle, indent=1)
    print(f"wrote {len(rows)} reference rows to {FIXTURE}")


if __name__ == "__main__":
    main()
