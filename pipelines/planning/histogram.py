"""Planning a windowed histogram: Laplace or Gaussian noise over public partitions, or a private selection of
partitions not known in advance (Gaussian thresholding, distinct-unit thresholding or the truncated Gaussian).

What a histogram costs (events of one window; a unit's windows, `PlanningContext.windows`, compose):
- known partitions, Gaussian: `Gaussian(sigma, L2)`; Laplace: `Laplace(scale, Linf)` per cell, composed over the
  (window, partition) cells one unit can change (`_known_sensitivity`), which is never looser than one event of
  the window's L1;
- unknown partitions, selection "gaussian" (the default): `GaussianThreshold(sigma, L2, delta_selection)`
  (a Gaussian on the partitions both neighbours hold, a unit's own partitions released with probability at
  most delta_selection), composed with every other release by the PLD bound; "truncated":
  `ZCDP(rho, delta_selection)`, rho = L0 Linf^2 / (2 sigma^2) (Cesar–Rogers Lemma 6.4), composed by zCDP/RDP
  only; "distinct" (counting jobs): the GaussianThreshold of "gaussian", its mu split between the noisy number
  of distinct units and the noisy records beyond each unit's first (`distinct_sigmas`). delta_selection is
  SELECTION_DELTA_SHARE of the job's delta, shared evenly over every selection run; sigma is calibrated.
Proofs: docs/proofs/pipelines.planning.job.plan_job.md, and the mechanisms' notes.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Mapping

from dpstream.accounting.calibrate import CalibratedRelease, Release
from dpstream.accounting.events import ZCDP, Event, Gaussian, GaussianThreshold, Laplace
from dpstream.pipelines.config.specs import (
    ContributionBounds,
    HistogramSpec,
    Metric,
    Noise,
    QuantilesSpec,
    Selection,
    SpecError,
    metric_bounds,
    moment_bounds,
    square_middle,
    value_middle,
)
from dpstream.pipelines.mechanisms.noise import rounded_sensitivity
from dpstream.pipelines.planning.context import Draft, PlanningContext
from dpstream.pipelines.planning.errors import PlanningError
from dpstream.pipelines.planning.grid import grid_noise

METRIC_TEXT = {Metric.SUM: "bounded values summed", Metric.COUNT: "bounded records counted",
               Metric.USERS: "distinct privacy units counted", Metric.MEAN: "bounded values averaged",
               Metric.VARIANCE: "bounded values' variance"}
"""How a histogram's report names what it counts per partition and window (`specs.Metric`)."""
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


@dataclass(frozen=True)
class SelectionRelease(Release):
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


@dataclass(frozen=True)
class UserSelection:
    """How a release over unknown partitions whose values are not thresholded sums (quantiles, means, variances)
    selects its partitions: Gaussian thresholding of each partition's number of distinct users (bounded under
    `metric_bounds(users)`), with discrete Gaussian noise `sigma`; a unit's own partitions show with probability at
    most `delta`; `event`: the selection's event per window (`transforms.selection.selected_by_users`)."""

    sigma: float
    delta: float
    event: GaussianThreshold

    @staticmethod
    def name(release: str) -> str:
        """The calibration entry's name of a release's selection."""
        return f"{release}.selection"

    @classmethod
    def entry(cls, release: str, weight: float, context: PlanningContext) -> "SelectionRelease":
        """The selection's calibration entry: one GaussianThreshold per window a unit reaches, L2 sqrt(L0)."""
        users = metric_bounds(Metric.USERS, context.bounds)
        return SelectionRelease(cls.name(release), "gaussian", weight, users.l2, context.windows,
                                selection_delta=selection_delta(context))

    @classmethod
    def calibrated(cls, release: str, calibrated: Mapping[str, CalibratedRelease],
                   bounds: ContributionBounds) -> "UserSelection":
        event = calibrated[cls.name(release)].event
        if not isinstance(event, GaussianThreshold):
            raise TypeError(f"the selection of {release!r} was calibrated to {event!r}, not a selection event")
        return cls(threshold_sigma(event, metric_bounds(Metric.USERS, bounds)), event.delta, event)

    def describe(self) -> str:
        return (f" A partition appears only if its noisy number of distinct privacy units (discrete Gaussian, "
                f"sigma={self.sigma:.6g}) clears a cutoff set so that one privacy unit's own partitions show with "
                f"probability at most {self.delta:.3g} (per window {self.event!r}).")


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


