"""What a job asks for, as frozen values shared by the job file, the planner and the transforms.

Records arrive as `dpstream.connectors.schema.EVENT_SCHEMA` record batches.
Privacy unit and windows (DESIGN.md §1): neighbouring inputs differ in all
records of one user. Contribution bounds apply per user and window, so a user
present in W windows changes W window releases; the planner composes every
window (`WindowSpec.count`), which is public because the job declares the
time range it covers.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from typing import ClassVar, TypeVar, Union

import numpy as np

from dpstream.accounting.calendar import calendar_length, calendar_text
from dpstream.accounting.text import duration_text, instant_text
from dpstream.pipelines.config.times import calendar_edges, duration_seconds, instant_seconds
from dpstream.pipelines.mechanisms.fixedpoint import MAX_CONTRIBUTIONS, to_units, value_quantum


class SpecError(ValueError):
    """A job specification value is out of range; the message names the key."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


EPSILON_RANGE = (1e-4, 1e3)  # a job's epsilon: below, noise drowns every count; above, the guarantee is void
MAX_DELTA = 0.01  # a job's largest delta
MAX_WINDOWS = 100_000  # a window range holding more is refused unless window.max_count allows it
FIRST_INSTANT, LAST_INSTANT = -62135596800.0, 221845392000.0  # 0001-01-01 and 9000-01-01, seconds since the epoch


def _require_window_boundary(start: float, end: float, step: float) -> None:
    """window.end must be start + k * step (k >= 1), so the last window starts at end - step: a fixed window then
    ends exactly at `end`, and no window starts past it. Otherwise refused, naming the two nearest valid ends."""
    if not (math.isfinite(step) and step > 0 and end > start):
        return  # reported by the checks of each value
    steps = Fraction(end - start) / Fraction(step)
    if steps.denominator == 1:
        return
    below, above = (start + k * step for k in (math.floor(steps), math.ceil(steps)))
    ends = [e for e in (below, above) if start < e <= LAST_INSTANT]
    if not ends:
        raise SpecError(f"window.size {duration_text(step)} does not fit between window.start {instant_text(start)} "
                        f"and 9000-01-01; use shorter windows")
    nearest = " or ".join(instant_text(e) for e in ends)
    raise SpecError(f"window.end {instant_text(end)} is not a window boundary: windows of {duration_text(step)} "
                    f"from {instant_text(start)} would run past it; set window.end to {nearest}")


