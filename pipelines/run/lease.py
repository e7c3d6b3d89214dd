"""Keeping a run's (or a stream's) ledger lease alive while its pipeline runs."""
from __future__ import annotations

import threading
from typing import Callable

from dpstream.pipelines.run.errors import RunError


class LeaseKeeper:
    """A daemon thread that calls `renew` every third of `lease_seconds` until stopped.

    A renewal that fails (the ledger unreachable for a while) is retried at the next tick; if the lease runs
    out meanwhile, another run may take the monitors and the commit is refused (`Ledger.commit_run` requires
    a running run), and a stream's session may be resumed elsewhere, after which its debits are refused
    (`Ledger.debit_stream`), so a lost lease can never publish. `error` keeps the last failure for the log."""

    def __init__(self, renew: Callable[[], None], lease_seconds: float, name: str) -> None:
        self._renew, self._seconds = renew, lease_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"dpstream-lease-{name}", daemon=True)
        self.error: str | None = None

    def __enter__(self) -> "LeaseKeeper":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(self._seconds / 3):
            try:
                self._renew()
                self.error = None
            except RunError as err:
                self.error = str(err)
