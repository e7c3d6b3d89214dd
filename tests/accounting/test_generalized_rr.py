import mpmath
import numpy as np
import pytest

from dpstream.accounting.bounds import generalized_rr as rr


def mp_probs(eps, t):
    mpmath.mp.dps = 40
    eps, t = mpmath.mpf(eps), mpmath.mpf(t)
    den = 1 - mpmath.exp(-eps)
    q = (1 - mpmath.exp(t - eps)) / den
    p = (mpmath.exp(-t) - mpmath.exp(-eps)) / den
    return p, 1 - p, q, 1 - q


@pytest.mark.parametrize("eps", [1e-6, 0.01, 0.1, 1.0, 5.0, 30.0])
@pytest.mark.parametrize("frac", [0.0, 1e-9, 0.25, 0.5, 0.9, 1.0])
def test_log_probabilities_match_mpmath(eps, frac):
    t = eps * frac
    ours = [rr.log_p(eps, t), rr.log_one_minus_p(eps, t), rr.log_q(eps, t), rr.log_one_minus_q(eps, t)]
    for mine, exact in zip(ours, mp_probs(eps, t)):
        if exact == 0:
            assert mine == -np.inf
        else:
            assert float(mine) == pytest.approx(float(mpmath.log(exact)), rel=1e-10, abs=1e-12)


def test_identities_and_standard_rr():
    eps, t = 0.7, np.linspace(0, 0.7, 11)
    assert np.allclose(rr.log_q(eps, t), t + rr.log_p(eps, t))
    assert np.allclose(np.exp(rr.log_q(eps, t)) + np.exp(rr.log_one_minus_q(eps, t)), 1.0)
    # RR_{2e, e} is epsilon-DP randomized response.
    assert np.exp(rr.log_q(2 * 0.3, 0.3)) == pytest.approx(np.exp(0.3) / (1 + np.exp(0.3)))
