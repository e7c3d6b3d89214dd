"""A budget scope's privacy unit (`PrivacyUnit`): a user, or a user x period on one grid, and the check that every
job on a scope has that unit.

A plain scope has one filter, charged each job's cost per unit; that bounds the loss of ONE unit only. A job
priced per user x period on another grid (another length, time zone, or start of its fixed periods) costs a unit
of the scope more than it is charged: Job A daily from midnight and job B daily from noon, 0.5 each, charge the
filter 1.0 while the unit (user, Jan 2 from midnight) overlaps one period of A and two of B, pure loss 1.5. So a
scope records its unit at `budget init` or at the first job it admits (table `dpstream_scope_units`), and the
ledger refuses, recording and debiting nothing, a job whose unit differs. A period scope's unit is its grid.
Proof: docs/proofs/accounting.ledger.periods.md, "Plain scopes serve one privacy unit".

When two units are equal:
- "user" (no unit period) equals only "user";
- fixed periods of P seconds are counted by the planner from the job's window.start
  (`pipelines.planning.windows._origin`), so the job's periods are [s + k P, s + (k+1) P) with s = window.start:
  two fixed grids are the same grid iff same P and same phase s mod P (computed exactly, as a Fraction of the
  float window.start; a period scope's grid has phase 0, its periods counted from 1970-01-01T00:00:00Z);
- calendar periods are absolute: same (count, unit) and same time zone.
A fixed grid and a calendar one are never equal here, even where they cut time alike (1 day in UTC and 86400 s
from midnight): refused, never over-admitted.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import sqlalchemy as sa

from dpstream.accounting.calendar import calendar_text
from dpstream.accounting.ledger.errors import LedgerError, UnitMismatchError
from dpstream.accounting.ledger.schema import Tables
from dpstream.accounting.periods import PeriodGrid
from dpstream.accounting.text import duration_text, instant_text

USER, USER_PERIOD = "user", "user x period"  # the `unit` tag of the stored JSON


@dataclass(frozen=True)
class PrivacyUnit:
    """A privacy unit: "user" (`grid` None), or user x period of `grid`; a fixed grid's `phase` (seconds in
    [0, P), exact) is where its periods start modulo P. Build one with `PrivacyUnit.of` (a job) or `of_scope`
    (a period scope)."""

    grid: PeriodGrid | None = None
    phase: Fraction | None = None

    def __post_init__(self) -> None:
        if self.grid is not None and not isinstance(self.grid, PeriodGrid):
            raise LedgerError(f"a privacy unit's grid is a PeriodGrid or None, got {self.grid!r}")
        if self.grid is None or self.grid.seconds is None:
            if self.phase is not None:
                raise LedgerError(f"only fixed periods have a phase; got phase {self.phase!r} for {self.grid!r}")
            return
        phase = self.phase
        if isinstance(phase, bool) or not isinstance(phase, (int, Fraction)):
            raise LedgerError(f"a fixed grid's phase is an exact number of seconds (int or Fraction), got {phase!r}")
        if not 0 <= phase < self.grid.seconds:
            raise LedgerError(f"a phase lies in [0, {self.grid.seconds}) seconds, got {phase}")
        object.__setattr__(self, "phase", Fraction(phase))

    @classmethod
    def of(cls, grid: PeriodGrid | float | str | None, window_start: float) -> "PrivacyUnit":
        """The unit of a job with unit period `grid` (None: user-level) and window.start `window_start` (seconds
        since the epoch; a fixed grid's periods are counted from it)."""
        if grid is None:
            return cls()
        grid = PeriodGrid.of(grid)
        if grid.seconds is None:
            return cls(grid)
        if isinstance(window_start, bool) or not (isinstance(window_start, (int, float, Fraction))
                                                  and math.isfinite(window_start)):
            raise LedgerError(f"a job's window.start is a finite number of seconds, got {window_start!r}")
        return cls(grid, Fraction(window_start) % grid.seconds)  # Fraction(float) is exact

    @classmethod
    def of_scope(cls, grid: PeriodGrid) -> "PrivacyUnit":
        """The unit a period scope serves: user x its absolute periods (a fixed grid from the epoch: phase 0)."""
        return cls(grid, None if grid.seconds is None else Fraction(0))

    @property
    def is_user(self) -> bool:
        return self.grid is None

    @property
    def text(self) -> str:
        """e.g. "user", "user x 1d period (periods of 86400 s from 1970-01-01T12:00:00Z; phase 43200 s)" or
        "user x 1 day period in America/New_York"."""
        grid = self.grid
        if grid is None:
            return "user"
        if grid.seconds is None:
            assert grid.calendar is not None
            return f"user x {calendar_text(grid.calendar)} period in {grid.timezone}"
        assert self.phase is not None
        phase = self.phase
        shown = str(phase.numerator) if phase.denominator == 1 else repr(float(phase))
        return (f"user x {duration_text(grid.seconds)} period (periods of {grid.seconds} s from "
                f"{instant_text(float(phase))}; phase {shown} s)")

    def to_dict(self) -> dict[str, Any]:
        """{"unit": "user"}, or {"unit": "user x period", grid..., "phase_s": "43200"} (a fixed grid's exact
        phase as a fraction's text, e.g. "1/4")."""
        if self.grid is None:
            return {"unit": USER}
        out: dict[str, Any] = {"unit": USER_PERIOD, **self.grid.to_dict()}
        if self.phase is not None:
            out["phase_s"] = str(self.phase)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PrivacyUnit":
        kind = data.get("unit")
        if kind == USER:
            return cls()
        if kind != USER_PERIOD:
            raise LedgerError(f"a stored privacy unit is {USER!r} or {USER_PERIOD!r}, got {kind!r}")
        grid = PeriodGrid.from_dict(data)
        return cls(grid, None if grid.seconds is None else Fraction(data["phase_s"]))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "PrivacyUnit":
        return cls.from_dict(json.loads(text))


UNKNOWN = {"unit": "unknown"}
"""What `mark_unknown` records for a plain scope that already had releases when its ledger gained units: the
unit those releases were charged for is not known, so no job may fix it (`declare`)."""


@dataclass(frozen=True)
class ScopeUnit:
    """The unit a scope serves (None: unknown, `UNKNOWN`), and how it was fixed: "AT by LABEL" (recorded), or by
    the period grid."""

    unit: PrivacyUnit | None
    fixed: str
    declared: bool = False  # by an operator (`budget init --unit`, `budget unit`), not by a job


def scope_unit(tables: Tables, conn: sa.Connection, scope: str, grid: PeriodGrid | None) -> ScopeUnit | None:
    """The unit scope `scope` (with period grid `grid`, None for a plain scope) serves; None: a plain scope
    whose unit is not fixed yet."""
    if grid is not None:
        return ScopeUnit(PrivacyUnit.of_scope(grid), f"by its budget per {grid.text} period")
    units = tables.scope_units
    row = conn.execute(sa.select(units).where(units.c.scope == scope)).one_or_none()
    if row is None:
        return None
    stored = json.loads(row.unit)
    declared = bool(stored.pop("declared", False))
    known = None if stored == UNKNOWN else PrivacyUnit.from_dict(stored)
    return ScopeUnit(known, f"at {row.fixed_at} by {row.fixed_by!r}", declared)


def mark_unknown(tables: Tables, conn: sa.Connection, at: str) -> None:
    """When a ledger gains the units table: every scope that already has releases serves an unknown unit (its
    releases were charged by jobs whose units were never recorded, possibly on different grids), so the first
    job after the upgrade cannot fix it; an operator declares it (`Ledger.declare_unit`)."""
    scopes = conn.execute(sa.select(tables.releases.c.scope).distinct()).scalars().all()
    for scope in scopes:
        if conn.execute(sa.select(tables.scope_units.c.scope).where(tables.scope_units.c.scope == scope)).first():
            continue
        conn.execute(tables.scope_units.insert().values(scope=scope, unit=json.dumps(UNKNOWN), fixed_at=at,
                                                        fixed_by="the upgrade that began recording privacy units"))


def unit_unused(tables: Tables, conn: sa.Connection, scope: str) -> bool:
    """Whether nothing has used the scope's unit yet: no release debited, no run running, no stream that may still
    publish. A unit fixed by a job that never published may then be fixed again."""
    releases, runs, streams = tables.releases, tables.runs, tables.streams
    return not (conn.execute(sa.select(releases.c.id).where(releases.c.scope == scope)).first()
                or conn.execute(sa.select(runs.c.id).where((runs.c.scope == scope) & (runs.c.status == "running")))
                .first()
                or conn.execute(sa.select(streams.c.id).where((streams.c.scope == scope)
                                                               & (streams.c.status != "finished"))).first())


def check_unit(tables: Tables, conn: sa.Connection, scope: str, grid: PeriodGrid | None,
               unit: PrivacyUnit | None) -> bool:
    """Whether `unit` is to be recorded as the scope's (a plain scope's first job); UnitMismatchError, naming both
    units, when the scope serves another. `unit` None (a manual spend, an older caller) is not checked. Call it
    with the scope row locked; record with `record_unit` in the same transaction."""
    if unit is None:
        return False
    if not isinstance(unit, PrivacyUnit):
        raise LedgerError(f"a job's privacy unit is a PrivacyUnit, got {unit!r}")
    served = scope_unit(tables, conn, scope, grid)
    if served is None:
        return True
    if served.unit is None:
        raise UnitMismatchError(
            f"scope {scope!r} has releases from before dpstream recorded privacy units, so the unit they were charged "
            f"for is unknown; read `dpstream budget history --scope {scope}`, then declare the unit its jobs used with "
            f"`dpstream budget unit --scope {scope} --job JOB.toml` (or `--user`); nothing was debited")
    if unit == served.unit:
        return False
    if grid is None and not served.declared and unit_unused(tables, conn, scope):
        return True  # fixed by a job that never published: fixed again
    if served.unit.is_user or unit.is_user:
        why = ("a user holds many user x period units, and a job priced per user x period costs a user once per "
               "period it reads")
    else:
        why = ("a unit of one grid overlaps two or more units of the other (a day from noon overlaps two days from "
               "midnight), and a job costs such a unit once per unit of its own grid it overlaps")
    budget = "one budget, charged once per job," if grid is None else "budget of each of its periods"
    raise UnitMismatchError(
        f"scope {scope!r} serves privacy unit {served.unit.text} (fixed {served.fixed}), but this job's privacy unit "
        f"is {unit.text}: {why}, so the scope's {budget} would bound neither unit's loss; "
        f"use another scope for this job (`dpstream budget init --scope NAME ...`); nothing was debited")


def record_unit(tables: Tables, conn: sa.Connection, scope: str, unit: PrivacyUnit, label: str, at: str,
                declared: bool = False) -> None:
    """Fix a plain scope's unit: by `label` (a job, or an operator when `declared`) at `at` (UTC time), replacing
    an unused or unknown one."""
    stored = {**unit.to_dict(), **({"declared": True} if declared else {})}
    conn.execute(tables.scope_units.delete().where(tables.scope_units.c.scope == scope))
    conn.execute(tables.scope_units.insert().values(scope=scope, unit=json.dumps(stored, sort_keys=True), fixed_at=at,
                                                    fixed_by=label))
