"""What every composition bound of the RDP and zCDP tests must satisfy: published optima and finite answers at scale."""
import math

from dpstream.accounting.composition import Composition
from dpstream.accounting.events import BoundedRange, PureDP, SelfComposed

# name -> (composition, epsilon at delta 1e-6 that no valid bound may go below)
PUBLISHED_OPTIMA = {
    # optimal composition 2.079056 (Cesar–Rogers Sec 6.2, Kairouz et al.)
    "pure-25x0.1": (Composition.of(SelfComposed(PureDP(0.1), 25)), 2.0791),
    # the non-adaptive optimum 7.71332 (Dong–Durfee–Rogers Thm 3) is below every adaptive bound
    "bounded-range-10x1": (Composition.of(SelfComposed(BoundedRange(1.0), 10)), 7.713),
}


def assert_finite_round_trip(bound, composition: Composition, delta: float) -> None:
    """epsilon at `delta` is finite and positive, and the delta at that epsilon lies in (0, delta]."""
    eps = bound.epsilon(composition, delta)
    back = bound.delta(composition, eps)
    assert math.isfinite(eps) and eps > 0 and 0 < back <= delta, f"epsilon {eps} at delta {delta}, delta {back} back"
