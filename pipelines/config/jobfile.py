"""Job files: TOML -> frozen dataclasses, validated once, when the file is loaded.

A job file has the sections [input], [window], [privacy], one [[release]] per
release, [output] and [beam] (the keys are documented in README.md, "Job file
reference"). Every error is one line that starts with the file name and names
the key, e.g.
    jobs/flights.toml: release.top_k.k must be a positive integer, got 0
Relative input and output paths are relative to the job file's directory.
Nothing here reads event data.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, NoReturn, overload
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dpstream.accounting.calendar import (
    calendar_length,
    calendar_spelling,
    local_day,
    local_midnight,
    unit_first_day,
    unit_number,
)
from dpstream.accounting.errors import LedgerError
from dpstream.accounting.periods import PeriodGrid
from dpstream.connectors import readers, timestamps, writers
from dpstream.pipelines.config.specs import (
    DEFAULT_MAX_QUANTILE_SCORES,
    DEFAULT_QUANTILE_BUCKETS,
    EPSILON_RANGE,
    LAST_INSTANT,
    MAX_DELTA,
    MAX_WINDOWS,
    ContributionBounds,
    HistogramSpec,
    Metric,
    Noise,
    PeakSpec,
    QuantilesSpec,
    ReleaseKind,
    ReleaseSpec,
    Selection,
    SpecError,
    SvtMethod,
    SvtMetric,
    SvtSpec,
    TopKSpec,
    WindowSpec,
)
from dpstream.pipelines.config.times import duration_seconds, instant_seconds, range_instant

FILE_INPUT_KEYS = ("format", "path", "user", "timestamp", "partition", "value", "timestamp_format", "timezone", "partitions",
                   "allow_empty")
PUBSUB_INPUT_KEYS = (
    "format", "subscription", "topic", "user", "timestamp", "timestamp_attribute", "partition", "value",
    "timestamp_format", "timezone", "partitions",
)
PUBSUB = "pubsub"  # streaming input (connectors.pubsub); needs the pubsub extra
RELEASE_KEYS: dict[ReleaseKind, tuple[str, ...]] = {
    ReleaseKind.HISTOGRAM: ("partitions", "noise", "selection", "clamp", "metric"),
    ReleaseKind.TOPK: ("partitions", "k", "counts"),
    ReleaseKind.PEAK: ("period", "maximum"),
    ReleaseKind.SVT: ("partitions", "maximum", "threshold", "sigma_threshold", "sigma_query", "metric", "method",
                      "persist_threshold"),
    ReleaseKind.QUANTILES: ("partitions", "quantiles", "buckets", "max_scores"),
}
"""The keys of a [[release]] table besides kind, name and weight, by kind (the fields of its spec class)."""
SECTIONS = {
    "input": tuple(dict.fromkeys(FILE_INPUT_KEYS + PUBSUB_INPUT_KEYS)),
    "window": ("size", "period", "start", "end", "allowed_lateness", "max_count"),
    "privacy": (
        "scope", "epsilon", "delta", "ledger", "max_partitions", "max_contributions", "max_windows",
        "max_partitions_total", "max_contributions_total", "min_value", "max_value",
        "unit_period",
    ),
    "release": ("kind", "name", "weight", *dict.fromkeys(key for keys in RELEASE_KEYS.values() for key in keys)),
    "output": ("path", "format"),
    "beam": ("runner", "seed", "max_memory_gb", "allow_unverified_runner"),
}
REQUIRED = {
    "input": ("path", "user", "timestamp", "partition"),
    "window": ("size", "start"),  # and end, unless open-ended (`_window`)
    "privacy": ("scope", "epsilon", "delta"),
    "release": ("kind", "name"),
}
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")  # it names a file: at most 100 characters
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # gs://bucket/dir, s3://..., hdfs://...: kept as given




class JobFileError(ValueError):
    """The job file is unreadable or a value is out of range; one line naming file and key."""


@dataclass(frozen=True)
class PrivacySettings:
    scope: str
    epsilon: float
    delta: float
    ledger: str | None
    bounds: ContributionBounds
    unit_period: PeriodGrid | None = None  # the privacy unit is user x period (budget per period); None: user


@dataclass(frozen=True)
class OutputSettings:
    path: str  # a local directory or a URL Beam's FileSystems can write (gs://bucket/dir on Dataflow)
    format: str = "parquet"


DEFAULT_MAX_MEMORY_GB = 8.0
"""A DirectRunner run whose estimated memory (`planning.size`) is above this many GiB is refused before its debit."""


@dataclass(frozen=True)
class BeamSettings:
    runner: str = "DirectRunner"
    seed: int | None = None  # fixed noise seed: tests only, never for real releases
    max_memory_gb: float = DEFAULT_MAX_MEMORY_GB  # the DirectRunner's estimated memory above which a run is refused
    allow_unverified_runner: str | None = None  # the one runner outside preflight.VERIFIED_RUNNERS the job may run on


@dataclass(frozen=True)
class Job:
    """A validated job: what to read, how to window it, the privacy budget, the releases and outputs."""

    source: str  # the job file
    name: str
    input: readers.InputSpec  # or connectors.pubsub.PubSubSource for a streaming job
    window: WindowSpec
    privacy: PrivacySettings
    releases: tuple[ReleaseSpec, ...]
    output: OutputSettings
    beam: BeamSettings
    allow_empty: bool = False  # [input] allow_empty: publish (noise) even when no input row falls in the range


def load(path: str) -> Job:
    """Read and validate a job file."""
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as err:
        raise JobFileError(f"{path}: cannot read the job file: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise JobFileError(f"{path}: not UTF-8 text (byte {err.start}); save the job file as UTF-8") from err
    except tomllib.TOMLDecodeError as err:
        raise JobFileError(f"{path}: not valid TOML: {err}") from err
    return parse(document, path)


def parse(document: dict[str, Any], path: str) -> Job:
    """Validate a parsed TOML document; `path` names the file in errors and anchors relative paths."""
    check = _Checker(path)
    unknown = sorted(set(document) - set(SECTIONS))
    if unknown:
        check.fail(f"unknown section [{unknown[0]}]; sections: {', '.join(f'[{s}]' for s in SECTIONS)}")
    base = os.path.dirname(os.path.abspath(path))
    sections = {name: check.table(document, name) for name in ("input", "window", "privacy", "output", "beam")}
    timezone = check.text(sections["input"], "input", "timezone", default="UTC")
    input_spec = _input(check, sections["input"], base, timezone)
    open_ended = input_spec.format == PUBSUB and "unit_period" in sections["privacy"]
    window = _window(check, sections["window"], timezone, open_ended)
    privacy = _privacy(check, sections["privacy"], timezone)
    shared = _partitions(check, sections["input"], "input")
    releases = _releases(check, document.get("release"), shared)
    output = _output(check, sections["output"], base, os.path.splitext(os.path.basename(path))[0])
    beam = _beam(check, sections["beam"])
    name = os.path.splitext(os.path.basename(path))[0]
    allow_empty = check.flag(sections["input"], "input", "allow_empty", default=False)
    return Job(os.path.abspath(path), name, input_spec, window, privacy, releases, output, beam, allow_empty)


# -- sections --------------------------------------------------------------------------------------


def _open_end(start: float, calendar: tuple[int, str] | None, step: float, timezone: str) -> float:
    """The end of an open-ended range: OPEN_ENDED_WINDOWS windows after `start` (calendar windows: after the
    calendar unit holding start), clipped to the latest instant a window range may reach."""
    if calendar is None:
        return start + min(OPEN_ENDED_WINDOWS, max(1, math.floor((LAST_INSTANT - start) / step))) * step
    count, unit = calendar
    first = unit_number(local_day(start, timezone), unit)
    return local_midnight(unit_first_day(first + OPEN_ENDED_WINDOWS * count, unit), timezone)


def _input(check: "_Checker", table: dict, base: str, timezone: str) -> readers.InputSpec:
    streaming = table.get("format") == PUBSUB
    if streaming:
        check.keys(table, "input", allowed=PUBSUB_INPUT_KEYS, required=("user", "partition"))
    else:
        check.keys(table, "input", allowed=FILE_INPUT_KEYS)
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        check.fail(f"input.timezone must be an IANA time zone name such as 'UTC' or 'America/New_York', got {timezone!r}")
    if streaming:
        return _pubsub_input(check, table, timezone)
    fmt = check.choice(table, "input", "format", readers.FORMATS + (PUBSUB,), default="parquet")
    raw_path = check.text(table, "input", "path")
    spec = dict(
        format=fmt,
        path=_resolve(base, raw_path),
        user=check.text(table, "input", "user"),
        timestamp=check.text(table, "input", "timestamp"),
        partition=check.text(table, "input", "partition"),
        value=check.text(table, "input", "value", default=None),
        timestamp_format=check.choice(table, "input", "timestamp_format", timestamps.FORMATS, default="auto"),
        timezone=timezone,
    )
    return check.build(readers.InputSpec, **spec)


def _pubsub_input(check: "_Checker", table: dict, timezone: str):
    from dpstream.connectors.pubsub import PubSubSource  # imports Apache Beam: only for streaming jobs

    return check.build(
        PubSubSource,
        subscription=check.text(table, "input", "subscription", default=None),
        topic=check.text(table, "input", "topic", default=None),
        user=check.text(table, "input", "user"),
        partition=check.text(table, "input", "partition"),
        timestamp=check.text(table, "input", "timestamp", default=None),
        timestamp_attribute=check.text(table, "input", "timestamp_attribute", default=None),
        value=check.text(table, "input", "value", default=None),
        timestamp_format=check.choice(table, "input", "timestamp_format", timestamps.FORMATS, default="auto"),
        timezone=timezone,
    )


def with_range(job: Job, start: str | None, end: str | None, now: datetime | None = None) -> Job:
    """The job over another window range (`dpstream run --start/--end`): ISO dates or date-times, or relative
    instants such as `yesterday` or `last-month` (`times.relative_instant`), in the job's time zone. The window
    size, period, lateness and limit stay; every window check applies. JobFileError naming the option."""
    if start is None and end is None:
        return job
    timezone = getattr(job.input, "timezone", "UTC")
    window = job.window
    try:
        instants = {flag: range_instant(value, timezone, now) if value is not None else default
                    for flag, value, default in (("--start", start, window.start), ("--end", end, window.end))}
    except ValueError as err:
        raise JobFileError(f"{job.source}: --start/--end {err}") from None
    try:
        window = WindowSpec(size=window.size, start=instants["--start"], end=instants["--end"], period=window.period,
                            allowed_lateness=window.allowed_lateness, max_count=window.max_count,
                            calendar=window.calendar, timezone=window.timezone)
    except SpecError as err:
        raise JobFileError(f"{job.source}: with --start/--end: {err}") from None
    return dataclasses.replace(job, window=window)


OPEN_ENDED_WINDOWS = 5_000
"""A streaming job on a user x period unit may omit window.end: its range then holds this many windows (208 days
of hourly windows, 13.7 years of daily ones), released and paid one period at a time until the stream is
stopped. Every window of a range costs the pipeline a few elements when it starts (empty windows must be
released too), which the DirectRunner takes about 10 s to absorb at this size."""


def _window(check: "_Checker", table: dict, timezone: str, open_ended: bool) -> WindowSpec:
    check.keys(table, "window")
    calendar = calendar_length(table.get("size"))
    size = 1.0 if calendar else check.duration(table, "window", "size", calendar=True)  # calendar windows: set from their edges
    period = check.duration(table, "window", "period", default=None)
    start = check.instant(table, "window", "start", timezone)
    if "end" not in table and open_ended:
        end = _open_end(start, calendar, period or size, timezone)
    else:
        if "end" not in table:
            check.fail("window.end is required (only a streaming (pubsub) job with a [privacy] unit_period may "
                       "omit it: it is paid one period at a time as its windows are released)")
        end = check.instant(table, "window", "end", timezone)
    given = table.get("allowed_lateness", 0)
    lateness = 0.0 if given in (0, "0s") else check.duration(table, "window", "allowed_lateness")
    max_count = check.integer(table, "window", "max_count", default=MAX_WINDOWS)
    return check.build(WindowSpec, size=size, start=start, end=end, period=period, allowed_lateness=lateness,
                       max_count=max_count, calendar=calendar, timezone=timezone)


def _privacy(check: "_Checker", table: dict, timezone: str) -> PrivacySettings:
    check.keys(table, "privacy")
    epsilon = check.number(table, "privacy", "epsilon")
    delta = check.number(table, "privacy", "delta")
    if not EPSILON_RANGE[0] <= epsilon <= EPSILON_RANGE[1]:
        check.fail(f"privacy.epsilon must lie in [{EPSILON_RANGE[0]:g}, {EPSILON_RANGE[1]:g}], got {epsilon!r} (the "
                   f"range in which noise is calibrated: below it a release is all noise, above it not private)")
    if not 0 < delta <= MAX_DELTA:
        check.fail(f"privacy.delta must lie in (0, {MAX_DELTA:g}], got {delta!r}: delta is the chance that the "
                   f"guarantee fails outright, usually far below 1 / (number of users)")
    bounds = check.build(
        ContributionBounds,
        max_partitions=check.integer(table, "privacy", "max_partitions", default=1),
        max_contributions=check.integer(table, "privacy", "max_contributions", default=1),
        min_value=check.number(table, "privacy", "min_value", default=1.0),
        max_value=check.number(table, "privacy", "max_value", default=1.0),
        max_windows=check.integer(table, "privacy", "max_windows", default=None),
        max_partitions_total=check.integer(table, "privacy", "max_partitions_total", default=None),
        max_contributions_total=check.integer(table, "privacy", "max_contributions_total", default=None),
    )
    return PrivacySettings(
        scope=check.text(table, "privacy", "scope"),
        epsilon=epsilon,
        delta=delta,
        ledger=check.text(table, "privacy", "ledger", default=None),
        bounds=bounds,
        unit_period=check.unit_period(table, timezone),
    )


def _partitions(check: "_Checker", table: dict, where: str) -> tuple[str, ...] | None:
    partitions = table.get("partitions")
    if partitions is not None and (
        not isinstance(partitions, list) or not partitions or not all(isinstance(p, str) and p for p in partitions)
    ):
        check.fail(f"{where}.partitions must be a non-empty list of strings, got {partitions!r}")
    if partitions is not None and len(set(partitions)) != len(partitions):
        check.fail(f"{where}.partitions lists a partition more than once")
    return tuple(partitions) if partitions is not None else None


def _releases(check: "_Checker", entries: Any, shared: tuple[str, ...] | None) -> tuple[ReleaseSpec, ...]:
    """The [[release]] tables; a release without `partitions` uses input.partitions (None: unknown partitions)."""
    if entries is None:
        check.fail("needs at least one [[release]] table")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        check.fail(f"release must be an array of tables ([[release]]), got {type(entries).__name__}")
    releases: list[ReleaseSpec] = []
    for position, entry in enumerate(entries, 1):
        name = entry.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            check.fail(f"release #{position}: name must be 1 to 100 letters, digits, '_', '.' or '-' (it names the output "
                       f"file), got {name if not isinstance(name, str) or len(name) <= 40 else name[:40] + '...'!r}")
        if any(r.name == name for r in releases):
            check.fail(f"release.{name}: name is used by more than one release")
        where = f"release.{name}"
        check.keys(entry, where, allowed=SECTIONS["release"], required=REQUIRED["release"])
        kind = ReleaseKind(check.choice(entry, where, "kind", tuple(ReleaseKind)))
        partitions = _partitions(check, entry, where)
        partitions = shared if partitions is None else partitions
        _check_kind_keys(check, entry, where, kind, partitions)
        weight = check.number(entry, where, "weight", default=1.0)
        if not weight > 0:
            check.fail(f"{where}.weight must be a positive number, got {weight!r}")
        releases.append(_RELEASE_BUILDERS[kind](check, entry, where, name, weight, partitions))
    return tuple(releases)


def _check_kind_keys(check: "_Checker", entry: dict, where: str, kind: ReleaseKind,
                     partitions: tuple[str, ...] | None) -> None:
    """Every key of the release table applies to its kind (one line naming the key otherwise)."""
    if "selection" in entry and not (kind == ReleaseKind.HISTOGRAM and partitions is None):
        check.fail(f"{where}.selection applies to histogram releases over unknown partitions (no partitions list), "
                   f"got it on a {kind} release{' with partitions' if partitions is not None else ''}")
    for key in entry:
        owners = [k.value for k, keys in RELEASE_KEYS.items() if key in keys]
        if owners and kind.value not in owners:
            check.fail(f"{where}.{key} applies to {' and '.join(owners)} releases only, got it on a {kind} release")


def _histogram(check: "_Checker", entry: dict, where: str, name: str, weight: float,
               partitions: tuple[str, ...] | None) -> HistogramSpec:
    return check.build(
        HistogramSpec, name=name, weight=weight, partitions=partitions,
        noise=check.choice(entry, where, "noise", tuple(Noise), default=Noise.GAUSSIAN),
        selection=check.choice(entry, where, "selection", tuple(Selection), default=Selection.GAUSSIAN),
        clamp=check.flag(entry, where, "clamp", default=False),
        metric=check.choice(entry, where, "metric", tuple(Metric), default=Metric.SUM),
    )


def _topk(check: "_Checker", entry: dict, where: str, name: str, weight: float,
          partitions: tuple[str, ...] | None) -> TopKSpec:
    k = check.integer(entry, where, "k", default=None)
    if k is None:
        check.fail(f"{where}.k is required for a topk release (the list length)")
    return check.build(TopKSpec, name=name, weight=weight, k=k, partitions=partitions,
                       counts=check.flag(entry, where, "counts", default=False))


def _peak(check: "_Checker", entry: dict, where: str, name: str, weight: float,
          partitions: tuple[str, ...] | None) -> PeakSpec:
    period = check.length(entry, where, "period", default=None)
    maximum = check.number(entry, where, "maximum", default=None)
    if period is None:
        check.fail(f"{where}.period is required for a peak release (e.g. \"30d\")")
    if maximum is None or not maximum > 0:
        check.fail(f"{where}.maximum is required for a peak release: a positive public upper bound of a window total, got {maximum!r}")
    return check.build(PeakSpec, name=name, weight=weight, period=period, maximum=maximum)


def _svt(check: "_Checker", entry: dict, where: str, name: str, weight: float,
         partitions: tuple[str, ...] | None) -> SvtSpec:
    """An svt release; range checks are SvtSpec's."""
    for key in ("threshold", "sigma_threshold", "maximum"):
        if key not in entry:
            check.fail(f"{where}.{key} is required for an svt release")
    maximum = check.number(entry, where, "maximum")
    if not maximum > 0:
        check.fail(f"{where}.maximum must be a positive public normaliser of a window total, got {maximum!r}")
    return check.build(
        SvtSpec, name=name, weight=weight, partitions=partitions, maximum=maximum,
        threshold=check.number(entry, where, "threshold"),
        sigma_threshold=check.number(entry, where, "sigma_threshold"),
        sigma_query=check.number(entry, where, "sigma_query", default=None),
        metric=check.choice(entry, where, "metric", tuple(SvtMetric), default=SvtMetric.COUNT),
        method=check.choice(entry, where, "method", tuple(SvtMethod), default=SvtMethod.FSRC),
        persist_threshold=check.flag(entry, where, "persist_threshold", default=False),
    )


