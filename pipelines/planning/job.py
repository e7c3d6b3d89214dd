"""The job plan: every release's mechanism and noise, fixed before any data is read.

`plan_job` turns the job's releases, contribution bounds and public window
range into one `accounting.calibrate` problem, so a single scalar sets the
noise of every release and the accountant's tightest valid epsilon over the
whole job (all releases, all windows) is at most the target. The pipeline
transforms then receive plain numbers from the returned `JobPlan`; they never
compute an epsilon.

What each release costs (events of one run; `runs` of them are composed):
- histogram, known partitions, Laplace: `Laplace(scale, L1)` once per window;
- histogram, known partitions, Gaussian: `Gaussian(sigma, L2)` once per window;
- histogram, unknown partitions, selection "gaussian" (the default):
  `GaussianThreshold(sigma, L2, delta_selection)` once per window (Gaussian
  thresholding: a Gaussian on the partitions both neighbours hold, a unit's own
  partitions released with probability <= delta_selection), which the PLD
  bound composes with every other release; selection "truncated":
  `ZCDP(rho, delta_selection)` once per window, rho = L0 Linf^2 / (2 sigma^2)
  (Cesar–Rogers Lemma 6.4), composed by zCDP/RDP only; selection "distinct"
  (counting jobs): the GaussianThreshold of "gaussian", its mu split between
  the noisy number of distinct units (mu^2 / k, k = Linf / |value|) and the
  noisy records beyond each unit's first (the rest), the split at which the
  released values are as noisy as with "gaussian" (`distinct_sigmas`). In all,
  delta_selection is fixed by the planner (SELECTION_DELTA_SHARE of the job's
  delta, shared evenly over every selection run) and sigma is calibrated;
- top-k: `BoundedRange(epsilon)` k times per window (Dong–Durfee–Rogers
  Prop 2; score range = Linf for counts, 2 Linf when values may be negative),
  plus `Gaussian(sigma, Linf sqrt(min(k, L0)))` per window when counts are asked for;
- peak: `PureDP(epsilon)` once per period with at least two windows
  (Lebensold–Precup–Balle Thm 8); sigma is solved from epsilon by bisection;
- svt: the monitor's whole budget, `ApproxDP(epsilon_m, delta_m)` (`PureDP`
  for method laplace), with (epsilon_m, delta_m) = weight / total weight of
  the job's (epsilon, delta). It is debited once, when the monitor is opened
  on the scope; later scheduled runs of the same monitor debit nothing for it,
  because its filter (`pipelines.mechanisms.monitor`; FSRC with a delta budget: the
  admitted instances' deltas add up to at most delta_m) never lets the
  monitor's output exceed that budget, however many runs and windows follow.
  The other releases are calibrated with these events fixed in the
  composition (named: `JobPlan.events` leaves out the continued monitors by
  name), so their noise does not depend on whether the monitor is new.

Privacy: add/remove all records of one privacy unit (spec.py). Contribution
bounding per window gives the sensitivities of `spec.ContributionBounds`.
The unit is a user, or with `unit_period` a user x period (e.g. aircraft-day):
then only the windows and peak periods that overlap one unit period are
composed (`unit_runs`), and the job's (epsilon, delta) holds per user and period.
Proof: docs/proofs/planning.plan_job.md; composition is the accountant's (`accounting.accountant`); calibration
is `accounting.calibrate`. Sensitivities are those of the quantised bounds,
which the exact int64 sums of bounding attain (`ContributionBounds`); the sums
reach the grid unrounded when its step is at most the value quantum, and
otherwise the rounding is covered by enlarging the noise so that the grid
sensitivity over the noise never exceeds the planned ratio (`grid_noise`,
`noise.grid_sensitivity`). Peak and svt queries divide exact totals once; their
sensitivities include that rounding (`normalised_sensitivity`).
Caller must ensure: the window range and partition lists are public.
Runtime: one calibration (about 45 accountant evaluations), plus one
bisection of the report-noisy-max epsilon per peak release.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

from dpstream.accounting.calibrate import CalibratedPlan, FixedEvent, Release, calibrate
from dpstream.accounting.events import ZCDP, ApproxDP, Event, GaussianThreshold, Laplace, PureDP, SelfComposed
from dpstream.accounting.numerics import epsilon_from_delta_curve, expanding_upper
from dpstream.accounting.selection import report_noisy_max_epsilon
from dpstream.pipelines.mechanisms.fixedpoint import QUOTIENT_ROUNDING
from dpstream.pipelines.mechanisms.monitor import SparseVectorMonitor
from dpstream.pipelines.mechanisms.noise import granularity, grid_sensitivity
from dpstream.pipelines.config.specs import ContributionBounds, ReleaseSpec, SpecError, WindowSpec

SELECTION_MECHANISMS = {"gaussian": "gaussian_threshold", "truncated": "truncated_gaussian", "distinct": "distinct_threshold"}
"""Job-file `selection` value -> mechanism for histograms over unknown partitions."""

SELECTION_DELTA_SHARE = 0.25
"""Share of the job's delta given to the selection events of unknown-partition histograms.

