"""What every part of `Budget` shares: its public parameters and plan, and its one way to the ledger."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

from dpstream.accounting.ledger import (
    Ledger,
    LedgerConflict,
    LedgerError,
    MonitorRecord,
    PeriodGrid,
    PrivacyUnit,
)
from dpstream.accounting.ledger.urls import masked_url
from dpstream.pipelines.config.specs import ContributionBounds, ReleaseSpec, WindowSpec
from dpstream.pipelines.planning import JobPlan
from dpstream.pipelines.run.errors import RunError
from dpstream.pipelines.run.publication import Publication

MonitorRecords = dict[str, MonitorRecord | None]
MonitorStates = dict[str, tuple[MonitorRecord, bool]]  # name -> (sealed record after a run, halted)


class BudgetBase:
    """The public parameters and plan of a `Budget` (set by `Budget.__init__`), the ledger it debits, and its privacy unit."""

    scope: str
    epsilon: float
    delta: float
    unit_period: PeriodGrid | None
    bounds: ContributionBounds
    window: WindowSpec
    releases: tuple[ReleaseSpec, ...]
    url: str
    seed: int | None
    shards: int
    source: str
    lease_seconds: float
    output: str | None
    overwrite: bool
    allow_unverified_runner: str | None
    plan: JobPlan
    _state_base: str | None
    _state_dir: str | None
    _publication: Publication | None

    @contextmanager
    def _ledger(self, consequence: str, conflicts: bool = False) -> Iterator[Ledger]:
        """The ledger, with its errors as RunError (`consequence`: what a failure means for the run).
        `conflicts`: let LedgerConflict through (the caller previews again)."""
        try:
            with Ledger(self.url, on_wait=tell) as ledger:
                yield ledger
        except LedgerError as err:
            if conflicts and isinstance(err, LedgerConflict):
                raise
            raise RunError(f"{err}; {consequence}") from err

    @property
    def privacy_unit(self) -> PrivacyUnit:
        """The job's privacy unit: user, or user x its unit period, whose fixed periods count from window.start;
        the ledger refuses the job on a scope that serves another (`accounting.ledger.units`)."""
        return PrivacyUnit.of(self.unit_period, self.window.start)

    def _create_hint(self) -> str:
        per_period = "" if self.unit_period is None else f" {self.unit_period.options}"
        return (f"create it with `dpstream budget init --ledger {masked_url(self.url)} --scope {self.scope} "
                f"--epsilon EPSILON --delta DELTA --filter approx:release_delta={self.delta!r}{per_period}` (one run "
                f"of this job spends epsilon={self.epsilon:g}, delta={self.delta:g}"
                + (" per period)" if per_period else ")"))


def tell(message: str) -> None:
    """A note on stderr while the run waits (a ledger lock)."""
    print(f"dpstream: {message}", file=sys.stderr)
