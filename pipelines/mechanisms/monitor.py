"""The sparse-vector monitor: threshold alerts over a stream of windows for as long as the budget allows.

One monitor consumes one bounded query value per window, in window order
(values already normalised to [0, 1] by public bounds; `sensitivity` is the
public bound on how far one privacy unit moves a value). It runs Gaussian
AboveThreshold instances back to back (Lebensold–Precup–Balle 2024,
Algorithm 3; Zhu–Wang 2020): an instance draws a fresh noisy threshold when it
starts, answers each window BOT (no alert) or TOP (alert), and ends at its
first TOP; the next window starts a new instance. Before each instance a
privacy filter decides whether it may start; when it refuses, the monitor
halts for good and says why.

Methods (`method=`):
- "fsrc" (default): Filtered Self-Reporting Composition (LPB Algorithm 4)
  with a delta budget (`accounting.filters.FSRCFilter`: LPB Thm 11 as
  printed charges delta once and is false; the admitted instances' deltas
  add up). Instance t gets delta_t = delta 6 / (pi^2 t^2)
  (`accounting.filters.fsrc.basel_delta`, so any number of instances fits in
  delta) and is admitted with its probabilistic-DP bound eps_max_t (Zhu–Wang
  RDP converted to pDP at delta_t,
  `accounting.selection.above_threshold_pdp_epsilon`); after its TOP the
  filter is charged the pure ex-post loss of the output BOT^(t-1) TOP
  (LPB Thm 17, `accounting.selection.above_threshold_expost_epsilon`).
- "whitehouse": the baseline of LPB Sec 4.1 and App. C. Every instance is
  priced up front as (eps_i, delta_i)-DP from the same Zhu–Wang pDP bound and
  admitted by the approximate-DP filter of Whitehouse et al. 2023 (LPB Thm 20).
- "laplace": Laplace AboveThreshold instances (Lyu–Su–Li 2017, Thm 2), each
  priced at its fixed pure epsilon, under the pure-DP filter.

Outputs per window: the window index, the alert bit and whether the monitor
has halted. The realised ex-post spend is data-dependent and is never an
output; it lives only in the sealed state (`to_dict`). numpy only, no Beam:
the Beam transforms and the benchmarks share this module.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from dpstream.accounting import selection
from dpstream.accounting.events import ApproxDP, PureDP, SelfComposed
from dpstream.accounting.filters import EventFilter, FSRCFilter, PrivacyFilter, PureDPFilter, WhitehouseFilter
from dpstream.accounting.filters.fsrc import basel_delta
from dpstream.pipelines.mechanisms.noise import SecureRandom
from dpstream.pipelines.mechanisms.release import positive
from dpstream.pipelines.mechanisms.sparse_vector import laplace_above_threshold_epsilon, laplace_noise

MONITOR_METHODS = ("fsrc", "whitehouse", "laplace")
LOWER, UPPER = 0.0, 1.0
_FILTER_KINDS = {"fsrc": FSRCFilter.kind, "whitehouse": WhitehouseFilter.kind, "laplace": PureDPFilter.kind}
_WHITEHOUSE_SEARCH_LIMIT = 1 << 20  # more instances than any budget and sigma of interest admits


@dataclass(frozen=True)
class MonitorOutput:
    """What one window releases: its index, the alert bit (TOP) and whether the monitor has halted."""

    window: int
    alert: bool
    halted: bool


@functools.lru_cache(maxsize=4096)
def _expost_epsilon(t: int, sigma_threshold, sigma_query, threshold, sensitivity, halted: bool) -> float:
    """Memoised ex-post loss of BOT^(t-1) TOP (halted) or BOT^t (stopped from outside); public arguments only."""
    return float(selection.above_threshold_expost_epsilon(
        t, sigma_threshold, sigma_query, threshold, sensitivity, LOWER, UPPER, halted=halted
    ))


@functools.lru_cache(maxsize=4096)
def _pdp_epsilon(delta: float, sigma_threshold, sigma_query, threshold, sensitivity) -> float:
    """Memoised Zhu–Wang pDP epsilon of one instance at `delta`; public arguments only."""
    return selection.above_threshold_pdp_epsilon(delta, sigma_threshold, sigma_query, threshold, sensitivity, LOWER)


def _whitehouse_instance_cost(epsilon, delta, sigma_threshold, sigma_query, threshold, sensitivity):
    """(eps_i, delta_i, n): the constant per-instance cost that lets the Whitehouse filter admit the most instances.

    The filter splits delta into half for the zCDP conversion and half for the
    instances' own deltas (its default). With n instances planned, each gets
    delta_i = (delta/2)/n, hence eps_i = the Zhu–Wang pDP epsilon at delta_i;
    the capacity of the filter for that cost (counted on a fresh filter, so the
    filter's own rule decides) falls as n grows. The largest n whose capacity
    is at least n is found by bisection. Public parameters only.
    Returns n = 0 when not even one instance fits.
    """

    def cost(n: int) -> tuple[float, float]:
        instance_delta = math.nextafter(delta / 2 / n, 0.0)
        return selection.above_threshold_pdp_epsilon(
            instance_delta, sigma_threshold, sigma_query, threshold, sensitivity, LOWER
        ), instance_delta

    def fits(n: int) -> bool:
        return WhitehouseFilter(epsilon, delta).admits(SelfComposed(ApproxDP(*cost(n)), n))

    if not fits(1):
        return (*cost(1), 0)
    low, high = 1, 2
    while high <= _WHITEHOUSE_SEARCH_LIMIT and fits(high):
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return (*cost(low), low)


@dataclass
class _Instance:
    """The open AboveThreshold instance: first window, BOTs answered so far, noisy threshold (secret)."""

    start: int
    bots: int
    noisy_threshold: float | None


class SparseVectorMonitor:
    """Gaussian AboveThreshold instances over windows under a privacy filter (FSRC by default).

    Paper symbols: rho = `threshold`, sigma_X = `sigma_threshold`, sigma_Z =
    `sigma_query` (default sqrt(3) sigma_X, as Zhu–Wang and LPB use), Delta =
    `sensitivity`, queries in [a, b] = [0, 1]; the budget is (`epsilon`, `delta`).

    Privacy: add/remove one privacy unit moves every window's value by at most
    `sensitivity`; the released alert bits and halting flags of the whole
    monitor, over any number of windows and across `to_dict`/`from_dict`
    resumptions, are (epsilon, delta)-DP ("laplace": epsilon-DP).
    Proof: "fsrc": FSRC with a delta budget (`accounting.filters.FSRCFilter`,
    docs/proofs/accounting.filters.fsrc.FSRCFilter.md; LPB Thm 11 as printed is
    false) with instance t (eps_max_t, delta_t)-pDP by Zhu–Wang's RDP (as
    restated in LPB Thm 6) and Markov's inequality (LPB Sec 2), the deltas
    delta_t = delta 6/(pi^2 t^2) summing to less than delta, and
    eps_post-ex-post-DP by LPB Thm 17 (TOP) or the BOT^t bound (instance
    closed from outside); "whitehouse": Whitehouse et al. 2023 as
    restated in LPB Thm 20, instances (eps_i, delta_i)-DP since pDP implies DP;
    "laplace": Lyu–Su–Li 2017 Thm 2 per instance and the pure-DP filter.
    Instances cut short by `close()` and resumption are covered in
    docs/proofs/pipelines.mechanisms.monitor.SparseVectorMonitor.md.
    Checks: method in MONITOR_METHODS; threshold finite; sigmas positive with
    sigma_query > sigma_threshold for the Zhu–Wang bound ("fsrc",
    "whitehouse"); 0 < sensitivity <= 1; epsilon > 0; 0 < delta < 1 ("laplace":
    0 <= delta < 1, unused); the budget admits at least one instance.
    Caller must ensure: every value is the window's query normalised to [0, 1]
    with sensitivity at most `sensitivity` (values outside are clipped); values
    arrive in window order, one per window; a saved state is resumed at most
    once (the ledger's job); production passes no seeded rng.
    Numerics: idealised float noise from `SecureRandom` (only alert bits are
    released); ex-post losses and eps_max are rounded up by `accounting.selection`,
    and the FSRC filter rounds its running sum up.
    Runtime: O(1) per window, plus one memoised ex-post quadrature (about 0.5 ms)
    per new instance length and ("fsrc") one memoised pDP epsilon (about 0.8 ms)
    per new instance index; construction about 3 ms ("whitehouse": about 50 ms).
    """

    def __init__(
        self,
        threshold: float,
        sigma_threshold: float,
        sensitivity: float,
        epsilon: float,
        delta: float,
        *,
        sigma_query: float | None = None,
        method: str = "fsrc",
        persist_threshold: bool = False,
        rng: SecureRandom | None = None,
    ) -> None:
        owner = "SparseVectorMonitor"
        if method not in MONITOR_METHODS:
            raise ValueError(f"{owner}: method must be one of {', '.join(MONITOR_METHODS)}, got {method!r}")
        self.method = method
        self.threshold = _finite(owner, "threshold", threshold)
        self.sigma_threshold = positive(owner, "sigma_threshold", sigma_threshold)
        self.sigma_query = (
            math.sqrt(3.0) * self.sigma_threshold if sigma_query is None else positive(owner, "sigma_query", sigma_query)
        )
        if method != "laplace" and not self.sigma_query > self.sigma_threshold:
            raise ValueError(
                f"{owner}: sigma_query must exceed sigma_threshold for the Zhu–Wang bound, "
                f"got sigma_threshold={self.sigma_threshold!r}, sigma_query={self.sigma_query!r}"
            )
        self.sensitivity = positive(owner, "sensitivity", sensitivity)
        if self.sensitivity > UPPER - LOWER:
            raise ValueError(f"{owner}: sensitivity must lie in (0, 1] for values in [0, 1], got {sensitivity!r}")
        self.epsilon = positive(owner, "epsilon", epsilon)
        if not (isinstance(delta, (int, float)) and not isinstance(delta, bool) and 0 <= delta < 1) or (
            method != "laplace" and delta == 0
        ):
            allowed = "[0, 1)" if method == "laplace" else "(0, 1)"
            raise ValueError(f"{owner}: delta must lie in {allowed} for method {method!r}, got {delta!r}")
        self.delta = float(delta)
        if not isinstance(persist_threshold, bool):
            raise ValueError(f"{owner}: persist_threshold must be True or False, got {persist_threshold!r}")
        self.persist_threshold = persist_threshold
        if rng is not None and not isinstance(rng, SecureRandom):
            raise TypeError(f"{owner}: rng must be a pipelines.mechanisms.noise.SecureRandom or None, got {type(rng).__name__}")
        self._rng = SecureRandom() if rng is None else rng
        self._set_instance_cost()
        self._filter = self._fresh_filter()
        self._window = 0
        self._instance: _Instance | None = None
        self._halt_reason: str | None = None

    # -- public parameters -------------------------------------------------

    def _set_instance_cost(self) -> None:
        """The ex-ante price of the first instance (public), and a check that the budget admits one."""
        owner = "SparseVectorMonitor"
        if self.method == "whitehouse":
            self._whitehouse_price = _whitehouse_instance_cost(
                self.epsilon, self.delta, self.sigma_threshold, self.sigma_query, self.threshold, self.sensitivity
            )
        self.instance_epsilon, self.instance_delta = self.instance_price(1)
        if self.method == "fsrc":
            fits = FSRCFilter(self.epsilon, self.delta).admits(self.instance_epsilon, self.instance_delta)
        elif self.method == "whitehouse":
            fits = self._whitehouse_price[2] > 0
        else:
            fits = PureDPFilter(self.epsilon).admits(PureDP(self.instance_epsilon))
        if not fits:
            raise ValueError(
                f"{owner}: budget epsilon={self.epsilon!r} admits no {self.method} instance, "
                f"whose ex-ante epsilon is {self.instance_epsilon:.6g}; raise epsilon or the noise"
            )

    def instance_price(self, instance: int) -> tuple[float, float]:
        """(ex-ante epsilon, delta) with which the `instance`-th AboveThreshold instance (from 1) is admitted.

        "fsrc": (eps_max at delta_t, delta_t) with delta_t = delta 6 / (pi^2 t^2); "whitehouse": the
        constant price of `_whitehouse_instance_cost`; "laplace": (Lyu–Su–Li epsilon, 0). Public parameters
        and the instance index only.
        """
        if self.method == "fsrc":
            delta = basel_delta(self.delta, instance)
            return _pdp_epsilon(delta, self.sigma_threshold, self.sigma_query, self.threshold, self.sensitivity), delta
        if self.method == "whitehouse":
            return self._whitehouse_price[0], self._whitehouse_price[1]
        return laplace_above_threshold_epsilon(
            self._laplace_scale(self.sigma_threshold), self._laplace_scale(self.sigma_query), self.sensitivity
        ), 0.0

    @staticmethod
    def _laplace_scale(sigma: float) -> float:
        """Laplace scale with the same standard deviation as N(0, sigma^2): b = sigma / sqrt(2)."""
        return sigma / math.sqrt(2.0)

    def _fresh_filter(self) -> FSRCFilter | EventFilter:
        if self.method == "fsrc":
            return FSRCFilter(self.epsilon, self.delta)
        if self.method == "whitehouse":
            return WhitehouseFilter(self.epsilon, self.delta)
        return PureDPFilter(self.epsilon)

    def _parameters(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold, "sigma_threshold": self.sigma_threshold, "sensitivity": self.sensitivity,
            "epsilon": self.epsilon, "delta": self.delta, "sigma_query": self.sigma_query, "method": self.method,
            "persist_threshold": self.persist_threshold,
        }

    @property
    def window(self) -> int:
        """Index of the next window to be processed (windows are numbered from 0)."""
        return self._window

    @property
    def halted(self) -> bool:
        return self._halt_reason is not None

    @property
    def halt_reason(self) -> str | None:
        """Why the monitor halted (public: depends only on public parameters), or None while it runs."""
        return self._halt_reason

    def describe(self) -> str:
        rule = {
            "fsrc": f"FSRC filter with a delta budget (Lebensold–Precup–Balle Alg. 4; the admitted instances' deltas "
                    f"add up): instance t is admitted at delta_t = delta 6/(pi^2 t^2) with the pDP epsilon eps_max at "
                    f"delta_t (t = 1: eps_max={self.instance_epsilon:.4g}, delta_1={self.instance_delta:.3g}; t = 10: "
                    f"eps_max={self.instance_price(10)[0]:.4g}) and charged its ex-post loss",
            "whitehouse": f"Whitehouse et al. filter, each instance priced ({self.instance_epsilon:.4g}, "
                          f"{self.instance_delta:.3g})-DP by Zhu–Wang",
            "laplace": f"pure-DP filter, each Laplace instance priced {self.instance_epsilon:.4g}",
        }[self.method]
        noise = "Laplace" if self.method == "laplace" else "Gaussian"
        return (
            f"{noise} sparse vector monitor: threshold {self.threshold:g}, sigma_threshold {self.sigma_threshold:g}, "
            f"sigma_query {self.sigma_query:.4g}, sensitivity {self.sensitivity:.4g}; {rule}; budget "
            f"({self.epsilon:g}, {self.delta:g})"
        )

    def public_dict(self) -> dict[str, Any]:
        """What may be shown: parameters, per-instance ex-ante price, next window, halting; no spend, no threshold."""
        return {
            **self._parameters(), "instance_epsilon": self.instance_epsilon, "instance_delta": self.instance_delta,
            "window": self._window, "halted": self.halted, "halt_reason": self._halt_reason,
            "filter": self._filter.public_dict(),
        }

    # -- the stream ----------------------------------------------------------

    def process(self, value: float, rng: SecureRandom | None = None) -> MonitorOutput:
        """Answer one window: BOT or TOP of the open instance, starting one (if the filter admits it) when none is open.

        `rng`: the noise of this window (the threshold noise of an instance
        starting here, then the query noise); default the monitor's own stream.
        Pipelines pass one stream per window so that a seeded test run draws
        the same noise whether the windows arrive in one run or several.
        """
        if rng is not None and not isinstance(rng, SecureRandom):
            raise TypeError(f"SparseVectorMonitor.process: rng must be a pipelines.mechanisms.noise.SecureRandom or None, got {type(rng).__name__}")
        rng = self._rng if rng is None else rng
        numeric = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
        if not (numeric and math.isfinite(value)):
            raise ValueError(f"SparseVectorMonitor.process: value must be a finite number, got {value!r}")
        value = min(max(float(value), LOWER), UPPER)
        window = self._window
        self._window += 1
        if self._halt_reason is not None:
            return MonitorOutput(window, False, True)
        if self._instance is None:
            price = self._next_price()
            if not self._admit(price):
                self._halt_reason = (
                    f"budget exhausted: the {self._filter.kind} filter admits no further AboveThreshold instance "
                    f"(the next would have ex-ante epsilon {price[0]:.4g} and delta {price[1]:.3g}; budget "
                    f"({self.epsilon:g}, {self.delta:g})); halted at window {window}"
                )
                return MonitorOutput(window, False, True)
            self._instance = _Instance(window, 0, self.threshold + self._noise(rng, self.sigma_threshold))
        noisy_threshold = self._instance.noisy_threshold
        assert noisy_threshold is not None, "a restored instance without its threshold is closed on restore"
        if value + self._noise(rng, self.sigma_query) >= noisy_threshold:
            self._end_instance(halted=True)
            return MonitorOutput(window, True, False)
        self._instance.bots += 1
        return MonitorOutput(window, False, False)

    def process_many(self, values) -> tuple[MonitorOutput, ...]:
        """`process` each value in order."""
        return tuple(self.process(value) for value in np.asarray(values, dtype=float).ravel())

    def close(self) -> None:
        """End the open instance, if any, as stopped from outside ("fsrc": charge the ex-post loss of BOT^t).

        The next window then starts a fresh instance, if the filter admits it.
        """
        if self._instance is not None:
            self._end_instance(halted=False)

    def _next_price(self) -> tuple[float, float]:
        """The price of the next instance: only "fsrc" prices depend on how many instances were admitted."""
        if isinstance(self._filter, FSRCFilter):
            return self.instance_price(self._filter.instances + 1)
        return self.instance_epsilon, self.instance_delta

    def _admit(self, price: tuple[float, float]) -> bool:
        if isinstance(self._filter, FSRCFilter):
            return self._filter.admits(*price)
        return self._filter.try_spend(ApproxDP(*price) if self.method == "whitehouse" else PureDP(price[0]))

    def _noise(self, rng: SecureRandom, sigma: float) -> float:
        if self.method == "laplace":
            return float(laplace_noise(rng, self._laplace_scale(sigma), 1)[0])
        return sigma * float(rng.standard_normal(1)[0])

    def _end_instance(self, halted: bool) -> None:
        """Charge the FSRC filter the ex-post loss of the instance's output (TOP after `bots` BOTs, or BOT^bots)."""
        instance = self._instance
        assert instance is not None, "only an open instance ends"
        if isinstance(self._filter, FSRCFilter):
            t = instance.bots + (1 if halted else 0)
            self._filter.charge(_expost_epsilon(
                t, self.sigma_threshold, self.sigma_query, self.threshold, self.sensitivity, halted
            ))
        self._instance = None

    # -- sealed state ----------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Everything needed to resume: parameters, filter state (sealed), next window, the open instance.

        The open instance keeps its noisy threshold only when `persist_threshold`;
        otherwise a monitor restored from this state closes the instance
        (`from_dict`). JSON-ready. Contains the realised spend: seal it, never publish it.
        """
        instance: dict[str, float] | None = None
        if self._instance is not None:
            instance = {"start": self._instance.start, "bots": self._instance.bots}
            threshold = self._instance.noisy_threshold
            if self.persist_threshold and threshold is not None:
                instance["noisy_threshold"] = threshold
        return {
            "monitor": "sparse_vector", "parameters": self._parameters(), "filter": self._filter.to_dict(),
            "window": self._window, "instance": instance, "halt_reason": self._halt_reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], rng: SecureRandom | None = None) -> "SparseVectorMonitor":
        """Resume a monitor saved by `to_dict`, drawing future noise from `rng` (default: a fresh CSPRNG).

        An open instance saved without its noisy threshold cannot continue:
        it is closed at once (charged as BOT^bots), and the next window
        starts a fresh instance.
        """
        owner = "SparseVectorMonitor.from_dict"
        try:
            if data["monitor"] != "sparse_vector":
                raise ValueError(f"{owner}: not a sparse vector monitor state, got monitor={data['monitor']!r}")
            monitor = cls(**data["parameters"], rng=rng)
            restored = PrivacyFilter.from_dict(data["filter"])
            window, instance, reason = data["window"], data["instance"], data["halt_reason"]
        except (KeyError, TypeError) as err:
            raise ValueError(f"{owner}: state lacks or mistypes a field ({err}); expected the dict of to_dict()") from err
        if restored.kind != _FILTER_KINDS[monitor.method]:
            raise ValueError(
                f"{owner}: method {monitor.method!r} needs a {_FILTER_KINDS[monitor.method]!r} filter, got {restored.kind!r}"
            )
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise ValueError(f"{owner}: window must be an integer >= 0, got {window!r}")
        if monitor.method == "fsrc" and restored.to_dict()["state"]["open"] != (instance is not None):
            raise ValueError(
                f"{owner}: the FSRC filter has an uncharged instance exactly when the state has one, got {instance!r}"
            )
        if not isinstance(restored, (FSRCFilter, EventFilter)):
            raise ValueError(f"{owner}: a monitor's filter is FSRC or an event filter, got {restored.kind!r}")
        monitor._filter, monitor._window, monitor._halt_reason = restored, window, reason
        if instance is not None:
            start, bots = instance.get("start"), instance.get("bots")
            if not (isinstance(start, int) and isinstance(bots, int) and 1 <= bots and start + bots == window):
                raise ValueError(
                    f"{owner}: instance must have integers start + bots == window={window} and bots >= 1, got {instance!r}"
                )
            noisy_threshold = instance.get("noisy_threshold")
            if noisy_threshold is not None and not monitor.persist_threshold:
                raise ValueError(f"{owner}: state holds a noisy threshold although persist_threshold is False")
            monitor._instance = _Instance(start, bots, None if noisy_threshold is None else float(noisy_threshold))
            if noisy_threshold is None:
                monitor.close()
        return monitor


def _finite(owner: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(value):
        raise ValueError(f"{owner}: {name} must be a finite number, got {value!r}")
    return float(value)
