"""The planner's one error type."""
from __future__ import annotations


class PlanningError(ValueError):
    """A job's releases cannot be planned; the message names the release."""
