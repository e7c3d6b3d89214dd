"""The bounds the accountant chooses from, in the order they are reported."""
from __future__ import annotations

from accounting.bounds import Bound
from accounting.bounds.approx_dp import ChourasiaRecursion
from accounting.bounds.basic import BasicComposition
from accounting.bounds.bounded_range import MGFBound, OptimalNonadaptiveBR, OptKL
from accounting.bounds.cesar_rogers import MixedMGF, MixedNonadaptive, MixedSetwise, SingleBRAdaptive
from accounting.bounds.gaussian import ExactGaussian
from accounting.bounds.pld import PLDBound
from accounting.bounds.pure_dp import KairouzOhViswanath
from accounting.bounds.rdp import RDPComposition
from accounting.bounds.zcdp import ZCDPComposition


def default_bounds() -> tuple[Bound, ...]:
    return (
        BasicComposition(),
        ExactGaussian(),
        KairouzOhViswanath(),
        ChourasiaRecursion(),
        OptimalNonadaptiveBR(),
        OptKL(),
        MGFBound(),
        MixedNonadaptive(),
        SingleBRAdaptive(),
        MixedSetwise(),
        MixedMGF(),
        ZCDPComposition(),
        RDPComposition(),
        PLDBound(),
    )