It trades the selection cutoff against every release's noise: the cutoff is
Linf + sigma z with z the normal quantile at (share delta / runs / L0), which
moves by about 2.5% per halving of the share near delta = 1e-6, while the rest
of the delta goes to the privacy-loss curve of the whole job. Measured on the
flights benchmark (5 partitions x 2 contributions, delta 1e-6, one window per
unit): share 0.5 -> 0.25 lowers the noise of every release by 1.2-1.6% and
raises the cutoff by 1.2% (benchmarks/pipelines.py).
"""


MONITOR_SHARE_MARGIN = 1e-9
"""An svt monitor's budget is its weight share of the job's (epsilon, delta) times (1 - this margin)."""


class PlanningError(ValueError):
    """A job's releases cannot be planned; the message names the release."""


@dataclass(frozen=True)
class _SelectionRelease(Release):
    """A calibration entry for partition selection: Gaussian thresholding or truncated Gaussian.

    `sensitivity` is the L2 sensitivity sqrt(L0) * tau, so a run's rho =
    sensitivity^2 / (2 sigma^2) as for a Gaussian of that sensitivity; the run's
    event keeps the fixed selection delta: `GaussianThreshold` (its dominating
    pair, composed by the PLD bound) or, truncated, `ZCDP(rho, delta)`
    (Cesar–Rogers Lemma 6.4, approximate zCDP).
    """

    selection_delta: float = 0.0
    truncated: bool = False

    def event(self, rho_share: float) -> Event:
        if self.truncated:
            return ZCDP(rho=rho_share / self.count, delta=self.selection_delta)
        return GaussianThreshold(sigma=self.sensitivity / math.sqrt(2.0 * rho_share / self.count),
                                 sensitivity=self.sensitivity, delta=self.selection_delta)


def score_range(bounds: ContributionBounds) -> float:
    """Range of score changes for the exponential mechanism: Linf when sums are monotone, else 2 Linf.

    Monotone: every quantised value has one sign, so the bounded sums have one (`ContributionBounds.sum_range`).
    """
    lower, upper = bounds.sum_range
    return bounds.linf if lower == 0.0 or upper == 0.0 else 2.0 * bounds.linf


def normalised_sensitivity(sensitivity: float, maximum: float) -> float:
    """How far one unit moves a query clip(total / maximum, 0, 1) whose exact total moves by at most `sensitivity`.

    The query divides an exact total with one correct rounding
    (`fixedpoint.rounded_quotient`), off by at most 2**-54 inside [0, 1], and
    clipping is 1-Lipschitz, so the computed queries of neighbours differ by at
    most sensitivity / maximum + QUOTIENT_ROUNDING (docs/proofs/planning.plan_job.md,
    "Normalised queries"); rounded up, and at most 1 when sensitivity <= maximum
    (queries lie in [0, 1]). Above 1 only when maximum < sensitivity, which callers refuse.
    """
    bound = math.nextafter(math.nextafter(sensitivity / maximum, math.inf) + QUOTIENT_ROUNDING, math.inf)
    return bound if sensitivity > maximum else min(bound, 1.0)