def _value_range(spec: HistogramSpec, bounds: ContributionBounds) -> tuple[float, float]:
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
    adds one record), unit_value what one record adds. Laplace only: cells, how many per-cell events (`event`)
    one unit's (window, partition) cells compose. mean and variance (mechanisms "mean", "variance"): noise is the
    sigma of the noisy count, extra_noise that of the noisy sum of values centred on `middle`, square_noise (variance)
    that of the noisy sum of their squares minus r^2 / 2 (`specs.square_middle`); sensitivity is the count's L2.
    """

    spec: HistogramSpec
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
    cells: int | None = None
    middle: float | None = None
    square_noise: float | None = None
    user_selection: UserSelection | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def noise_stddev(self) -> float:
        """The standard deviation of a released value's noise; for a mean, of its numerator at worst (a mean at
        either end of the range), which divided by the partition's record count approximates the mean's."""
        count, total, squares = (self.part_stddev(noise) for noise in (self.noise, self.extra_noise, self.square_noise))
        if self.mechanism == "mean":  # sqrt(sd_sum^2 + (max - middle)^2 sd_count^2)
            return math.hypot(total, count * (self.value_range[1] - (self.middle or 0.0)))
        if self.mechanism == "variance":  # value_range [0, r^2]; linearised d(Q/N - (S/N)^2) at its worst
            radius = math.sqrt(self.value_range[1])
            return math.hypot(squares, 2 * radius * total, 2.5 * radius ** 2 * count)
        if self.unit_value is not None:  # distinct_threshold: the value is unit_value * noisy units + noisy extra
            return math.hypot(self.unit_value * self.noise, self.extra_noise or 0.0)
        return _stddev(self.mechanism, self.noise)

    def part_stddev(self, noise: float | None) -> float:
        """The standard deviation of a mean's or variance's part noise of parameter `noise` (0 for no part)."""
        return 0.0 if noise is None else _stddev(self.spec.noise.value, noise)

    @property
    def listed(self) -> tuple[str, ...]:
        """The public partitions of a histogram over known partitions (every one appears in every window)."""
        if self.spec.partitions is None:
            raise ValueError(f"histogram {self.name!r} has no public partition list: its partitions are selected")
        return self.spec.partitions

    @property
    def counts_units(self) -> bool:
        """True when the mechanism needs each partition's number of distinct users besides its sum."""
        return self.mechanism == "distinct_threshold"

    @property
    def selects(self) -> bool:
        """True for unknown partitions: the mechanism (or, for a mean or a variance, `user_selection`) chooses
        which partitions appear."""
        return self.spec.partitions is None

    def describe(self) -> str:
        lower, upper = self.value_range
        if (lower == -math.inf and upper == math.inf) or self.mechanism in MOMENTS:
            return self._describe_noise()
        interval = f"{'(' if lower == -math.inf else '['}{lower:g}, {upper:g}{')' if upper == math.inf else ']'}".replace("inf", "infinity")
        return (f"{self._describe_noise()} Released values are clamped to {interval}, the range a bounded sum can "
                f"take: no value moves further from the truth, but totals over partitions come out high.")

    def _describe_noise(self) -> str:
        if self.mechanism in ("mean", "variance"):
            return self._describe_moments()
        if self.mechanism == "distinct_threshold":
            extra = ("" if self.extra_noise is None else
                     f" plus the records beyond each unit's first with independent discrete Gaussian noise "
                     f"sigma={self.extra_noise:.6g}")
            return (
                f"{self._subject} over partitions not known in advance, one release per window ({self.runs} "
                f"windows composed per privacy unit): each observed partition's number of distinct privacy units gets "
                f"discrete Gaussian noise with sigma={self.noise:.6g}, and only partitions whose noisy number clears a "
                f"cutoff appear, set so that one privacy unit's own partitions show with probability at most "
                f"{self.selection_delta:.3g}; a partition's value is that noisy number times {self.unit_value:g}{extra} "
                f"(standard deviation {self.noise_stddev:.6g}; per window {self.event!r})."
            )
        if self.mechanism == "gaussian_threshold":
            return (
                f"{self._subject} over partitions not known in advance, one release per window ({self.runs} "
                f"windows composed per privacy unit): each observed partition's bounded sum gets discrete Gaussian noise "
                f"with sigma={self.noise:.6g}, and only partitions whose noisy value clears a cutoff appear, set so that "
                f"one privacy unit's own partitions show with probability at most {self.selection_delta:.3g} "
                f"(Gaussian thresholding; per window {self.event!r})."
            )
        if self.mechanism == "truncated_gaussian":
            return (
                f"{self._subject} over partitions not known in advance, one release per window ({self.runs} "
                f"windows composed per privacy unit): each observed partition's bounded sum gets discrete Gaussian noise with sigma={self.noise:.6g} "
                f"truncated to a public level, and only partitions whose noisy value clears threshold + truncation appear "
                f"(Cesar–Rogers Algorithm 2; per window {self.event!r}, the truncation spending delta={self.selection_delta:.3g})."
            )
        if self.mechanism == "laplace":
            return (
                f"{self._subject} over {len(self.listed)} public partitions, one release per window "
                f"({self.runs} windows composed per privacy unit): every listed partition appears, empty or not, with "
                f"discrete Laplace noise (scale {self.noise:.6g}, standard deviation {self.noise_stddev:.6g}), "
                f"independent per cell; one user changes at most {self.cells} (window, partition) cells by at "
                f"most {self.sensitivity / self.max_partitions:.6g} each, composed as {self.cells} events {self.event!r}."
            )
        return (
            f"{self._subject} over {len(self.listed)} public partitions, one release per window "
            f"({self.runs} windows composed per privacy unit): every listed partition appears, empty or not, with discrete gaussian noise "
            f"(noise parameter {self.noise:.6g}, standard deviation {self.noise_stddev:.6g}) calibrated to the "
            f"L2 sensitivity {self.sensitivity:.6g} of one user's bounded contributions ({self._event_scope} "
            f"{self.event!r})."
        )

    def _describe_moments(self) -> str:
        """A mean's or variance's noisy parts, how they become the value, and what they cost."""
        laplace = self.spec.noise.value == "laplace"
        parameter = "scale" if laplace else "sigma"
        noisy = (f"per partition a noisy count of the bounded records (discrete {'Laplace' if laplace else 'Gaussian'}, "
                 f"{parameter}={self.noise:.6g}) and a noisy sum of their values minus {self.middle:g} "
                 f"({parameter}={self.extra_noise:.6g})")
        floor = f"max(count, {max(1.0, self.part_stddev(self.noise)):.4g})"
        if self.mechanism == "variance":
            noisy = (noisy.replace(") and a noisy sum", "), a noisy sum") + f" and a noisy sum of those differences' "
                     f"squares minus {self.value_range[1] / 2:g} ({parameter}={self.square_noise:.6g})")
            value = (f"released as (sum of squares - sum^2 / n) / n + {self.value_range[1] / 2:g} with n = {floor}, "
                     f"clamped to [0, {self.value_range[1]:g}]")
        else:
            value = f"released as {self.middle:g} + sum / {floor} clamped to [{self.value_range[0]:g}, {self.value_range[1]:g}]"
        parts = 3 if self.mechanism == "variance" else 2
        cost = (f"{parts} Laplace events per (window, partition) cell a unit can change, {self.cells} cells, each "
                f"{self.event!r}" if laplace else f"the {parts} noises together are one Gaussian event, {self.event!r}")
        return (f"{self._subject} over {self._where}, one release per window ({self.runs} windows composed per privacy "
                f"unit): {noisy}, {value} (a count below its noise's standard deviation pulls the value towards the "
                f"middle): a {self.mechanism} over n records is off by about {self.noise_stddev:.4g} / n or less "
                f"({cost}).{self._selected}")

    @property
    def _where(self) -> str:
        return "partitions not known in advance" if self.selects else f"{len(self.listed)} public partitions"

    @property
    def _selected(self) -> str:
        return self.user_selection.describe() if self.user_selection is not None else ""

    @property
    def _subject(self) -> str:
        return f"Histogram {self.name!r} of {METRIC_TEXT[self.spec.metric]}"

    @property
    def _event_scope(self) -> str:
        """What the planned event covers: one window, or the whole release under a cap across windows."""
        if getattr(self.event, "sensitivity", self.sensitivity) == self.sensitivity:
            return "per window"
        return ("the whole release at once, since max_partitions_total or max_contributions_total caps what a user "
                "changes:")


