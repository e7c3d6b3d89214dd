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
- histogram, unknown partitions: `ZCDP(rho, delta_selection)` once per window,
  rho = L0 Linf^2 / (2 sigma^2) (Cesar–Rogers Lemma 6.4); the delta of the
  truncation is fixed by the planner (half of the job's delta, shared evenly
  over every selection run), the rho part is calibrated;
- top-k: `BoundedRange(epsilon)` k times per window (Dong–Durfee–Rogers
  Prop 2; score range = Linf for counts, 2 Linf when values may be negative),
  plus `Gaussian(sigma, Linf sqrt(min(k, L0)))` per window when counts are asked for;
- peak: `PureDP(epsilon)` once per period with at least two windows
  (Lebensold–Precup–Balle Thm 8); sigma is solved from epsilon by bisection.

Privacy: add/remove all records of one privacy unit (spec.py). Contribution
bounding per window gives the sensitivities of `spec.ContributionBounds`.
Proof: docs/proofs/planning.plan_job.md; composition is the accountant's (`accounting.accountant`); calibration
is `accounting.calibrate`; grid rounding of non-integer sums is covered by
enlarging the noise so that the grid sensitivity over the noise never exceeds
the planned ratio (`noise.grid_sensitivity`).
Caller must ensure: the window range and partition lists are public.
Runtime: one calibration (about 45 accountant evaluations), plus one
bisection of the report-noisy-max epsilon per peak release.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

from accounting.calibrate import CalibratedPlan, Release, calibrate
from accounting.events import ZCDP, Event, Laplace, SelfComposed
from accounting.numerics import epsilon_from_delta_curve, expanding_upper
from accounting.selection import report_noisy_max_epsilon
from pipelines.noise import granularity, grid_sensitivity
from pipelines.spec import ContributionBounds, ReleaseSpec, SpecError, WindowSpec

SELECTION_DELTA_SHARE = 0.5
"""Share of the job's delta reserved for the truncation events of unknown-partition histograms."""


class PlanningError(ValueError):
    """A job's releases cannot be planned; the message names the release."""


@dataclass(frozen=True)
class _SelectionRelease(Release):
    """A calibration entry whose run is delta-approximate rho-zCDP (truncated-Gaussian selection).

    `sensitivity` is sqrt(L0) * tau, so rho of a run = sensitivity^2 / (2 sigma^2)
    exactly as for a Gaussian of that L2 sensitivity; the run's event keeps the
    fixed truncation delta (Cesar–Rogers Lemma 6.4), so the accountant composes
    it as approximate zCDP, never as an exact Gaussian.
    """

    selection_delta: float = 0.0

    def event(self, rho_share: float) -> Event:
        return ZCDP(rho=rho_share / self.count, delta=self.selection_delta)


def integral_sums(bounds: ContributionBounds) -> bool:
    """True when every bounded per-partition sum is an integer (counting: min_value = max_value, an integer)."""
    return bounds.min_value == bounds.max_value and float(bounds.min_value).is_integer()


def score_range(bounds: ContributionBounds) -> float:
    """Range of score changes for the exponential mechanism: Linf when sums are monotone, else 2 Linf."""
    monotone = bounds.min_value >= 0 or bounds.max_value <= 0
    return bounds.linf if monotone else 2.0 * bounds.linf


def grid_noise(noise: float, sensitivity: float, integral: bool, changed: int, norm: int) -> tuple[float, float]:
    """(noise', sensitivity') with noise' >= noise, sensitivity'/noise' <= sensitivity/noise after grid rounding.

    The mechanisms round their inputs to the grid of step granularity(noise'),
    which can raise the sensitivity (`noise.grid_sensitivity`); the noise is
    scaled up by the same factor, so the privacy of a run (a function of the
    ratio only) is never above the planned one. Integer inputs on a grid of
    step <= 1 are not rounded, and nothing changes.
    """
    current = noise
    for _ in range(8):
        step = granularity(current)
        effective = grid_sensitivity(sensitivity, step, integral and step <= 1.0, changed, norm)
        if effective / current <= sensitivity / noise:
            return current, effective
        current = math.nextafter(noise * effective / sensitivity, math.inf)
    raise PlanningError(f"grid adjustment of noise {noise!r} for sensitivity {sensitivity!r} did not settle")


def _stddev(mechanism: str, noise: float) -> float:
    return math.sqrt(2.0) * noise if mechanism == "laplace" else noise


