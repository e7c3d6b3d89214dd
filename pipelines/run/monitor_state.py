"""`Budget`'s svt monitors: their records in the ledger, where each continues, and the states a run seals.

A run's monitor states pass through a private state directory (`Budget(state_dir=...)`): the pipeline writes
each monitor's state after its last answered window, and the launcher reads them back to seal them in the
ledger with the debit (`sealed_states`).
"""
from __future__ import annotations

import json
import os
import tempfile
import uuid
from functools import cached_property
from typing import Any

import apache_beam as beam

from dpstream.accounting.ledger import (
    MonitorRecord,
)
from dpstream.accounting.text import first_line
from dpstream.connectors.files import is_local, join, read_bytes, remove_file, write_bytes
from dpstream.pipelines.mechanisms.monitor import SparseVectorMonitor
from dpstream.pipelines.planning import SvtPlan
from dpstream.pipelines.run.budget_base import BudgetBase, MonitorRecords, MonitorStates
from dpstream.pipelines.run.errors import RunError
from dpstream.pipelines.transforms.svt import STATE, snapshot_path
from dpstream.pipelines.transforms.windowing import iso


class MonitorState(BudgetBase):
    """A budget's svt monitors (a part of `Budget`)."""

    def sealed_states(self, released: dict[str, set[int]] | None = None) -> MonitorStates:
        """Each monitor's record as the pipeline sealed it (read from state_dir).

        Batch (`released` None): the state sealed after the run's last window (the file is removed). Streaming
        (`released`: release name -> the window indices whose alerts were published): the state the monitor
        sealed after the last published window, continuing at the window after it; a monitor that published
        no window keeps the state it started from."""
        out: MonitorStates = {}
        for planned in self.plan.monitors():
            if released is None:
                path = self._state_path(planned.name)
                state, next_start = json.loads(read_bytes(path)), self.window.next_start
                remove_file(path)
            else:
                state, next_start = self._streamed_state(planned, released.get(planned.name, set()))
            out[planned.name] = (MonitorRecord(state, next_start), state["halt_reason"] is not None)
        return out

    def _streamed_state(self, planned: SvtPlan, released: set[int]) -> tuple[dict[str, Any], float]:
        """(sealed state, next window start) of a streaming monitor whose windows `released` were published."""
        if not released:
            initial = self._initial_state(planned)
            return (dict(initial) if initial is not None else planned.monitor().to_dict()), self.window.start
        last = max(released)
        path = snapshot_path(self._snapshot_dir(planned.name), last)
        try:
            state = json.loads(read_bytes(path))
        except (OSError, ValueError) as err:
            raise RunError(f"svt release {planned.name!r}: the monitor's state after window {last + 1}, whose alert "
                           f"was written, is missing or unreadable ({path}: {first_line(err)}); nothing was "
                           f"published or debited, and the monitor keeps its state from before this run") from err
        following = self.window.bounds(last + 1)[0] if last + 1 < self.window.count else self.window.next_start
        return state, following

    @cached_property
    def monitor_records(self) -> MonitorRecords:
        """svt release name -> its sealed ledger record (None: a new monitor), after checking a run may continue
        it (an svt monitor, loadable, same parameters; where it continues is checked by admit for a run and by
        `monitor_starts` for a stream; leases are checked when the run or stream opens)."""
        records: MonitorRecords = {}
        if not self.plan.monitors():
            return records
        with self._ledger("nothing was debited") as ledger:
            for planned in self.plan.monitors():
                records[planned.name] = ledger.monitor_record(self.scope, planned.name)
        for planned in self.plan.monitors():
            record = records[planned.name]
            if record is not None:
                self._check_continuation(planned, record)
        return records

    def monitor_starts(self) -> dict[str, int]:
        """svt release name -> the window index its monitor answers next on a stream: 0 for a new monitor, else
        the window at which the ledger's record continues (a stopped stream's monitor continues after its last
        sealed window; each monitor of a job is sealed on its own, so they may differ); the range's window count
        when it went past it. RunError when a record continues between window starts or outside the range."""
        starts = {self.window.bounds(i)[0]: i for i in range(self.window.count)} | {self.window.next_start:
                                                                                  self.window.count}
        found = {}
        for planned in self.plan.monitors():
            next_start = self._continues_at(self.monitor_records[planned.name])
            if next_start not in starts:
                raise RunError(f"{self.source}: release {planned.name!r}: the monitor continues at "
                               f"{iso(next_start)}, which is not a window start of the job's range "
                               f"{iso(self.window.start)} to {iso(self.window.next_start)}; nothing was debited")
            found[planned.name] = starts[next_start]
        return found

    def _continued(self) -> frozenset[str]:
        """The svt monitors of the plan that are already open on the scope (their budgets are not debited again)."""
        return frozenset(name for name, record in self.monitor_records.items() if record is not None)

    def _continues_at(self, record: MonitorRecord | None) -> float:
        """The window start a monitor's record continues at (a new monitor: the range's start)."""
        if record is None:
            return self.window.start
        assert record.next_start is not None, "monitor_records checks every record names where it continues"
        return record.next_start

    def _check_start(self, planned: SvtPlan, record: MonitorRecord | None) -> None:
        """A run continues a monitor at the window its record continues at: RunError otherwise."""
        if (next_start := self._continues_at(record)) != self.window.start:
            raise RunError(f"{self.source}: release {planned.name!r}: the monitor continues at window start "
                           f"{iso(next_start)}, got window.start {iso(self.window.start)}")

    def _check_continuation(self, planned: SvtPlan, record: MonitorRecord) -> None:
        where = f"{self.source}: release {planned.name!r}"
        if not record.state or record.next_start is None:
            raise RunError(f"{where}: monitor {planned.name!r} on scope {self.scope!r} is not an svt release "
                           f"monitor; choose another release name")
        try:
            SparseVectorMonitor.from_dict(record.state)
        except ValueError as err:
            raise RunError(f"{where}: monitor {planned.name!r} on scope {self.scope!r} cannot be continued: "
                           f"{err}; give the release a new name to open a new monitor (its budget is debited); "
                           f"nothing was debited") from err
        wanted = planned.monitor().to_dict()["parameters"]
        if record.state["parameters"] != wanted:
            raise RunError(f"{where}: the monitor was opened with parameters {record.state['parameters']}, "
                           f"the job now asks for {wanted}; a monitor's parameters cannot change")

    def _initial_state(self, planned: object) -> dict[str, Any] | None:
        if not isinstance(planned, SvtPlan):
            return None
        record = self.monitor_records.get(planned.name)
        return None if record is None else record.state

    def _snapshot_dir(self, name: str) -> str:
        return join(os.path.dirname(self._state_path(name)), f"{name}.windows")

    def _state_path(self, name: str) -> str:
        if self._state_dir is None:
            base = self._state_base
            self._state_dir = (tempfile.mkdtemp(prefix="dpstream-sealed-", dir=base) if base is None or is_local(base)
                               else join(base, f".dpstream-sealed-{uuid.uuid4().hex}"))
        return join(self._state_dir, f"{name}.json")


class WriteState(beam.PTransform):
    """A monitor run's one sealed state -> a private file at `path` (local: owner read/write only)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def expand(self, states):
        return (states
                | "Collect state" >> beam.combiners.ToList()
                | "Write state" >> beam.Map(seal_state, self._path))


class SealState(beam.PTransform):
    """An svt release whose sealed state is written to `path`; yields the alert rows only."""

    def __init__(self, transform: beam.PTransform, path: str) -> None:
        super().__init__()
        self._transform, self._path = transform, path

    def default_label(self) -> str:
        return self._transform.default_label()

    def expand(self, batches):
        released = batches | "Monitor" >> self._transform
        released[STATE] | "Seal state" >> WriteState(self._path)
        return released["alerts"]


def seal_state(states: list, path: str) -> None:
    """Write the one sealed state of a monitor run to a private file (local: owner read/write only; a URL: the
    output bucket's access rules)."""
    if len(states) != 1:
        raise ValueError(f"a monitor run must seal exactly one state, got {len(states)}")
    if not is_local(path):
        write_bytes(path, json.dumps(states[0]).encode("utf-8"))
        return
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(states[0], handle)
