"""A look at the input's timestamps before the ledger is asked: does any row fall inside the window range?

`dpstream run` refuses, before the ledger is asked, a file input with no row inside the range (a unit mistake in
the timestamps, a range that misses the data, an empty or header-only file): its releases would be pure noise
at the scope's cost. The check reads chunks until the first row inside the range, so for an input that has one
it usually reads one block. It happens before the run exists in the ledger, so its verdict, which depends on the
data, reaches only the operator's terminal and never the ledger's view (docs/proofs/pipelines.run.budget.Budget.md,
A2). `validate` reads a bounded prefix and warns about what it finds.
"""
from __future__ import annotations

from dataclasses import dataclass

from dpstream.accounting.text import instant_text
from dpstream.connectors.readers import InputSpec, list_chunks, read_chunk
from dpstream.pipelines.config.specs import WindowSpec
from dpstream.pipelines.transforms.input_range import RangeCounts, range_counts

VALIDATE_ROWS = 100_000
"""How many rows `dpstream validate` reads (the first ones, in file order)."""


@dataclass(frozen=True)
class InputScan:
    """Counts over the rows read, and whether they are all of the input's rows."""

    counts: RangeCounts
    complete: bool


def scan(spec: InputSpec, window: WindowSpec, max_rows: int | None = None, stop_inside: bool = False) -> InputScan:
    """Read the input's rows in file order, counting where they fall against `window`, until `max_rows` rows
    were read, or (`stop_inside`) a batch holds a row inside the range; InputError for a bad row on the way."""
    counts = RangeCounts()
    for chunk in list_chunks(spec):
        for batch in read_chunk(spec, chunk):
            timestamps = batch.column("timestamp").to_numpy(zero_copy_only=False)
            if max_rows is not None:
                timestamps = timestamps[:max_rows - counts.rows]
            counts += range_counts(timestamps, window)
            if (stop_inside and counts.inside) or (max_rows is not None and counts.rows >= max_rows):
                return InputScan(counts, False)
    return InputScan(counts, True)


def empty_range_refusal(source: str, spec: InputSpec, window: WindowSpec, found: InputScan) -> str:
    """The one line that refuses a run whose input has no row inside the range."""
    hint = "" if found.counts.rows == 0 else (f"; check input.timestamp_format (now {spec.timestamp_format!r}), "
                                              f"input.timezone and the [window] range")
    what = "the input has no rows" if found.counts.rows == 0 else found.counts.text()
    return (f"{source}: no input row falls inside the window range [{instant_text(window.start)}, "
            f"{instant_text(window.end)}) ({what}){hint}; set input.allow_empty = true to publish noise for it "
            f"anyway; nothing was debited")