@dataclass(frozen=True)
class HistogramPlan:
    """A windowed histogram: one noisy value per partition and window.

    mechanism: laplace or gaussian (known partitions) or truncated_gaussian (unknown);
    noise: Laplace scale or Gaussian sigma; sensitivity: L1, L2, or tau = Linf (truncated_gaussian).
    """

    spec: ReleaseSpec
    mechanism: str
    runs: int
    noise: float
    sensitivity: float
    max_partitions: int
    event: Event
    selection_delta: float | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def noise_stddev(self) -> float:
        return _stddev(self.mechanism, self.noise)

    def describe(self) -> str:
        if self.mechanism == "truncated_gaussian":
            return (
                f"Histogram {self.name!r} over partitions not known in advance, one release per window ({self.runs} "
                f"windows): each observed partition's bounded sum gets discrete Gaussian noise with sigma={self.noise:.6g} "
                f"truncated to a public level, and only partitions whose noisy value clears threshold + truncation appear "
                f"(Cesar–Rogers Algorithm 2; per window {self.event!r}, the truncation spending delta={self.selection_delta:.3g})."
            )
        norm = "L1" if self.mechanism == "laplace" else "L2"
        return (
            f"Histogram {self.name!r} over {len(self.spec.partitions)} public partitions, one release per window "
            f"({self.runs} windows): every listed partition appears, empty or not, with discrete {self.mechanism} noise "
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
            f"({self.runs} windows): {self.spec.k} exponential-mechanism picks per window (one-shot Gumbel), each "
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
    sensitivity: float  # L1 / maximum
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


ReleasePlan = Union[HistogramPlan, TopKPlan, PeakPlan]


@dataclass(frozen=True)
class JobPlan:
    """Every release's parameters and the calibration that justifies them; immutable."""

    releases: tuple[ReleasePlan, ...]
    calibrated: CalibratedPlan
    bounds: ContributionBounds
    window: WindowSpec

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

    def events(self) -> tuple[Event, ...]:
        """The job's events, as debited from the budget scope."""
        return self.calibrated.events()

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
) -> JobPlan:
    """Calibrate every release of a job so that the whole job is (epsilon, delta)-DP.

    Checks: release names unique; topk has a public partition list with at least k entries;
    peak period a multiple of the window step and L1 <= maximum; svt releases are not planned here.
    """
    releases = tuple(releases)
    if not releases:
        raise PlanningError("a job needs at least one release, got none")
    names = [r.name for r in releases]
    if len(set(names)) != len(names):
        raise PlanningError(f"release names must be unique, got {names}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise PlanningError(f"privacy.delta must lie in (0, 1), got {delta!r}")
    windows = window.count
    integral = integral_sums(bounds)
    selection_runs = sum(windows for r in releases if r.kind == "histogram" and r.partitions is None)
    selection_delta = SELECTION_DELTA_SHARE * delta / selection_runs if selection_runs else None

    entries: list[Release] = []
    sizes: dict[str, tuple[int, ...]] = {}
    for spec in releases:
        where = f"release {spec.name!r}"
        if spec.kind == "histogram" and spec.partitions is None:
            entries.append(_SelectionRelease(spec.name, "gaussian", spec.weight, bounds.l2, windows,
                                             selection_delta=selection_delta))
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
            runs = sum(1 for d in sizes[spec.name] if d >= 2)
            if runs == 0:
                raise PlanningError(f"{where}: every period holds a single window; period must cover at least 2 windows")
            entries.append(Release(spec.name, "pure", spec.weight, 1.0, runs))
        else:
            raise PlanningError(f"{where}: kind {spec.kind!r} is not planned by pipelines.planning; allowed: histogram, topk, peak")

    try:
        calibrated = calibrate(entries, epsilon, delta)
    except (ValueError, SpecError) as err:
        raise PlanningError(f"cannot calibrate the job to epsilon={epsilon!r}, delta={delta!r}: {err}") from err
    by_name = calibrated.by_name()
    planned: list[ReleasePlan] = []
    for spec in releases:
        event = by_name[spec.name].event
        if spec.kind == "histogram" and spec.partitions is None:
            sigma = bounds.linf * math.sqrt(bounds.max_partitions / (2.0 * event.rho))
            sigma, tau = grid_noise(sigma, bounds.linf, integral, changed=1, norm=1)
            planned.append(HistogramPlan(spec, "truncated_gaussian", windows, sigma, bounds.linf,
                                         bounds.max_partitions, event, selection_delta))
        elif spec.kind == "histogram":
            norm = 1 if spec.noise == "laplace" else 2
            noise = event.scale if isinstance(event, Laplace) else event.sigma
            noise, _ = grid_noise(noise, event.sensitivity, integral, bounds.max_partitions, norm)
            planned.append(HistogramPlan(spec, spec.noise, windows, noise, event.sensitivity, bounds.max_partitions, event))
        elif spec.kind == "topk":
            selection = (spec, windows, event.epsilon, score_range(bounds), SelfComposed(event, spec.k), bounds.max_partitions)
            if spec.counts:
                count_event = by_name[f"{spec.name}.counts"].event
                sigma, _ = grid_noise(count_event.sigma, count_event.sensitivity, integral,
                                      min(spec.k, bounds.max_partitions), 2)
                planned.append(TopKPlan(*selection, sigma, count_event.sensitivity, count_event))
            else:
                planned.append(TopKPlan(*selection))
        else:
            sensitivity = bounds.l1 / spec.maximum
            sigma = _peak_sigma(sizes[spec.name], event.epsilon, sensitivity)
            runs = sum(1 for d in sizes[spec.name] if d >= 2)
            planned.append(PeakPlan(spec, runs, round(spec.period / window.step), sizes[spec.name], sigma,
                                    sensitivity, event.epsilon, event))
    return JobPlan(tuple(planned), calibrated, bounds, window)