def _quantiles(check: "_Checker", entry: dict, where: str, name: str, weight: float,
               partitions: tuple[str, ...] | None) -> QuantilesSpec:
    """A quantiles release; the list's checks are QuantilesSpec's."""
    if "quantiles" not in entry:
        check.fail(f"{where}.quantiles is required for a quantiles release (e.g. [0.5, 0.9])")
    return check.build(QuantilesSpec, name=name, weight=weight, partitions=partitions, quantiles=entry["quantiles"],
                       buckets=check.integer(entry, where, "buckets", default=DEFAULT_QUANTILE_BUCKETS, minimum=2),
                       max_scores=check.integer(entry, where, "max_scores", default=DEFAULT_MAX_QUANTILE_SCORES))


_RELEASE_BUILDERS: dict[ReleaseKind, Callable[..., ReleaseSpec]] = {
    ReleaseKind.HISTOGRAM: _histogram, ReleaseKind.TOPK: _topk, ReleaseKind.PEAK: _peak, ReleaseKind.SVT: _svt,
    ReleaseKind.QUANTILES: _quantiles,
}


def _resolve(base: str, path: str) -> str:
    """A URL (gs://, s3://, ...) as given; a local path relative to the job file's folder, with ~ expanded."""
    return path if _URL.match(path) else os.path.join(base, os.path.expanduser(path))


