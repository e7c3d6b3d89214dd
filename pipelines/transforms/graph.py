"""The release graph of a job: one private transform per planned release, applied to the event batches.

`release_graph` is the entry point the job runner calls after the plan was
debited from the ledger (`private_releases` when no svt state is needed): it only wires transforms with the plan's numbers, so
nothing data-dependent can fail or spend here.
"""
from __future__ import annotations

from typing import Any, Mapping

import apache_beam as beam

from dpstream.pipelines.transforms.histogram import PrivateHistogram
from dpstream.pipelines.transforms.peak import PeakWindow
from dpstream.pipelines.planning import HistogramPlan, JobPlan, PeakPlan, SvtPlan, TopKPlan
from dpstream.pipelines.config.specs import ContributionBounds, ReleaseSpec, WindowSpec
from dpstream.pipelines.transforms.svt import STATE, SparseVectorAlerts
from dpstream.pipelines.transforms.topk import PrivateTopK

_TRANSFORMS = {HistogramPlan: PrivateHistogram, TopKPlan: PrivateTopK, PeakPlan: PeakWindow}


def private_releases(
    batches: beam.PCollection,
    releases: tuple[ReleaseSpec, ...],
    plan: JobPlan,
    bounds: ContributionBounds,
    window: WindowSpec,
    seed: int | None,
    shards: int = 1,
) -> dict[str, beam.PCollection]:
    """Release name -> PCollection of plain dict rows, for every release of the job (new svt monitors).

    `release_graph` also returns the svt monitors' sealed states.
    """
    return release_graph(batches, releases, plan, bounds, window, seed, shards)[0]


def release_graph(
    batches: beam.PCollection,
    releases: tuple[ReleaseSpec, ...],
    plan: JobPlan,
    bounds: ContributionBounds,
    window: WindowSpec,
    seed: int | None,
    shards: int = 1,
    monitor_states: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> tuple[dict[str, beam.PCollection], dict[str, beam.PCollection]]:
    """(release name -> rows, svt release name -> its sealed state after the run), for every release of the job.

    `batches`: pyarrow RecordBatches in EVENT_SCHEMA. `plan`: from `planning.plan_job`
    with the same releases, bounds and window. `seed`: None in production (OS
    CSPRNG); an integer only in tests, where every (release, window) noise
    stream and every sampling key is derived from it, so batch and streaming
    runs give the same rows. `monitor_states`: svt release name -> the
    monitor's sealed state from the ledger (absent or None: a new monitor).
    """
    if plan.bounds != bounds or plan.window != window:
        raise ValueError(f"the plan was made for bounds={plan.bounds} and window={plan.window}, got bounds={bounds} and window={window}")
    outputs, states = {}, {}
    monitor_states = monitor_states or {}
    for spec in releases:
        planned = plan[spec.name]
        if planned.spec != spec:
            raise ValueError(f"release {spec.name!r} differs from the planned one: planned {planned.spec}, got {spec}")
        if isinstance(planned, SvtPlan):
            transform = SparseVectorAlerts(planned, bounds, window, seed, shards, monitor_states.get(spec.name))
            released = batches | f"Release {spec.name}" >> transform
            outputs[spec.name], states[spec.name] = released["alerts"], released[STATE]
            continue
        transform = _TRANSFORMS[type(planned)](planned, bounds, window, seed, shards)
        outputs[spec.name] = batches | f"Release {spec.name}" >> transform
    return outputs, states
