"""The accounting package's one error type that needs no database: `LedgerError`, raised by the ledger and by
the period grids it shares with planning (`accounting.periods`), which must not load the ledger's SQL toolkit."""
from __future__ import annotations


class LedgerError(ValueError):
    """A ledger operation failed on user input or on the database; the message is one line."""
