"""Gaussian-DP filters: the naive GDP filter and the GDP residue filter (Regehr et al. Thm 5).

Leaf pricing. A Gaussian leaf (sigma, sensitivity s) is exactly s/sigma-GDP.
An epsilon-DP leaf (PureDP, Laplace, BoundedRange) is dominated by
randomized response R_eps (Regehr et al. Def 5: eps-DP iff L <= R_eps; an
eps-BR mechanism is eps-DP), and R_eps is nu-GDP for exactly
nu(eps) = 2 Phi^{-1}(e^eps / (1 + e^eps)) (docs/proofs/accounting.filters.gdp.randomized_response_mu.md).
Leaves without a GDP description (ApproxDP, ZCDP) are refused with an error.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Self

import numpy as np
from scipy.special import erfinv, gammaln, log_ndtr, ndtri

from dpstream.accounting.bounds.gaussian import gdp_log_delta
from dpstream.accounting.events import BoundedRange, Event, Gaussian, Laplace, PureDP
from dpstream.accounting.filters.base import EventFilter, check_budget, check_delta

GDP_KINDS = "Gaussian, PureDP, Laplace, BoundedRange"
_ULP_STEPS = 4


def _down(value: float, steps: int = _ULP_STEPS) -> float:
    for _ in range(steps):
        value = math.nextafter(value, 0.0)
    return max(value, 0.0)


def _up(value: float, steps: int = _ULP_STEPS) -> float:
    for _ in range(steps):
        value = math.nextafter(value, math.inf)
    return value


def randomized_response_mu(epsilon: float) -> float:
    """Smallest nu with R_eps <= G_nu: nu = 2 Phi^{-1}(e^eps/(1+e^eps)), rounded up.

    Numerics: 2 sqrt(2) erfinv(tanh(eps/2)) for eps <= 1 (no cancellation near
    eps = 0), -2 Phi^{-1}(1/(1+e^eps)) above (no loss near probability 1).
    """
    check_budget("randomized_response_mu", "epsilon", epsilon)
    if epsilon <= 1.0:
        nu = 2.0 * math.sqrt(2.0) * float(erfinv(math.tanh(epsilon / 2.0)))
    else:
        nu = -2.0 * float(ndtri(math.exp(-epsilon - math.log1p(math.exp(-epsilon)))))
    return _up(nu * (1.0 + 1e-13))


def gdp_mu_for(epsilon: float, delta: float) -> float:
    """Largest mu such that mu-GDP implies (epsilon, delta)-DP, rounded down.

    mu-GDP is (eps, delta_mu(eps))-DP with the exact profile of Dong–Roth–Su
    2019, Cor 2.13; delta_mu(eps) increases with mu, so bisection on mu keeps
    the lower end (Regehr et al. F7: mu* = max{mu : H_{e^eps}(G_mu) <= delta}).
    """
    check_budget("gdp_mu_for", "epsilon", epsilon)
    check_delta("gdp_mu_for", delta, allow_zero=False)
    target = math.log(delta)
    lo, hi = 0.0, 1.0
    while gdp_log_delta(hi, epsilon) <= target:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-13 * hi:
        mid = 0.5 * (lo + hi)
        if gdp_log_delta(mid, epsilon) <= target:
            lo = mid
        else:
            hi = mid
    return lo


def _gdp_leaves(filter_: EventFilter, leaves: Mapping[Event, int]) -> tuple[float, list[tuple[float, int]]]:
    """(sum of count * mu^2 over Gaussian leaves, [(epsilon, count)] of the pure leaves); errors on other leaves."""
    gaussian_sq = 0.0
    pure: list[tuple[float, int]] = []
    for leaf, count in leaves.items():
        if isinstance(leaf, Gaussian):
            gaussian_sq += count * _up((leaf.sensitivity / leaf.sigma) ** 2)
        elif isinstance(leaf, (PureDP, BoundedRange, Laplace)):
            pure.append((_up(float(leaf.epsilon)), count))
        else:
            raise filter_._unsupported(leaf, GDP_KINDS)
    return _up(gaussian_sq), pure


class GDPFilter(EventFilter):
    """Naive GDP filter: admit while mu_1^2 + ... + mu_t^2 <= mu^2.

    Privacy: add/remove one privacy unit; the interaction is mu-GDP, hence
    (eps, delta_mu(eps))-DP for every eps (Dong–Roth–Su Cor 2.13), for mu_t
    chosen adaptively. `GDPFilter.for_budget(epsilon, delta)` uses the largest
    mu that implies (epsilon, delta)-DP.
    Proof: Regehr et al. 2026, Remark 2 (Koskela et al. 2022; Smith–Thakurta
    2022) with Thm 1; a release costs the GDP parameter of its own events,
    sqrt(sum mu_i^2) (Dong–Roth–Su Cor 3.3), pure leaves at nu(eps).
    Checks: mu positive and finite; leaves Gaussian, PureDP, Laplace, BoundedRange.
    Caller must ensure: each mechanism is mu_t-GDP given past outputs.
    Numerics: costs rounded up, the remaining mu rounded down.
    Runtime: O(number of distinct leaves) per spend.
    After a refusal the filter keeps admitting smaller spends (residue filter).
    """

    kind = "gdp"
    halts_on_refusal = False

    def __init__(self, mu: float) -> None:
        super().__init__()
        self.mu = check_budget(type(self).__name__, "mu", mu)
        self._remaining = self.mu

    @classmethod
    def for_budget(cls, epsilon: float, delta: float) -> Self:
        return cls(gdp_mu_for(epsilon, delta))

    @property
    def remaining_mu(self) -> float:
        return self._remaining

    def describe(self) -> str:
        return (
            f"GDP filter: each release costs its GDP parameter; squares add up to at most mu^2 = {self.mu:.6g}^2; "
            f"the scope is {self.mu:.6g}-GDP"
        )

    def _parameters(self) -> dict[str, Any]:
        return {"mu": self.mu}

    def _state(self) -> dict[str, Any]:
        return {"remaining_mu": self._remaining}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._remaining = float(state["remaining_mu"])

    def cost_terms(self, event: Event) -> dict[str, float]:
        """The release's GDP mu (the residue filter may keep more budget than mu^2 less this mu^2)."""
        gaussian_sq, pure = _gdp_leaves(self, self._leaves(event))
        return {"mu": _up(math.sqrt(_up(gaussian_sq + sum(count * _up(randomized_response_mu(eps) ** 2)
                                                          for eps, count in pure))))}

    def left_terms(self) -> dict[str, float]:
        return {"mu": self._remaining}

    def _charge(self, leaves: Mapping[Event, int]) -> float | None:
        gaussian_sq, pure = _gdp_leaves(self, leaves)
        cost_sq = _up(gaussian_sq + sum(count * _up(randomized_response_mu(eps) ** 2) for eps, count in pure))
        left = self._remaining**2 - cost_sq
        if left < 0:
            return None
        return _down(math.sqrt(_down(left)))

    def _apply(self, new_state: float) -> None:
        self._remaining = new_state


