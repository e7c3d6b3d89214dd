"""The ledger's errors."""
from __future__ import annotations

from dpstream.accounting.errors import LedgerError  # noqa: F401  (re-exported: the ledger's base error)


class LedgerConflict(LedgerError):
    """The scope changed between a run's preview and its commit; nothing was written (preview again)."""


class UnknownScopeError(LedgerError):
    """The ledger has no scope of that name (the one error for which `dpstream budget init` is the advice)."""


class UnitMismatchError(LedgerError):
    """A job's privacy unit differs from the one its scope serves (`accounting.ledger.units`); nothing was written."""
