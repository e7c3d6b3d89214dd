"""The bounds the accountant chooses from, in the order they are reported."""
from __future__ import annotations

from dpstream.accounting.bounds import Bound
from dpstream.accounting.bounds.approx_dp import ChourasiaRecursion
from dpstream.accounting.bounds.basic import BasicComposition
from dpstream.accounting.bounds.bounded_range import MGFBound, OptimalNonadaptiveBR, OptKL
from dpstream.accounting.bounds.cesar_rogers import MixedMGF, MixedNonadaptive, MixedSetwise, SingleBRAdaptive
from dpstream.accounting.bounds.gaussian import ExactGaussian
from dpstream.accounting.bounds.pld import PLDBound
from dpstream.accounting.bounds.pure_dp import KairouzOhViswanath
from dpstream.accounting.bounds.rdp import RDPComposition
from dpstream.accounting.bounds.zcdp import ZCDPComposition


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
