"""Exact composition of Gaussian mechanisms (mu-GDP adds in quadrature).

Privacy: a Gaussian mechanism with L2 sensitivity Delta and noise sigma is
exactly mu-GDP with mu = Delta / sigma; the adaptive composition of
mu_i-GDP mechanisms is sqrt(sum mu_i^2)-GDP, and this is tight
(Dong–Roth–Su 2019, Cor 3.3). A mu-GDP mechanism is (epsilon, delta(epsilon))-DP
for exactly
    delta(epsilon) = Phi(-epsilon/mu + mu/2) - e^epsilon Phi(-epsilon/mu - mu/2)
(Dong–Roth–Su 2019, Cor 2.13; Balle–Wang 2018, Thm 8).
Proof: Dong–Roth–Su 2019, Cor 2.13 (profile) and Cor 3.3 (composition).
Numerics: both terms in log space with log_ndtr; the difference with
log1p(-exp(.)) so delta stays accurate down to 1e-300.
Runtime: O(number of distinct events) to build mu, O(1) per delta, about 60
evaluations per epsilon.
"""
from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.special import log_ndtr

from dpstream.accounting.bounds import Bound
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import Gaussian
from dpstream.accounting.numerics import log_sub_exp


def total_mu(composition: Composition) -> float:
    """sqrt(sum of count * (sensitivity / sigma)^2) over the Gaussian events."""
    return math.sqrt(math.fsum(count * event.mu**2 for event, count in composition.select(Gaussian)))


def gdp_log_delta(mu: float, epsilon: float) -> float:
    """log delta(epsilon) of a mu-GDP mechanism (the exact Gaussian privacy profile)."""
    if mu == 0.0:
        return -math.inf if epsilon >= 0 else math.log(-math.expm1(epsilon))
    if math.isinf(epsilon):  # delta(+inf) = 0, delta(-inf) = 1
        return -math.inf if epsilon > 0 else 0.0
    first = float(log_ndtr(-epsilon / mu + mu / 2))
    second = epsilon + float(log_ndtr(-epsilon / mu - mu / 2))
    if second >= first:  # equal up to rounding: delta is below float resolution
        return -math.inf
    return log_sub_exp(first, second)


def gdp_delta(mu: float, epsilon: float) -> float:
    return math.exp(gdp_log_delta(mu, epsilon))


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon >= 0 with delta_mu(epsilon) <= delta, rounded up by the bracket tolerance."""
    if delta >= 1.0:
        return 0.0
    target = math.log(delta)
    if gdp_log_delta(mu, 0.0) <= target:
        return 0.0
    upper = max(1.0, mu * mu / 2 + mu * math.sqrt(2 * max(-target, 1.0)) + 1.0)
    while gdp_log_delta(mu, upper) > target:
        upper *= 2
    root = brentq(lambda e: gdp_log_delta(mu, e) - target, 0.0, upper, xtol=1e-14, rtol=1e-15)
    # brentq returns a point within xtol of the crossing; step right until the bound holds.
    while gdp_log_delta(mu, root) > target:
        root = math.nextafter(root, math.inf) + 1e-14
    return root


class ExactGaussian(Bound):
    name = "gaussian_exact"
    reference = "Dong–Roth–Su 2019, Cor 2.13 and Cor 3.3 (mu-GDP composition)"

    def applies(self, composition: Composition) -> bool:
        return composition.only(Gaussian)

    def is_exact(self, composition: Composition) -> bool:
        return True  # mu-GDP composition of Gaussians is tight (Dong–Roth–Su Cor 3.3)

    def delta(self, composition: Composition, epsilon: float) -> float:
        return gdp_delta(total_mu(composition), epsilon)

    def epsilon(self, composition: Composition, delta: float) -> float:
        return gdp_epsilon(total_mu(composition), delta)