def selection_delta(context: PlanningContext) -> float:
    """Each selection run's delta: SELECTION_DELTA_SHARE of the job's delta, shared evenly over every window of
    every histogram or quantiles release over unknown partitions that one unit can touch."""
    selections = sum(isinstance(r, (HistogramSpec, QuantilesSpec)) and r.partitions is None for r in context.releases)
    return SELECTION_DELTA_SHARE * context.delta / (selections * context.windows)


def threshold_sigma(event: GaussianThreshold, bounds: ContributionBounds) -> float:
    """The sigma Gaussian thresholding runs with for a calibrated selection event: enlarged for the grid over the
    L0 sums one unit changes (`grid_noise`)."""
    return grid_noise(event.sigma, event.sensitivity, bounds.quantum, bounds.max_partitions, norm=2)[0]


def draft(spec: HistogramSpec, context: PlanningContext) -> Draft[HistogramPlan]:
    """The histogram's calibration entry (one per window a unit can touch) and how its plan is finished; planned
    under its metric's bounds (`specs.metric_bounds`), which its transform bounds the data with."""
    if spec.metric in MOMENTS:
        return _moments_draft(spec, context)
    context = dataclasses.replace(context, bounds=metric_bounds(spec.metric, context.bounds))
    bounds, windows = context.bounds, context.windows
    if spec.partitions is not None:
        entry = Release(spec.name, spec.noise.value, spec.weight, *_known_sensitivity(spec, context))
        return Draft((entry,), (), lambda calibrated: _known(spec, context, calibrated[spec.name].event))
    if spec.selection == Selection.DISTINCT and not bounds.counting:
        raise PlanningError(f"release {spec.name!r}: selection \"distinct\" needs a counting job (min_value = "
                            f"max_value: every record worth the same), got min_value={bounds.min_value!r}, "
                            f"max_value={bounds.max_value!r}")
    delta = selection_delta(context)
    entry = SelectionRelease(spec.name, "gaussian", spec.weight, bounds.l2, windows, selection_delta=delta,
                              truncated=spec.selection == Selection.TRUNCATED)
    return Draft((entry,), (), lambda calibrated: _unknown(spec, context, calibrated[spec.name].event, delta))


