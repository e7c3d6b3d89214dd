"""Privacy filters: admission rules valid when privacy parameters are chosen adaptively.

The `Accountant` composes releases whose parameters were fixed in advance. When
a later release's parameters may depend on earlier outputs (a budget scope's
releases across jobs, an SVT monitor) the admission rule must be a filter
proven valid for fully adaptive composition. Composing exact privacy curves
and stopping at the budget is not such a rule in general (Regehr et al.
2026, Cors 1-4), so no filter here does that.

Event filters (`admits(event)`, `try_spend(event)`):
  pure         PureDPFilter       sum of epsilons <= epsilon           (Regehr et al. Remark 3)
  approx       ApproxDPFilter     sums of epsilons and deltas           (residue filter on R_{eps,delta})
  zcdp         ZCDPFilter         sum of rho <= rho                     (Feldman–Zrnic; Regehr et al. Remark 4)
  whitehouse   WhitehouseFilter   approximate zCDP, halts at refusal    (Whitehouse et al. 2023)
  gdp          GDPFilter          sum of mu^2 <= mu^2                   (Regehr et al. Remark 2)
  gdp-residue  GDPResidueFilter   largest GDP residue                   (Regehr et al. Thm 5)
Monitor filter: FSRCFilter (`admits(eps_max, delta)`, `charge(eps_post)`; Lebensold–Precup–Balle Alg. 4 with
a delta budget: their Thm 11 as printed charges delta once and is false, see docs/proofs/accounting.filters.fsrc.FSRCFilter.md).
"""
from __future__ import annotations

from dpstream.accounting.filters.base import EventFilter, PrivacyFilter, UnsupportedByFilterError, exact_decimal
from dpstream.accounting.filters.fsrc import FSRCFilter
from dpstream.accounting.filters.gdp import GDPFilter, GDPResidueFilter, gdp_mu_for, randomized_response_mu
from dpstream.accounting.filters.pure import ApproxDPFilter, PureDPFilter
from dpstream.accounting.filters.zcdp import WhitehouseFilter, ZCDPFilter, zcdp_rho_for

FILTER_CLASSES: dict[str, type[PrivacyFilter]] = {
    cls.kind: cls
    for cls in (PureDPFilter, ApproxDPFilter, ZCDPFilter, WhitehouseFilter, GDPFilter, GDPResidueFilter, FSRCFilter)
}

SCOPE_FILTERS: tuple[str, ...] = ("pure", "approx", "zcdp", "whitehouse", "gdp", "gdp-residue")


def default_scope_filter(delta: float) -> str:
    """The filter a budget scope gets unless told otherwise: `pure` when delta is 0, else `approx`."""
    return "pure" if delta == 0 else "approx"


def scope_filter(kind: str, epsilon: float, delta: float, **options: float) -> EventFilter:
    """The event filter `kind` whose whole run is (epsilon, delta)-DP.

    pure: epsilon-DP (delta unused). approx: options `release_delta`.
    zcdp, gdp, gdp-residue: the largest rho or mu that implies (epsilon, delta)-DP.
    whitehouse: option `conversion_delta`.
    """
    if kind not in SCOPE_FILTERS:
        raise ValueError(f"unknown filter {kind!r}; allowed: {', '.join(SCOPE_FILTERS)}")
    allowed_options = {"approx": {"release_delta"}, "whitehouse": {"conversion_delta"}}.get(kind, set())
    unknown = sorted(set(options) - allowed_options)
    if unknown:
        raise ValueError(f"filter {kind!r} takes options {sorted(allowed_options)}, got {unknown}")
    if kind == "pure":
        return PureDPFilter(epsilon)
    if kind == "approx":
        return ApproxDPFilter(epsilon, delta, **options)
    if delta == 0:
        raise ValueError(f"filter {kind!r} needs delta > 0, got 0")
    if kind == "whitehouse":
        return WhitehouseFilter(epsilon, delta, **options)
    return {
        "zcdp": ZCDPFilter.for_budget, "gdp": GDPFilter.for_budget, "gdp-residue": GDPResidueFilter.for_budget
    }[kind](epsilon, delta)


__all__ = [
    "ApproxDPFilter",
    "EventFilter",
    "FILTER_CLASSES",
    "FSRCFilter",
    "GDPFilter",
    "GDPResidueFilter",
    "PrivacyFilter",
    "PureDPFilter",
    "SCOPE_FILTERS",
    "UnsupportedByFilterError",
    "WhitehouseFilter",
    "ZCDPFilter",
    "default_scope_filter",
    "exact_decimal",
    "gdp_mu_for",
    "randomized_response_mu",
    "scope_filter",
    "zcdp_rho_for",
]
