"""What every mechanism returns (`Release`: the value to publish, its privacy event, its public parameters) and
the argument checks the mechanisms share (one-line errors naming the mechanism and the argument)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from dpstream.accounting.events import Event
from dpstream.pipelines.mechanisms.fixedpoint import is_integer_objects
from dpstream.pipelines.mechanisms.noise import SecureRandom


@dataclass(frozen=True)
class Release:
    """The output of one mechanism run: `value` may be published; `event` is what it costs.

    `parameters` holds the public parameters actually used (noise scale, grid
    step, effective sensitivity, ...), for reports. Array values are read-only.
    `ex_post_epsilon` (AboveThreshold only) is the pure ex-post loss of the
    outcome released: data-dependent spend for a privacy filter or the sealed
    ledger, never for publication (DESIGN.md section 1).
    """

    mechanism: str
    value: Any
    event: Event
    parameters: Mapping[str, Any]
    ex_post_epsilon: float | None = None

    def describe(self) -> str:
        """One line for reports: mechanism, public parameters and event."""
        params = ", ".join(f"{name}={value}" for name, value in self.parameters.items())
        return f"{self.mechanism}({params}) -> {self.event!r}"


def release(mechanism: str, value: Any, event: Event, ex_post_epsilon: float | None = None, **parameters: Any) -> Release:
    if isinstance(value, np.ndarray):
        value.setflags(write=False)
    return Release(mechanism, value, event, MappingProxyType(parameters), ex_post_epsilon)


def positive(owner: str, name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) or not (
        math.isfinite(value) and value > 0
    ):
        raise ValueError(f"{owner}: {name} must be a positive finite number, got {value!r}")
    return float(value)


def count(owner: str, name: str, value: int, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def checked_rng(owner: str, rng: SecureRandom) -> SecureRandom:
    if not isinstance(rng, SecureRandom):
        raise TypeError(f"{owner}: rng must be a pipelines.mechanisms.noise.SecureRandom, got {type(rng).__name__}")
    return rng


def vector(owner: str, name: str, values: Any, minimum: int = 1) -> np.ndarray:
    """A 1-d numeric array of at least `minimum` finite entries: integers, floats, or an object array of Python
    ints (exact sums beyond int64, `fixedpoint.narrowed`, which `noise.to_grid` takes exactly)."""
    array = np.asarray(values)
    if array.ndim == 1 and array.size >= minimum and is_integer_objects(array):
        return array  # integers: finite
    if array.ndim != 1 or array.size < minimum or array.dtype.kind not in "iuf":
        raise ValueError(
            f"{owner}: {name} must be a 1-d numeric array with at least {minimum} entries, "
            f"got shape {array.shape} and dtype {array.dtype}"
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{owner}: {name} must be finite, got NaN or infinity")
    return array


def changed(owner: str, max_partitions: int | None, size: int) -> int:
    return size if max_partitions is None else count(owner, "max_partitions", max_partitions)

def bounded_vector(owner: str, values, lower: float, upper: float, minimum: int) -> np.ndarray:
    array = vector(owner, "values", values, minimum=minimum)
    if not (math.isfinite(lower) and math.isfinite(upper) and lower < upper):
        raise ValueError(f"{owner}: need finite lower < upper, got lower={lower!r}, upper={upper!r}")
    return np.clip(array.astype(np.float64), lower, upper)
