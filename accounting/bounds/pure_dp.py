"""Optimal composition of k mechanisms that are each epsilon-DP with the same epsilon.

Privacy: add/remove one privacy unit; (epsilon_g, delta)-DP. If each of k
adaptively chosen mechanisms is epsilon_0-DP, their composition is
(epsilon_g, delta_OPT(epsilon_g))-DP with

    delta_OPT = (1 + e^{eps_0})^{-k} sum_{l > (eps_g + k eps_0) / (2 eps_0)} C(k, l) (e^{l eps_0} - e^{eps_g + (k - l) eps_0}),

and no smaller delta holds for every such composition: k-fold randomized
response attains it. Paper symbols: k = number of events, eps_0 = their common
epsilon, eps_g = the queried epsilon.
Proof: Kairouz–Oh–Viswanath 2017, Thm 3.3 (stated for every eps_g >= 0 as
Cesar–Rogers, Thm 1); Murtagh–Vadhan 2016 give the same sum. The sum is the
privacy profile of the privacy-loss distribution eps_0 (2Y - k),
Y ~ Binomial(k, e^{eps_0} / (1 + e^{eps_0})) (Chourasia–Javaid–Sikdar, Cor 4.7
with delta = 0), which is also how it is evaluated here, for every real eps_g.
Laplace(scale b, sensitivity s) is (s/b)-DP and epsilon-BR implies epsilon-DP
(Durfee–Rogers 2019, Def 2.2), so both enter as PureDP(epsilon).
Checks: `applies` only when every event is PureDP, Laplace or BoundedRange and
all their epsilons are equal as floats.
Caller must ensure: the epsilons were fixed before any mechanism ran (this is
an accountant bound, not a privacy filter).
Numerics: log binomial masses from gammaln, rounded up by a bound on the
gammaln error; the profile and its exact inverse come from
`accounting.bounds.discrete_pld` (logsumexp; epsilon solved in closed form on
the piece between the atoms eps_0 (2l - k), then rounded up). No overflow for
k up to 10^6 and eps_0 up to 700.
Runtime: O(k) per delta or epsilon, so it applies to at most MAX_ENUMERATED events.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln

from dpstream.accounting.bounds import Bound
from dpstream.accounting.bounds.basic import pure_epsilon
from dpstream.accounting.bounds.discrete_pld import DiscretePLD
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import BoundedRange, Laplace, PureDP

PURE_EVENTS = (PureDP, Laplace, BoundedRange)
ULP = 2.0**-52
MAX_ENUMERATED = 10**6
"""Bounds that enumerate the k + 1 atoms of k-fold randomized response apply to at most this many events (8 MB of
atoms); beyond it the accountant uses the bounds whose cost does not grow with k (basic, RDP, zCDP, MGF)."""


def rr_log_probabilities(epsilon: float) -> tuple[float, float]:
    """(log p, log(1 - p)) with p = e^eps / (1 + e^eps), the randomized-response mass of loss +eps."""
    return -math.log1p(math.exp(-epsilon)), -epsilon - math.log1p(math.exp(-epsilon))


def binomial_loss_atoms(count: int, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """Privacy-loss atoms epsilon (2l - count) of `count`-fold RR(epsilon) and their log masses, rounded up.

    The rounding covers the error of the three gammaln values (a few ulps of
    gammaln(count + 1) each) and of the products with log p and log(1 - p).
    """
    ell = np.arange(count + 1, dtype=float)
    log_p, log_1mp = rr_log_probabilities(epsilon)
    log_comb = gammaln(count + 1.0) - gammaln(ell + 1.0) - gammaln(count - ell + 1.0)
    log_mass = log_comb + ell * log_p + (count - ell) * log_1mp
    error = 16 * ULP * (float(gammaln(count + 1.0)) + count * (abs(log_p) + abs(log_1mp)) + 1.0)
    return epsilon * (2.0 * ell - count), log_mass + error


def kov_pld(count: int, epsilon: float) -> DiscretePLD:
    """The privacy-loss distribution of `count` epsilon-DP mechanisms composed (k-fold RR)."""
    _check_count(count)
    _check_epsilon(epsilon)
    loss, log_mass = binomial_loss_atoms(count, float(epsilon))
    return DiscretePLD.build(loss, log_mass, 0.0)


def kov_delta(k: int, epsilon: float, epsilon_g: float) -> float:
    """delta_OPT(epsilon_g) of k adaptively composed epsilon-DP mechanisms (KOV 2017, Thm 3.3), rounded up."""
    return kov_pld(k, epsilon).delta(epsilon_g)


def kov_epsilon(k: int, epsilon: float, delta: float) -> float:
    """Smallest epsilon_g >= 0 with delta_OPT(epsilon_g) <= delta, rounded up."""
    return kov_pld(k, epsilon).epsilon(delta)


def _check_count(count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"the number of composed mechanisms must be an integer >= 1, got {count!r}")


def _check_epsilon(epsilon: float) -> None:
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")


def common_epsilon(composition: Composition) -> float | None:
    """The single epsilon shared by every pure event of `composition`, or None."""
    values = {pure_epsilon(event) for event, _ in composition}
    return values.pop() if len(values) == 1 else None


class KairouzOhViswanath(Bound):
    """k events that are each epsilon_0-DP with one common epsilon_0: the exact optimum (see the module docstring)."""

    max_events = MAX_ENUMERATED

    name = "kairouz_oh_viswanath"
    reference = "Kairouz–Oh–Viswanath 2017, Thm 3.3 (optimal homogeneous pure-DP composition)"

    def applies(self, composition: Composition) -> bool:
        return composition.only(*PURE_EVENTS) and common_epsilon(composition) is not None

    def is_exact(self, composition: Composition) -> bool:
        """Optimal over all epsilon-DP mechanisms, so exact when every event is `PureDP`
        (not for Laplace or BR events, whose own worst cases are smaller)."""
        return composition.only(PureDP)

    def _pld(self, composition: Composition) -> DiscretePLD:
        epsilon = common_epsilon(composition)
        if epsilon is None or not composition.only(*PURE_EVENTS):
            kinds = sorted(type(e).__name__ for e, _ in composition)
            raise ValueError(f"{self.name} needs pure events (PureDP, Laplace, BoundedRange) with one epsilon, got {kinds}")
        return kov_pld(len(composition), epsilon)

    def delta(self, composition: Composition, epsilon: float) -> float:
        return self._pld(composition).delta(epsilon)

    def epsilon(self, composition: Composition, delta: float) -> float:
        return self._pld(composition).epsilon(delta)
