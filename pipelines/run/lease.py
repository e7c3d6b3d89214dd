"""Keeping a run's ledger lease alive while its pipeline runs."""
from __future__ import annotations

import threading

from dpstream.pipelines.run.budget import Admission, Budget
from dpstream.pipelines.run.errors import RunError


class LeaseKeeper:
    """A daemon thread that renews `admission`'s lease every third of `budget.lease_seconds` until stopped.

    A renewal that fails (the ledger unreachable for a while) is retried at the next tick; if the lease runs
    out meanwhile, another run may take the monitors and the commit is refused (`Ledger.commit_run` requires
    a running run), so a lost lease can never publish. `error` keeps the last failure for the log."""

    def __init__(self, budget: Budget, admission: Admission) -> None:
        self._budget, self._admission = budget, admission
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"dpstream-lease-{admission.run_id}", daemon=True)
        self.error: str | None = None

    def __enter__(self) -> "LeaseKeeper":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(self._budget.lease_seconds / 3):
            try:
                self._budget.renew(self._admission)
                self.error = None
            except RunError as err:
                self.error = str(err)
