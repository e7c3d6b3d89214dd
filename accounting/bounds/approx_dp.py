"""Exactly tight composition of heterogeneous (epsilon_i, delta_i)-DP guarantees.

Privacy: add/remove one privacy unit; (epsilon, delta)-DP. If mechanism i is
(eps_i, delta_i)-DP, the composition of M_1..M_k is, for every real t,
(t, delta(t))-DP with

    delta(t) = p_inf + prod_i (1 - delta_i) E[(1 - e^{t - S})_+],
    p_inf = 1 - prod_i (1 - delta_i),   S = sum_i s_i eps_i,
    P(s_i = +1) = e^{eps_i} / (1 + e^{eps_i}),  P(s_i = -1) = 1 / (1 + e^{eps_i}),

and this is tight: composing randomized responses RR(eps_i, delta_i) attains it.
Paper symbols: eps_i, delta_i as above; t = the queried epsilon; delta^{(x)k}
of eq. (62)-(63) is `delta` here.
Proof: Chourasia–Javaid–Sikdar, Thm 4.5 (RR(eps, delta) dominates every
(eps, delta)-DP pair), Thm 4.6 (the recursion (62)) and Cor 4.7 (the closed
form above); Kairouz–Oh–Viswanath 2017, Thm 3.3 in the homogeneous case.
With delta_i = 0 this is the heterogeneous optimal pure-DP composition
(Murtagh–Vadhan 2016). Laplace(b, s) enters as (s/b, 0) and BoundedRange(eps)
as (eps, 0) (epsilon-BR implies epsilon-DP). The lattice evaluation and its
pessimistic rounding are proved in
docs/proofs/accounting.bounds.approx_dp.ChourasiaRecursion.md.
Checks: `applies` only to compositions of PureDP, ApproxDP, Laplace and
BoundedRange events; parameters are checked when the events are built.
Caller must ensure: every (eps_i, delta_i) was fixed before any mechanism ran.
The mechanisms themselves may be chosen adaptively, but this is NOT a privacy
filter: choosing eps_i from earlier outputs voids the bound (Regehr et al.).
Numerics: when the law of S has at most `MAX_EXACT_ATOMS` distinct values
(few distinct eps_i; always when all eps_i are equal) it is enumerated exactly
in log space. Otherwise S lives on a lattice of spacing g: eps_i that are
(up to 1e-9 relative) multiples of g are rounded up to that multiple, the
others keep their exact RR masses split between the two neighbouring lattice
points so that the split pair post-processes back to RR(eps_i) (a dominating
pair, error O(g^2) instead of O(g) for rounding up). g is a common divisor of
the eps_i when one exists with a lattice of at most MAX_LATTICE points (then
the result is exact up to rounding), else about
max(max eps_i / 2^12, width / L), shrunk so the most frequent eps_i is a
multiple of it; width spans +-12 standard deviations of S and
L = WORK_BUDGET / k within [2^15, 2^18]. Grid error (measured, delta 1e-6):
300 eps_i ~ U(0.01, 0.1) give 5.19034, between the exact round-down and
round-up-to-1e-4 values 5.18587 and 5.19475; 1,000 give 10.16783 against
10.16772 at a 4x finer grid (error ~ L^-2). Lattice tails below 1e-30 in
total are dropped and added to delta; float error in the masses is bounded
and rounded up. Epsilon is solved exactly between atoms (`discrete_pld`).
Runtime: exact path O(atoms); lattice path O(sum over steps of the atoms per
step times the lattice length), a step being one split event or one aligned
group: 1,000 distinct epsilons take about 0.2 s, 10,000 about 2-3 s.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Iterable

import numpy as np

from dpstream.accounting.bounds import Bound
from dpstream.accounting.bounds.basic import pure_epsilon
from dpstream.accounting.bounds.discrete_pld import DiscretePLD
from dpstream.accounting.bounds.pure_dp import (
    MAX_ENUMERATED,
    PURE_EVENTS,
    ULP,
    binomial_loss_atoms,
    rr_log_probabilities,
)
from dpstream.accounting.composition import Composition
from dpstream.accounting.events import ApproxDP

MAX_EXACT_ATOMS = 2**16
MIN_LATTICE = 2**15
MAX_LATTICE = 2**18
WORK_BUDGET = 2**26
GRID_DIVISIONS = 2**12
TAIL_BUDGET = 1e-30
TAIL_SIGMAS = 12.0
ALIGN_TOLERANCE = 1e-9
MAX_DIVISOR = 64


def _validate(epsilon: float, delta: float, count: int) -> tuple[float, float, int]:
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon_i must be a finite number >= 0, got {epsilon!r}")
    if not (isinstance(delta, (int, float)) and 0 <= delta < 1):
        raise ValueError(f"delta_i must lie in [0, 1), got {delta!r}")
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise ValueError(f"count must be an integer >= 0, got {count!r}")
    return float(epsilon), float(delta), int(count)


def approx_dp_pld(
    weighted_pairs: Iterable[tuple[tuple[float, float], int]],
    max_exact_atoms: int = MAX_EXACT_ATOMS,
    max_lattice: int | None = None,
) -> DiscretePLD:
    """Privacy-loss distribution of the composition of `count` (epsilon, delta)-DP steps per item.

    `weighted_pairs` holds ((epsilon, delta), count). The result dominates
    (is pessimistic for) the exact Thm 4.6 curve and equals it on the exact path.
    """
    log_keep = 0.0
    eps_counts: Counter = Counter()
    for (epsilon, delta), count in weighted_pairs:
        epsilon, delta, count = _validate(epsilon, delta, count)
        log_keep += count * math.log1p(-delta)
        if epsilon > 0 and count > 0:
            eps_counts[epsilon] += count
    groups = sorted(eps_counts.items())
    atoms = math.prod(n + 1 for _, n in groups)
    if atoms <= max_exact_atoms:
        loss, log_mass, dropped = _enumerate(groups)
    else:
        loss, log_mass, dropped = _lattice(groups, max_lattice)
    keep = math.exp(log_keep)
    p_inf = -math.expm1(log_keep) + keep * dropped
    return DiscretePLD.build(loss, log_mass + log_keep, p_inf * (1 + 4 * ULP))


def _enumerate(groups: list[tuple[float, int]]) -> tuple[np.ndarray, np.ndarray, float]:
    """Every value of S with its log mass: outer sums of the per-epsilon binomial laws."""
    loss, log_mass = np.zeros(1), np.zeros(1)
    for epsilon, count in groups:
        group_loss, group_mass = binomial_loss_atoms(count, epsilon)
        loss = (loss[:, None] + group_loss[None, :]).ravel()
        log_mass = (log_mass[:, None] + group_mass[None, :]).ravel()
    # Each outer sum after the first adds one rounding of a sum of logs; cover it.
    return loss, log_mass + 4 * ULP * (len(groups) - 1) * (1.0 + np.abs(log_mass)), 0.0


def _common_grid(epsilons: np.ndarray) -> float | None:
    """A spacing g with every epsilon within 1e-9 (relative) of a multiple m g, rounded so m g >= epsilon."""
    for divisor in range(1, MAX_DIVISOR + 1):
        ratios = epsilons / (epsilons[0] / divisor)
        multiples = np.maximum(np.round(ratios), 1.0)
        if np.all(np.abs(ratios - multiples) <= ALIGN_TOLERANCE * multiples):
            return math.nextafter(float(np.max(epsilons / multiples)), math.inf)
    return None


def lattice_length(events: int) -> int:
    """Lattice length for `events` split steps: about WORK_BUDGET entry updates in all, within [2^15, 2^18]."""
    return min(MAX_LATTICE, max(MIN_LATTICE, WORK_BUDGET // max(events, 1)))


def lattice_spacing(groups: list[tuple[float, int]], max_lattice: int | None = None) -> float:
    """The lattice spacing g used when the law of S is too large to enumerate."""
    epsilons = np.array([e for e, _ in groups])
    counts = np.array([n for _, n in groups], dtype=float)
    width = min(2.0 * float(np.sum(counts * epsilons)), 2.0 * TAIL_SIGMAS * math.sqrt(float(np.sum(counts * epsilons**2))))
    common = _common_grid(epsilons)
    if common is not None and width / common <= (max_lattice or MAX_LATTICE):
        return common
    length = max_lattice or lattice_length(int(counts.sum()))
    target = max(float(np.max(epsilons)) / GRID_DIVISIONS, width / length)
    # Align the grid with the most frequent epsilon, so that group composes exactly, in one step.
    most = float(epsilons[int(np.argmax(counts))])
    return math.nextafter(most / math.ceil(most / target), math.inf)


def _step_atoms(epsilon: float, count: int, spacing: float, tail: float):
    """Lattice offsets and masses of one group: (offsets, masses, times applied, mass dropped)."""
    ratio = epsilon / spacing
    if _is_aligned(epsilon, spacing):
        multiple = round(ratio)
        # Aligned: RR(multiple * spacing) dominates RR(epsilon); all `count` at once as a binomial.
        loss, log_mass = binomial_loss_atoms(count, multiple * spacing)
        offsets = multiple * (2 * np.arange(count + 1) - count)
        kept = log_mass >= math.log(tail / (count + 1))
        dropped = float(np.sum(np.exp(log_mass[~kept])))
        return offsets[kept], np.exp(log_mass[kept]), 1, dropped
    # Split each RR atom between its lattice neighbours a < eps < b (and -b < -eps < -a),
    # keeping both the P-mass and the Q-mass of the atom.
    low = math.floor(ratio)
    while low * spacing > epsilon:
        low -= 1
    while (low + 1) * spacing < epsilon:
        low += 1
    a, b = low * spacing, (low + 1) * spacing
    log_p, log_1mp = rr_log_probabilities(epsilon)
    # Shares: +eps moves to b with (1 - e^{a-eps}) / (1 - e^{a-b}), to a with the rest;
    # -eps moves to -b with (e^{eps-a} - 1) / (e^{b-a} - 1), to -a with the rest.
    up_to_b = math.expm1(a - epsilon) / math.expm1(a - b)
    up_to_a = math.exp(a - epsilon) * math.expm1(epsilon - b) / math.expm1(a - b)
    down_to_b = math.expm1(epsilon - a) / math.expm1(b - a)
    down_to_a = math.exp(epsilon - a) * math.expm1(b - epsilon) / math.expm1(b - a)
    p, q = math.exp(log_p), math.exp(log_1mp)
    offsets = np.array([-(low + 1), -low, low, low + 1])
    masses = np.array([q * down_to_b, q * down_to_a, p * up_to_a, p * up_to_b]) * (1 + 8 * ULP)
    return offsets, masses, count, 0.0


def _lattice(groups: list[tuple[float, int]], max_lattice: int | None) -> tuple[np.ndarray, np.ndarray, float]:
    spacing = lattice_spacing(groups, max_lattice)
    steps = sum(1 if _is_aligned(e, spacing) else n for e, n in groups)
    tail = TAIL_BUDGET / (2 * steps)
    pmf, offset, dropped, rel_error = np.ones(1), 0, 0.0, 0.0
    for epsilon, count in groups:
        offsets, masses, times, kernel_dropped = _step_atoms(epsilon, count, spacing, tail)
        dropped += kernel_dropped
        low, high = int(offsets.min()), int(offsets.max())
        for _ in range(times):
            pmf, offset = _convolve_sparse(pmf, offsets - low, masses), offset + low
            rel_error += (masses.size + 2) * ULP
            pmf, offset, cut = _trim(pmf, offset, tail, 2 * (high - low) + 64)
            dropped += cut
    loss = (offset + np.arange(pmf.size)) * spacing
    with np.errstate(divide="ignore"):
        log_mass = np.log(pmf) + math.log1p(rel_error + 4 * ULP)
    return loss, log_mass, dropped


def _convolve_sparse(pmf: np.ndarray, shifts: np.ndarray, masses: np.ndarray) -> np.ndarray:
    """pmf convolved with the kernel sum_i masses[i] * (unit at shifts[i]); shifts ascending from 0."""
    size = pmf.size
    out = np.empty(size + int(shifts[-1]))
    np.multiply(pmf, masses[0], out=out[:size])
    out[size:] = 0.0
    scratch = np.empty(size)
    for shift, mass in zip(shifts[1:], masses[1:]):
        np.multiply(pmf, mass, out=scratch)
        segment = out[shift : shift + size]
        np.add(segment, scratch, out=segment)
    return out


def _is_aligned(epsilon: float, spacing: float) -> bool:
    ratio = epsilon / spacing
    multiple = round(ratio)
    return multiple >= 1 and abs(ratio - multiple) <= ALIGN_TOLERANCE * multiple and multiple * spacing >= epsilon


def _trim(pmf: np.ndarray, offset: int, tail: float, window: int) -> tuple[np.ndarray, int, float]:
    """Drop leading and trailing entries whose total mass on each side is at most `tail`.

    Only the outer `window` entries of each side are scanned first (a step
    moves mass by at most that much); the scan widens when all of them go.
    """
    head = _droppable(pmf, tail, window)
    back = _droppable(pmf[::-1], tail, window)
    if head + back >= pmf.size:
        return pmf, offset, 0.0
    cut = math.fsum(pmf[:head]) + math.fsum(pmf[pmf.size - back :])
    return pmf[head : pmf.size - back], offset + head, cut


def _droppable(pmf: np.ndarray, tail: float, window: int) -> int:
    """How many leading entries of `pmf` have total mass at most `tail`."""
    while True:
        window = min(window, pmf.size)
        count = int(np.searchsorted(np.cumsum(pmf[:window]), tail, side="right"))
        if count < window or window == pmf.size:
            return count
        window *= 2


def approx_dp_delta(pairs: Iterable[tuple[float, float]], epsilon_g: float) -> float:
    """delta(epsilon_g) of the composition of (epsilon_i, delta_i)-DP mechanisms (Chourasia et al. Thm 4.6)."""
    return approx_dp_pld(Counter((float(e), float(d)) for e, d in pairs).items()).delta(epsilon_g)


def approx_dp_epsilon(pairs: Iterable[tuple[float, float]], delta: float) -> float:
    """Smallest epsilon >= 0 at which the composition is (epsilon, delta)-DP, rounded up (inf if none)."""
    return approx_dp_pld(Counter((float(e), float(d)) for e, d in pairs).items()).epsilon(delta)


def composition_pairs(composition: Composition) -> list[tuple[tuple[float, float], int]]:
    """((epsilon, delta), count) for every leaf of a composition of pure and approximate DP events."""
    return [((pure_epsilon(event), float(getattr(event, "delta", 0.0))), count) for event, count in composition]


class ChourasiaRecursion(Bound):
    """Any list of pure and (epsilon, delta) events, fixed in advance: Thm 4.6 (see the module docstring). Not a filter."""

    max_events = MAX_ENUMERATED

    name = "chourasia_recursion"
    reference = "Chourasia–Javaid–Sikdar, Thm 4.6 and Cor 4.7 (exact (eps_i, delta_i) composition)"

    def applies(self, composition: Composition) -> bool:
        return composition.only(*PURE_EVENTS, ApproxDP)

    def _pld(self, composition: Composition) -> DiscretePLD:
        if not self.applies(composition):
            kinds = sorted(type(e).__name__ for e, _ in composition)
            raise ValueError(f"{self.name} needs PureDP, ApproxDP, Laplace or BoundedRange events, got {kinds}")
        return approx_dp_pld(composition_pairs(composition))

    def delta(self, composition: Composition, epsilon: float) -> float:
        return self._pld(composition).delta(epsilon)

    def epsilon(self, composition: Composition, delta: float) -> float:
        return self._pld(composition).epsilon(delta)