@dataclass(frozen=True)
class WindowSpec:
    """Event-time windows over the public range [start, end) (seconds since the epoch, UTC).

    Fixed windows when `period` is None, else sliding windows of length `size`
    starting every `period` seconds (a record belongs to size/period windows).
    Window i covers [start + i * step, start + i * step + size), step = period or size.

    At most `max_count` windows (MAX_WINDOWS by default; a job file raises it with window.max_count), and the
    range lies between 0001-01-01 and 9000-01-01.

    Late data (streaming): window i is released once, when the watermark passes its
    end plus `allowed_lateness` seconds; records of window i that arrive after that
    are dropped and not counted anywhere (how many arrive late depends on the data,
    so publishing the number would need its own noise). Batch runs see no late data.
    """

    size: float
    start: float
    end: float
    period: float | None = None
    allowed_lateness: float = 0.0
    max_count: int = MAX_WINDOWS
    calendar: tuple[int, str] | None = None  # calendar windows (`times.calendar_length`): size is then the longest
    timezone: str = "UTC"  # the calendar's time zone
    edges: tuple[float, ...] = field(default=(), compare=False, repr=False)  # calendar windows' boundaries

    def __post_init__(self) -> None:
        if self.calendar is not None:
            self._calendar_edges(self.calendar)
        _require(math.isfinite(self.size) and self.size > 0, f"window.size must be a positive number of seconds, got {self.size!r}")
        _require(
            self.period is None or (math.isfinite(self.period) and 0 < self.period <= self.size),
            f"window.period must lie in (0, window.size={self.size}], got {self.period!r}",
        )
        _require(math.isfinite(self.start) and math.isfinite(self.end) and self.end > self.start,
                 f"window.end must be after window.start, got start={self.start!r}, end={self.end!r}")
        _require(math.isfinite(self.allowed_lateness) and self.allowed_lateness >= 0,
                 f"window.allowed_lateness must be a non-negative number of seconds, got {self.allowed_lateness!r}")
        _require(FIRST_INSTANT <= self.start and self.end <= LAST_INSTANT,
                 "window.start and window.end must lie between 0001-01-01 and 9000-01-01")
        _require(isinstance(self.max_count, int) and self.max_count >= 1,
                 f"window.max_count must be a positive integer, got {self.max_count!r}")
        if self.calendar is None:
            _require_window_boundary(self.start, self.end, self.step)
        windows = self.count
        _require(windows <= self.max_count,
                 f"the window range holds {windows} windows, more than window.max_count = {self.max_count}; each "
                 f"window's cells are held in memory and its noise composed, so raise window.max_count only if "
                 f"that many windows are meant")

    def _calendar_edges(self, calendar: tuple[int, str]) -> None:
        """Calendar windows: their boundaries, and size = the longest window (fixed windows only)."""
        _require(self.period is None, f"window.period (sliding windows) needs a fixed window.size, got calendar "
                                      f"windows of {calendar_text(calendar)}")
        _require(math.isfinite(self.start) and math.isfinite(self.end) and self.end > self.start,
                 f"window.end must be after window.start, got start={self.start!r}, end={self.end!r}")
        try:
            edges = calendar_edges(calendar, self.start, self.end, self.timezone, self.max_count)
        except ValueError as err:
            raise SpecError(str(err)) from None
        object.__setattr__(self, "edges", edges)
        object.__setattr__(self, "size", max(b - a for a, b in zip(edges, edges[1:])))

    @property
    def length_text(self) -> str:
        """What a window spans, e.g. "1d" or "1 month (America/New_York)"."""
        if self.calendar is None:
            return duration_text(self.size)
        return f"{calendar_text(self.calendar)} ({self.timezone})"

    @property
    def next_start(self) -> float:
        """Where the window after the last one would start (the next run's window.start)."""
        return self.edges[-1] if self.edges else self.start + self.count * self.step

    @classmethod
    def of(cls, size: str | float, start: object, end: object, *, period: str | float | None = None,
           timezone: str = "UTC", allowed_lateness: str | float = 0.0, max_count: int = MAX_WINDOWS) -> "WindowSpec":
        """Windows in the job file's terms: durations such as "1d" or seconds, and ISO dates or date-times
        (local time in `timezone` when they have no offset), e.g. WindowSpec.of("1d", "2013-01-01", "2014-01-01")."""
        calendar = calendar_length(size)
        durations = {"size": 1.0 if calendar else size, "period": period, "allowed_lateness": allowed_lateness}
        seconds = {name: None if value is None else duration_seconds(value) for name, value in durations.items()}
        try:
            instants = {"start": instant_seconds(start, timezone), "end": instant_seconds(end, timezone)}
        except ValueError as err:
            raise SpecError(f"window start and end {err}") from None
        return cls(size=seconds["size"] or math.nan, start=instants["start"], end=instants["end"],
                   period=seconds["period"], allowed_lateness=seconds["allowed_lateness"] or 0.0, max_count=max_count,
                   calendar=calendar, timezone=timezone)

    @property
    def step(self) -> float:
        return self.period if self.period is not None else self.size

    @property
    def count(self) -> int:
        """Number of windows whose start lies in [start, end)."""
        if self.edges:
            return len(self.edges) - 1
        return max(1, math.ceil((self.end - self.start) / self.step))

    @property
    def windows_per_record(self) -> int:
        """How many windows one record can fall into (1 for fixed windows)."""
        return math.ceil(self.size / self.step)

    def bounds(self, index: int) -> tuple[float, float]:
        """[start, end) of window `index`, in seconds."""
        if self.edges:
            return self.edges[index], self.edges[index + 1]
        begin = self.start + index * self.step
        return begin, begin + self.size