def _moments_draft(spec: HistogramSpec, context: PlanningContext) -> Draft[HistogramPlan]:
    """A mean or a variance: k noisy parts per partition and window (`specs.moment_bounds`: the count, the
    centred sum, and for a variance the sum of centred squares), each part's noise proportional to its own
    sensitivity (about (max - min) / 2 times the count's for the sum, ((max - min) / 2)^2 / 2 times for the
    squares). Gaussian: one event of L2 sqrt(k) x the count's, since the parts' shifts divided by their sigmas
    add up to exactly that; Laplace: k events per (window, partition) cell a unit can change, each at the count's
    Linf over its scale (docs/proofs/pipelines.planning.histogram.mean.md)."""
    bounds, metric = context.bounds, spec.metric.value
    if spec.partitions is None and spec.selection != Selection.GAUSSIAN:
        raise PlanningError(f"release {spec.name!r}: metric \"{metric}\" over unknown partitions selects them by "
                            f"their noisy number of distinct users; selection = \"{spec.selection}\" does not apply")
    if bounds.counting:
        raise PlanningError(f"release {spec.name!r}: metric \"{metric}\" needs min_value < max_value (every record "
                            f"is worth {bounds.min_value!r} here, so the {metric} is known)")
    try:
        part_bounds = moment_bounds(spec.metric, bounds)
    except SpecError as err:
        raise PlanningError(f"release {spec.name!r}: metric \"{metric}\" sums squared centred values up to "
                            f"((max_value - min_value) / 2)^2 / 2 = {square_middle(bounds):.4g}, which the value grid "
                            f"cannot hold ({err}); narrow privacy.min_value and max_value") from None
    parts = tuple((part, *_known_sensitivity(spec, part)) for part in
                  (dataclasses.replace(context, bounds=b) for b in part_bounds))
    _, count_sensitivity, runs = parts[0]
    share = spec.weight / 2 if spec.partitions is None else spec.weight
    entries: tuple[Release, ...] = (
        Release(spec.name, "laplace", share, count_sensitivity, runs * len(parts)) if spec.noise == Noise.LAPLACE
        else Release(spec.name, "gaussian", share, math.sqrt(len(parts)) * count_sensitivity, runs),)
    if spec.partitions is None:  # selected by distinct users: docs/proofs/pipelines.planning.histogram.mean.md
        entries += (UserSelection.entry(spec.name, share, context),)
    return Draft(entries, (), lambda calibrated: _moments(spec, context, parts, calibrated))


