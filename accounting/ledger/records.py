"""What the ledger returns: spend results, release records and public views of scopes and monitors."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa

from dpstream.accounting.events import Event
from dpstream.accounting.filters import PrivacyFilter
from dpstream.accounting.ledger.units import PrivacyUnit
from dpstream.accounting.periods import PeriodGrid, Periods

PERIOD_SCOPE = "period-scope"  # the `filter` tag of a period scope's filter_state JSON


def scope_config(row: sa.Row) -> tuple[PeriodGrid | None, dict[str, Any]]:
    """(the period grid or None for a plain scope, the filter dict: state, or a period's fresh template)."""
    data = json.loads(row.filter_state)
    if data.get("filter") == PERIOD_SCOPE:
        return PeriodGrid.from_dict(data), data["template"]
    return None, data


def largest_spent(states: list[PrivacyFilter]) -> dict[str, float]:
    """Per state figure, the most spent over `states`: max_spent_* (largest), min_remaining_* (smallest)."""
    out: dict[str, float] = {}
    for budget_filter in states:
        public = budget_filter.public_dict()
        for name in budget_filter.to_dict()["state"]:
            value = public.get(name)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if name.startswith("remaining"):
                key = f"min_{name}"
                out[key] = min(out.get(key, value), value)
            else:
                key = f"max_{name}"
                out[key] = max(out.get(key, value), value)
    return out


@dataclass(frozen=True)
class SpendResult:
    """Whether a release was admitted, and the one line that says so."""

    admitted: bool
    scope: str
    label: str
    release_id: int | None
    message: str


RUNNING, PUBLISHED, FAILED, EXPIRED, REFUSED, RELEASED = "running", "published", "failed", "expired", "refused", "released"
RUN_OUTCOMES = (RUNNING, PUBLISHED, FAILED, EXPIRED, REFUSED, RELEASED)
"""A run's outcomes (`Ledger.open_run`): running (it holds a lease), published (its release was debited), failed
(it ended with an error before publishing), expired (its lease ran out: killed or cut off), refused (the scope
refused its debit at publication), released (an operator ended its lease, `dpstream budget release`). Only
published runs are debited."""


@dataclass(frozen=True)
class RunRecord:
    """One run (`Ledger.runs`): label, outcome, the event its publication debits, what it leases (monitors, an
    output location) until when, the release its publication debited, and why it ended otherwise."""

    run_id: int
    scope: str
    label: str
    status: str
    time: str
    finished: str | None
    event: Event
    output: str | None
    monitors: tuple[str, ...]
    lease_until: float
    monitors_pending: bool
    release_id: int | None
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run_id, "scope": self.scope, "label": self.label, "outcome": self.status,
                "time": self.time, "finished": self.finished, "events": self.event.to_dict(), "output": self.output,
                "monitors": list(self.monitors), "lease_until": self.lease_until,
                "monitors_pending": self.monitors_pending, "release_id": self.release_id, "reason": self.reason}


@dataclass(frozen=True)
class RunTicket:
    """The answer to `Ledger.open_run`: admitted (the run holds its leases; nothing is debited yet) or not, the
    run's id and the one line that says so."""

    admitted: bool
    scope: str
    label: str
    run_id: int | None
    message: str


@dataclass(frozen=True)
class ReleaseRecord:
    """One admitted release: its label, UTC time, events and the scope's public filter state after it.

    On a period scope, `periods` are the periods it was charged to (contiguous runs) and
    `budget_after` the largest figures over those periods after it.
    """

    release_id: int
    scope: str
    label: str
    time: str
    event: Event
    budget_after: dict[str, Any]
    periods: tuple[Periods, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "id": self.release_id,
            "scope": self.scope,
            "label": self.label,
            "time": self.time,
            "events": self.event.to_dict(),
            "budget_after": self.budget_after,
        }
        if self.periods is not None:
            out["periods"] = [run.to_dict() for run in self.periods]
        return out


@dataclass(frozen=True)
class MonitorView:
    """A monitor's public view: its budget, halted or not, which run holds its lease (`checked_out`, a run id;
    `legacy_hold`: a release id of an older dpstream's run that never checked it in), and its filter's public figures
    (FSRC: the instances admitted and the delta they used; `legacy`: why a record sealed by an older dpstream
    cannot be continued). Never its realised spend."""

    name: str
    epsilon: float
    delta: float
    halted: bool
    checked_out: int | None
    lease_until: float | None = None
    legacy_hold: int | None = None
    instances: int | None = None
    delta_used: float | None = None
    legacy: str | None = None
    stream: int | None = None  # the live stream answering it (`Ledger.open_stream` with monitors)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; the optional figures only when present."""
        out = {"name": self.name, "epsilon": self.epsilon, "delta": self.delta, "halted": self.halted,
               "checked_out": self.checked_out}
        out.update({key: getattr(self, key)
                    for key in ("lease_until", "legacy_hold", "instances", "delta_used", "legacy", "stream")
                    if getattr(self, key) is not None})
        return out


