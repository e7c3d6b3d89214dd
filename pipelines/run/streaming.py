"""Streaming jobs: each window's rows written when it is released, and the rule that ends a run.

A streaming job (Pub/Sub input) has a public window range [start, end) like
every job. A release emits its rows of window i once, when the watermark
passes the window's release time (`windowing.release_micros`); a peak release
emits a period's row at the period's last nominal window. `WriteWindowParts`
writes those rows at once, one JSON-lines file per emission,
OUTPUT/windows/NAME/window-IIIIII.jsonl (I: the emission's window index), through
Beam's FileSystems, so a reader sees each window as soon as it is released.
A marker element per expected emission makes an empty window write an empty
file, so every emission leaves a file whatever the data.

Completion rule (`run_until_released`): the run is complete when every
expected emission of every release has its file. The submitting process
watches the files, not runner metrics (the DirectRunner reports no counter
updated downstream of a timer while streaming, and other runners report
metrics late or not at all), and then cancels the pipeline. A `max_seconds`
bound cancels it earlier: the run is partial and the caller reports which
windows were released. Either way the parts of each release are then merged
into one file in the job's output format, the file a batch run writes for
the same rows (`merge_parts`), and removed.
"""
from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass

import apache_beam as beam

from dpstream.accounting.ledger import Artifact
from dpstream.connectors.files import create_bytes, remove_file
from dpstream.connectors.writers import join, read_bytes, write_bytes, write_rows
from dpstream.pipelines.config.specs import WindowSpec
from dpstream.pipelines.planning import PeakPlan
from dpstream.pipelines.transforms.windowing import PublicWindows, beam_windows, window_index

_LOG = logging.getLogger(__name__)
PARTS_DIR = "windows"
POLL_S = 1.0
REFUSED = ".refused"
_PART = re.compile(r"window-(\d+)\.(jsonl|refused)$")


def emissions(plan, window: WindowSpec) -> tuple[int, ...]:
    """The window indices at which a release emits: every window, or a peak period's last window."""
    if isinstance(plan, PeakPlan):
        return plan.last_windows
    return tuple(range(window.count))


def part_path(directory: str, index: int) -> str:
    return join(directory, f"window-{index:06d}.jsonl")


class _AtEmission(beam.DoFn):
    """A released row -> (emission index, row); the row travels at its window's release time minus 1 us."""

    def __init__(self, window: WindowSpec):
        self._window = window

    def process(self, row, timestamp=beam.DoFn.TimestampParam):
        yield window_index(self._window, timestamp), row


class _WritePart(beam.DoFn):
    """(emission index, rows and one None marker) -> the emission's JSON-lines file.

    With a `payer` (a stream that pays as it releases, `payment.StreamPayer`) the window's steps are debited and
    its bytes journaled first, and the file gets the journaled bytes (an emission journaled before keeps its
    first bytes, whatever was computed now); a window whose debit was refused gets a `.refused` file with the
    reason instead of its rows; an svt release's one row arrives as (row, the monitor's sealed state), which
    the payer seals with the alert.
    `on_written()` is called after each file (a stream's `StreamReport.refresh`).
    Either file is created only if the emission has none yet (a resumed stream never publishes a window twice),
    and only for the emissions this run may release (`indices`)."""

    def __init__(self, directory: str, indices: tuple[int, ...], payer=None, on_written=None):
        self._directory, self._indices, self._payer = directory, frozenset(indices), payer
        self._on_written = on_written

    def process(self, element):
        index, items = element
        if index not in self._indices:
            _LOG.warning("window %d is not released by this run; its rows are dropped", index)
            return
        path = part_path(self._directory, index)
        rows = [item for item in items if item is not None]
        if self._payer is None:
            write_bytes(path, _jsonl(rows))
            self._written()
            return
        if released_before(path):
            return
        if self._payer.monitor is not None:  # svt: (row, the monitor's state after it), sealed with the alert
            (row, state), = rows
            answer = self._payer.seal_and_publish(index, state, _jsonl([row]))
        else:
            answer = self._payer.publish(index, _jsonl(rows), len(rows))
        if answer.refusal is not None:
            _LOG.warning("window %d is not published: %s", index, answer.refusal)
            mark_unpublished(self._directory, index, answer.refusal)
        elif not create_bytes(path, answer.content):
            _LOG.warning("window %d was already published; the new rows are dropped", index)
        self._written()

    def _written(self) -> None:
        if self._on_written is not None:
            self._on_written()


