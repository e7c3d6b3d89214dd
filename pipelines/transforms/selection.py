"""Partitions selected by their noisy number of distinct users, for the releases over unknown partitions whose
values are not the thresholded sums themselves (quantiles, means, variances).

Privacy: Gaussian thresholding (`mechanisms.gaussian_threshold`) of per-partition user counts bounded under
`metric_bounds(users)` (each user adds 1 to at most L0 partitions per window): event GaussianThreshold(sigma,
sqrt(L0), delta) per window, as planned (`planning.histogram.SelectionRelease`). What a release then computes on
the selected partitions composes after it: for every selected set, one user still changes at most L0 of the
selected partitions' inputs (docs/proofs/pipelines.mechanisms.quantiles.exponential_quantiles.md, "Unknown
partitions").
Proof: docs/proofs/accounting.events.GaussianThreshold.md.
"""
from __future__ import annotations

import pandas as pd

from dpstream.pipelines import mechanisms
from dpstream.pipelines.mechanisms.noise import SecureRandom
from dpstream.pipelines.planning.histogram import UserSelection


def selected_by_users(users: pd.Series, selection: UserSelection, max_partitions: int,
                      rng: SecureRandom) -> list[str]:
    """The partitions (the index of `users`, bounded distinct users per partition) whose noisy number of users
    clears Gaussian thresholding's cutoff (threshold one user), in index order."""
    observed = [str(p) for p in users.index]
    kept, _ = mechanisms.gaussian_threshold(users.to_numpy(), selection.sigma, 1.0, rng, delta=selection.delta,
                                            max_partitions=max_partitions).value
    return [observed[i] for i in kept]