@dataclass(frozen=True)
class PeriodsView:
    """Public figures over a period scope's periods: how many were spent on and halted, the largest figure spent
    in any one period, and the first and last period spent on (their starts)."""

    spent: int
    halted: int
    largest_spent: dict[str, float]
    first: str | None
    last: str | None


@dataclass(frozen=True)
class ScopeView:
    """A scope's public view (`Ledger.show`): budget, filter rule and public state, releases, monitors; on a period
    scope, its period grid (`unit_period`) and `periods`; the privacy unit it serves (`unit`; None: a plain scope
    whose first job has not fixed it yet) and how it was fixed (`unit_fixed`)."""

    scope: str
    epsilon: float
    delta: float
    filter: str
    rule: str
    state: dict[str, Any]
    halted: bool
    releases: int
    monitors: tuple[MonitorView, ...]
    created_at: str
    unit_period: PeriodGrid | None = None
    periods: PeriodsView | None = None
    retired: str | None = None  # "AT (REASON)" once `budget retire` ended the scope
    unit: PrivacyUnit | None = None
    unit_fixed: str | None = None  # "at AT by 'LABEL'", or "by its budget per P period"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as `dpstream budget show --json` prints it."""
        out = {"scope": self.scope, "epsilon": self.epsilon, "delta": self.delta, "filter": self.filter,
               "rule": self.rule, "state": self.state, "halted": self.halted, "releases": self.releases,
               "monitors": [m.to_dict() for m in self.monitors], "created_at": self.created_at,
               "unit_period": None if self.unit_period is None else self.unit_period.text,
               "unit_period_grid": None if self.unit_period is None else self.unit_period.to_dict(), "retired": self.retired,
               "privacy_unit": (None if self.unit_fixed is None else
                                {"unit": "unknown", "fixed": self.unit_fixed} if self.unit is None else
                                {**self.unit.to_dict(), "text": self.unit.text, "fixed": self.unit_fixed})}
        if self.periods is not None:
            out.update({"periods_spent": self.periods.spent, "periods_halted": self.periods.halted,
                        "largest_spent": self.periods.largest_spent, "first_period": self.periods.first,
                        "last_period": self.periods.last})
        return out


@dataclass(frozen=True)
class MonitorRecord:
    """A monitor's sealed record: its state (the monitor's own JSON, opaque to the ledger but for its `filter`),
    the window start its next run continues at, and the ledger release whose run holds it (None: checked in).
    Sealed: the state holds the realised spend, so the record is never published."""

    state: dict[str, Any]
    next_start: float | None = None
    checked_out: int | None = None

    def to_json(self) -> str:
        return json.dumps({"monitor": self.state, "next_start": self.next_start, "checked_out": self.checked_out})

    @classmethod
    def from_json(cls, text: str) -> "MonitorRecord":
        data = json.loads(text)
        return cls(data.get("monitor", {}), data.get("next_start"), data.get("checked_out"))


def monitor_view(row: sa.Row, lease: tuple[int, float] | None, stream: int | None = None) -> MonitorView:
    """The public view of a monitor row (`lease`: the run holding it and until when; `stream`: the live stream
    answering it): only the filter's `public_dict` is read from the sealed record.

    A record whose filter cannot be loaded (sealed by an older dpstream under the printed FSRC rule, which
    charges delta once) is shown with `legacy` set instead.
    """
    record = MonitorRecord.from_json(row.sealed_state)
    view = MonitorView(row.name, row.epsilon, row.delta, bool(row.halted), None if lease is None else lease[0],
                       None if lease is None else lease[1], record.checked_out, stream=stream)
    sealed_filter = record.state.get("filter")
    if sealed_filter is None:
        return view
    try:
        public = PrivacyFilter.from_dict(sealed_filter).public_dict()
    except ValueError as err:
        return replace(view, legacy=f"cannot be continued: {err}")
    return replace(view, instances=public.get("instances"), delta_used=public.get("delta_used"))