def _jsonl(rows: list) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode("utf-8")


def mark_unpublished(directory: str, index: int, reason: str) -> bool:
    """Decide emission `index` as never published: its `.refused` file holds `reason` (public facts only);
    False when the emission has a file already."""
    return create_bytes(part_path(directory, index).removesuffix(".jsonl") + REFUSED, (reason + "\n").encode("utf-8"))


def released_before(path: str) -> bool:
    """Whether an emission's part (its rows or its refusal) exists already."""
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.exists(path) or FileSystems.exists(path.removesuffix(".jsonl") + REFUSED)


class WriteWindowParts(beam.PTransform):
    """Rows of one release -> one file per emission, written when the emission's window is released.

    `indices`: the release's expected emissions (`emissions`); `directory`: where
    its files go (a local path or a URL); `payer`, `on_written`: see `_WritePart`. `one_row`: every emission is exactly one
    row (svt alerts, which a stateful monitor emits in window order after the window's watermark), written
    as it arrives instead of grouped per window with a marker (a row emitted from a timer may be behind the
    watermark of a window grouping downstream, which would drop it). With a payer, svt rows pass a Reshuffle
    first: a fusion break, so the writer (which seals the monitor in the ledger) sees only answers the runner
    committed with the monitor's state; a retried monitor bundle, which answers again with fresh noise, never
    reaches it twice (docs/proofs/pipelines.run.stream.md).
    """

    def __init__(self, window: WindowSpec, indices: tuple[int, ...], directory: str, payer=None,
                 one_row: bool = False, on_written=None) -> None:
        super().__init__()
        self._window = window
        self._indices = indices
        self._directory = directory
        self._payer = payer
        self._one_row = one_row
        self._on_written = on_written

    def display_data(self) -> dict:
        return {"directory": self._directory, "emissions": len(self._indices)}

    def expand(self, rows):
        keyed = rows | "Key by emission" >> beam.ParDo(_AtEmission(self._window))
        write = _WritePart(self._directory, self._indices, self._payer, self._on_written)
        if self._one_row:  # each emission is exactly one row (svt): written as it comes, no grouping to wait for
            if self._payer is not None:  # the writer seals the monitor: it must see only committed answers
                keyed = keyed | "Commit the monitor's answers" >> beam.Reshuffle()
            return (keyed
                    | "As a part" >> beam.MapTuple(lambda index, row: (index, [row, None]))
                    | "Write part" >> beam.ParDo(write))
        markers = rows.pipeline | "Emissions" >> PublicWindows(
            self._window, lambda index, wanted=frozenset(self._indices): [(index, None)] if index in wanted else [])
        return (
            (keyed | "Window rows" >> beam.WindowInto(beam_windows(self._window)),
             markers | "Window markers" >> beam.WindowInto(beam_windows(self._window)))
            | "With markers" >> beam.Flatten()
            | "Group per emission" >> beam.GroupByKey()
            | "Write part" >> beam.ParDo(write)
        )


def parts(directory: str) -> dict[int, bool]:
    """Emission index -> True (its rows were published) or False (never published: its debit was refused, or
    `mark_unpublished`), for every emission
    with a file in `directory` (a part appears only once completely written)."""
    from apache_beam.io.filesystems import FileSystems

    found = FileSystems.match([join(directory, "window-*")])[0].metadata_list
    return {int(match.group(1)): match.group(2) == "jsonl" for item in found if (match := _PART.search(item.path))}


def republish(directories: dict[str, str], journal: dict[str, dict[int, Artifact]]) -> dict[str, list[int]]:
    """Make every journaled emission's file hold its journaled bytes (`accounting.ledger.journal`): a part that
    is missing (a wiped or lost output), differs (written by something else) or was marked refused is written
    again from the journal, never computed again. Release name -> the emissions written (releases with some)."""
    from apache_beam.io.filesystems import FileSystems

    out: dict[str, list[int]] = {}
    for name, directory in directories.items():
        for index, artifact in sorted(journal.get(name, {}).items()):
            path = part_path(directory, index)
            if FileSystems.exists(path) and read_bytes(path) == artifact.content:
                continue
            refused = path.removesuffix(".jsonl") + REFUSED
            if FileSystems.exists(refused):
                remove_file(refused)
            write_bytes(path, artifact.content)
            out.setdefault(name, []).append(index)
    return out