@dataclass(frozen=True)
class ContributionBounds:
    """Per user and window: at most `max_partitions` partitions, `max_contributions` records per
    partition, each value clipped to [min_value, max_value] and put on the value grid.

    The value grid (`pipelines.mechanisms.fixedpoint`): a clipped value v becomes k = rint(v / q) integer
    units of the public power-of-two `quantum` q, so bounded sums are exact int64 sums. The
    quantised bounds k_min q <= k q <= k_max q (`value_units`, `quantised_range`) are what a
    record can really add; they differ from min_value and max_value by at most q / 2 < 2**-30
    max(|min_value|, |max_value|), and not at all for integer bounds up to 2**30 in magnitude.
    Sensitivities (Cesar–Rogers Sec. 6; DESIGN.md §1), for the per-partition sums of one window,
    from the quantised bounds, so they are exactly what contribution bounding can produce:
        L0   = max_partitions
        Linf = max_contributions * max(|k_min|, |k_max|) * q
        L1   = L0 * Linf,  L2 = sqrt(L0) * Linf
    Linf and L1 are computed in integers and rounded up to doubles. Counting jobs use
    min_value = max_value = 1 (q = 1, k = 1: the sums are the counts).

    Across windows: `max_windows` C (None: no cap) keeps each privacy unit's records in at most C windows of
    the run's range, and `max_partitions_total` T (None: no cap) in at most T (window, partition) cells, both
    chosen uniformly at random (`transforms.bounding`), so a unit's records reach at most min(C, T) of the
    per-window mechanisms and move the whole release by L2 <= sqrt(min(C L0, T)) Linf
    (docs/proofs/pipelines.transforms.bounding.max_windows.md). `max_contributions_total` K (None: no cap)
    keeps each unit's heaviest cells while their bounded sums hold at most K records' worth of value
    (K max(|k_min|, |k_max|) units), so one unit moves the whole release by L1 <= K |value|max and
    L2 <= |value|max sqrt(floor(K / m) m^2 + (K mod m)^2) with m = max_contributions (`mass_l2`).
    """

    max_partitions: int = 1
    max_contributions: int = 1
    min_value: float = 1.0
    max_value: float = 1.0
    max_windows: int | None = None
    max_partitions_total: int | None = None
    max_contributions_total: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_windows", "max_partitions_total", "max_contributions_total"):
            value = getattr(self, name)
            _require(value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1),
                     f"privacy.{name} must be a positive integer, got {value!r}")
        for name in ("max_partitions", "max_contributions"):
            value = getattr(self, name)
            _require(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                     f"privacy.{name} must be a positive integer, got {value!r}")
        _require(self.max_contributions_total is None or self.max_contributions_total >= self.max_contributions,
                 f"privacy.max_contributions_total must be at least max_contributions ({self.max_contributions}: "
                 f"one full cell must fit), got {self.max_contributions_total!r}")
        _require(self.max_contributions <= MAX_CONTRIBUTIONS,
                 f"privacy.max_contributions must be at most 2**32 (one user's exact sums fit in int64), "
                 f"got {self.max_contributions!r}")
        _require(math.isfinite(self.min_value) and math.isfinite(self.max_value) and self.min_value <= self.max_value,
                 f"privacy.min_value must be <= privacy.max_value, got {self.min_value!r} > {self.max_value!r}")
        try:
            value_quantum(self.min_value, self.max_value)
        except ValueError as err:
            raise SpecError(f"privacy.min_value, privacy.max_value: {err}") from err

    @property
    def counting(self) -> bool:
        """True when every kept record is worth the same (min_value = max_value): sums are counts times that value."""
        return self.min_value == self.max_value

    @property
    def quantum(self) -> float:
        """q, the power of two whose integer multiples bounded values are (`fixedpoint.value_quantum`)."""
        return value_quantum(self.min_value, self.max_value)

    @property
    def value_units(self) -> tuple[int, int]:
        """(k_min, k_max): the clipping bounds in integer units of `quantum`, mapped like every value."""
        low, high = to_units(np.array([self.min_value, self.max_value]), self.quantum)
        return int(low), int(high)

    @property
    def quantised_range(self) -> tuple[float, float]:
        """(k_min q, k_max q): the smallest and largest value one kept record can add (exact doubles)."""
        low, high = self.value_units
        return low * self.quantum, high * self.quantum

    @property
    def linf(self) -> float:
        low, high = self.value_units
        return _rounded_up(self.max_contributions * max(abs(low), abs(high))) * self.quantum

    @property
    def l1(self) -> float:
        low, high = self.value_units
        return _rounded_up(self.max_partitions * self.max_contributions * max(abs(low), abs(high))) * self.quantum

    @property
    def l2(self) -> float:
        """sqrt(L0) Linf, rounded up: the smallest double at or above sqrt(L0 (m k)^2) q (`_root_up`)."""
        low, high = self.value_units
        return _root_up(self.max_partitions * (self.max_contributions * max(abs(low), abs(high))) ** 2) * self.quantum

    @property
    def mass_units(self) -> int | None:
        """The bounded value one unit may keep over the range under `max_contributions_total` K, in units of the
        quantum: K max(|k_min|, |k_max|) (None without K)."""
        if self.max_contributions_total is None:
            return None
        low, high = self.value_units
        return self.max_contributions_total * max(abs(low), abs(high))

    @property
    def mass_l2(self) -> float | None:
        """The largest L2 norm of a vector of cells each at most Linf with L1 norm at most the `mass_units`: full
        cells first, sqrt(floor(K / m) Linf^2 + ((K mod m) |value|max)^2), rounded up (None without K)."""
        if self.max_contributions_total is None:
            return None
        low, high = self.value_units
        full, rest = divmod(self.max_contributions_total, self.max_contributions)
        squares = (full * self.max_contributions ** 2 + rest ** 2) * max(abs(low), abs(high)) ** 2  # in q^2, exact
        return _root_up(squares) * self.quantum

    @property
    def sum_range(self) -> tuple[float, float]:
        """The interval every bounded per-partition sum lies in, whatever the data.

        A sum of quantised values is >= 0 when k_min >= 0 (counts always) and
        <= 0 when k_max <= 0; otherwise its sign is open. An empty partition sums to 0.
        """
        low, high = self.value_units
        return (0.0 if low >= 0 else -math.inf, 0.0 if high <= 0 else math.inf)


