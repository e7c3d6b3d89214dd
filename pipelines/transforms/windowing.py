"""Event-time windows of a `WindowSpec` on Beam, and the per-(release, window) noise streams.

Window i covers [start + i step, start + i step + size). Records are assigned
to their window indices in numpy (`window_indices`); each piece of window i
is then emitted with the timestamp end_i - 1 microsecond and windowed by
`beam_windows`, Beam fixed windows of length `step` that end exactly at each
end_i. So Beam window [end_i - step, end_i) holds window i and nothing else,
fixed and sliding windows alike, and in streaming a window's release fires
when the watermark passes end_i (the default trigger), never earlier.
Moving a timestamp forward to end_i - 1 us is always allowed: every record of
window i has an earlier event time.

Late data: with `WindowSpec.allowed_lateness` L, pieces travel at end_i + L - 1 us
instead and the Beam windows end at end_i + L, so the single release of window i
waits until the watermark passes end_i + L and includes every record that arrived
before then. A record that arrives after that is behind the watermark of its
Beam window and the runner drops it (Beam's default: no allowed lateness on the
Beam window, one pane per window). Each window is still released exactly once, so
the plan's one run per window holds; dropping records only removes data. Nothing
counts the dropped records in the release: their number depends on the data.

Periods (peak releases) group consecutive windows; period p is emitted at the
release time of its last window and windowed by `period_windows`.

Calendar windows (months, ISO weeks, local days: `WindowSpec.calendar`) have
boundaries instead of a step: a record's window is found by binary search on
them, and `CalendarWindows` gives Beam window [end_(i-1), end_i) (plus the
lateness) to the pieces of window i, the same rule as fixed windows.
"""
from __future__ import annotations

import hashlib
from datetime import datetime, timezone

import apache_beam as beam
import numpy as np
from apache_beam.coders import coders
from apache_beam.transforms.window import FixedWindows, IntervalWindow, NonMergingWindowFn, WindowFn
from apache_beam.utils.timestamp import Duration, Timestamp

from dpstream.connectors.schema import MICROS
from dpstream.pipelines.config.specs import WindowSpec
from dpstream.pipelines.mechanisms.noise import SecureRandom


def _micros(seconds: float) -> int:
    return int(round(seconds * MICROS))


def window_indices(timestamps: np.ndarray, window: WindowSpec) -> tuple[np.ndarray, np.ndarray]:
    """(row positions, window indices): every window in [0, count) that holds each record.

    timestamps are int64 microseconds. Fixed windows give at most one index per
    row; sliding windows up to size/step. Records outside every window are dropped.
    """
    if window.edges:
        index = np.searchsorted(_edge_micros(window), timestamps.astype(np.int64), side="right") - 1
        rows = np.flatnonzero((index >= 0) & (index < window.count))
        return rows, index[rows]
    start, step, size = _micros(window.start), _micros(window.step), _micros(window.size)
    offset = timestamps.astype(np.int64) - start
    last = np.floor_divide(offset, step)
    if step == size:  # fixed windows: at most one each, no repeat
        rows = np.flatnonzero((offset >= 0) & (last < window.count))
        return rows, last[rows]
    first = np.floor_divide(offset - size, step) + 1
    first = np.maximum(first, 0)
    last = np.minimum(last, window.count - 1)
    span = np.maximum(last - first + 1, 0)
    rows = np.repeat(np.arange(timestamps.size), span)
    starts = np.repeat(first, span)
    within = np.arange(rows.size) - np.repeat(np.cumsum(span) - span, span)
    return rows, starts + within


def window_start_micros(window: WindowSpec) -> int:
    """The start of the range (window 0), in microseconds."""
    return int(_edge_micros(window)[0]) if window.edges else _micros(window.start)


def _edge_micros(window: WindowSpec) -> np.ndarray:
    return np.array([_micros(edge) for edge in window.edges], dtype=np.int64)


def window_end_micros(window: WindowSpec, index: int) -> int:
    if window.edges:
        return _micros(window.edges[index + 1])
    return _micros(window.start) + index * _micros(window.step) + _micros(window.size)


def release_micros(window: WindowSpec, index: int) -> int:
    """When window `index` is released in streaming: its end plus the allowed lateness (microseconds)."""
    return window_end_micros(window, index) + _micros(window.allowed_lateness)


def release_times(window: WindowSpec) -> np.ndarray:
    """`release_micros` of every window, as an int64 array indexed by window."""
    return np.array([release_micros(window, index) for index in range(window.count)], dtype=np.int64)


