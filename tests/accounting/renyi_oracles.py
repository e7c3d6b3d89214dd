"""mpmath reference values for the Rényi and zCDP tests (test oracles only, never used by the library)."""
import mpmath

DPS = 60


def mp(x):
    return mpmath.mpf(x)


def laplace_rdp(eps, alpha):
    """Mironov 2017, Prop 6, at 60 digits."""
    with mpmath.workdps(DPS):
        eps, alpha = mp(eps), mp(alpha)
        inner = alpha / (2 * alpha - 1) * mpmath.exp((alpha - 1) * eps) + (alpha - 1) / (2 * alpha - 1) * mpmath.exp(
            -alpha * eps
        )
        return mpmath.log(inner) / (alpha - 1)


def two_point_rdp(p0, p1, alpha):
    """D_alpha between Bernoulli-type laws (p0, 1 - p0) and (p1, 1 - p1)."""
    with mpmath.workdps(DPS):
        alpha = mp(alpha)
        inner = p0**alpha * p1 ** (1 - alpha) + (1 - p0) ** alpha * (1 - p1) ** (1 - alpha)
        return mpmath.log(inner) / (alpha - 1)


def randomized_response_rdp(eps, alpha):
    """RDP of eps-randomized response (Mironov 2017, Prop 5), at 60 digits."""
    with mpmath.workdps(DPS):
        eps = mp(eps)
        p = mpmath.exp(eps) / (1 + mpmath.exp(eps))
        return two_point_rdp(p, 1 - p, alpha)


def generalized_rr_rdp(eps, t, alpha, reverse=False):
    """D_alpha(RR_{eps,t}(0) || RR_{eps,t}(1)) from Dong–Durfee–Rogers Def 2.4 (or the reversed order)."""
    with mpmath.workdps(DPS):
        eps, t = mp(eps), mp(t)
        q = (1 - mpmath.exp(t - eps)) / (1 - mpmath.exp(-eps))
        p = (mpmath.exp(-t) - mpmath.exp(-eps)) / (1 - mpmath.exp(-eps))
        return two_point_rdp(p, q, alpha) if reverse else two_point_rdp(q, p, alpha)


def bounded_range_rdp(eps, alpha, reverse=False):
    """sup over t in [0, eps] by golden-section search at 60 digits (the function is unimodal in t)."""
    with mpmath.workdps(DPS):
        lo, hi = mp(0), mp(eps)
        ratio = (mpmath.sqrt(5) - 1) / 2
        f = lambda t: generalized_rr_rdp(eps, t, alpha, reverse)  # noqa: E731
        x1, x2 = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        f1, f2 = f(x1), f(x2)
        for _ in range(200):
            if f1 < f2:
                lo, x1, f1 = x1, x2, f2
                x2 = lo + ratio * (hi - lo)
                f2 = f(x2)
            else:
                hi, x2, f2 = x2, x1, f1
                x1 = hi - ratio * (hi - lo)
                f1 = f(x1)
        return max(f1, f2)


def conversion_epsilon(rdp_value, alpha, delta):
    """Canonne–Kamath–Steinke 2020, Prop 12, solved for epsilon at one order."""
    with mpmath.workdps(DPS):
        alpha = mp(alpha)
        return rdp_value + mpmath.log((alpha - 1) / alpha) - (mpmath.log(delta) + mpmath.log(alpha)) / (alpha - 1)


def conversion_delta(rdp_value, alpha, epsilon):
    """Canonne–Kamath–Steinke 2020, Prop 12 at one order."""
    with mpmath.workdps(DPS):
        alpha = mp(alpha)
        return mpmath.exp((alpha - 1) * (rdp_value - epsilon)) / (alpha - 1) * (1 - 1 / alpha) ** alpha


def minimise_over_log_gap(f, low=-6.0, high=8.0, points=1401):
    """Brute force: min of f(alpha) over alpha = 1 + 10^u on a uniform u-grid, then golden refinement."""
    with mpmath.workdps(DPS):
        grid = [mp(low) + (mp(high) - mp(low)) * i / (points - 1) for i in range(points)]
        values = [f(1 + mpmath.power(10, u)) for u in grid]
        index = min(range(points), key=lambda i: values[i])
        lo, hi = grid[max(index - 1, 0)], grid[min(index + 1, points - 1)]
        ratio = (mpmath.sqrt(5) - 1) / 2
        g = lambda u: f(1 + mpmath.power(10, u))  # noqa: E731
        x1, x2 = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        g1, g2 = g(x1), g(x2)
        for _ in range(120):
            if g1 > g2:
                lo, x1, g1 = x1, x2, g2
                x2 = lo + ratio * (hi - lo)
                g2 = g(x2)
            else:
                hi, x2, g2 = x2, x1, g1
                x1 = hi - ratio * (hi - lo)
                g1 = g(x1)
        return min(values[index], g1, g2)


def kov_delta(k, eps, eps_g):
    """Exact optimal delta of k adaptive eps-DP mechanisms at eps_g (Kairouz–Oh–Viswanath; Cesar–Rogers Thm 1)."""
    with mpmath.workdps(DPS):
        eps, eps_g = mp(eps), mp(eps_g)
        total = mp(0)
        for ell in range(k + 1):
            term = mpmath.exp(ell * eps) - mpmath.exp(eps_g + (k - ell) * eps)
            if term > 0:
                total += mpmath.binomial(k, ell) * term
        return total / (1 + mpmath.exp(eps)) ** k
