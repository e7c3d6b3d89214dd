"""The one error type of the ledger."""
from __future__ import annotations


class LedgerError(ValueError):
    """A ledger operation failed on user input or on the database; the message is one line."""
