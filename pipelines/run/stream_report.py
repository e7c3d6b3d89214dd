"""A stream's outputs as of now: the release files merged from every window published so far, and report.json
and report.md, written by the pipeline after each window it publishes (so the launcher may leave) and by the
launcher when its session ends. All from public facts: the job, the window files, the ledger's stream record.

Writers may race (two releases' windows published at once, or a worker and the launcher): each write is
atomic and complete, and the next window's write brings the files up to date, so a reader sees a consistent
report that may lag the newest window. A worker that finds every window of the range decided ends the stream
as finished.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from dpstream.accounting.ledger import Ledger
from dpstream.accounting.ledger.receipts import Debit
from dpstream.connectors.files import join
from dpstream.connectors.writers import release_path
from dpstream.pipelines.config.jobfile import Job
from dpstream.pipelines.planning import JobPlan, plan_job
from dpstream.pipelines.report import document as report
from dpstream.pipelines.run import streaming as streaming_io
from dpstream.pipelines.run.status import stream_steps
from dpstream.pipelines.transforms.graph import release_columns


@dataclass(frozen=True)
class StreamReport:
    """The public facts a stream's report needs; picklable, so it travels with the pipeline to its workers."""

    job: Job
    output_dir: str
    ledger: str
    stream_id: int
    session: int
    runner: str
    beam_args: tuple[str, ...]
    started_at: str
    skipped: tuple[int, ...]  # windows this session will never release (`paid_stream.resume_point`)

    @cached_property
    def plan(self) -> JobPlan:
        privacy = self.job.privacy
        return plan_job(self.job.releases, privacy.bounds, self.job.window, privacy.epsilon, privacy.delta,
                        privacy.unit_period)

    @property
    def files(self) -> dict[str, str]:
        return {spec.name: release_path(self.output_dir, spec.name, self.job.output.format)
                for spec in self.job.releases}

    def decided(self) -> dict[str, set[int]]:
        """Release name -> the windows published or refused so far (one listing of its window parts)."""
        return {spec.name: streaming_io.released(join(self.output_dir, streaming_io.PARTS_DIR, spec.name))
                for spec in self.job.releases}

    def pending(self, decided: dict[str, set[int]] | None = None) -> dict[str, int]:
        """Release name -> windows of the range neither published nor refused yet (only releases with some);
        `decided`: a listing made already (`decided()`)."""
        decided = self.decided() if decided is None else decided
        out = {}
        for spec in self.job.releases:
            missing = len(set(streaming_io.emissions(self.plan[spec.name], self.job.window)) - decided[spec.name])
            if missing:
                out[spec.name] = missing
        return out

    def write(self, timings: dict[str, float] | None = None, started: float | None = None) -> dict[str, Any]:
        """Merge the published windows into the release files and write the reports; report.json's content."""
        decided = self.decided()
        for spec in self.job.releases:
            streaming_io.merge_parts(join(self.output_dir, streaming_io.PARTS_DIR, spec.name), decided[spec.name],
                                     self.files[spec.name], self.job.output.format,
                                     release_columns(self.plan[spec.name]))
        with Ledger(self.ledger) as ledger:
            record = ledger.stream(self.stream_id)
            after, display, ledger_id = ledger.show(self.job.privacy.scope), ledger.display_url, ledger.ledger_id
            paid = record.event if record.prepaid is None else next(  # a prepaid stream: the whole plan, once
                r.event for r in ledger.history(record.scope) if r.release_id == record.prepaid)
        debit = Debit(display, record.scope, record.stream_id, None, record.label, f"stream {record.stream_id}",
                      paid, after, None, None, ledger_id)
        stream = {"stream": record.stream_id, "session": record.session, "status": record.status,
                  **stream_steps(record, after.unit_period, self.job.window), "windows_skipped": list(self.skipped),
                  "monitors": list(record.monitors)}
        context = report.RunContext(job=self.job, plan=self.plan, runner=self.runner, beam_args=self.beam_args,
                                    debit=debit, files=self.files, started_at=self.started_at,
                                    timings=dict(timings or {}), pending=self.pending(decided), stream=stream)
        return report.write_reports(context, self.output_dir, time.perf_counter() if started is None else started)

    def refresh(self) -> None:
        """After the pipeline published (or had refused) a window: bring the files and reports up to date, and
        end the stream as finished once every window of the range is decided."""
        if self.write()["streaming"]["complete"]:
            with Ledger(self.ledger) as ledger:
                ledger.end_stream(self.stream_id, self.session, finished=True)
