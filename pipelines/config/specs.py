"""What a job asks for, as frozen values shared by the job file, the planner and the transforms.

Records arrive as `dpstream.connectors.schema.EVENT_SCHEMA` record batches.
Privacy unit and windows (DESIGN.md §1): neighbouring inputs differ in all
records of one user. Contribution bounds apply per user and window, so a user
present in W windows changes W window releases; the planner composes every
window (`WindowSpec.count`), which is public because the job declares the
time range it covers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpstream.pipelines.mechanisms.fixedpoint import MAX_CONTRIBUTIONS, to_units, value_quantum

RELEASE_KINDS = ("histogram", "topk", "peak", "svt")
NOISE_KINDS = ("gaussian", "laplace")
SELECTION_KINDS = ("gaussian", "truncated", "distinct")  # unknown-partition histograms: planning.SELECTION_MECHANISMS
SVT_METRICS = ("count", "sum", "share")
SVT_METHODS = ("fsrc", "whitehouse", "laplace")  # pipelines.mechanisms.monitor.MONITOR_METHODS (kept Beam- and scipy-free here)


class SpecError(ValueError):
    """A job specification value is out of range; the message names the key."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


@dataclass(frozen=True)
class WindowSpec:
    """Event-time windows over the public range [start, end) (seconds since the epoch, UTC).

    Fixed windows when `period` is None, else sliding windows of length `size`
    starting every `period` seconds (a record belongs to size/period windows).
    Window i covers [start + i * step, start + i * step + size), step = period or size.

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

    def __post_init__(self) -> None:
        _require(math.isfinite(self.size) and self.size > 0, f"window.size must be a positive number of seconds, got {self.size!r}")
        _require(
            self.period is None or (math.isfinite(self.period) and 0 < self.period <= self.size),
            f"window.period must lie in (0, window.size={self.size}], got {self.period!r}",
        )
        _require(math.isfinite(self.start) and math.isfinite(self.end) and self.end > self.start,
                 f"window.end must be after window.start, got start={self.start!r}, end={self.end!r}")
        _require(math.isfinite(self.allowed_lateness) and self.allowed_lateness >= 0,
                 f"window.allowed_lateness must be a non-negative number of seconds, got {self.allowed_lateness!r}")

    @property
    def step(self) -> float:
        return self.period if self.period is not None else self.size

    @property
    def count(self) -> int:
        """Number of windows whose start lies in [start, end)."""
        return max(1, math.ceil((self.end - self.start) / self.step))

    @property
    def windows_per_record(self) -> int:
        """How many windows one record can fall into (1 for fixed windows)."""
        return math.ceil(self.size / self.step)

    def bounds(self, index: int) -> tuple[float, float]:
        """[start, end) of window `index`, in seconds."""
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
    """

    max_partitions: int = 1
    max_contributions: int = 1
    min_value: float = 1.0
    max_value: float = 1.0

    def __post_init__(self) -> None:
        for name in ("max_partitions", "max_contributions"):
            value = getattr(self, name)
            _require(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                     f"privacy.{name} must be a positive integer, got {value!r}")
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
        return math.sqrt(self.max_partitions) * self.linf

    @property
    def sum_range(self) -> tuple[float, float]:
        """The interval every bounded per-partition sum lies in, whatever the data.

        A sum of quantised values is >= 0 when k_min >= 0 (counts always) and
        <= 0 when k_max <= 0; otherwise its sign is open. An empty partition sums to 0.
        """
        low, high = self.value_units
        return (0.0 if low >= 0 else -math.inf, 0.0 if high <= 0 else math.inf)


def _rounded_up(count: int) -> float:
    """A non-negative integer as the nearest double at or above it."""
    nearest = float(count)
    return nearest if nearest >= count else math.nextafter(nearest, math.inf)