def window_timestamp(window: WindowSpec, index: int) -> Timestamp:
    """The timestamp at which pieces of window `index` travel: its release time minus one microsecond."""
    return Timestamp(micros=release_micros(window, index) - 1)


def window_index(window: WindowSpec, timestamp: Timestamp) -> int:
    """Inverse of `window_timestamp`."""
    end = timestamp.micros + 1 - _micros(window.allowed_lateness)
    if window.edges:
        return int(np.searchsorted(_edge_micros(window), end)) - 1
    return (end - _micros(window.start) - _micros(window.size)) // _micros(window.step)


class CalendarWindows(NonMergingWindowFn):
    """Beam windows [release_(i-1), release_i) of calendar windows (release_i: the end of window i plus the
    lateness; the first starts at window 0's start plus the lateness): window i's pieces, which travel at
    release_i - 1 us, fall in Beam window i and nothing else does."""

    def __init__(self, releases: tuple[int, ...]):
        self._releases = np.asarray(releases, dtype=np.int64)

    def assign(self, context):
        micros = context.timestamp.micros
        index = int(np.searchsorted(self._releases, micros, side="right"))
        if not 0 < index < self._releases.size:
            raise ValueError(f"CalendarWindows: timestamp {context.timestamp} lies outside the windows' range")
        return [IntervalWindow(Timestamp(micros=int(self._releases[index - 1])),
                               Timestamp(micros=int(self._releases[index])))]

    def get_window_coder(self):
        return coders.IntervalWindowCoder()

    def __eq__(self, other):
        return type(self) is type(other) and np.array_equal(self._releases, other._releases)

    def __hash__(self):
        return hash(self._releases.tobytes())


def beam_windows(window: WindowSpec) -> WindowFn:
    """One Beam window per window, ending at its release time: fixed windows of length step (calendar windows:
    `CalendarWindows`)."""
    if window.edges:
        lateness = _micros(window.allowed_lateness)
        return CalendarWindows(tuple(int(edge) + lateness for edge in _edge_micros(window)))
    length = _micros(window.step)
    return FixedWindows(Duration(micros=length), Timestamp(micros=release_micros(window, 0) % length))


def period_windows(window: WindowSpec, last_windows: tuple[int, ...]) -> WindowFn:
    """One Beam window per period of consecutive windows (`last_windows`: each period's last window), ending at
    the release time of its last window, so pieces at `window_timestamp(window, last)` fall in their period's."""
    first = _micros(window.start) + _micros(window.allowed_lateness)
    return CalendarWindows((first, *(release_micros(window, last) for last in last_windows)))


def iso(seconds: float) -> str:
    """ISO 8601 in UTC, e.g. 2013-01-01T00:00:00+00:00."""
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat()


def window_bounds_iso(window: WindowSpec, index: int) -> tuple[str, str]:
    begin, end = window.bounds(index)
    return iso(begin), iso(end)


def release_rng(seed: int | None, release: str, index: int) -> SecureRandom:
    """The noise stream of one (release, window or period).

    Production (seed None): a fresh OS-CSPRNG generator. Test mode: PCG64
    seeded from SHA-256(seed, release, index), so the noise of a window does
    not depend on which other windows ran before it, or in which order.
    """
    if seed is None:
        return SecureRandom()
    digest = hashlib.sha256(f"{seed}\x00{release}\x00{index}".encode()).digest()
    return SecureRandom(int.from_bytes(digest[:16], "little"))


class AttachWindowTimestamp(beam.DoFn):
    """(window index, value) -> the same element at `window_timestamp`, so `beam_windows` can group it; `key`
    finds the window index in another key (e.g. (index, shard))."""

    def __init__(self, window: WindowSpec, key=None):
        self._window = window
        self._key = key

    def process(self, element):
        index = element[0] if self._key is None else self._key(element[0])
        yield beam.window.TimestampedValue(element, window_timestamp(self._window, index))



class PublicWindows(beam.PTransform):
    """Pipeline root -> `elements(index)` for every window index of the public range, each at its window's
    timestamp (`window_timestamp`), so `beam_windows` groups it with the window's data; `key(element)` finds an
    element's window index (default: element[0]). Which elements exist depends only on the public range."""

    def __init__(self, window: WindowSpec, elements, key=None) -> None:
        super().__init__()
        self._window, self._elements, self._key = window, elements, key

    def expand(self, root):
        every = [element for index in range(self._window.count) for element in self._elements(index)]
        return (root
                | "Every window" >> beam.Create(every)
                | "Timestamp every window" >> beam.ParDo(AttachWindowTimestamp(self._window, key=self._key)))
