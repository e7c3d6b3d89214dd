"""Selection bounds against a 40-digit mpmath oracle, plus the Zhu–Wang RDP bound and argument checks.

The oracle values for a representative grid (80 ex-post rows: t from 1 to 10^4,
sigmas 0.02 to 1 and sqrt(3) times that, thresholds 0.1 to 0.9, sensitivity
down to 1e-5, halted or not; 40 report-noisy-max rows: d from 2 to 10^5) are
stored in data/selection_reference.json, written by
`python -m tests.accounting.selection_oracle`; three of them are recomputed
live here so the fixture cannot drift from its generator. The full grid runs
with `python -m benchmarks.selection --full-grid`.
"""
import json
import math
import pathlib

import mpmath as mp
import numpy as np
import pytest

from dpstream.accounting.selection import (
    above_threshold_expost_epsilon,
    above_threshold_pdp_epsilon,
    above_threshold_rdp,
    report_noisy_max_epsilon,
)
from tests.accounting import selection_oracle

FIXTURE = json.loads((pathlib.Path(__file__).parent / "data" / "selection_reference.json").read_text())
ROWS = FIXTURE["rows"]
SQRT3 = math.sqrt(3.0)


def _fast(row):
    if row["bound"] == "expost":
        return above_threshold_expost_epsilon(
            row["t"], row["sigma_threshold"], row["sigma_query"], row["threshold"], row["sensitivity"],
            halted=row["halted"],
        )
    return report_noisy_max_epsilon(row["d"], row["sigma"], row["sensitivity"])


def test_fixture_covers_the_required_ranges():
    expost = [r for r in ROWS if r["bound"] == "expost"]
    rnm = [r for r in ROWS if r["bound"] == "rnm"]
    assert FIXTURE["digits"] == 40
    assert {1, 10000} <= {r["t"] for r in expost}
    assert {2, 100000} <= {r["d"] for r in rnm}
    assert min(r["sensitivity"] for r in ROWS) == 1e-5
    assert {True, False} == {r["halted"] for r in expost}
    assert {0.1, 0.9} <= {r["threshold"] for r in expost}
    sigmas = {r["sigma_threshold"] for r in expost} | {r["sigma_query"] for r in expost} | {r["sigma"] for r in rnm}
    assert min(sigmas) == 0.02 and max(sigmas) >= 1.0
    assert all(r["quadrature_error"] < 1e-30 for r in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: "-".join(f"{k}={v}" for k, v in r.items() if k not in ("epsilon", "quadrature_error")))
def test_agrees_with_40_digit_reference_and_never_undershoots(row):
    with mp.workdps(40):
        exact = mp.mpf(row["epsilon"])
    value = _fast(row)
    assert value >= exact
    assert (value - exact) / exact <= 1e-6


@pytest.mark.parametrize("index", [0, 41, len(ROWS) - 1])
def test_fixture_matches_the_oracle_recomputed_live(index):
    row = ROWS[index]
    if row["bound"] == "expost":
        value, error = selection_oracle.above_threshold_expost_epsilon(
            row["t"], row["sigma_threshold"], row["sigma_query"], row["threshold"], row["sensitivity"],
            halted=row["halted"],
        )
    else:
        value, error = selection_oracle.report_noisy_max_epsilon(row["d"], row["sigma"], row["sensitivity"])
    assert error < 1e-30
    with mp.workdps(40):
        assert abs(value - mp.mpf(row["epsilon"])) <= mp.mpf(10) ** -30 * abs(value)


def test_vectorised_over_t_equals_scalar_calls():
    ts = np.array([1, 3, 17, 250, 4000, 10000])
    args = (0.1, 0.1 * SQRT3, 0.6, 1e-3)
    for halted in (True, False):
        together = above_threshold_expost_epsilon(ts, *args, halted=halted)
        assert together.shape == ts.shape
        alone = [above_threshold_expost_epsilon(int(t), *args, halted=halted) for t in ts]
        np.testing.assert_allclose(together, alone, rtol=1e-11)
    grid = above_threshold_expost_epsilon(ts.reshape(2, 3), *args)
    assert grid.shape == (2, 3)


def test_vectorised_over_d_equals_scalar_calls():
    ds = np.array([2, 5, 100, 100000])
    together = report_noisy_max_epsilon(ds, 0.05, 1e-4)
    np.testing.assert_allclose(together, [report_noisy_max_epsilon(int(d), 0.05, 1e-4) for d in ds], rtol=1e-11)


def test_scalars_give_floats():
    assert isinstance(above_threshold_expost_epsilon(5, 0.1, 0.2, 0.5, 0.01), float)
    assert isinstance(report_noisy_max_epsilon(5, 0.1, 0.01), float)
    assert isinstance(above_threshold_rdp(2.0, 0.1, 0.2, 0.5, 0.01), float)


