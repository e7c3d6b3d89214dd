"""Streaming jobs that publish as they release: each period, or each window on a plain scope, paid when it is
first released (or, a prepaid stream, its whole plan paid once when the stream opens), and resumable.

A streaming job (Pub/Sub input) is a stream (`accounting.ledger.streams`) when its ledger scope holds a budget
per period (`dpstream budget init --unit-period P`), or when its scope is plain (`Budget.stream_payment`): paid
window by window where its windows are separate rounds that the scope's filter prices one at a time at no extra
cost, else prepaid; only svt monitors on a runner that may replay a sealed window pay at the end, as a run. Order
(docs/proofs/pipelines.run.stream.md):
1. everything public is checked first, as for a run (the runner did: job, plan, runner options, memory);
2. the output directory is read: the windows a stream of this job released there before (parts, or refusals)
   are kept, and this run releases the rest, from the first window no release has decided (`resume_point`);
3. the ledger opens the stream, or resumes the stream of the same job into the same output in a new session
   (nothing is debited, but a new prepaid stream's whole plan; a stream no step could admit, or whose opening
   is refused, is refused, exit 3); a resumed stream's published windows
   are read from the ledger's journal, and any whose file is missing or changed is written again from it
   (never computed again), so the resume point follows what the ledger says was published, not the files;
4. the pipeline computes each window; just before it writes window i it debits, once per stream, every
   period window i overlaps, or window i itself on a plain scope (at no cost when prepaid), and journals the
   window's bytes in the same transaction (`payment.StreamPayer`), and writes
   OUTPUT/windows/NAME/window-IIIIII.jsonl only when all of them were admitted (else window-IIIIII.refused,
   with the reason). Written windows are published: a reader may use them at once. The launcher renews the
   stream's lease meanwhile;
5. when every window is decided, or at `max_seconds`, the pipeline is cancelled, the parts are merged into
   one file per release (every window released so far, by any session, checked against the journal first) and
   report.json / report.md are written into OUTPUT; the stream ends finished, or stopped (resumable: run the
   same job file again).
A failure or interrupt ends the session stopped: windows already published stay published and paid; periods
and windows not reached are never debited (a prepaid stream paid them all when it opened). Windows are numbered from the job's window.start whatever session
releases them, so a resumed stream with a fixed seed releases what one uninterrupted run would.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

from apache_beam.options.pipeline_options import PipelineOptions

from dpstream.accounting.ledger import Artifact, Ledger, PeriodGrid, Periods, StreamRecord, StreamTicket
from dpstream.accounting.text import instant_text
from dpstream.connectors.files import filesystems, join
from dpstream.pipelines.config.jobfile import Job
from dpstream.pipelines.config.specs import WindowSpec
from dpstream.pipelines.planning import JobPlan, PeakPlan, SvtPlan
from dpstream.pipelines.run import streaming as streaming_io
from dpstream.pipelines.run.budget import Budget
from dpstream.pipelines.run.errors import EXIT_INTERRUPTED, RunError
from dpstream.pipelines.run.job_graph import build_pipeline
from dpstream.pipelines.run.lease import LeaseKeeper
from dpstream.pipelines.run.payment import StreamPayer
from dpstream.pipelines.run.preflight import DIRECT_RUNNERS, check_event_time, runner_name
from dpstream.pipelines.run.stream_report import StreamReport
from dpstream.pipelines.run.transaction import pipeline_error

STREAMING_WINDOW = "window {number} of {windows} (ending {end}) decided"
"""The progress line a stream tells as each window is published or refused."""


@dataclass(frozen=True)
class StreamOutcome:
    """What one session of a stream left: the report, the merged files, the windows still pending per release."""

    report: dict[str, Any]
    files: dict[str, str]
    pending: dict[str, int]


def resume_point(plan: JobPlan, window: WindowSpec, grid: PeriodGrid | None, decided: dict[str, set[int]],
                 expected: dict[str, tuple[int, ...]], paid: Iterable[int] = (),
                 answered: dict[str, set[int]] | None = None) -> int:
    """The first window index this session may release: the first emission some release has not decided.

    Each window's release is an independent mechanism, so any undecided window may be released later. A job
    with state across windows (contribution caps over a unit's windows, or peaks over a period) holds that
    state per user x period unit in the pipeline (on a plain scope, whose prepaid stream paid the whole plan
    once: per user and cap group, `_cap_group_end`); a new session starts it afresh, so it must not release any
    window of a period (group) an earlier session touched: one that has a decided emission of any release (its
    span: a window, or a peak's whole period), or that the stream paid (`paid`: period indices, window indices
    on a plain scope; a stale worker may still publish there). It starts after the last such period (group),
    moved out of any peak period that point cuts, so no peak is computed over part of its period; windows in
    between are skipped, never released. `answered`: windows decided only because an svt monitor had answered
    them (`answered_before`: another job's answers, or an alert never published), which touched no state here."""
    pending = [index for name, indices in expected.items() for index in indices if index not in decided[name]]
    if not pending:
        return window.count
    first = min(pending)
    peaks = [r for r in plan.releases if isinstance(r, PeakPlan)]
    if plan.window_cap is None and not peaks:
        return first
    answered = answered or {}
    spans = [_span(plan[name], window, index) for name, indices in decided.items()
             for index in indices - answered.get(name, set())]
    if grid is not None:
        ends = [Periods.overlapping(a, b, grid).end() for a, b in spans] + [grid.start(p + 1) for p in paid]
    else:  # the group end only grows with time: one call, at the latest touched time (not one scan per window)
        latest = max([b for _, b in spans] + [window.bounds(index)[1] for index in paid], default=None)
        ends = [] if latest is None else [_cap_group_end(plan, window, latest)]
    barrier = max(ends, default=-math.inf)
    while math.isfinite(barrier):  # out of any peak period it cuts
        moved = max([barrier] + [b for peak in peaks for a, b in peak.period_bounds if a < barrier < b])
        if moved == barrier:
            break
        barrier = moved
    while first < window.count and window.bounds(first)[0] < barrier:
        first += 1
    return first


def _cap_group_end(plan: JobPlan, window: WindowSpec, time_s: float) -> float:
    """On a plain scope (a prepaid stream), where the cap group holding the windows that start before `time_s`
    ends: the start of the next group's first window (`WindowCap.unit_of_window`: the job's unit period, or one
    group for the whole range, whose end it then is); `time_s` itself when the plan has no caps (only peaks hold
    state)."""
    cap = plan.window_cap
    before = [index for index in range(window.count) if window.bounds(index)[0] < time_s]
    if cap is None or not before:
        return time_s
    group = cap.unit_of_window[before[-1]]
    later = [window.bounds(index)[0] for index in range(before[-1] + 1, window.count)
             if cap.unit_of_window[index] > group]
    return max(time_s, min(later, default=window.bounds(window.count - 1)[1]))


def answered_before(plan: JobPlan, expected: dict[str, tuple[int, ...]], decided: dict[str, set[int]],
                    starts: dict[str, int]) -> dict[str, set[int]]:
    """svt release name -> its undecided windows before `starts[name]`, the window its monitor answers next
    (`Budget.monitor_starts`). The monitor is sealed in the ledger before an alert is published, so a session that
    died in between left a monitor that has answered a window whose alert was never published (or another run or
    stream answered those windows); that answer is spent and never published here (`mark_answered`), while the
    other releases still publish the window."""
    return {r.name: {i for i in expected[r.name] if i < starts[r.name]} - decided[r.name]
            for r in plan.releases if isinstance(r, SvtPlan)}


def mark_answered(parts: dict[str, str], answered: dict[str, set[int]], starts: dict[str, int]) -> None:
    """Decide the windows of `answered_before` as never published (a `.refused` part saying why)."""
    _mark_unpublished(parts, answered, lambda name: f"not published: svt monitor {name!r} had answered this window "
                                                    f"before this session (its ledger record continues at window "
                                                    f"{starts[name] + 1})")


def _mark_unpublished(parts: dict[str, str], indices: dict[str, set[int]], reason) -> None:
    """Decide release name -> windows as never published, each `.refused` part holding `reason(name)`."""
    for name, found in indices.items():
        for index in sorted(found):
            streaming_io.mark_unpublished(parts[name], index, reason(name))


def _span(planned, window: WindowSpec, index: int) -> tuple[float, float]:
    """The time range the emission at `index` of a planned release reads."""
    if isinstance(planned, PeakPlan):
        return dict(zip(planned.last_windows, planned.period_bounds))[index]
    return window.bounds(index)


def run_stream(job: Job, job_budget: Budget, grid: PeriodGrid | None, options: PipelineOptions, beam_args: Sequence[str],
               output_dir: str, log, max_seconds: float | None, progress, started: float,
               timings: dict[str, float], detach: bool = False, prepaid: bool = False) -> StreamOutcome:
    """Run one session of the job's stream into `output_dir` (see the module docstring); RunError on failure.
    `grid`: the scope's period grid, None on a plain scope (paid window by window, or, `prepaid`, its whole plan
    once when the stream opens: `Budget.stream_payment`).
    `detach`: submit the pipeline and return at once (a runner that runs it elsewhere: the pipeline writes its
    windows and reports and ends the stream itself); the outcome's report is then empty."""
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    parts = {spec.name: join(output_dir, streaming_io.PARTS_DIR, spec.name) for spec in job.releases}
    expected = {spec.name: streaming_io.emissions(job_budget.plan[spec.name], job.window) for spec in job.releases}
    if detach and runner_name(options) in DIRECT_RUNNERS:
        raise RunError(f"{job.source}: the DirectRunner runs the pipeline inside this process, so the launcher "
                       f"cannot leave it; run without --detach, or on Dataflow or Flink; nothing was debited")
    unfinished = job_budget.unfinished_stream(output_dir)  # read its journal first: it says what was published
    decided = ({name: streaming_io.released(directory) for name, directory in parts.items()} if unfinished is None
               else _journal_decided(job_budget, job.window, grid, expected, parts, unfinished.stream_id,
                                     unfinished.debited, log)[0])
    _check_output(output_dir, any(decided.values()))
    if any(decided.values()):
        done = job_budget.finished_stream(output_dir) if unfinished is None else None
        if done is not None:
            return report_again(job, job_budget, done, output_dir, parts, log, StreamReport(
                job, output_dir, job_budget.url, done.stream_id, done.session, runner_name(options),
                tuple(beam_args), started_at, ()), timings, started)
        job_budget.check_resumable(output_dir)
    has_windows = any(decided.values())  # by an earlier session of this stream, or by another
    monitor_starts = job_budget.monitor_starts()
    answered = answered_before(job_budget.plan, expected, decided, monitor_starts)
    decided = {name: indices | answered.get(name, set()) for name, indices in decided.items()}
    first = resume_point(job_budget.plan, job.window, grid, decided, expected,  # refined once the ledger is read
                         answered=answered)
    if first < job.window.count:
        check_event_time(job.window, options, time.time(), first)
    elif unfinished is None:
        raise RunError(f"{job.source}: no window of the range is left to release into {output_dir} (its svt "
                       f"monitors have answered them all); nothing was debited")
    label = f"job {job.name} ({job.source}) at {started_at}: " + ", ".join(r.name for r in job.releases)
    pays = ("its whole plan is paid now" if prepaid else
            f"{'each window' if grid is None else f'each {grid.text} period'} is paid when released")
    progress(f"opening stream on scope {job_budget.scope!r} ({pays})")
    ticket = job_budget.open_stream(label, output_dir, prepaid, resume_only=has_windows)
    log(ticket.message)
    try:
        if has_windows and not ticket.resumed:  # another stream finished there meanwhile
            raise RunError(f"{output_dir} holds windows of a stream that finished; write to another output; "
                           f"nothing was debited")
        decided, before = _journal_decided(job_budget, job.window, grid, expected, parts, ticket.stream_id,
                                           ticket.debited, log)
        mark_paid_unjournaled(parts, before)
        answered = answered_before(job_budget.plan, expected, decided, monitor_starts)
        decided = {name: indices | answered.get(name, set()) for name, indices in decided.items()}
        later = resume_point(job_budget.plan, job.window, grid, decided, expected, ticket.debited, answered)
        if first < later < job.window.count:
            check_event_time(job.window, options, time.time(), later)
        first = later
        mark_answered(parts, answered, monitor_starts)  # the stream is this session's now
    except RunError as err:
        job_budget.end_stream(ticket, finished=not ticket.resumed, reason=str(err))
        raise
    remaining = {name: tuple(i for i in indices if i >= first and i not in decided[name])
                 for name, indices in expected.items()}
    skipped = tuple(sorted({i for name, indices in expected.items() for i in indices
                            if i < first and i not in decided[name]}))
    stream_report = StreamReport(job, output_dir, job_budget.url, ticket.stream_id, ticket.session,
                                 runner_name(options), tuple(beam_args), started_at, skipped)
    try:
        pipeline = build_pipeline(job, job_budget, options, {}, parts, remaining,
                                  StreamPayer(job_budget.url, ticket.stream_id, ticket.session, job.window, grid,
                                              _payment_lease(job, job_budget.lease_seconds) if detach else None),
                                  stream_report.refresh, monitor_starts)
        if detach:
            pipeline.run()
            return StreamOutcome({}, stream_report.files, stream_report.pending())
        seen = _compute(job, job_budget, ticket, pipeline, parts, remaining, max_seconds, progress)
        timings["pipeline_s"] = time.perf_counter() - started - timings.get("plan_s", 0.0)
    except Exception as err:
        error = err if isinstance(err, RunError) else pipeline_error(err)
        job_budget.end_stream(ticket, finished=False, reason=error.recorded)
        published = ("windows already written stay published; the stream paid its whole plan when it opened"
                     if prepaid else "windows already written stay published and paid; "
                     + ("windows" if grid is None else "periods") + " not reached were not debited")
        raise RunError(f"{str(error).removesuffix('; nothing was published or debited')}; {published}",
                       error.exit_code) from err
    except BaseException as err:
        job_budget.end_stream(ticket, finished=False, reason="interrupted")
        if isinstance(err, KeyboardInterrupt):
            raise RunError(_interrupted(ticket, parts), EXIT_INTERRUPTED) from err
        raise
    pending = _pending(remaining, seen.released)
    job_budget.end_stream(ticket, finished=not pending, reason="stopped at max_seconds" if pending else None)
    # a bundle still running after the cancel can still write a window it paid for before the stream ended (later
    # debits are refused): count the windows again now that no more can be paid
    pending = _pending(remaining, {name: streaming_io.released(directory) for name, directory in parts.items()})
    try:
        republished(job_budget.url, ticket.stream_id, parts, log)  # what is merged is what the ledger journaled
        content = stream_report.write(timings, started)
    except OSError as err:
        raise RunError(f"cannot write the report into {output_dir}: {err.strerror or err}; the windows written "
                       f"stay published") from err
    return StreamOutcome(content, stream_report.files, pending)


def report_again(job: Job, job_budget: Budget, done: StreamRecord, output_dir: str, parts: dict[str, str], log,
                 stream_report: StreamReport, timings: dict[str, float], started: float) -> StreamOutcome:
    """The job run again into the output of its finished stream `done`: nothing is opened, computed or debited;
    the window files are brought in line with the journal (`republished`), and the release files and reports
    written again (a session killed between its last window and its report left them stale). The windows the
    stream never released are listed as skipped."""
    decided, _ = republished(job_budget.url, done.stream_id, parts, log)
    expected = {spec.name: streaming_io.emissions(job_budget.plan[spec.name], job.window) for spec in job.releases}
    skipped = tuple(sorted({i for name, indices in expected.items() for i in indices if i not in decided[name]}))
    stream_report = replace(stream_report, skipped=skipped)
    log(f"stream {done.stream_id} into {output_dir} had finished: its windows follow the ledger's journal and its "
        f"release files and reports were written again; nothing was computed or debited")
    try:
        content = stream_report.write(timings, started)
    except OSError as err:
        raise RunError(f"cannot write the report into {output_dir}: {err.strerror or err}; the windows written "
                       f"stay published") from err
    return StreamOutcome(content, stream_report.files, stream_report.pending())


def republished(ledger_url: str, stream_id: int, parts: dict[str, str],
                log) -> tuple[dict[str, set[int]], dict[str, dict[int, Artifact]]]:
    """Bring the stream's window files in line with its journal (`streaming.republish`: a published window whose
    file is gone or changed is written again with its journaled bytes, never computed again), log what was
    written; (release name -> the windows decided now, the journal)."""
    with Ledger(ledger_url) as ledger:
        journal = ledger.stream_journal(stream_id)
    for name, indices in streaming_io.republish(parts, journal).items():
        log(f"{name}: {len(indices)} published window(s) written again from the ledger's journal (their files were "
            f"missing or changed): {', '.join(str(i) for i in indices[:10])}{' ...' if len(indices) > 10 else ''}")
    return {name: streaming_io.released(directory) for name, directory in parts.items()}, journal


def paid_unjournaled(plan: JobPlan, window: WindowSpec, grid: PeriodGrid | None, expected: dict[str, tuple[int, ...]],
                     decided: dict[str, set[int]], paid: Iterable[int],
                     journal: dict[str, dict[int, Artifact]]) -> dict[str, set[int]]:
    """Release name -> its undecided emissions that read a step (window, or period) the stream paid for although
    no journaled window reads it. A session that journals pays a step only together with the first window it
    publishes there, so such a step was paid by a session of an older dpstream, which kept no journal: its
    windows may have been published, and their files are gone. They are never published again (their content is
    unknown; computing them again would publish a second noisy version for the price of one)."""
    def steps(name: str, index: int) -> set[int]:
        if grid is None:
            return {index}
        periods = Periods.overlapping(*_span(plan[name], window, index), grid)
        return set(range(periods.first, periods.first + periods.count))

    covered = {step for name, items in journal.items() for index in items for step in steps(name, index)}
    legacy = set(paid) - covered
    return {name: {i for i in indices if i not in decided[name] and steps(name, i) & legacy}
            for name, indices in expected.items()}


def _journal_decided(job_budget: Budget, window: WindowSpec, grid: PeriodGrid | None,
                     expected: dict[str, tuple[int, ...]], parts: dict[str, str], stream_id: int, paid: Iterable[int],
                     log) -> tuple[dict[str, set[int]], dict[str, set[int]]]:
    """The stream's decided windows once its files follow its journal (`republished`), counting as decided the
    windows an older, journal-less session paid for (`paid_unjournaled`); (release name -> decided windows, those
    paid-unjournaled ones)."""
    decided, journal = republished(job_budget.url, stream_id, parts, log)
    before = paid_unjournaled(job_budget.plan, window, grid, expected, decided, paid, journal)
    return {name: indices | before[name] for name, indices in decided.items()}, before


def mark_paid_unjournaled(parts: dict[str, str], indices: dict[str, set[int]]) -> None:
    """Decide the windows of `paid_unjournaled` as never published again (a `.refused` part saying why)."""
    _mark_unpublished(parts, indices, lambda _: "not published again: a session of an older dpstream, which kept no "
                                                "journal, paid for this window and may have published it; its file "
                                                "is gone")


def _interrupted(ticket: StreamTicket, parts: dict[str, str]) -> str:
    """What an interrupted stream leaves, read back from its outputs after its session ended (no later window can
    be paid: the ledger refuses the ended session)."""
    published = {name: sum(streaming_io.parts(directory).values()) for name, directory in parts.items()}
    return (f"interrupted; stream {ticket.stream_id} stopped (run the job again to resume it); the windows it "
            f"published stay published and paid: " + ", ".join(f"{name} {count}" for name, count in published.items()))


def _pending(remaining: dict[str, tuple[int, ...]], released: dict[str, set[int]]) -> dict[str, int]:
    """Release name -> how many of this session's windows are neither published nor refused (releases with some)."""
    return {name: count for name, indices in remaining.items() if (count := len(set(indices) - released[name]))}


def _payment_lease(job: Job, lease_seconds: float) -> float:
    """How long each window's payment extends a detached stream's lease: at least two of its longest windows
    (plus lateness), so a pipeline whose launcher left keeps its session from one window to the next. (With the
    launcher there, its lease keeper renews the lease, and a killed launcher's session expires after
    `lease_seconds`.)"""
    window = job.window  # every window: calendar days and months differ in length (a fall-back day has 25 hours)
    longest = max(window.bounds(i)[1] - window.bounds(i)[0] for i in range(window.count))
    return max(lease_seconds, 2 * (max(longest, window.step) + window.allowed_lateness))


def _check_output(output_dir: str, has_windows: bool) -> None:
    """A stream writes into a new or empty output, or one holding its own windows (checked with the ledger)."""
    beam_files = filesystems()
    if has_windows or not beam_files.exists(output_dir):
        return
    found = beam_files.match([join(output_dir, "*")])[0].metadata_list
    if found:
        raise RunError(f"output directory {output_dir} holds files but no stream windows; a stream writes into a "
                       f"new or empty directory; nothing was debited")


def _compute(job: Job, job_budget: Budget, ticket: StreamTicket, pipeline, parts: dict[str, str],
             remaining: dict[str, tuple[int, ...]], max_seconds: float | None,
             progress) -> streaming_io.StreamingOutcome:
    def on_window(index: int) -> None:
        progress(STREAMING_WINDOW.format(number=index + 1, windows=job.window.count,
                                         end=instant_text(job.window.bounds(index)[1])))

    if not any(remaining.values()):
        return streaming_io.StreamingOutcome({name: set() for name in parts}, remaining, 0.0)
    with LeaseKeeper(lambda: job_budget.renew_stream(ticket), job_budget.lease_seconds, f"stream-{ticket.stream_id}"):
        return streaming_io.run_until_released(pipeline, parts, remaining, max_seconds, on_window)
