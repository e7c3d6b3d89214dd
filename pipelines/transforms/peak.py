"""`PeakWindow`: per period, the window with the largest total, by Gaussian report-noisy-max.

A period groups consecutive windows (e.g. the days of a 30-day period, or of a
calendar month: `planning.peak_groups`). Each window's total (the exact integer sum over partitions of
the bounded sums, `fixedpoint.total`) is divided by the release's public
maximum with one correct rounding (`fixedpoint.rounded_quotient`) and clipped
to [0, 1]; the index of the largest total plus N(0, sigma^2) is released
(`mechanisms.report_noisy_max`). Only the window is released, never a value.

Privacy: one user moves a window total by at most L1 = L0 Linf, exactly, so a
normalised total by at most L1 / maximum + 2**-53 (the division's rounding;
`planning.normalised_sensitivity`); per period PureDP(epsilon) with
epsilon = `accounting.selection.report_noisy_max_epsilon` (Lebensold–Precup–Balle
Thm 8), at most the planned epsilon (sigma solved by `planning.plan_job`).
A period with a single window releases that window, which is data-independent
and costs nothing.
Proof: LPB Thm 8 (`mechanisms.report_noisy_max`); the totals' sensitivity from `BoundContributions`
(docs/proofs/pipelines.transforms.bounding.BoundContributions.md) and the division's rounding
(docs/proofs/pipelines.planning.job.plan_job.md, "Normalised queries").
Caller must ensure: maximum is public; `seed` only in tests.
Runtime: one quadrature per distinct period size (memoised), O(windows) noise.
"""
from __future__ import annotations

import bisect

import apache_beam as beam
import numpy as np

from dpstream.pipelines import mechanisms
from dpstream.pipelines.config.specs import WindowSpec
from dpstream.pipelines.mechanisms.fixedpoint import exact_value, rounded_quotient, total
from dpstream.pipelines.planning import PeakPlan
from dpstream.pipelines.transforms.aggregation import WindowedRelease
from dpstream.pipelines.transforms.windowing import (
    iso,
    period_windows,
    release_rng,
    window_bounds_iso,
    window_timestamp,
)


def peak_release(plan: PeakPlan, totals, quantum: float, rng) -> tuple[int, mechanisms.Release | None]:
    """(position of the released window within its period, the release or None for a one-window period).

    `totals`: each window's exact total, in integer units of `quantum`, in window order.
    """
    if len(totals) < 2:
        return 0, None
    normalised = np.array([rounded_quotient(exact_value(total, quantum), plan.spec.maximum) for total in totals])
    release = mechanisms.report_noisy_max(normalised, plan.sigma, rng,
                                          sensitivity=plan.sensitivity, lower=0.0, upper=1.0)
    return release.value, release


class _ToPeriod(beam.DoFn):
    def __init__(self, last_windows: tuple[int, ...], window: WindowSpec):
        self._last_windows = last_windows
        self._window = window

    def process(self, element):
        index, sums = element
        period = bisect.bisect_left(self._last_windows, index)
        last = self._last_windows[period]
        yield beam.window.TimestampedValue((period, (index, total(sums))), window_timestamp(self._window, last))


class _PeakMechanism(beam.DoFn):
    def __init__(self, plan: PeakPlan, window: WindowSpec, seed: int | None, quantum: float):
        self._plan = plan
        self._window = window
        self._seed = seed
        self._quantum = quantum

    def process(self, element):
        period, windows = element
        ordered = sorted(windows)
        position, _ = peak_release(self._plan, [units for _, units in ordered], self._quantum,
                                   release_rng(self._seed, self._plan.name, period))
        start, end = window_bounds_iso(self._window, ordered[position][0])
        period_start, period_end = self._plan.period_bounds[period]
        yield {"release": self._plan.name, "period_start": iso(period_start),
               "period_end": iso(period_end), "window_start": start, "window_end": end,
               "noise_stddev": self._plan.sigma * self._plan.spec.maximum}


class PeakWindow(WindowedRelease):
    """Record batches -> dict rows (release, period_start, period_end, window_start, window_end, noise_stddev).

    noise_stddev is sigma in the units of the totals (sigma * maximum).
    """

    @classmethod
    def columns(cls, plan) -> tuple[str, ...]:
        return ("release", "period_start", "period_end", "window_start", "window_end", "noise_stddev")

    def default_label(self) -> str:
        return f"PeakWindow({self._plan.name}, periods of {self._plan.period_text})"

    def display_data(self):
        return {"release": self._plan.name, "sigma": self._plan.sigma, "epsilon_per_period": self._plan.epsilon,
                "maximum": self._plan.spec.maximum, "periods": len(self._plan.period_sizes)}

    def expand(self, batches):
        last_windows = self._plan.last_windows
        return (
            self._window_sums(batches, None)
            | "Total per window" >> beam.ParDo(_ToPeriod(last_windows, self._window))
            | "Window periods" >> beam.WindowInto(period_windows(self._window, last_windows))
            | "Group per period" >> beam.GroupByKey()
            | "Report noisy max" >> beam.ParDo(_PeakMechanism(self._plan, self._window, self._seed, self._bounds.quantum))
        )