def _output(check: "_Checker", table: dict, base: str, job_name: str) -> OutputSettings:
    check.keys(table, "output")
    path = _resolve(base, check.text(table, "output", "path", default=os.path.join("dpstream-output", job_name)))
    return OutputSettings(path=path, format=check.choice(table, "output", "format", writers.FORMATS, default="parquet"))


def _beam(check: "_Checker", table: dict) -> BeamSettings:
    check.keys(table, "beam")
    seed = check.integer(table, "beam", "seed", default=None, minimum=0)
    max_memory_gb = check.number(table, "beam", "max_memory_gb", default=DEFAULT_MAX_MEMORY_GB)
    if not max_memory_gb > 0:
        check.fail(f"beam.max_memory_gb must be a positive number of gigabytes, got {max_memory_gb!r}")
    return BeamSettings(runner=check.text(table, "beam", "runner", default="DirectRunner"), seed=seed,
                        max_memory_gb=max_memory_gb,
                        allow_unverified_runner=check.text(table, "beam", "allow_unverified_runner", default=None))


# -- value checks ----------------------------------------------------------------------------------

_MISSING = object()


class _Checker:
    """Typed lookups that fail with `FILE: SECTION.KEY must be ..., got VALUE`."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, message: str) -> NoReturn:
        raise JobFileError(f"{self.path}: {message}")

    def build(self, cls, **fields):
        try:
            return cls(**fields)
        except (SpecError, ValueError) as err:
            raise JobFileError(f"{self.path}: {err}") from err

    def table(self, document: dict, name: str) -> dict:
        value = document.get(name, {})
        if not isinstance(value, dict):
            self.fail(f"[{name}] must be a table, got {value!r}")
        if not value and name in REQUIRED:
            self.fail(f"missing section [{name}]")
        return value

    def keys(self, table: dict, where: str, allowed=None, required=None) -> None:
        allowed = SECTIONS[where] if allowed is None else allowed
        required = REQUIRED.get(where, ()) if required is None else required
        for key in table:
            if key not in allowed:
                self.fail(f"{where}.{key} is not a known key; allowed: {', '.join(allowed)}")
        for key in required:
            if key not in table:
                self.fail(f"{where}.{key} is required")

    def _get(self, table: dict, where: str, key: str, default: Any) -> Any:
        value = table.get(key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                self.fail(f"{where}.{key} is required")
            return default
        return value

    @overload
    def text(self, table: dict, where: str, key: str) -> str: ...
    @overload
    def text(self, table: dict, where: str, key: str, default: str) -> str: ...
    @overload
    def text(self, table: dict, where: str, key: str, default: None) -> str | None: ...

    def text(self, table: dict, where: str, key: str, default: Any = _MISSING) -> str | None:
        value = self._get(table, where, key, default)
        if value is not default and (not isinstance(value, str) or not value):
            self.fail(f"{where}.{key} must be a non-empty string, got {value!r}")
        return value

    def choice(self, table: dict, where: str, key: str, allowed: tuple[str, ...], default: Any = _MISSING) -> str:
        value = self._get(table, where, key, default)
        if value not in allowed:
            self.fail(f"{where}.{key} must be one of {', '.join(allowed)}, got {value!r}")
        return value

    def flag(self, table: dict, where: str, key: str, default: bool) -> bool:
        value = self._get(table, where, key, default)
        if not isinstance(value, bool):
            self.fail(f"{where}.{key} must be true or false, got {value!r}")
        return value

    @overload
    def number(self, table: dict, where: str, key: str) -> float: ...
    @overload
    def number(self, table: dict, where: str, key: str, default: float) -> float: ...
    @overload
    def number(self, table: dict, where: str, key: str, default: None) -> float | None: ...

    def number(self, table: dict, where: str, key: str, default: Any = _MISSING) -> float | None:
        value = self._get(table, where, key, default)
        if value is None and default is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(f"{where}.{key} must be a finite number, got {value!r}")
        return float(value)

    @overload
    def integer(self, table: dict, where: str, key: str, default: int, minimum: int = 1) -> int: ...
    @overload
    def integer(self, table: dict, where: str, key: str, default: None, minimum: int = 1) -> int | None: ...

    def integer(self, table: dict, where: str, key: str, default: Any = _MISSING, minimum: int = 1) -> int | None:
        value = self._get(table, where, key, default)
        if value is None and default is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            wanted = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            self.fail(f"{where}.{key} must be {wanted}, got {value!r}")
        return value

    @overload
    def duration(self, table: dict, where: str, key: str, *, calendar: bool = False) -> float: ...
    @overload
    def duration(self, table: dict, where: str, key: str, default: Any, *, calendar: bool = False) -> float | None: ...

    def duration(self, table: dict, where: str, key: str, default: Any = _MISSING, *,
                 calendar: bool = False) -> float | None:
        """Seconds from a number or a string like "1d", "6h", "30m", "90s", "2w" (`calendar`: the key also takes a
        calendar length, which the caller has ruled out, and the message says so)."""
        value = self._get(table, where, key, default)
        if value is None and default is None:
            return None
        seconds = duration_seconds(value)
        if not (math.isfinite(seconds) and seconds > 0):
            hint = ", or a calendar length such as \"1day\", \"1week\", \"1month\", \"1y\"" if calendar else ""
            self.fail(f"{where}.{key} must be a positive duration such as \"1d\", \"6h\", \"30m\" or seconds{hint}, "
                      f"got {value!r}")
        return seconds

    def length(self, table: dict, where: str, key: str, default: Any = _MISSING) -> float | str | None:
        """A calendar length in its canonical spelling ("1month"), or else a duration in seconds."""
        calendar = calendar_length(table.get(key))
        if calendar is not None:
            return calendar_spelling(calendar)
        return self.duration(table, where, key, default, calendar=True)

    def unit_period(self, table: dict, timezone: str) -> PeriodGrid | None:
        """[privacy] unit_period: a period grid (whole seconds, or a calendar length in the job's time zone)."""
        length = self.length(table, "privacy", "unit_period", default=None)
        try:
            return None if length is None else PeriodGrid.of(length, timezone)
        except LedgerError as err:
            self.fail(f"privacy.unit_period: {err}")

    def instant(self, table: dict, where: str, key: str, timezone: str) -> float:
        """Seconds since the epoch from an ISO date or date-time; without an offset, local time in `timezone`."""
        try:
            return instant_seconds(self._get(table, where, key, _MISSING), timezone)
        except ValueError as err:
            self.fail(f"{where}.{key} {err}")
