"""Parse and print events as `KIND:PARAMS` strings, e.g. `gaussian:sigma=2,sensitivity=1`.

Used by the CLI and job files. Kinds: pure, approx, exponential (BoundedRange),
laplace, gaussian, zcdp, gaussian_threshold. Every error is one line naming the bad part.
"""
from __future__ import annotations

import dataclasses
import math

from dpstream.accounting.events import LEAF_EVENTS, Event, InvalidEventError

KINDS: dict[str, type[Event]] = {cls.kind: cls for cls in LEAF_EVENTS}


def parse_event(spec: str) -> Event:
    """`KIND:NAME=VALUE,...` -> an event, validated."""
    kind, sep, params = spec.strip().partition(":")
    cls = KINDS.get(kind.strip().lower())
    if cls is None:
        raise InvalidEventError(f"event {spec!r}: unknown kind {kind!r}; allowed: {', '.join(sorted(KINDS))}")
    allowed = [f.name for f in dataclasses.fields(cls)]
    values: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in params.split(","))) if sep else ():
        name, eq, raw = part.partition("=")
        name = name.strip()
        if not eq or name not in allowed:
            raise InvalidEventError(
                f"event {spec!r}: expected NAME=VALUE with NAME in {allowed}, got {part!r}"
            )
        try:
            value = float(raw)
        except ValueError as err:
            raise InvalidEventError(f"event {spec!r}: {name} must be a number, got {raw.strip()!r}") from err
        if math.isnan(value):
            raise InvalidEventError(f"event {spec!r}: {name} must be a number, got NaN")
        values[name] = value
    try:
        return cls(**values)
    except TypeError as err:
        required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
        raise InvalidEventError(f"event {spec!r}: {kind} needs {required}, got {sorted(values)}") from err


def format_event(event: Event) -> str:
    """The inverse of `parse_event` for leaf events."""
    params = ",".join(f"{f.name}={getattr(event, f.name)!r}" for f in dataclasses.fields(event))
    return f"{type(event).kind}:{params}"