def _root_up(square: int) -> float:
    """The smallest double at or above sqrt(square) for a non-negative integer (exact comparisons: a double is a
    rational, so r^2 >= square is decided in integers)."""
    root = math.sqrt(_rounded_up(square))
    while Fraction(root) ** 2 < square:
        root = math.nextafter(root, math.inf)
    while root > 0 and Fraction(math.nextafter(root, 0.0)) ** 2 >= square:
        root = math.nextafter(root, 0.0)
    return root


def _rounded_up(count: int) -> float:
    """A non-negative integer as the nearest double at or above it."""
    nearest = float(count)
    return nearest if nearest >= count else math.nextafter(nearest, math.inf)


class ReleaseKind(StrEnum):
    """What a release publishes (one spec class each; `release_spec_class`)."""

    HISTOGRAM = "histogram"  # per window, a noisy value per partition
    TOPK = "topk"  # per window, the k highest partitions by the exponential mechanism
    PEAK = "peak"  # per period, the window with the largest total, by Gaussian report-noisy-max
    SVT = "svt"  # threshold alerts over windows by a sparse-vector monitor
    QUANTILES = "quantiles"  # per window, quantiles of the bounded values per partition, by the exponential mechanism


class Noise(StrEnum):
    """Noise of a histogram over public partitions: discrete Gaussian (L2 sensitivity) or discrete Laplace (L1)."""

    GAUSSIAN = "gaussian"
    LAPLACE = "laplace"


