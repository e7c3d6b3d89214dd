"""Planning: every release's mechanism and noise, fixed from public values before any data is read.

`plan_job` (module `job`) calibrates all releases of a job together; each release kind has a planner module
(`histogram`, `topk`, `peak`, `svt`, `quantiles`) that says what the release costs and builds its plan. `context` holds what
every planner reads, `grid` the noise adjustments for the grid, `windows` the window and period counts.
"""
from __future__ import annotations

from dpstream.pipelines.planning.errors import PlanningError
from dpstream.pipelines.planning.histogram import HistogramPlan
from dpstream.pipelines.planning.job import PLANNERS, JobPlan, ReleasePlan, plan_job
from dpstream.pipelines.planning.peak import PeakPlan
from dpstream.pipelines.planning.quantiles import QuantilesPlan
from dpstream.pipelines.planning.svt import SvtPlan
from dpstream.pipelines.planning.topk import TopKPlan
from dpstream.pipelines.planning.windows import WindowCap

__all__ = ["PLANNERS", "HistogramPlan", "JobPlan", "PeakPlan", "PlanningError", "QuantilesPlan", "ReleasePlan", "SvtPlan",
           "TopKPlan",
           "WindowCap", "plan_job"]
