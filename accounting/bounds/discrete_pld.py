"""Discrete privacy-loss distributions: exact privacy profile and its exact inverse.

A discrete PLD is a finite set of privacy-loss atoms z (with masses m_z under
P) plus a mass p_inf at +infinity. Its privacy profile is, for every real t
(Chourasia–Javaid–Sikdar, eq. (20), with the +infinity atom of their §4):

    delta(t) = p_inf + sum_{z > t} m_z (1 - e^{t - z}).

Between consecutive atoms the set {z > t} is fixed, so the profile is
A - e^t B with A = sum m_z and B = sum m_z e^{-z} over that set; it is
continuous and non-increasing, and delta(t) <= target solves in closed form
on the right piece: t = log(A - target) - log(B). That is how `epsilon`
inverts without bisection.

Numerics: masses are held as logarithms; callers pass masses already rounded
up by a bound on their own floating error (`log_mass`), and every sum here is
a logsumexp. `delta` rounds its result up by `SUM_SLACK` (relative) for the
logsumexp itself; `epsilon` steps its closed-form root right until the
forward profile meets the target, then adds `EPSILON_MARGIN` (relative).
Runtime: O(n log n) to build (sort and merge equal atoms), O(n) per delta,
O(n) per epsilon.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

SUM_SLACK = 1e-13
EPSILON_MARGIN = 1e-12


def _log_one_minus_exp(x: np.ndarray | float) -> np.ndarray | float:
    """log(1 - e^x) for x <= 0 (-inf at 0), elementwise on an array."""
    with np.errstate(divide="ignore"):
        return np.log(-np.expm1(x))


@dataclass(frozen=True)
class DiscretePLD:
    """Privacy-loss atoms `loss` (ascending, distinct) with log masses `log_mass`, plus `p_inf` at +infinity."""

    loss: np.ndarray
    log_mass: np.ndarray
    p_inf: float

    @classmethod
    def build(cls, loss, log_mass, p_inf: float) -> "DiscretePLD":
        """Sort the atoms and merge equal losses (masses add)."""
        loss = np.asarray(loss, dtype=float).ravel()
        log_mass = np.asarray(log_mass, dtype=float).ravel()
        if loss.shape != log_mass.shape:
            raise ValueError(f"loss and log_mass must have the same length, got {loss.size} and {log_mass.size}")
        keep = log_mass > -np.inf
        loss, log_mass = loss[keep], log_mass[keep]
        order = np.argsort(loss, kind="stable")
        loss, log_mass = loss[order], log_mass[order]
        if loss.size:
            starts = np.flatnonzero(np.r_[True, np.diff(loss) > 0])
            if starts.size < loss.size:
                # A chain of n logaddexp calls is off by at most ~n ulps (relative): round up by 2n.
                sizes = np.diff(np.r_[starts, loss.size])
                log_mass = np.logaddexp.reduceat(log_mass, starts) + 2.0**-51 * sizes
                loss = loss[starts]
        return cls(loss, log_mass, min(1.0, float(p_inf)))

    def delta(self, t: float) -> float:
        """delta(t) = sup_S P(S) - e^t Q(S), rounded up; defined for every real t."""
        t = float(t)
        first = int(np.searchsorted(self.loss, t, side="right"))
        if first == self.loss.size:
            return self.p_inf
        terms = self.log_mass[first:] + _log_one_minus_exp(t - self.loss[first:])
        finite = math.exp(float(logsumexp(terms))) * (1.0 + SUM_SLACK)
        return min(1.0, self.p_inf + finite)

    def epsilon(self, target: float) -> float:
        """Smallest t >= 0 with delta(t) <= target (inf if none), rounded up."""
        if not target < 1.0:
            return 0.0
        if self.delta(0.0) <= target:
            return 0.0
        rest = target - self.p_inf
        if rest < 0:
            return math.inf
        # Suffix sums over atoms i.. : log A_i and log B_i.
        log_a = np.logaddexp.accumulate(self.log_mass[::-1])[::-1]
        log_b = np.logaddexp.accumulate((self.log_mass - self.loss)[::-1])[::-1]
        # delta(loss_i) - p_inf sums over the atoms strictly above loss_i (suffix i + 1);
        # it is 0 at the last atom.
        at_atoms = np.full(self.loss.size, -np.inf)
        at_atoms[:-1] = log_a[1:] + _log_one_minus_exp(np.minimum(self.loss[:-1] + log_b[1:] - log_a[1:], 0.0))
        log_rest = math.log(rest) if rest > 0 else -math.inf
        # The first atom where the profile is at or below the target: the root
        # lies in (loss_{i-1}, loss_i], where the atoms above t are i, i+1, ...
        i = int(np.argmax(at_atoms <= log_rest))
        log_gap = float(log_a[i]) + float(_log_one_minus_exp(min(log_rest - float(log_a[i]), 0.0)))
        root = min(max(log_gap - float(log_b[i]), 0.0), float(self.loss[i]))
        return self._round_up(root, target)

    def _round_up(self, root: float, target: float) -> float:
        step = 1e-15 * max(1.0, abs(root))
        while self.delta(root) > target:
            root += step
            step *= 2.0
        return root + EPSILON_MARGIN * abs(root)