class Selection(StrEnum):
    """How a histogram over unknown partitions chooses the partitions it shows.

    gaussian: Gaussian thresholding of the noisy sum (the default); distinct (counting jobs): Gaussian
    thresholding of the noisy number of distinct units, the value from that number plus the noisy records
    beyond each unit's first; truncated: Cesar–Rogers truncated Gaussian (bounded noise, approximate-zCDP
    accounting).
    """

    GAUSSIAN = "gaussian"
    TRUNCATED = "truncated"
    DISTINCT = "distinct"


class Metric(StrEnum):
    """What a histogram counts per partition and window (`HistogramSpec.metric`): the bounded values' sum (the
    default; a count when min_value = max_value), the bounded records (each worth 1 whatever the value bounds),
    the distinct privacy units (users), the bounded values' mean (a noisy count and a noisy sum of the
    values centred on the middle of [min_value, max_value], `centred_bounds`), or their variance (the mean's
    noisy count and sum and a noisy sum of the centred values' squares, `squared_bounds`)."""

    SUM = "sum"
    COUNT = "count"
    USERS = "users"
    MEAN = "mean"
    VARIANCE = "variance"


def metric_bounds(metric: "Metric", bounds: "ContributionBounds") -> "ContributionBounds":
    """The contribution bounds a histogram's metric is computed under: the job's for sum; counting bounds
    (every record worth 1) for count; counting bounds with max_contributions 1 for users, so that each kept
    (user, partition) adds exactly 1 and a partition's bounded sum is the number of users kept in it. The
    other bounds (max_partitions, max_windows, max_partitions_total) are the job's."""
    if metric in (Metric.SUM, Metric.MEAN, Metric.VARIANCE):  # a mean's or variance's parts: `moment_bounds`
        return bounds
    contributions = 1 if metric == Metric.USERS else bounds.max_contributions
    return dataclasses.replace(bounds, max_contributions=contributions, min_value=1.0, max_value=1.0)


def value_middle(bounds: "ContributionBounds") -> float:
    """The middle of [min_value, max_value], which a mean's values are centred on (a double; any public value
    would do for privacy, the middle minimises the centred values' range)."""
    return bounds.min_value / 2 + bounds.max_value / 2


def centred_bounds(bounds: "ContributionBounds") -> "ContributionBounds":
    """The bounds of a mean's centred sum: values v - middle clipped to [min_value - middle, max_value - middle],
    the other bounds unchanged; so one record moves the centred sum by at most about (max - min) / 2."""
    middle = value_middle(bounds)
    return dataclasses.replace(bounds, min_value=bounds.min_value - middle, max_value=bounds.max_value - middle)


def square_middle(bounds: "ContributionBounds") -> float:
    """Half the largest squared centred value, r^2 / 2 with r = max_value - middle: the centred values' squares
    lie in [0, r^2] and are centred on it."""
    return (bounds.max_value - value_middle(bounds)) ** 2 / 2


def squared_bounds(bounds: "ContributionBounds") -> "ContributionBounds":
    """The bounds of a variance's sum of squares: values (clip(v) - middle)^2 - r^2 / 2 in [-r^2 / 2, r^2 / 2]
    (`square_middle`), the other bounds unchanged; one record moves that sum by at most r^2 / 2."""
    half = square_middle(bounds)
    return dataclasses.replace(bounds, min_value=-half, max_value=half)