def test_zero_sensitivity_costs_nothing():
    assert report_noisy_max_epsilon(10, 0.1, 0.0) == pytest.approx(0.0, abs=1e-10)
    assert above_threshold_expost_epsilon(10, 0.1, 0.2, 0.5, 0.0) == pytest.approx(0.0, abs=1e-10)
    assert above_threshold_pdp_epsilon(1e-6, 0.1, 0.2, 0.5, 0.0) == 0.0


def test_extreme_counts_stay_finite():
    """t = 10^6 and d = 10^7: powers of Phi far below float range, handled in log space."""
    value = above_threshold_expost_epsilon(10**6, 0.02, 0.02 * SQRT3, 0.9, 1e-5)
    assert math.isfinite(value) and value > 0
    value = report_noisy_max_epsilon(10**7, 0.02, 1e-5)
    assert math.isfinite(value) and value > 0


def test_shifting_the_range_and_threshold_changes_nothing():
    base = above_threshold_expost_epsilon(7, 0.2, 0.3, 0.4, 0.05)
    shifted = above_threshold_expost_epsilon(7, 0.2, 0.3, 10.4, 0.05, lower=10.0, upper=11.0)
    assert shifted == pytest.approx(base, rel=1e-10)


def test_ex_post_loss_grows_with_the_sensitivity():
    values = [above_threshold_expost_epsilon(20, 0.1, 0.2, 0.5, delta) for delta in (1e-4, 1e-3, 1e-2, 1e-1)]
    assert values == sorted(values)


# ----------------------------------------------------------------------------
# Zhu–Wang RDP (LPB Thm 6 with the exact worst-case stopping-time moment) and its pDP conversion.


def _mp_log_moment(gamma, rho, sx, sz):
    """log E_x[Phi(-(rho + sx x)/sz)^-gamma], x ~ N(0, 1), by the 40-digit oracle (its integrand is log-concave too)."""
    value, error = selection_oracle.log_gaussian_expectation([(-gamma, -sx / sz, -rho / sz)])
    assert error < 1e-30
    return float(value)


def _thm7_log_moment(rho, sx):
    m = rho**2 / sx**2
    return float(np.logaddexp(0.0, math.log(2 * math.sqrt(3) * math.pi * (1 + 9 * m)) + m))


@pytest.mark.parametrize(
    "gamma, rho, sx, sz",
    [(2.0, 0.0, 0.1, 0.1 * SQRT3), (2.0, 0.5, 0.1, 0.1 * SQRT3), (2.0, 0.3, 0.2, 0.5), (1.05, 0.9, 0.3, 0.6), (3.9, 0.9, 0.3, 0.6), (2.9, 0.33, 0.04, 0.04 * SQRT3)],
)
def test_rdp_is_thm6_with_the_exact_stopping_moment(gamma, rho, sx, sz):
    alpha, delta = 4.0, 0.01
    expected = (
        gamma / (gamma - 1) * alpha * delta**2 / (2 * sx**2)
        + 2 * alpha * delta**2 / sz**2
        + _mp_log_moment(gamma, rho, sx, sz) / (gamma * (alpha - 1))
    )
    value = above_threshold_rdp(alpha, sx, sz, rho, delta, gamma=gamma)
    assert value >= expected
    assert value == pytest.approx(expected, rel=1e-8)
    # `lower` shifts queries and threshold together.
    assert above_threshold_rdp(alpha, sx, sz, rho + 3, delta, lower=3.0, gamma=gamma) == pytest.approx(value, rel=1e-10)
    np.testing.assert_allclose(
        above_threshold_rdp(np.array([alpha, 2 * alpha]), sx, sz, rho, delta, gamma=gamma),
        [value, above_threshold_rdp(2 * alpha, sx, sz, rho, delta, gamma=gamma)],
    )


def test_printed_thm7_moment_undershoots_near_the_threshold_floor():
    """LPB Thm 7's closed form is below the moment it bounds at threshold = lower, sz = sqrt(3) sx (why it is not used)."""
    exact = _mp_log_moment(2.0, 0.0, 0.1, 0.1 * SQRT3)
    assert math.exp(exact) == pytest.approx(12.9643616, rel=1e-7)
    assert math.exp(_thm7_log_moment(0.0, 0.1)) == pytest.approx(11.8827962, rel=1e-7)