def released(directory: str) -> set[int]:
    """Emission indices that are decided: their rows or their refusal have a file in `directory`."""
    return set(parts(directory))


def merge_parts(directory: str, indices: set[int], path: str, fmt: str, columns: tuple[str, ...] = ()) -> int:
    """Write the rows of the given parts to one release file (sorted, as a batch run writes it; refused windows
    have no rows; `columns`: the header when there are none); returns the rows."""
    rows: list[dict] = []
    published = {index for index, has_rows in parts(directory).items() if has_rows}
    for index in sorted(indices & published):
        text = read_bytes(part_path(directory, index)).decode("utf-8")
        rows.extend(json.loads(line) for line in text.splitlines() if line)
    return write_rows(rows, path, fmt, columns)


@dataclass(frozen=True)
class StreamingOutcome:
    """What a streaming run released: release name -> emission indices with a file, and the expected ones."""

    released: dict[str, set[int]]
    expected: dict[str, tuple[int, ...]]
    seconds: float

    @property
    def complete(self) -> bool:
        return all(self.released[name] >= set(indices) for name, indices in self.expected.items())

    def pending(self) -> dict[str, int]:
        """Release name -> expected emissions without a file (only releases that have some)."""
        missing = {name: len(set(indices) - self.released[name]) for name, indices in self.expected.items()}
        return {name: count for name, count in missing.items() if count}


def newly_complete(before: StreamingOutcome | None, after: StreamingOutcome) -> list[int]:
    """Emission indices every release expecting them has written in `after` but not yet in `before`."""
    def complete(outcome: StreamingOutcome | None) -> set[int]:
        if outcome is None:
            return set()
        wanted = {index for indices in outcome.expected.values() for index in indices}
        return {index for index in wanted if all(index in outcome.released[name]
                                                 for name, indices in outcome.expected.items() if index in indices)}
    return sorted(complete(after) - complete(before))


def run_until_released(pipeline: beam.Pipeline, directories: dict[str, str], expected: dict[str, tuple[int, ...]],
                       max_seconds: float | None, on_window=None) -> StreamingOutcome:
    """Run a streaming pipeline until every expected emission has its file, or `max_seconds` passed; then cancel it.

    `on_window(index)` is called once per window index as soon as every release emitting at it has its file.

    A pipeline error (a bad message) is raised as the runner raised it. The
    runner's own wait runs in a daemon thread, because not every runner's
    `wait_until_finish` takes a timeout; after a cancel the DirectRunner's
    never returns, and the thread ends with the process.
    """
    started = time.monotonic()
    result = pipeline.run()
    ended, failure = threading.Event(), []

    def wait() -> None:
        try:
            result.wait_until_finish()
        except BaseException as err:  # handed to the submitting thread, which raises it
            failure.append(err)
        finally:
            ended.set()

    threading.Thread(target=wait, name="dpstream-pipeline", daemon=True).start()
    try:
        outcome = _watch(directories, expected, max_seconds, on_window, started, ended)
    except BaseException:  # Ctrl-C: the caller ends the stream's session; the pipeline stops here too
        _cancel(result)
        raise
    if failure:
        raise failure[0]
    if not ended.is_set():
        _LOG.info("streaming run: %s after %.1fs; cancelling the pipeline",
                  "every window released" if outcome.complete else "max_seconds reached", outcome.seconds)
        result.cancel()
        _LOG.info("streaming run: pipeline cancelled after %.1fs", time.monotonic() - started)
    return outcome


def _watch(directories: dict[str, str], expected: dict[str, tuple[int, ...]], max_seconds: float | None, on_window,
           started: float, ended: threading.Event) -> StreamingOutcome:
    """Poll the emissions' files until every one is there, the pipeline ended, or `max_seconds` passed."""
    outcome = None
    while True:
        finished = ended.is_set()  # read before the files, so a finished pipeline's last files are seen
        seen = {name: released(directory) for name, directory in directories.items()}
        outcome, before = StreamingOutcome(seen, expected, time.monotonic() - started), outcome
        for index in newly_complete(before, outcome) if on_window else ():
            on_window(index)
        if outcome.complete or finished:
            return outcome
        if max_seconds is not None and outcome.seconds >= max_seconds:
            return outcome
        ended.wait(POLL_S)


def _cancel(result) -> None:
    try:
        result.cancel()
    except Exception:  # a runner that cannot cancel: its workers find the session ended and publish nothing
        _LOG.warning("the pipeline could not be cancelled")