def moment_bounds(metric: "Metric", bounds: "ContributionBounds") -> tuple["ContributionBounds", ...]:
    """The bounds of each part a mean (count, centred sum) or a variance (and the sum of squares) is computed
    from, in that order."""
    parts = (metric_bounds(Metric.COUNT, bounds), centred_bounds(bounds))
    return parts + (squared_bounds(bounds),) if metric == Metric.VARIANCE else parts


class SvtMetric(StrEnum):
    """An svt release's per-window query: bounded records, bounded values, or the share of positive values."""

    COUNT = "count"
    SUM = "sum"
    SHARE = "share"


class SvtMethod(StrEnum):
    """The svt monitor's rule (`dpstream.pipelines.mechanisms.monitor`): Gaussian AboveThreshold under FSRC (the
    default), or the baselines: Zhu–Wang pricing under the Whitehouse et al. filter, Laplace AboveThreshold."""

    FSRC = "fsrc"
    WHITEHOUSE = "whitehouse"
    LAPLACE = "laplace"


E = TypeVar("E", bound=StrEnum)


def _member(enum: type[E], where: str, key: str, value: object) -> E:
    """`value` as a member of `enum` (its word, e.g. "laplace"), or a SpecError naming the key."""
    if isinstance(value, str) and value in enum._value2member_map_:
        return enum(value)
    raise SpecError(f"{where}: {key} must be one of {[m.value for m in enum]}, got {value!r}")


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _partition_list(where: str, partitions: object) -> tuple[str, ...] | None:
    """None, or a non-empty tuple of distinct non-empty strings."""
    if partitions is None:
        return None
    _require(isinstance(partitions, (list, tuple)) and len(partitions) > 0
             and all(isinstance(p, str) and p for p in partitions),
             f"{where}: partitions must be a non-empty list of strings when given, got {partitions!r}")
    assert isinstance(partitions, (list, tuple))
    _require(len(set(partitions)) == len(partitions), f"{where}: partitions lists a partition more than once")
    return tuple(partitions)


@dataclass(frozen=True)
class _Release:
    """What every release has: a name (it names the output file) and a weight (its relative share of the job's
    budget; `dpstream.accounting.calibrate`, and for svt `planning.svt`)."""

    name: str
    weight: float = 1.0
    kind: ClassVar[ReleaseKind]

    def __post_init__(self) -> None:
        _require(isinstance(self.name, str) and bool(self.name), f"release.name must be a non-empty string, got {self.name!r}")
        _require(_number(self.weight) and self.weight > 0, f"{self.where}: weight must be a positive number, got {self.weight!r}")

    @property
    def where(self) -> str:
        return f"release {self.name!r}"

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)  # normalising a frozen field in __post_init__


@dataclass(frozen=True, kw_only=True)
class HistogramSpec(_Release):
    """Per window, a noisy bounded sum per partition.

    partitions: the public partition list (every listed partition appears, with noise), or None when the
    partitions are unknown (only privately selected ones appear, chosen by `selection`). noise: for public
    partitions. metric: what is counted (`Metric`; bounded under `metric_bounds`). clamp: release each noisy value clamped to `ContributionBounds.sum_range` (counts at 0), which
    never moves it further from the truth but biases it upwards near the range's edge, so sums over partitions
    come out high; false (the default, benchmarks/clamping.py) releases the unclamped, unbiased noisy values.
    """

    kind: ClassVar[ReleaseKind] = ReleaseKind.HISTOGRAM
    partitions: tuple[str, ...] | None = None
    noise: Noise = Noise.GAUSSIAN
    selection: Selection = Selection.GAUSSIAN
    clamp: bool = False
    metric: Metric = Metric.SUM

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("partitions", _partition_list(self.where, self.partitions))
        self._set("noise", _member(Noise, self.where, "noise", self.noise))
        self._set("metric", _member(Metric, self.where, "metric", self.metric))
        self._set("selection", _member(Selection, self.where, "selection", self.selection))
        _require(isinstance(self.clamp, bool), f"{self.where}: clamp must be true or false, got {self.clamp!r}")