# --- GDP residue filter -------------------------------------------------------------------------

_MAX_ATOMS = 512  # support size of one residue step; larger releases are split into steps
_GRID = 600
_LOG_MARGIN = 1e-9  # demand h_comp <= h_budget * exp(-1e-9): a one-sided safety margin


def _log_h_gdp(mu: float, s: np.ndarray) -> np.ndarray:
    """log H_{e^s}(G_mu), vectorised over s (mu = 0 gives the identity pair, h(x) = (1 - x)_+).

    Same profile as `accounting.bounds.gaussian.gdp_log_delta`, over arrays.
    """
    s = np.asarray(s, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        if mu == 0.0:
            return np.where(s < 0, np.log(-np.expm1(np.minimum(s, 0.0))), -np.inf)
        first = log_ndtr(-s / mu + mu / 2)
        second = s + log_ndtr(-s / mu - mu / 2)
        diff = np.minimum(second - first, 0.0)
        out = first + np.log(-np.expm1(diff))
    return np.where(second < first, out, -np.inf)


def _rr_atoms(epsilon: float, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Privacy-loss atoms of R_eps composed `count` times: z = eps (2j - count) with binomial log-probabilities."""
    j = np.arange(count + 1, dtype=float)
    log_q = -math.log1p(math.exp(-epsilon))  # log e^eps/(1+e^eps)
    log_1mq = -epsilon - math.log1p(math.exp(-epsilon))
    log_binom = gammaln(count + 1) - gammaln(j + 1) - gammaln(count - j + 1)
    return epsilon * (2 * j - count), log_binom + j * log_q + (count - j) * log_1mq


def _convolve(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return (a[0][:, None] + b[0][None, :]).ravel(), (a[1][:, None] + b[1][None, :]).ravel()


def _pure_chunks(pure: list[tuple[float, int]]) -> list[tuple[tuple[np.ndarray, np.ndarray], float]]:
    """The pure leaves as discrete PLDs of at most _MAX_ATOMS atoms, each with its naive GDP cost nu^2.

    The chunks are spent one after another.
    """
    unit = (np.zeros(1), np.zeros(1))
    chunks, current, naive_sq = [], unit, 0.0
    for epsilon, count in pure:
        while count > 0:
            room = _MAX_ATOMS // current[0].size - 1
            if room < 1:
                chunks.append((current, _up(naive_sq)))
                current, naive_sq = unit, 0.0
                continue
            take = min(count, room)
            current = _convolve(current, _rr_atoms(epsilon, take))
            naive_sq += take * _up(randomized_response_mu(epsilon) ** 2)
            count -= take
    if current[0].size > 1:
        chunks.append((current, _up(naive_sq)))
    return chunks


class _Dominance:
    """Checks G_inner (+) L <= G_budget for a fixed budget and a discrete PLD L, on x = e^s >= 1 (Lemma 8).

    h_{G (+) L}(x) = E_{Z~L} h_G(x e^{-Z}) (Regehr et al. Prop 6). The check
    runs in log space on a grid of s from 0 to where h_budget < e^-800
    (quadratically spaced, denser near x = 1) plus every atom (the kinks
    when inner_mu = 0), and demands a relative margin of 1e-9; with `refine`
    it also zooms into each of the four lowest local minima of the grid
    (three levels of 201 points, resolution 1e-6 of the grid spacing).
    """

    def __init__(self, budget_mu: float, atoms: tuple[np.ndarray, np.ndarray]) -> None:
        self.budget_mu = budget_mu
        self.z, self.log_p = atoms
        s_max = budget_mu * (budget_mu / 2 + 40.0)
        atoms_inside = self.z[(self.z >= 0) & (self.z <= s_max)]
        self.grid = np.union1d(np.linspace(0.0, math.sqrt(s_max), _GRID) ** 2, atoms_inside)
        self.budget_on_grid = _log_h_gdp(budget_mu, self.grid)

    def _gap(self, inner_mu: float, s: np.ndarray, budget: np.ndarray | None = None) -> np.ndarray:
        terms = self.log_p[None, :] + _log_h_gdp(inner_mu, s[:, None] - self.z[None, :])
        top = np.max(terms, axis=1)
        safe_top = np.where(np.isfinite(top), top, 0.0)
        with np.errstate(divide="ignore"):
            comp = safe_top + np.log(np.sum(np.exp(terms - safe_top[:, None]), axis=1))
        return (_log_h_gdp(self.budget_mu, s) if budget is None else budget) - comp

    def holds(self, inner_mu: float, refine: bool) -> bool:
        values = self._gap(inner_mu, self.grid, self.budget_on_grid)
        if np.any(values < _LOG_MARGIN):
            return False
        if not refine:
            return True
        interior = np.flatnonzero((values[1:-1] <= values[:-2]) & (values[1:-1] <= values[2:])) + 1
        for index in interior[np.argsort(values[interior])][:4]:
            lo, hi = self.grid[index - 1], self.grid[index + 1]
            for _ in range(3):
                points = np.linspace(lo, hi, 201)
                local = self._gap(inner_mu, points)
                if np.any(local < _LOG_MARGIN):
                    return False
                best = int(np.argmin(local))
                lo, hi = points[max(best - 1, 0)], points[min(best + 1, 200)]
        return True


def gdp_residue(
    budget_mu: float, gaussian_sq: float, atoms: tuple[np.ndarray, np.ndarray], naive_sq: float
) -> float | None:
    """Largest mu' in [0, budget_mu] with G_mu' (+) G_g (+) L <= G_budget (g^2 = gaussian_sq), rounded down.

    Returns None when G_g (+) L is not below G_budget (the release is not
    admissible). `naive_sq` is the naive GDP cost nu^2 of G_g (+) L: the naive
    residue sqrt(budget^2 - nu^2) is valid by Remark 2 and starts the
    bisection, which is valid because G_mu' (+) L is monotone in mu'
    (Regehr et al. Thm 5, Prop 2). Bisection uses the grid check; its result
    must also pass the refined check, else the bracket steps down towards
    the naive residue, which needs no check.
    """
    check = _Dominance(budget_mu, atoms)
    if not check.holds(math.sqrt(gaussian_sq), refine=True):
        return None
    naive = _down(math.sqrt(_down(budget_mu * budget_mu - naive_sq))) if naive_sq <= budget_mu**2 else 0.0
    lo, hi = naive, budget_mu
    while hi - lo > 1e-8 * budget_mu:
        mid = 0.5 * (lo + hi)
        if check.holds(math.sqrt(mid * mid + gaussian_sq), refine=False):
            lo = mid
        else:
            hi = mid
    step = hi - lo
    while lo > naive and not check.holds(math.sqrt(lo * lo + gaussian_sq), refine=True):
        step *= 2.0
        lo = max(naive, lo - step)
    return lo


class GDPResidueFilter(GDPFilter):
    """GDP residue filter (Regehr et al. 2026, Thm 5): budget G_mu, residue update.

    Rule: admit a release with privacy-loss distribution L iff L <= G_mu;
    then mu <- the largest mu' with G_mu' (+) L <= G_mu (bisection on [0, mu]).
    Gaussian-only releases give mu' = sqrt(mu^2 - nu^2), like the naive filter;
    releases with pure leaves keep strictly more budget than the naive filter.
    Privacy: add/remove one privacy unit; the interaction is mu-GDP, hence
    (eps, delta_mu(eps))-DP for every eps, for releases chosen adaptively.
    Proof: Regehr et al. Thm 5 with Thm 1 (residue condition by construction);
    Laplace and BR leaves are priced at R_eps, which dominates them, and the
    domination stays valid under (+) (Prop 2). A release whose pure part has
    more than 512 atoms is spent as consecutive residue steps (each one is a
    valid step of Alg. 1, so the chain keeps the residue condition).
    Checks: mu positive and finite; leaves Gaussian, PureDP, Laplace, BoundedRange.
    Caller must ensure: each release's events are fixed before it runs.
    Numerics: dominance G_mu' (+) L <= G_mu is checked on x >= 1 (both sides are
    symmetric, Lemma 8) in log space with log_ndtr, on a grid refined at each
    local minimum, with a relative margin of 1e-9, for all x where
    h_{G_mu}(x) >= e^-800; bisection keeps the lower end.
    Runtime: about 25 dominance checks per residue step, each O(600 x atoms).
    After a refusal the filter keeps admitting smaller spends (Alg. 1).
    """

    kind = "gdp-residue"

    def describe(self) -> str:
        return (
            f"GDP residue filter (Regehr et al. Thm 5): a release is admitted while its privacy-loss "
            f"distribution fits the remaining GDP budget, which then shrinks to the largest residue; "
            f"the scope is {self.mu:.6g}-GDP"
        )

    def _prices_additively(self, leaves: Mapping[Event, int]) -> bool:
        """Gaussian leaves only: then the residue is the naive filter's; pure leaves keep more budget when charged
        together than one round at a time."""
        return not _gdp_leaves(self, leaves)[1]

    def _charge(self, leaves: Mapping[Event, int]) -> float | None:
        gaussian_sq, pure = _gdp_leaves(self, leaves)
        if not pure:  # GDP is closed under composition: the residue is the naive one (Regehr et al. §4)
            return super()._charge(leaves)
        mu = self._remaining
        for atoms, naive_sq in _pure_chunks(pure):
            if mu == 0.0:
                return None
            residue = gdp_residue(mu, gaussian_sq, atoms, _up(gaussian_sq + naive_sq))
            if residue is None:
                return None
            mu = residue
            gaussian_sq = 0.0
        return mu
