"""What a job's output and its ledger scope say about its progress (`dpstream status JOB`): public facts only.

For a stream on a period scope: the windows each release published or had refused (the files in
OUTPUT/windows/NAME, written by the pipeline as windows are released), the stream's state, session and lease,
and the periods it paid or was refused. For any job: the ledger's runs into the output (running, published,
failed, ...) and each svt monitor's state (open, halted, leased). Nothing here reads event data or a sealed state.
"""
from __future__ import annotations

import json
import os
from typing import Any

from dpstream.accounting.ledger import Ledger, LedgerError, PeriodGrid, StreamRecord, UnknownScopeError
from dpstream.accounting.ledger.streams import STREAMING
from dpstream.accounting.text import instant_text
from dpstream.connectors.files import filesystems, is_local, join, read_bytes
from dpstream.pipelines.config.jobfile import Job
from dpstream.pipelines.config.specs import WindowSpec
from dpstream.pipelines.planning import plan_job
from dpstream.pipelines.report.document import REPORT_JSON
from dpstream.pipelines.run import streaming as streaming_io
from dpstream.pipelines.run.errors import RunError


def job_status(job: Job, output_dir: str | None = None, ledger_url: str | None = None) -> dict[str, Any]:
    """The job's progress as JSON-ready facts (see the module docstring); RunError when the ledger cannot tell."""
    output = output_dir or job.output.path
    output = os.path.abspath(output) if is_local(output) else output
    privacy = job.privacy
    plan = plan_job(job.releases, privacy.bounds, job.window, privacy.epsilon, privacy.delta, privacy.unit_period)
    windows = {}
    for spec in job.releases:
        expected = streaming_io.emissions(plan[spec.name], job.window)
        found = streaming_io.parts(join(output, streaming_io.PARTS_DIR, spec.name))
        windows[spec.name] = {"expected": len(expected), "published": sum(found.values()),
                              "refused": sum(1 for has_rows in found.values() if not has_rows)}
    out: dict[str, Any] = {"job": job.source, "output": output, "scope": privacy.scope, "windows": windows,
                           "report": _report_state(output)}
    try:
        with Ledger(ledger_url or privacy.ledger) as ledger:
            view = ledger.show(privacy.scope)
            out["ledger"] = ledger.display_url
            out["runs"] = [_run(r) for r in ledger.runs_of(privacy.scope) if r.output == output]
            out["streams"] = [_stream(s, view.unit_period, job.window) for s in ledger.streams_of(privacy.scope, output)]
            names = {spec.name for spec in job.releases if spec.kind == "svt"}
            out["monitors"] = [m.to_dict() for m in view.monitors if m.name in names]
    except UnknownScopeError as err:
        raise RunError(f"{job.source}: {err}") from err
    except LedgerError as err:
        raise RunError(f"{job.source}: {err}") from err
    return out


def _report_state(output: str) -> dict[str, Any] | None:
    path = join(output, REPORT_JSON)
    if not filesystems().exists(path):
        return None
    content = json.loads(read_bytes(path))
    return {"written": True, **content.get("streaming", {}),
            **({"stream": content["stream"]["stream"]} if "stream" in content else {})}


def _run(run) -> dict[str, Any]:
    return {"run": run.run_id, "outcome": run.status, "started": run.time, "finished": run.finished,
            "reason": run.reason}


def stream_steps(record: StreamRecord, grid: PeriodGrid | None, window: WindowSpec) -> dict[str, Any]:
    """What a stream paid, as report.json and `dpstream status` show it: `pays` ("period" on a period scope,
    "window" on a plain one), then `periods_debited` (their starts) and `periods_refused` (start -> why), or
    `windows_debited` and `windows_refused` (window starts), and `prepaid`: the release that debited the whole
    plan when the stream opened (its windows are then decided at no cost; None: it pays per step)."""
    unit = "window" if grid is None else "period"

    def start(step: int) -> str:
        return instant_text(window.bounds(step)[0] if grid is None else grid.start(step))

    return {"pays": unit, f"{unit}s_debited": [start(s) for s in sorted(record.debited)],
            f"{unit}s_refused": {start(s): why for s, why in sorted(record.refused.items())},
            "prepaid": record.prepaid}


def _stream(stream, grid, window) -> dict[str, Any]:
    return {"stream": stream.stream_id, "status": stream.status, "session": stream.session,
            "lease_until": instant_text(stream.lease_until) if stream.status == STREAMING else None,
            **stream_steps(stream, grid, window), "reason": stream.reason}


def status_lines(status: dict[str, Any]) -> list[str]:
    """`job_status` in plain lines, as `dpstream status` prints them."""
    lines = [f"job {status['job']} -> {status['output']} (scope {status['scope']!r} in {status.get('ledger')})"]
    for name, counts in status["windows"].items():
        refused = f", {counts['refused']} refused" if counts["refused"] else ""
        lines.append(f"  {name}: {counts['published']} of {counts['expected']} windows published{refused}")
    for stream in status["streams"]:
        unit = stream["pays"]
        debited, refused = stream[f"{unit}s_debited"], stream[f"{unit}s_refused"]
        span = f" ({debited[0]} .. {debited[-1]})" if debited else ""
        lease = f", lease until {stream['lease_until']}" if stream["lease_until"] else ""
        paid = (f"whole plan prepaid (release {stream['prepaid']}), {_count(len(debited), unit)} published{span}"
                if stream.get("prepaid") is not None else f"{_count(len(debited), unit)} debited{span}")
        lines.append(f"  stream {stream['stream']}: {stream['status']} (session {stream['session']}{lease}); {paid}"
                     + (f", {len(refused)} refused" if refused else "")
                     + (f"; {stream['reason']}" if stream["reason"] else ""))
    for run in status["runs"][-3:]:
        lines.append(f"  run {run['run']}: {run['outcome']} (started {run['started']})"
                     + (f": {run['reason']}" if run["reason"] else ""))
    for monitor in status["monitors"]:
        state = "halted" if monitor["halted"] else "open"
        holder = (f", leased to run {monitor['checked_out']}" if monitor.get("checked_out") else
                  f", answered by stream {monitor['stream']}" if monitor.get("stream") else "")
        lines.append(f"  svt monitor {monitor['name']}: {state}{holder}")
    report = status["report"]
    if report is None:
        lines.append("  report: not written yet")
    else:
        pending = report.get("windows_pending")
        waiting = ", ".join(f"{name}: {count}" for name, count in (pending or {}).items())
        lines.append("  report: written" + (f"; windows not released when it was written: {waiting}" if pending else ""))
    return lines


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