@dataclass(frozen=True, kw_only=True)
class TopKSpec(_Release):
    """Per window, the k highest of the public partitions by k exponential-mechanism picks; `counts`: also their
    Gaussian noisy sums, made consistent with the ranking."""

    kind: ClassVar[ReleaseKind] = ReleaseKind.TOPK
    k: int
    partitions: tuple[str, ...]
    counts: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(isinstance(self.k, int) and not isinstance(self.k, bool) and self.k >= 1,
                 f"{self.where}: k must be a positive integer, got {self.k!r}")
        partitions = _partition_list(self.where, self.partitions)
        _require(partitions is not None,
                 f"{self.where}: topk needs a public partitions list (the exponential mechanism ranks public candidates)")
        assert partitions is not None
        _require(self.k <= len(partitions), f"{self.where}: k must be at most the {len(partitions)} listed partitions, got {self.k}")
        self._set("partitions", partitions)
        _require(isinstance(self.counts, bool), f"{self.where}: counts must be true or false, got {self.counts!r}")


@dataclass(frozen=True, kw_only=True)
class PeakSpec(_Release):
    """Per period, the window with the largest total, by Gaussian report-noisy-max on totals divided by the public
    `maximum` (an upper bound of a window total). `period`: seconds (a multiple of the window step, counted from
    window.start), or a calendar length such as "1month" or "1year" (local periods in the window's time zone)."""

    kind: ClassVar[ReleaseKind] = ReleaseKind.PEAK
    period: float | str
    maximum: float

    def __post_init__(self) -> None:
        super().__post_init__()
        fixed = isinstance(self.period, (int, float)) and _number(self.period) and self.period > 0
        _require(calendar_length(self.period) is not None or fixed,
                 f"{self.where}: period must be a positive number of seconds or a calendar length such as "
                 f"\"1month\", got {self.period!r}")
        _require(_number(self.maximum) and self.maximum > 0,
                 f"{self.where}: maximum must be a positive number (public bound of a window total), got {self.maximum!r}")


@dataclass(frozen=True, kw_only=True)
class SvtSpec(_Release):
    """Threshold alerts over windows by a sparse-vector monitor (`dpstream.pipelines.transforms.svt`).

    metric: the per-window query (count: bounded records; sum: bounded values; share: bounded records whose
    value is positive, over max(bounded records, maximum)); maximum: its public normaliser (count and sum: an
    upper bound of the window total; share: the least denominator); threshold in [0, 1] units of the
    normalised query; sigma_threshold, sigma_query (default sqrt(3) sigma_threshold); method; persist_threshold:
    keep an open instance's noisy threshold between runs; partitions: only these public partitions count.
    The monitor's budget is the release's weight share of the job's whole (epsilon, delta).
    """

    kind: ClassVar[ReleaseKind] = ReleaseKind.SVT
    maximum: float
    threshold: float
    sigma_threshold: float
    sigma_query: float | None = None
    metric: SvtMetric = SvtMetric.COUNT
    method: SvtMethod = SvtMethod.FSRC
    persist_threshold: bool = False
    partitions: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        where = self.where
        self._set("metric", _member(SvtMetric, where, "metric", self.metric))
        self._set("method", _member(SvtMethod, where, "method", self.method))
        self._set("partitions", _partition_list(where, self.partitions))
        _require(_number(self.maximum) and self.maximum > 0,
                 f"{where}: maximum must be a positive number (public normaliser of a window total), got {self.maximum!r}")
        _require(_number(self.threshold) and 0 <= self.threshold <= 1,
                 f"{where}: threshold must lie in [0, 1] (units of the normalised query), got {self.threshold!r}")
        _require(_number(self.sigma_threshold) and self.sigma_threshold > 0,
                 f"{where}: sigma_threshold must be a positive number, got {self.sigma_threshold!r}")
        if self.sigma_query is not None:
            _require(_number(self.sigma_query) and self.sigma_query > 0,
                     f"{where}: sigma_query must be a positive number, got {self.sigma_query!r}")
            _require(self.method == SvtMethod.LAPLACE or self.sigma_query > self.sigma_threshold,
                     f"{where}: sigma_query must exceed sigma_threshold={self.sigma_threshold!r} for the Zhu–Wang bound, "
                     f"got {self.sigma_query!r}")
        _require(isinstance(self.persist_threshold, bool),
                 f"{where}: persist_threshold must be true or false, got {self.persist_threshold!r}")