def grid_noise(noise: float, sensitivity: float, quantum: float, changed: int, norm: int) -> tuple[float, float]:
    """(noise', sensitivity') with noise' >= noise, sensitivity'/noise' <= sensitivity/noise after grid rounding.

    The mechanisms round their inputs, integers in units of the power of two
    `quantum`, to the grid of step granularity(noise'), which can raise the
    sensitivity (`noise.grid_sensitivity`); the noise is scaled up by the same
    factor, so the privacy of a run (a function of the ratio only) is never
    above the planned one. On a grid of step <= quantum nothing is rounded
    (`noise.to_grid`), and nothing changes.
    """
    current = noise
    for _ in range(8):
        step = granularity(current)
        effective = grid_sensitivity(sensitivity, step, step <= quantum, changed, norm)
        if effective / current <= sensitivity / noise:
            return current, effective
        current = math.nextafter(noise * effective / sensitivity, math.inf)
    raise PlanningError(f"grid adjustment of noise {noise!r} for sensitivity {sensitivity!r} did not settle")


def distinct_sigmas(event: GaussianThreshold, bounds: ContributionBounds) -> tuple[float, float | None]:
    """(sigma of the noisy distinct units, sigma of the noisy extra records or None) for selection "distinct".

    The calibrated event has mu = L2 / sigma with L2 = sqrt(L0) Linf. With
    v = |value| (a counting job) and k = Linf / v, the units get mu^2 / k and
    the extra (sensitivity sqrt(L0) (Linf - v)) the rest, so the run's
    mu^2 = mu_units^2 + mu_extra^2 stays at the planned mu^2 (each sigma then
    enlarged for the grid, `grid_noise`, and by 1e-12 for roundings). This
    split minimises the variance of the released value v units + extra,
    (L0 / mu^2)(v^2 / f + (Linf - v)^2 / (1 - f)) over the share f, at
    f = v / Linf, where it equals sigma^2: the values are as noisy as with one
    noisy count, while the cutoff is one unit plus a margin in sigma_units.
    """
    value, root = abs(bounds.quantised_range[0]), math.sqrt(bounds.max_partitions)
    mu = event.mu * (1.0 - 1e-12)
    share = value / bounds.linf
    units, _ = grid_noise(root / (mu * math.sqrt(share)), root, 1.0, bounds.max_partitions, norm=2)
    if share >= 1.0:
        return units, None
    extra_sensitivity = root * (bounds.linf - value)
    extra = extra_sensitivity / (mu * math.sqrt(1.0 - share))
    extra, _ = grid_noise(extra, extra_sensitivity, bounds.quantum, bounds.max_partitions, norm=2)
    return units, extra


def _value_range(spec: ReleaseSpec, bounds: ContributionBounds) -> tuple[float, float]:
    """Where a histogram's released values are clamped: the bounded sums' range, or nowhere (`clamp = false`)."""
    return bounds.sum_range if spec.clamp else (-math.inf, math.inf)


def _stddev(mechanism: str, noise: float) -> float:
    return math.sqrt(2.0) * noise if mechanism == "laplace" else noise


