"""mpmath oracles for pure and approximate DP composition (test-only; 40 digits)."""
import itertools

import mpmath

mpmath.mp.dps = 40


def kov_delta_mp(k, eps, eps_g):
    """Kairouz–Oh–Viswanath Thm 3.3 in the sum form of Cesar–Rogers Thm 1, valid for every real eps_g."""
    eps, eps_g = mpmath.mpf(eps), mpmath.mpf(eps_g)
    first = max(0, int(mpmath.floor((eps_g + k * eps) / (2 * eps))) - 1)
    comb = mpmath.binomial(k, first)
    total = mpmath.mpf(0)
    for ell in range(first, k + 1):
        term = comb * (mpmath.exp(ell * eps) - mpmath.exp(eps_g + (k - ell) * eps))
        total += max(term, 0)
        comb = comb * (k - ell) / (ell + 1)
    return total / (1 + mpmath.exp(eps)) ** k


def rr_sign_atoms_mp(pairs):
    """The 2^k (loss, probability) atoms of S = sum +-eps_i with P(+eps_i) = e^eps_i / (1 + e^eps_i)."""
    atoms = [(mpmath.mpf(0), mpmath.mpf(1))]
    for eps, _ in pairs:
        eps = mpmath.mpf(eps)
        p = mpmath.exp(eps) / (1 + mpmath.exp(eps))
        atoms = [(z + eps, w * p) for z, w in atoms] + [(z - eps, w * (1 - p)) for z, w in atoms]
    return atoms


def rr_sign_enumeration_mp(pairs, t, atoms=None):
    """Thm 4.6 by brute force over the 2^k sign patterns of S = sum +-eps_i, plus the delta atom."""
    t = mpmath.mpf(t)
    keep = mpmath.fprod(1 - mpmath.mpf(d) for _, d in pairs)
    atoms = rr_sign_atoms_mp(pairs) if atoms is None else atoms
    total = mpmath.fsum(w * (1 - mpmath.exp(t - z)) for z, w in atoms if z > t)
    return (1 - keep) + keep * total


def rr_product_hockey_stick_mp(pairs, t):
    """sup_S P(S) - e^t Q(S) for the product of the randomized responses RR(eps_i, delta_i) themselves.

    RR(eps, delta) has four outcomes with P = (delta, (1-delta) p, (1-delta)(1-p), 0) and
    Q = (0, (1-delta)(1-p), (1-delta) p, delta), p = e^eps / (1 + e^eps) (Chourasia et al. eq. 38).
    """
    factor = mpmath.exp(mpmath.mpf(t))
    outcomes = []
    for eps, delta in pairs:
        eps, delta = mpmath.mpf(eps), mpmath.mpf(delta)
        p = mpmath.exp(eps) / (1 + mpmath.exp(eps))
        outcomes.append(
            [(delta, 0), ((1 - delta) * p, (1 - delta) * (1 - p)), ((1 - delta) * (1 - p), (1 - delta) * p), (0, delta)]
        )
    total = mpmath.mpf(0)
    for combo in itertools.product(*outcomes):
        p_mass = mpmath.fprod(o[0] for o in combo)
        q_mass = mpmath.fprod(o[1] for o in combo)
        total += max(p_mass - factor * q_mass, 0)
    return total


def smallest_epsilon_mp(delta_of_t, target, upper, iterations=80):
    """Smallest t >= 0 with delta(t) <= target, by mpmath bisection (exact to ~upper * 2^-80)."""
    target = mpmath.mpf(target)
    if delta_of_t(0) <= target:
        return mpmath.mpf(0)
    lo, hi = mpmath.mpf(0), mpmath.mpf(upper)
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if delta_of_t(mid) <= target:
            hi = mid
        else:
            lo = mid
    return lo
