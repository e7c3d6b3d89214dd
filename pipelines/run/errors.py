"""Why a run stopped, and the exit codes `dpstream` returns for it (documented in `dpstream run --help`)."""
from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 2  # bad job file, input, ledger or pipeline
EXIT_REFUSED = 3  # the budget scope refused the debit: nothing was read or written
EXIT_PARTIAL = 4  # a streaming run stopped at --max-seconds before every window of its range was released


class RunError(Exception):
    """The run stopped; `exit_code` is EXIT_ERROR (bad input, before or after the debit) or EXIT_REFUSED."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code