MOMENTS = {Metric.MEAN: "mean", Metric.VARIANCE: "variance"}
"""The histogram metrics computed from several noisy parts (`specs.moment_bounds`), by mechanism name."""


def _moments(spec: HistogramSpec, context: PlanningContext, parts,
             calibrated: Mapping[str, CalibratedRelease]) -> HistogramPlan:
    """The mean's or variance's plan from its calibrated entries; `parts`: (context, sensitivity, runs) of each
    part (L2 and windows for Gaussian noise, Linf and cells for Laplace, `_known_sensitivity`)."""
    event = calibrated[spec.name].event
    (counts, count_sensitivity, cells), *_ = parts
    if isinstance(event, Laplace):  # per cell: one changed coordinate, in L1
        sigmas = [grid_noise(event.scale * linf / count_sensitivity, linf, part.bounds.quantum, changed=1, norm=1)[0]
                  for part, linf, _ in parts]
    elif isinstance(event, Gaussian):
        sigmas = [_grid_sigma(part, event.sigma * l2 / count_sensitivity, l2) for part, l2, _ in parts]
    else:
        raise TypeError(f"histogram {spec.name!r} was calibrated to {event!r}, not Laplace or Gaussian noise")
    bounds = context.bounds
    value_range = ((bounds.min_value, bounds.max_value) if spec.metric == Metric.MEAN
                   else (0.0, 2 * square_middle(bounds)))
    return HistogramPlan(spec, MOMENTS[spec.metric], context.windows, sigmas[0],
                         _norm_sensitivity(counts.bounds, spec.noise), bounds.max_partitions, event,
                         value_range=value_range, extra_noise=sigmas[1], cells=cells if isinstance(event, Laplace) else None,
                         middle=value_middle(bounds), square_noise=sigmas[2] if len(sigmas) > 2 else None,
                         user_selection=None if spec.partitions is not None else UserSelection.calibrated(
                             spec.name, calibrated, bounds))


def _grid_sigma(context: PlanningContext, sigma: float, sensitivity: float) -> float:
    """A Gaussian sigma enlarged for the grid (`grid_noise`) over the cells its sensitivity covers: one
    window's, or the whole release's when it is planned as one event (`PlanningContext.whole_l2`); rounding
    scales both the same way, so the per-window sensitivity the mechanism reports stays within the plan."""
    bounds = context.bounds
    changed = bounds.max_partitions if context.whole_l2 is None else (
        context.total_cells or context.windows * bounds.max_partitions)
    return grid_noise(sigma, sensitivity, bounds.quantum, changed, norm=2)[0]


