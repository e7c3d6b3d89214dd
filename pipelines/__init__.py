"""dpstream's pipelines: job files, planning, the numpy mechanisms, the Beam transforms, runs, reports and the CLI.

The Python API for Beam users is importable from here (loaded on first use, so that `dpstream.pipelines.mechanisms`
and the planner stay usable without Apache Beam):

    import dpstream.pipelines as dp
    budget = dp.Budget(scope=..., epsilon=..., delta=..., bounds=dp.ContributionBounds(...),
                       window=dp.WindowSpec.of("1d", "2013-01-01", "2014-01-01"),
                       releases=[dp.HistogramSpec("daily", partitions=[...])])
    rows = events | dp.ToEvents(user=..., timestamp=..., partition=...) | budget.release("daily")
    budget.run(pipeline)

See `dpstream.pipelines.run.budget` and README.md, "Library use".
"""
from __future__ import annotations

import importlib
from typing import Any

_API = {
    "Budget": "dpstream.pipelines.run.budget",
    "Debit": "dpstream.accounting.ledger.receipts",
    "RunError": "dpstream.pipelines.run.errors",
    "ToEvents": "dpstream.connectors.beam_io",
    "ReadEvents": "dpstream.connectors.beam_io",
    "InputSpec": "dpstream.connectors.readers",
    "ContributionBounds": "dpstream.pipelines.config.specs",
    "WindowSpec": "dpstream.pipelines.config.specs",
    "HistogramSpec": "dpstream.pipelines.config.specs",
    "TopKSpec": "dpstream.pipelines.config.specs",
    "PeakSpec": "dpstream.pipelines.config.specs",
    "SvtSpec": "dpstream.pipelines.config.specs",
    "QuantilesSpec": "dpstream.pipelines.config.specs",
    "Metric": "dpstream.pipelines.config.specs",
    "Noise": "dpstream.pipelines.config.specs",
    "Selection": "dpstream.pipelines.config.specs",
    "SvtMetric": "dpstream.pipelines.config.specs",
    "SvtMethod": "dpstream.pipelines.config.specs",
    "SpecError": "dpstream.pipelines.config.specs",
    "PlanningError": "dpstream.pipelines.planning",
    "plan_job": "dpstream.pipelines.planning",
}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    """The API names above, imported from their modules on first use."""
    if name not in _API:
        raise AttributeError(f"module 'dpstream.pipelines' has no attribute {name!r}")
    return getattr(importlib.import_module(_API[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