DEFAULT_QUANTILE_BUCKETS = 1000
"""The grid of a quantiles release: steps of (max_value - min_value) / 1000, finer than the rank error of any
budget worth spending (the exponential mechanism's error grows only with ln(G + 1))."""
MAX_QUANTILES = 32
DEFAULT_MAX_QUANTILE_SCORES = 10**10
"""A quantiles release whose draws score more grid points than this over its window range (windows x partitions x
(buckets + 1) x quantiles, about 50 ns of CPU each: `planning.quantiles.scores`) is refused before the ledger is
asked unless its `max_scores` allows it. 10^10 is about 10 minutes of CPU; hourly windows for a year over 100
partitions, 1,000 buckets and 2 quantiles score 1.75 x 10^9."""


@dataclass(frozen=True, kw_only=True)
class QuantilesSpec(_Release):
    """Per window and partition, the `quantiles` (each in (0, 1)) of the bounded values, each drawn by the
    exponential mechanism among the points of a grid of `buckets` equal steps over [min_value, max_value].

    partitions: the public partition list (every listed partition appears), or None: partitions are selected by
    Gaussian thresholding of their noisy number of distinct privacy units, and only selected ones appear.
    """

    kind: ClassVar[ReleaseKind] = ReleaseKind.QUANTILES
    quantiles: tuple[float, ...]
    partitions: tuple[str, ...] | None = None
    buckets: int = DEFAULT_QUANTILE_BUCKETS
    max_scores: int = DEFAULT_MAX_QUANTILE_SCORES

    def __post_init__(self) -> None:
        super().__post_init__()
        levels = self.quantiles
        _require(isinstance(levels, (list, tuple)) and 0 < len(levels) <= MAX_QUANTILES
                 and all(_number(q) and 0 < q < 1 for q in levels),
                 f"{self.where}: quantiles must be a list of 1 to {MAX_QUANTILES} numbers in (0, 1), such as "
                 f"[0.5, 0.9], got {levels!r}")
        _require(len(set(levels)) == len(levels), f"{self.where}: quantiles lists a quantile more than once")
        self._set("quantiles", tuple(sorted(float(q) for q in levels)))
        self._set("partitions", _partition_list(self.where, self.partitions))
        _require(isinstance(self.buckets, int) and not isinstance(self.buckets, bool) and 2 <= self.buckets <= 10**6,
                 f"{self.where}: buckets must be an integer from 2 to 1000000, got {self.buckets!r}")
        _require(isinstance(self.max_scores, int) and not isinstance(self.max_scores, bool) and self.max_scores >= 1,
                 f"{self.where}: max_scores must be a positive integer, got {self.max_scores!r}")


ReleaseSpec = Union[HistogramSpec, TopKSpec, PeakSpec, SvtSpec, QuantilesSpec]
"""One `[[release]]` of a job file, or one release of a library `Budget`."""

RELEASE_SPECS: dict[ReleaseKind, type[ReleaseSpec]] = {
    spec.kind: spec for spec in (HistogramSpec, TopKSpec, PeakSpec, SvtSpec, QuantilesSpec)
}
"""The spec class of each release kind."""
