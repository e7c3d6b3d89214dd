"""The one error type connectors raise for bad input: one line naming file, row and column."""
from __future__ import annotations


class InputError(ValueError):
    """Input that cannot become events: a missing file or column, or a bad row.

    Row messages read `FILE:ROW: column 'NAME': PROBLEM`, where ROW is the line
    number for CSV (the header is line 1) and JSONL, and the 1-based row number
    for Parquet. PROBLEM names the kind of problem ("not a number", "not an ISO
    8601 time", "missing value", ...) and never quotes the value: row values are
    data, and a run's failure reason is stored in the ledger, whose views are
    public (docs/proofs/pipelines.run.budget.Budget.md, assumption A2).
    """


class OutputError(OSError):
    """A release file that cannot be written (its filesystem full, or not writable): one line naming the file,
    e.g. `DIR/daily.jsonl: cannot write: No space left on device`. An OSError, so callers that handle those
    still do."""


class RowError(ValueError):
    """A bad value at a 0-based position of one column chunk; the reader adds file, row and column. `problem`
    says what is wrong with the value without quoting it."""

    def __init__(self, index: int, problem: str) -> None:
        super().__init__(problem)
        self.index = index
        self.problem = problem