@dataclass(frozen=True)
class HistogramPlan:
    """A windowed histogram: one noisy value per partition and window.

    mechanism: laplace or gaussian (known partitions), gaussian_threshold or truncated_gaussian (unknown);
    noise: Laplace scale or Gaussian sigma; sensitivity: L1, L2, or tau = Linf (the selection mechanisms);
    value_range: public interval released values are clamped to (`mechanisms.clamp_to_range`), unbounded
    when the release asks for unclamped values. distinct_threshold only: noise is the sigma of the noisy
    number of distinct units, extra_noise that of the records beyond each unit's first (None when a unit
    adds one record), unit_value what one record adds.
    """

    spec: ReleaseSpec
    mechanism: str
    runs: int
    noise: float
    sensitivity: float
    max_partitions: int
    event: Event
    selection_delta: float | None = None
    value_range: tuple[float, float] = (-math.inf, math.inf)
    extra_noise: float | None = None
    unit_value: float | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def noise_stddev(self) -> float:
        if self.counts_units:
            return math.hypot(self.unit_value * self.noise, self.extra_noise or 0.0)
        return _stddev(self.mechanism, self.noise)

    @property
    def counts_units(self) -> bool:
        """True when the mechanism needs each partition's number of distinct users besides its sum."""
        return self.mechanism == "distinct_threshold"

    @property
    def selects(self) -> bool:
        """True for unknown partitions: the mechanism chooses which partitions appear."""
        return self.mechanism in SELECTION_MECHANISMS.values()

    def describe(self) -> str:
        lower, upper = self.value_range
        if lower == -math.inf and upper == math.inf:
            return self._describe_noise()
        interval = f"{'(' if lower == -math.inf else '['}{lower:g}, {upper:g}{')' if upper == math.inf else ']'}".replace("inf", "infinity")
        return (f"{self._describe_noise()} Released values are clamped to {interval}, the range a bounded sum can "
                f"take: no value moves further from the truth, but totals over partitions come out high.")

    def _describe_noise(self) -> str:
        if self.mechanism == "distinct_threshold":
            extra = ("" if self.extra_noise is None else
                     f" plus the records beyond each unit's first with independent discrete Gaussian noise "
                     f"sigma={self.extra_noise:.6g}")
            return (
                f"Histogram {self.name!r} over partitions not known in advance, one release per window ({self.runs} "
                f"windows composed per privacy unit): each observed partition's number of distinct privacy units gets "
                f"discrete Gaussian noise with sigma={self.noise:.6g}, and only partitions whose noisy number clears a "
                f"cutoff appear, set so that one privacy unit's own partitions show with probability at most "
                f"{self.selection_delta:.3g}; a partition's value is that noisy number times {self.unit_value:g}{extra} "
                f"(standard deviation {self.noise_stddev:.6g}; per window {self.event!r})."
            )
        if self.mechanism == "gaussian_threshold":
            return (
                f"Histogram {self.name!r} over partitions not known in advance, one release per window ({self.runs} "
                f"windows composed per privacy unit): each observed partition's bounded sum gets discrete Gaussian noise "
                f"with sigma={self.noise:.6g}, and only partitions whose noisy value clears a cutoff appear, set so that "
                f"one privacy unit's own partitions show with probability at most {self.selection_delta:.3g} "
                f"(Gaussian thresholding; per window {self.event!r})."
            )
        if self.mechanism == "truncated_gaussian":
            return (
                f"Histogram {self.name!r} over partitions not known in advance, one release per window ({self.runs} "
                f"windows composed per privacy unit): each observed partition's bounded sum gets discrete Gaussian noise with sigma={self.noise:.6g} "
                f"truncated to a public level, and only partitions whose noisy value clears threshold + truncation appear "
                f"(Cesar–Rogers Algorithm 2; per window {self.event!r}, the truncation spending delta={self.selection_delta:.3g})."
            )
        norm = "L1" if self.mechanism == "laplace" else "L2"
        return (
            f"Histogram {self.name!r} over {len(self.spec.partitions)} public partitions, one release per window "
            f"({self.runs} windows composed per privacy unit): every listed partition appears, empty or not, with discrete {self.mechanism} noise "
            f"(noise parameter {self.noise:.6g}, standard deviation {self.noise_stddev:.6g}) calibrated to the "
            f"{norm} sensitivity {self.sensitivity:.6g} of one user's bounded contributions (per window {self.event!r})."
        )


@dataclass(frozen=True)
class TopKPlan:
    """Per window, the k highest partitions by k peeled exponential mechanisms (one-shot Gumbel).

    epsilon: per pick; sensitivity: the score range. count_sigma / count_sensitivity / count_event:
    the optional Gaussian counts of the chosen keys (CountMLE post-processing).
    """

    spec: ReleaseSpec
    runs: int  # windows
    epsilon: float
    sensitivity: float
    event: Event  # one window: SelfComposed(BoundedRange(epsilon), k)
    max_partitions: int
    count_sigma: float | None = None
    count_sensitivity: float | None = None
    count_event: Event | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def describe(self) -> str:
        text = (
            f"Top-{self.spec.k} {self.name!r} among {len(self.spec.partitions)} public partitions, once per window "
            f"({self.runs} windows composed per privacy unit): {self.spec.k} exponential-mechanism picks per window (one-shot Gumbel), each "
            f"epsilon={self.epsilon:.6g}-bounded-range with score range {self.sensitivity:.6g} (Dong–Durfee–Rogers)."
        )
        if self.count_sigma is not None:
            text += (
                f" The chosen partitions' bounded sums are released with discrete Gaussian noise sigma={self.count_sigma:.6g} "
                f"(L2 sensitivity {self.count_sensitivity:.6g}), made consistent with the ranking (Cesar–Rogers Algorithm 1)."
            )
        return text