def _known_sensitivity(spec: HistogramSpec, context: PlanningContext) -> tuple[float, int]:
    """(sensitivity, runs) of public-partition noise.

    Gaussian: per window (L2 of one window) composed over the windows a unit can touch; or, when a cap across
    windows makes the whole release vector's L2 smaller (`PlanningContext.whole_l2`: sqrt(T) Linf under
    `max_partitions_total` T, the mass bound under `max_contributions_total`), one event of that L2 (for T
    exactly the composition of T / max_partitions windows). Laplace: one event per (window, partition) cell a
    unit can change, Linf each, composed over those cells (L0 per window over its windows, or T): the noise is
    independent per cell, so the release's privacy loss is the sum of the cells' losses, and each cell's pair
    is dominated by Laplace at shift Linf. That composition is never noisier than one Laplace event of the
    window's L1 per window or of the whole vector's L1 T Linf (docs/proofs/
    pipelines.transforms.bounding.max_windows.md, "Laplace"); `max_contributions_total` does not lower it.
    """
    bounds, cells = context.bounds, context.total_cells
    if spec.noise == Noise.LAPLACE:
        return bounds.linf, cells or context.windows * bounds.max_partitions
    whole = context.whole_l2
    if whole is None:
        return bounds.l2, context.windows
    return whole, 1


def _norm_sensitivity(bounds: ContributionBounds, noise: Noise) -> float:
    """The sensitivity in the noise's norm: L1 for Laplace, L2 for Gaussian."""
    return bounds.l1 if noise == Noise.LAPLACE else bounds.l2


def _known(spec: HistogramSpec, context: PlanningContext, event: Event) -> HistogramPlan:
    bounds = context.bounds
    if isinstance(event, Laplace):  # per cell: one changed coordinate, in L1
        noise, _ = grid_noise(event.scale, event.sensitivity, bounds.quantum, changed=1, norm=1)
    elif isinstance(event, Gaussian):
        noise = _grid_sigma(context, event.sigma, event.sensitivity)
    else:
        raise TypeError(f"histogram {spec.name!r} was calibrated to {event!r}, not Laplace or Gaussian noise")
    _, cells = _known_sensitivity(spec, context)
    return HistogramPlan(spec, spec.noise.value, context.windows, noise, _norm_sensitivity(bounds, spec.noise),
                         bounds.max_partitions, event, value_range=_value_range(spec, bounds),
                         cells=cells if isinstance(event, Laplace) else None)


def _unknown(spec: HistogramSpec, context: PlanningContext, event: Event, delta: float) -> HistogramPlan:
    bounds = context.bounds
    mechanism = SELECTION_MECHANISMS[spec.selection]
    common = (spec, mechanism, context.windows)
    if spec.selection == Selection.DISTINCT and isinstance(event, GaussianThreshold):
        units, extra = distinct_sigmas(event, bounds)
        return HistogramPlan(*common, units, bounds.linf, bounds.max_partitions, event, delta,
                             _value_range(spec, bounds), extra_noise=extra, unit_value=bounds.quantised_range[0])
    if isinstance(event, GaussianThreshold):
        sigma = threshold_sigma(event, bounds)
    elif isinstance(event, ZCDP):
        sigma = bounds.linf * math.sqrt(bounds.max_partitions / (2.0 * event.rho))
        sigma, _ = grid_noise(sigma, bounds.linf, bounds.quantum, changed=1, norm=1, bound=rounded_sensitivity)
    else:
        raise TypeError(f"histogram {spec.name!r} was calibrated to {event!r}, not a selection event")
    return HistogramPlan(*common, sigma, bounds.linf, bounds.max_partitions, event, delta, _value_range(spec, bounds))