@dataclass(frozen=True)
class ReleaseSpec:
    """One `[[release]]` of a job file.

    kind: histogram (per-window noisy value per partition), topk (per-window top-k partitions by the
    exponential mechanism), peak (per period, the window with the largest total, Gaussian
    report-noisy-max), svt (threshold alerts by a sparse-vector monitor, `pipelines.transforms.svt`).
    noise: gaussian or laplace (histogram); partitions: the public partition list, or None when the
    partitions are unknown (then only privately selected partitions appear); selection: how they are
    selected, gaussian (Gaussian thresholding of the noisy sum, the default), distinct (counting jobs:
    Gaussian thresholding of the noisy number of distinct units, the value from that number plus the
    noisy records beyond each unit's first) or truncated (Cesar–Rogers truncated Gaussian, bounded noise
    but approximate-zCDP accounting); k: list length for topk;
    weight: relative share of the job's budget (see accounting.calibrate; an svt release's share is its
    monitor's whole budget, see planning.plan_job).
    svt: metric count (bounded records), sum (bounded values) or share (bounded records whose value is
    positive, over max(bounded records, maximum)); maximum: public normaliser (count and sum: an upper
    bound of the window total; share: the least denominator); threshold in [0, 1] units of the
    normalised query; sigma_threshold, sigma_query (default sqrt(3) sigma_threshold); method fsrc,
    whitehouse or laplace; persist_threshold: keep an open instance's noisy threshold between runs.
    clamp (histogram): release each noisy value clamped to `ContributionBounds.sum_range` (counts at 0),
    which never moves it further from the truth; false releases the unclamped, unbiased noisy values.
    """

    name: str
    kind: str
    weight: float = 1.0
    noise: str = "gaussian"
    selection: str = "gaussian"
    partitions: tuple[str, ...] | None = None
    k: int | None = None
    period: float | None = None  # peak: seconds per period (e.g. a month of daily windows)
    counts: bool = False  # topk: also release Gaussian counts for the chosen keys
    maximum: float | None = None  # peak, svt: public normaliser of a window's total (see above)
    threshold: float | None = None  # svt
    sigma_threshold: float | None = None  # svt
    sigma_query: float | None = None  # svt; None: sqrt(3) * sigma_threshold
    metric: str = "count"  # svt
    method: str = "fsrc"  # svt
    persist_threshold: bool = False  # svt
    clamp: bool = True  # histogram

    def __post_init__(self) -> None:
        where = f"release {self.name!r}"
        _require(bool(self.name) and isinstance(self.name, str), f"release.name must be a non-empty string, got {self.name!r}")
        _require(self.kind in RELEASE_KINDS, f"{where}: kind must be one of {list(RELEASE_KINDS)}, got {self.kind!r}")
        _require(self.noise in NOISE_KINDS, f"{where}: noise must be one of {list(NOISE_KINDS)}, got {self.noise!r}")
        _require(isinstance(self.clamp, bool), f"{where}: clamp must be true or false, got {self.clamp!r}")
        _require(self.selection in SELECTION_KINDS,
                 f"{where}: selection must be one of {list(SELECTION_KINDS)}, got {self.selection!r}")
        _require(math.isfinite(self.weight) and self.weight > 0, f"{where}: weight must be a positive number, got {self.weight!r}")
        if self.kind == "topk":
            _require(isinstance(self.k, int) and not isinstance(self.k, bool) and self.k >= 1,
                     f"{where}: k must be a positive integer, got {self.k!r}")
        if self.kind == "peak":
            _require(self.period is not None and math.isfinite(self.period) and self.period > 0,
                     f"{where}: period must be a positive number of seconds, got {self.period!r}")
            _require(self.maximum is not None and math.isfinite(self.maximum) and self.maximum > 0,
                     f"{where}: maximum must be a positive number (public bound of a window total), got {self.maximum!r}")
        if self.kind == "svt":
            self._check_svt(where)
        if self.partitions is not None:
            _require(isinstance(self.partitions, tuple) and len(self.partitions) > 0,
                     f"{where}: partitions must be a non-empty list when given, got {self.partitions!r}")

    def _check_svt(self, where: str) -> None:
        def number(value) -> bool:
            return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

        _require(self.metric in SVT_METRICS, f"{where}: metric must be one of {list(SVT_METRICS)}, got {self.metric!r}")
        _require(self.method in SVT_METHODS, f"{where}: method must be one of {list(SVT_METHODS)}, got {self.method!r}")
        _require(number(self.maximum) and self.maximum > 0,
                 f"{where}: maximum must be a positive number (public normaliser of a window total), got {self.maximum!r}")
        _require(number(self.threshold) and 0 <= self.threshold <= 1,
                 f"{where}: threshold must lie in [0, 1] (units of the normalised query), got {self.threshold!r}")
        _require(number(self.sigma_threshold) and self.sigma_threshold > 0,
                 f"{where}: sigma_threshold must be a positive number, got {self.sigma_threshold!r}")
        if self.sigma_query is not None:
            _require(number(self.sigma_query) and self.sigma_query > 0,
                     f"{where}: sigma_query must be a positive number, got {self.sigma_query!r}")
            _require(self.method == "laplace" or self.sigma_query > self.sigma_threshold,
                     f"{where}: sigma_query must exceed sigma_threshold={self.sigma_threshold!r} for the Zhu–Wang bound, "
                     f"got {self.sigma_query!r}")
        _require(isinstance(self.persist_threshold, bool),
                 f"{where}: persist_threshold must be true or false, got {self.persist_threshold!r}")
