"""The release graph: one private transform per planned release (`TRANSFORMS`, by plan type), applied to the
event batches.

`release_transform` gives one release's transform and `release_graph` applies every release of a plan; the
`Budget` (`dpstream.pipelines.run.budget`) and through it the job runner use them. They only wire transforms
with the plan's numbers, so nothing data-dependent can fail or spend here.
"""
from __future__ import annotations

from typing import Any, Mapping

import apache_beam as beam

from dpstream.pipelines.config.specs import ContributionBounds, ReleaseSpec, WindowSpec
from dpstream.pipelines.planning import (
    HistogramPlan,
    JobPlan,
    PeakPlan,
    QuantilesPlan,
    ReleasePlan,
    SvtPlan,
    TopKPlan,
    WindowCap,
)
from dpstream.pipelines.transforms.aggregation import WindowedRelease
from dpstream.pipelines.transforms.histogram import PrivateHistogram
from dpstream.pipelines.transforms.peak import PeakWindow
from dpstream.pipelines.transforms.quantiles import PrivateQuantiles
from dpstream.pipelines.transforms.svt import STATE, SparseVectorAlerts
from dpstream.pipelines.transforms.topk import PrivateTopK

TRANSFORMS: dict[type, type[WindowedRelease]] = {HistogramPlan: PrivateHistogram, TopKPlan: PrivateTopK, PeakPlan: PeakWindow,
                                                 QuantilesPlan: PrivateQuantiles}
"""The transform of each plan type but svt (whose transform also takes the monitor's sealed state)."""


def release_columns(planned: ReleasePlan) -> tuple[str, ...]:
    """The columns of release `planned`'s rows (what its file's header holds, rows or none)."""
    kind = SparseVectorAlerts if isinstance(planned, SvtPlan) else TRANSFORMS[type(planned)]
    return kind.columns(planned)


def release_transform(planned: ReleasePlan, bounds: ContributionBounds, window: WindowSpec, seed: int | None,
                      shards: int = 1, monitor_state: Mapping[str, Any] | None = None,
                      cap: WindowCap | None = None, snapshots: str | None = None,
                      paid_from: int | None = None) -> WindowedRelease:
    """The private transform of one planned release (`TRANSFORMS` by plan type); svt: its monitor continues
    `monitor_state` (None: a new monitor) and the transform yields {"alerts": rows, STATE: sealed state};
    streaming, it also seals its state after each window into the `snapshots` directory, or, on a stream that
    pays as it releases, answers from window `paid_from` and sends each row with its sealed state.

    `cap`: the plan's cross-window cap (`JobPlan.window_cap`), which every kind but svt applies in bounding
    (an svt monitor's filter is charged the same however few windows a unit reaches, so a cap would only drop
    data)."""
    if isinstance(planned, SvtPlan):
        return SparseVectorAlerts(planned, bounds, window, seed, shards, monitor_state, snapshots, paid_from)
    return TRANSFORMS[type(planned)](planned, bounds, window, seed, shards, cap=cap)


def release_graph(
    batches: beam.PCollection,
    releases: tuple[ReleaseSpec, ...],
    plan: JobPlan,
    bounds: ContributionBounds,
    window: WindowSpec,
    seed: int | None,
    shards: int = 1,
    monitor_states: Mapping[str, Mapping[str, Any] | None] | None = None,
    monitor_snapshots: Mapping[str, str] | None = None,
    paid_from: Mapping[str, int] | None = None,
) -> tuple[dict[str, beam.PCollection], dict[str, beam.PCollection]]:
    """(release name -> rows, svt release name -> its sealed state after the run), for every release of the job.

    `batches`: pyarrow RecordBatches in EVENT_SCHEMA. `plan`: from `planning.plan_job` with the same releases,
    bounds and window. `seed`: None in production (OS CSPRNG); an integer only in tests, where every
    (release, window) noise stream and every sampling key is derived from it, so batch and streaming runs give
    the same rows. `monitor_states`: svt release name -> the monitor's sealed state from the ledger (absent or
    None: a new monitor). `monitor_snapshots`: svt release name -> where a streaming monitor seals its state
    after each window (`svt.snapshot_path`). `paid_from`: on a stream that pays as it releases, svt release name ->
    the window its monitor answers next (absent: 0); the monitors then send each alert row with their sealed
    state (`svt.SparseVectorAlerts`).
    """
    if plan.bounds != bounds or plan.window != window:
        raise ValueError(f"the plan was made for bounds={plan.bounds} and window={plan.window}, got bounds={bounds} and window={window}")
    outputs, states = {}, {}
    monitor_states = monitor_states or {}
    for spec in releases:
        planned = plan[spec.name]
        if planned.spec != spec:
            raise ValueError(f"release {spec.name!r} differs from the planned one: planned {planned.spec}, got {spec}")
        transform = release_transform(planned, bounds, window, seed, shards, monitor_states.get(spec.name),
                                      plan.window_cap, (monitor_snapshots or {}).get(spec.name),
                                      None if paid_from is None else paid_from.get(spec.name, 0))
        released = batches | f"Release {spec.name}" >> transform
        if isinstance(planned, SvtPlan):
            outputs[spec.name], states[spec.name] = released["alerts"], released[STATE]
        else:
            outputs[spec.name] = released
    return outputs, states