@dataclass(frozen=True)
class PeakPlan:
    """Per period, the window with the largest total by Gaussian report-noisy-max on totals / maximum in [0, 1].

    sigma is in normalised units; epsilon is the planned per-period bound, which
    `report_noisy_max_epsilon(d, sigma, sensitivity)` meets for every period size d in `period_sizes`.
    """

    spec: ReleaseSpec
    runs: int  # periods with at least two windows
    windows_per_period: int
    period_sizes: tuple[int, ...]  # windows in each period, in order
    sigma: float
    sensitivity: float  # L1 / maximum, plus the division's rounding (normalised_sensitivity)
    epsilon: float
    event: Event

    @property
    def name(self) -> str:
        return self.spec.name

    def describe(self) -> str:
        return (
            f"Peak window {self.name!r}: for each of {len(self.period_sizes)} periods of {self.windows_per_period} windows, "
            f"the window with the largest total, by Gaussian report-noisy-max on totals divided by the public maximum "
            f"{self.spec.maximum:g} and clipped to [0, 1] (sigma={self.sigma:.6g} in those units, sensitivity "
            f"{self.sensitivity:.6g}); pure epsilon={self.epsilon:.6g} per period (Lebensold–Precup–Balle Thm 8)."
        )


@dataclass(frozen=True)
class SvtPlan:
    """A sparse-vector monitor over the job's windows: one normalised query per window, alerts by `pipelines.transforms.svt`.

    sensitivity: how far one privacy unit moves the normalised query (L1 of the
    metric's total over the public maximum); epsilon, delta: the monitor's whole
    budget (its filter's); event: what opening the monitor debits from the scope.
    """

    spec: ReleaseSpec
    runs: int  # windows of this run
    sensitivity: float
    epsilon: float
    delta: float
    event: Event
    instance_epsilon: float  # ex-ante (pDP or pure) epsilon of the first AboveThreshold instance
    instance_delta: float  # its delta; fsrc: instance t gets delta 6 / (pi^2 t^2), at a larger epsilon
    monitor_text: str

    @property
    def name(self) -> str:
        return self.spec.name

    def monitor(self, rng=None) -> SparseVectorMonitor:
        """A fresh monitor with this plan's parameters."""
        spec = self.spec
        return SparseVectorMonitor(spec.threshold, spec.sigma_threshold, self.sensitivity, self.epsilon, self.delta,
                                   sigma_query=spec.sigma_query, method=spec.method,
                                   persist_threshold=spec.persist_threshold, rng=rng)

    def describe(self) -> str:
        query = {
            "count": "the number of bounded records",
            "sum": "the sum of the bounded values",
            "share": "the share of bounded records whose value is positive (denominator at least the maximum)",
        }[self.spec.metric]
        return (
            f"Threshold alerts {self.name!r} over {self.runs} windows of this run: each window's {query}, divided by "
            f"the public {self.spec.maximum:g} and clipped to [0, 1] (sensitivity {self.sensitivity:.6g}), goes to a "
            f"{self.monitor_text}. The monitor's budget {self.event!r} is debited once, when it is opened on the "
            f"scope; it continues across scheduled runs until its filter halts it."
        )


ReleasePlan = Union[HistogramPlan, TopKPlan, PeakPlan, SvtPlan]


@dataclass(frozen=True)
class JobPlan:
    """Every release's parameters and the calibration that justifies them; immutable."""

    releases: tuple[ReleasePlan, ...]
    calibrated: CalibratedPlan
    bounds: ContributionBounds
    window: WindowSpec
    unit_period: float | None = None  # seconds; None: the privacy unit is a user over the whole range

    def __getitem__(self, name: str) -> ReleasePlan:
        for release in self.releases:
            if release.name == name:
                return release
        raise KeyError(f"no release named {name!r}; planned: {[r.name for r in self.releases]}")

    @property
    def epsilon(self) -> float:
        """The accountant's epsilon for the whole job at the target delta (<= the target)."""
        return self.calibrated.epsilon

    @property
    def delta(self) -> float:
        return self.calibrated.target_delta

    def events(self, continued: frozenset[str] = frozenset()) -> tuple[Event, ...]:
        """The job's events, as debited from the budget scope; `continued`: names of the svt monitors already
        open on the scope, whose budgets are not debited again. Monitors are told apart by name, never by event
        (two monitors with equal parameters have equal events)."""
        return self.calibrated.events(without=frozenset(continued))

    def monitors(self) -> tuple[SvtPlan, ...]:
        return tuple(r for r in self.releases if isinstance(r, SvtPlan))

    def describe(self) -> dict[str, str]:
        """Plain-words text per release, in plan order."""
        return {release.name: release.describe() for release in self.releases}


