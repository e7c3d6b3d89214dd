"""Why a run stopped, and the exit codes `dpstream` returns for it (documented in `dpstream --help`)."""
from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 2  # bad job file, input, output, runner options or ledger: nothing was published or debited
EXIT_REFUSED = 3  # the budget scope refused the run: nothing was read, published or debited
EXIT_PARTIAL = 4  # a streaming run stopped at --max-seconds before every window of its range was released
EXIT_INTERNAL = 5  # an unexpected error (a bug or a runner failure); `--debug` shows the traceback
EXIT_INTERRUPTED = 130  # Ctrl-C: the run ended unpublished


class RunError(Exception):
    """The run stopped; `exit_code` is one of the EXIT_ codes above. `ledger_reason`: what the ledger records as
    the reason the run failed, when the message itself may not go there (it can quote data: an exception raised
    by code other than dpstream's); None: the message."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR, ledger_reason: str | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.ledger_reason = ledger_reason

    @property
    def recorded(self) -> str:
        """The reason the ledger records."""
        return self.ledger_reason if self.ledger_reason is not None else str(self)


class CommitInDoubt(RunError):
    """The ledger could not say whether a run's debit committed (the connection was lost around its COMMIT): the
    run keeps its staged outputs, and the next run into the same output publishes them if the ledger recorded
    the debit and removes them otherwise."""
