"""Generalized randomized response RR_{epsilon,t}, the worst case of an epsilon-BR mechanism.

Dong–Durfee–Rogers, Def 2.4 (also Cesar–Rogers, Def 2.4), for t in [0, epsilon]:
    q_t = Pr[RR(0)=0] = (1 - e^{t-eps}) / (1 - e^{-eps})
    p_t = Pr[RR(1)=0] = (e^{-t} - e^{-eps}) / (1 - e^{-eps})
with q_t = e^t p_t and 1 - q_t = e^{t-eps} (1 - p_t). Standard epsilon-DP
randomized response is RR_{2 eps, eps}.
Numerics: every probability in log space via expm1, accurate for epsilon down to
1e-12 and t at either end of [0, epsilon]. Functions accept numpy arrays for t.
"""
from __future__ import annotations

import numpy as np


def _log_one_minus_exp_neg(x):
    """log(1 - e^{-x}) for x >= 0 (-inf at 0)."""
    with np.errstate(divide="ignore"):
        return np.log(-np.expm1(-np.asarray(x, dtype=float)))


def log_p(epsilon: float, t):
    """log p_{eps,t} = log Pr[RR_{eps,t}(1) = 0]."""
    t = np.asarray(t, dtype=float)
    return -t + _log_one_minus_exp_neg(epsilon - t) - _log_one_minus_exp_neg(epsilon)


def log_one_minus_p(epsilon: float, t):
    """log (1 - p_{eps,t}) = log Pr[RR_{eps,t}(1) = 1]."""
    return _log_one_minus_exp_neg(t) - _log_one_minus_exp_neg(epsilon)


def log_q(epsilon: float, t):
    """log q_{eps,t} = log Pr[RR_{eps,t}(0) = 0]."""
    return _log_one_minus_exp_neg(epsilon - np.asarray(t, dtype=float)) - _log_one_minus_exp_neg(epsilon)


def log_one_minus_q(epsilon: float, t):
    """log (1 - q_{eps,t}) = log Pr[RR_{eps,t}(0) = 1]."""
    t = np.asarray(t, dtype=float)
    return (t - epsilon) + log_one_minus_p(epsilon, t)