def period_sizes(window: WindowSpec, period: float) -> tuple[int, ...]:
    """Windows per period: window i belongs to period floor(i * step / period); period must be a multiple of step."""
    ratio = period / window.step
    per_period = round(ratio)
    if per_period < 1 or abs(ratio - per_period) > 1e-9 * ratio:
        raise PlanningError(f"peak period must be a positive multiple of the window step {window.step}, got {period!r}")
    total = window.count
    return tuple(min(per_period, total - start) for start in range(0, total, per_period))


def check_unit_period(window: WindowSpec, unit_period: float) -> int:
    """Windows per unit period; the unit period must be a whole number of fixed windows (counted from window.start)."""
    if window.period is not None:
        raise PlanningError(f"privacy.unit_period needs fixed windows (no window.period), got window.period={window.period!r}")
    ratio = unit_period / window.size
    per_period = round(ratio)
    if not (math.isfinite(unit_period) and per_period >= 1 and abs(ratio - per_period) <= 1e-9 * ratio):
        raise PlanningError(f"privacy.unit_period must be a positive multiple of window.size={window.size}, got {unit_period!r}")
    return per_period


def unit_runs(window: WindowSpec, unit_period: float | None, group: int = 1) -> int:
    """How many groups of `group` consecutive windows (group 1: windows) one privacy unit can touch.

    Without a unit period a user may appear in every window: all groups of the range.
    With one, unit period p covers fixed windows [p m, (p+1) m), m = windows per period,
    and touches only the groups that overlap that range; the maximum over all periods is returned.
    Proof: docs/proofs/planning.unit_runs.md.
    """
    total = window.count
    if unit_period is None:
        return math.ceil(total / group)
    per_period = check_unit_period(window, unit_period)
    return max(len(range(first // group, (min(first + per_period, total) - 1) // group + 1))
               for first in range(0, total, per_period))


def _peak_sigma(sizes: tuple[int, ...], epsilon: float, sensitivity: float) -> float:
    """The smallest sigma (rounded up) with report_noisy_max_epsilon(d, sigma, sensitivity) <= epsilon for all d."""
    sigma = 0.0
    for d in sorted({d for d in sizes if d >= 2}):
        def spent(s: float, d: int = d) -> float:
            return float(report_noisy_max_epsilon(d, s, sensitivity, 0.0, 1.0))

        upper = expanding_upper(spent, epsilon, start=sensitivity / epsilon, limit=1e12)
        while upper / 2 > 1e-3 * sensitivity and spent(upper / 2) <= epsilon:
            upper /= 2
        sigma = max(sigma, epsilon_from_delta_curve(spent, epsilon, upper, lower=upper / 2, rtol=1e-9, atol=0.0))
    if not math.isfinite(sigma) or sigma <= 0:
        raise PlanningError(f"no report-noisy-max sigma meets epsilon={epsilon!r} for period sizes {sorted(set(sizes))}")
    return sigma


def plan_job(
    releases: tuple[ReleaseSpec, ...],
    bounds: ContributionBounds,
    window: WindowSpec,
    epsilon: float,
    delta: float,
    unit_period: float | None = None,
) -> JobPlan:
    """Calibrate every release of a job so that the whole job is (epsilon, delta)-DP.

    unit_period: None when the privacy unit is a user over the whole window range; else the
    length in seconds of the period of a user x period unit (a multiple of the fixed window
    size): the budget then holds per user and period, and only the runs that one unit period
    can touch are composed (`unit_runs`; peak periods overlapping a unit period).

    Checks: release names unique; topk has a public partition list with at least k entries;
    peak period a multiple of the window step and L1 <= maximum; svt sensitivity at most 1 and a
    budget share that admits at least one AboveThreshold instance.
    """
    releases = tuple(releases)
    if not releases:
        raise PlanningError("a job needs at least one release, got none")
    names = [r.name for r in releases]
    if len(set(names)) != len(names):
        raise PlanningError(f"release names must be unique, got {names}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise PlanningError(f"privacy.delta must lie in (0, 1), got {delta!r}")
    windows = unit_runs(window, unit_period)
    quantum = bounds.quantum
    selection_runs = sum(windows for r in releases if r.kind == "histogram" and r.partitions is None)
    selection_delta = SELECTION_DELTA_SHARE * delta / selection_runs if selection_runs else None

    entries: list[Release] = []
    sizes: dict[str, tuple[int, ...]] = {}
    monitors = {spec.name: _svt_plan(spec, bounds, window, epsilon, delta, releases)
                for spec in releases if spec.kind == "svt"}
    for spec in releases:
        where = f"release {spec.name!r}"
        if spec.kind == "histogram" and spec.partitions is None:
            if spec.selection == "distinct" and not bounds.counting:
                raise PlanningError(f"{where}: selection \"distinct\" needs a counting job (min_value = max_value: "
                                    f"every record worth the same), got min_value={bounds.min_value!r}, "
                                    f"max_value={bounds.max_value!r}")
            entries.append(_SelectionRelease(spec.name, "gaussian", spec.weight, bounds.l2, windows,
                                             selection_delta=selection_delta, truncated=spec.selection == "truncated"))
        elif spec.kind == "histogram":
            sensitivity = bounds.l1 if spec.noise == "laplace" else bounds.l2
            entries.append(Release(spec.name, spec.noise, spec.weight, sensitivity, windows))
        elif spec.kind == "topk":
            if spec.partitions is None:
                raise PlanningError(f"{where}: topk needs a public partitions list (the exponential mechanism ranks public candidates)")
            if spec.k > len(spec.partitions):
                raise PlanningError(f"{where}: k must be at most the {len(spec.partitions)} listed partitions, got {spec.k}")
            share = spec.weight / 2 if spec.counts else spec.weight
            entries.append(Release(spec.name, "exponential", share, score_range(bounds), windows * spec.k))
            if spec.counts:
                count_l2 = bounds.linf * math.sqrt(min(spec.k, bounds.max_partitions))
                entries.append(Release(f"{spec.name}.counts", "gaussian", share, count_l2, windows))
        elif spec.kind == "peak":
            if bounds.l1 > spec.maximum:
                raise PlanningError(f"{where}: maximum must be at least the L1 sensitivity {bounds.l1:g} of a window total, got {spec.maximum!r}")
            sizes[spec.name] = period_sizes(window, spec.period)
            runs = _peak_runs(window, unit_period, spec.period, sizes[spec.name])
            if runs == 0:
                raise PlanningError(f"{where}: every period holds a single window; period must cover at least 2 windows")
            entries.append(Release(spec.name, "pure", spec.weight, 1.0, runs))
        elif spec.kind != "svt":
            raise PlanningError(f"{where}: kind {spec.kind!r} is not planned by pipelines.planning; allowed: histogram, topk, peak")

    fixed = tuple(FixedEvent(name, monitor.event) for name, monitor in monitors.items())
    try:
        calibrated = calibrate(entries, epsilon, delta, fixed=fixed)
    except (ValueError, SpecError) as err:
        raise PlanningError(f"cannot calibrate the job to epsilon={epsilon!r}, delta={delta!r}: {err}") from err
    by_name = calibrated.by_name()
    planned: list[ReleasePlan] = []
    for spec in releases:
        if spec.kind == "svt":
            planned.append(monitors[spec.name])
            continue
        event = by_name[spec.name].event
        if spec.kind == "histogram" and spec.partitions is None and spec.selection == "distinct":
            units, extra = distinct_sigmas(event, bounds)
            planned.append(HistogramPlan(spec, SELECTION_MECHANISMS[spec.selection], windows, units, bounds.linf,
                                         bounds.max_partitions, event, selection_delta, _value_range(spec, bounds),
                                         extra_noise=extra, unit_value=bounds.quantised_range[0]))
        elif spec.kind == "histogram" and spec.partitions is None:
            if isinstance(event, GaussianThreshold):
                sigma, _ = grid_noise(event.sigma, event.sensitivity, quantum, bounds.max_partitions, norm=2)
            else:
                sigma = bounds.linf * math.sqrt(bounds.max_partitions / (2.0 * event.rho))
                sigma, _ = grid_noise(sigma, bounds.linf, quantum, changed=1, norm=1)
            planned.append(HistogramPlan(spec, SELECTION_MECHANISMS[spec.selection], windows, sigma, bounds.linf,
                                         bounds.max_partitions, event, selection_delta, _value_range(spec, bounds)))
        elif spec.kind == "histogram":
            norm = 1 if spec.noise == "laplace" else 2
            noise = event.scale if isinstance(event, Laplace) else event.sigma
            noise, _ = grid_noise(noise, event.sensitivity, quantum, bounds.max_partitions, norm)
            planned.append(HistogramPlan(spec, spec.noise, windows, noise, event.sensitivity, bounds.max_partitions, event,
                                         value_range=_value_range(spec, bounds)))
        elif spec.kind == "topk":
            selection = (spec, windows, event.epsilon, score_range(bounds), SelfComposed(event, spec.k), bounds.max_partitions)
            if spec.counts:
                count_event = by_name[f"{spec.name}.counts"].event
                sigma, _ = grid_noise(count_event.sigma, count_event.sensitivity, quantum,
                                      min(spec.k, bounds.max_partitions), 2)
                planned.append(TopKPlan(*selection, sigma, count_event.sensitivity, count_event))
            else:
                planned.append(TopKPlan(*selection))
        else:
            sensitivity = normalised_sensitivity(bounds.l1, spec.maximum)
            sigma = _peak_sigma(sizes[spec.name], event.epsilon, sensitivity)
            runs = _peak_runs(window, unit_period, spec.period, sizes[spec.name])
            planned.append(PeakPlan(spec, runs, round(spec.period / window.step), sizes[spec.name], sigma,
                                    sensitivity, event.epsilon, event))
    return JobPlan(tuple(planned), calibrated, bounds, window, unit_period)


def _peak_runs(window: WindowSpec, unit_period: float | None, period: float, sizes: tuple[int, ...]) -> int:
    """Report-noisy-max runs one unit can touch: peak periods of at least two windows overlapping its unit period."""
    per_period = round(period / window.step)
    if unit_period is None:
        return sum(1 for d in sizes if d >= 2)
    per_unit = check_unit_period(window, unit_period)
    total = window.count
    return max(sum(1 for q in range(first // per_period, (min(first + per_unit, total) - 1) // per_period + 1)
                   if sizes[q] >= 2)
               for first in range(0, total, per_unit))


def svt_sensitivity(spec: ReleaseSpec, bounds: ContributionBounds) -> float:
    """How far one privacy unit moves an svt release's normalised window query.

    count and share: L0 * max_contributions records (share: a record's
    partition for bounding is (partition, positive or not), still at most L0
    of them), over the maximum; sum: the L1 sensitivity of the window total
    over the maximum; each plus the rounding of the query's one division
    (`normalised_sensitivity`). Proof for share: docs/proofs/svt.SparseVectorAlerts.md.
    """
    if spec.metric == "sum":
        return normalised_sensitivity(bounds.l1, spec.maximum)
    return normalised_sensitivity(bounds.max_partitions * bounds.max_contributions, spec.maximum)


def _svt_plan(spec: ReleaseSpec, bounds: ContributionBounds, window: WindowSpec, epsilon: float, delta: float,
              releases: tuple[ReleaseSpec, ...]) -> SvtPlan:
    where = f"release {spec.name!r}"
    share = spec.weight / math.fsum(r.weight for r in releases)
    sensitivity = svt_sensitivity(spec, bounds)
    if not sensitivity <= 1.0:
        raise PlanningError(f"{where}: maximum must be at least the sensitivity {sensitivity * spec.maximum:g} of a "
                            f"window total (normalised sensitivity <= 1), got {spec.maximum!r}")
    # A hair below the exact share, so that the accountant's upward-rounded sums stay within the job's target.
    monitor_epsilon = epsilon * share * (1.0 - MONITOR_SHARE_MARGIN)
    monitor_delta = 0.0 if spec.method == "laplace" else delta * share * (1.0 - MONITOR_SHARE_MARGIN)
    event = PureDP(monitor_epsilon) if spec.method == "laplace" else ApproxDP(monitor_epsilon, monitor_delta)
    try:
        monitor = SparseVectorMonitor(spec.threshold, spec.sigma_threshold, sensitivity, monitor_epsilon, monitor_delta,
                                      sigma_query=spec.sigma_query, method=spec.method,
                                      persist_threshold=spec.persist_threshold)
    except ValueError as err:
        raise PlanningError(f"{where}: {err}") from err
    return SvtPlan(spec, window.count, sensitivity, monitor_epsilon, monitor_delta, event, monitor.instance_epsilon,
                   monitor.instance_delta, monitor.describe())
