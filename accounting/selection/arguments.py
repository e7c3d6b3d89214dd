"""Argument checks of the selection bounds: one-line messages naming the function, the rule and the value."""
from __future__ import annotations

import math

import numpy as np


def require_positive(owner: str, name: str, value) -> float:
    if not (isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{owner}: {name} must be a positive finite number, got {value!r}")
    return float(value)


def require_finite(owner: str, name: str, value) -> float:
    if not (isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(value)):
        raise ValueError(f"{owner}: {name} must be a finite number, got {value!r}")
    return float(value)


def require_range(owner: str, sensitivity, lower, upper) -> tuple[float, float, float]:
    lower = require_finite(owner, "lower", lower)
    upper = require_finite(owner, "upper", upper)
    if not upper > lower:
        raise ValueError(f"{owner}: upper must exceed lower, got lower={lower!r}, upper={upper!r}")
    sensitivity = require_finite(owner, "sensitivity", sensitivity)
    if not 0 <= sensitivity <= upper - lower:
        raise ValueError(
            f"{owner}: sensitivity must lie in [0, upper - lower] = [0, {upper - lower!r}], got {sensitivity!r}"
        )
    return sensitivity, lower, upper


def require_counts(owner: str, name: str, value, minimum: int) -> tuple[np.ndarray, tuple]:
    """An integer or array of integers >= minimum, as a flat float array (exponents), and its shape."""
    if type(value) is int and minimum <= value <= 2**53:  # the common scalar call, exactly a float
        return np.array([float(value)]), ()
    try:
        counts = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum} or an array of them, got {value!r}") from err
    if counts.size == 0 or not np.all(np.isfinite(counts)) or np.any(counts != np.floor(counts)) or np.any(counts < minimum):
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum} or an array of them, got {value!r}")
    return counts.ravel(), counts.shape