@pytest.mark.parametrize("ratio", [0.4, 1.0, 3.3, 6.4, 20.0, 80.0])
def test_exact_moment_is_never_looser_than_thm7_where_thm7_holds(ratio):
    """For (threshold - lower)/sx >= 0.4 at sz = sqrt(3) sx the exact RDP is at most the printed Thm 7 value."""
    sx, sz, delta, alpha = 0.1, 0.1 * SQRT3, 1e-3, 3.0
    rho = ratio * sx
    thm7 = alpha * delta**2 / sx**2 + 2 * alpha * delta**2 / sz**2 + _thm7_log_moment(rho, sx) / (2 * (alpha - 1))
    assert above_threshold_rdp(alpha, sx, sz, rho, delta) <= thm7


def test_rdp_does_not_overflow_for_a_far_threshold():
    value = above_threshold_rdp(2.0, 0.01, 0.02, 0.9, 1e-3)  # (rho/sx)^2 = 8100: e^8100 overflows
    assert math.isfinite(value) and value > 1000


@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-10])
@pytest.mark.parametrize("sx, rho, sensitivity", [(0.1, 0.5, 1e-3), (0.05, 0.33, 1 / 5564), (0.5, 0.1, 0.05)])
def test_pdp_is_the_minimum_over_alpha(delta, sx, rho, sensitivity):
    sz = sx * SQRT3
    value = above_threshold_pdp_epsilon(delta, sx, sz, rho, sensitivity, gamma=2.0)
    alphas = 1 + np.logspace(-4, 6, 200001)
    curve = above_threshold_rdp(alphas, sx, sz, rho, sensitivity) + math.log(1 / delta) / (alphas - 1)
    assert value <= curve.min() * (1 + 1e-12)  # the closed-form optimum is below every grid point
    assert value >= curve.min() * (1 - 1e-8)  # and the grid comes within its spacing of it
    optimised = above_threshold_pdp_epsilon(delta, sx, sz, rho, sensitivity)
    assert optimised <= value
    for gamma in (1.1, 1.5, 2.5, 2.9):  # the gamma grid is a minimum over valid choices
        assert optimised <= above_threshold_pdp_epsilon(delta, sx, sz, rho, sensitivity, gamma=gamma) * (1 + 0.05)


# ----------------------------------------------------------------------------
# Argument checks: one line, the rule and the value received.


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: report_noisy_max_epsilon(1, 0.1, 0.01), "d must be an integer >= 2"),
        (lambda: report_noisy_max_epsilon(2.5, 0.1, 0.01), "d must be an integer >= 2"),
        (lambda: report_noisy_max_epsilon(3, 0.0, 0.01), "sigma must be a positive finite number, got 0.0"),
        (lambda: report_noisy_max_epsilon(3, 0.1, 2.0), r"sensitivity must lie in \[0, upper - lower\]"),
        (lambda: report_noisy_max_epsilon(3, 0.1, 0.1, lower=1.0, upper=1.0), "upper must exceed lower"),
        (lambda: above_threshold_expost_epsilon(0, 0.1, 0.2, 0.5, 0.01), "t must be an integer >= 1"),
        (lambda: above_threshold_expost_epsilon(np.array([2, -1]), 0.1, 0.2, 0.5, 0.01), "t must be an integer >= 1"),
        (lambda: above_threshold_expost_epsilon(3, -0.1, 0.2, 0.5, 0.01), "sigma_threshold must be a positive"),
        (lambda: above_threshold_expost_epsilon(3, 0.1, math.inf, 0.5, 0.01), "sigma_query must be a positive"),
        (lambda: above_threshold_expost_epsilon(3, 0.1, 0.2, math.nan, 0.01), "threshold must be a finite number"),
        (lambda: above_threshold_expost_epsilon(3, 0.1, 0.2, 0.5, 0.01, halted="yes"), "halted must be True or False"),
        (lambda: above_threshold_rdp(1.0, 0.1, 0.2, 0.5, 0.01), "alpha must be a finite number > 1"),
        (lambda: above_threshold_rdp(2.0, 0.1, 0.14, 0.5, 0.01), r"gamma must lie in \(1, \(sigma_query/sigma_threshold\)\^2\)"),
        (lambda: above_threshold_rdp(2.0, 0.1, 0.2, 0.5, 0.01, gamma=1.0), "gamma must lie in"),
        (lambda: above_threshold_rdp(2.0, 0.1, 0.2, 0.5, -0.01), "sensitivity must be >= 0"),
        (lambda: above_threshold_pdp_epsilon(0.0, 0.1, 0.2, 0.5, 0.01), r"delta must lie in \(0, 1\), got 0.0"),
        (lambda: above_threshold_pdp_epsilon(1e-6, 0.1, 0.1, 0.5, 0.01), "needs sigma_query > sigma_threshold"),
    ],
)
def test_bad_arguments_are_rejected_in_one_line(call, message):
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert "\n" not in str(info.value)
