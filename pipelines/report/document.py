"""Run reports: report.json (machine-readable), report.md (plain words) and chart.png.

Everything here is built from the objects that ran: the plan's own
`describe()` text and parameters, the accountant's explanation of the job's
epsilon, the ledger's answer to the debit, and the release files as written.
Only released rows are counted; the number of input events is private and is
never reported.
"""
from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from dpstream.accounting.events import Event
from dpstream.accounting.ledger.receipts import Debit
from dpstream.accounting.periods import PeriodGrid
from dpstream.accounting.text import duration_text, version
from dpstream.connectors.writers import join, read_rows, write_bytes
from dpstream.pipelines.config.jobfile import Job
from dpstream.pipelines.planning import JobPlan
from dpstream.pipelines.planning.utility import Z975 as Z_95  # two-sided 95% normal quantile of the error bars
from dpstream.pipelines.transforms.windowing import iso

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
CHART_PNG = "chart.png"


@dataclass(frozen=True)
class RunContext:
    """What a finished run hands to the report: the job, its plan, the debit and the files written."""

    job: Job
    plan: JobPlan
    runner: str
    beam_args: tuple[str, ...]
    debit: Debit  # what the ledger debits at publication (scope, run id, event, scope state after)
    files: dict[str, str]
    started_at: str
    timings: dict[str, float]
    pending: dict[str, int] = dataclasses.field(default_factory=dict)  # streaming: windows not released (max_seconds)
    stream: dict[str, Any] | None = None  # a stream that pays per period as it releases (`run.paid_stream`)


def write_reports(context: RunContext, output_dir: str, started: float) -> dict[str, Any]:
    """Write report.json, report.md and chart.png into output_dir; returns the report.json content."""
    tick = time.perf_counter()
    tables = {name: read_rows(path) for name, path in context.files.items()}
    chart = chart_png(context, tables, join(output_dir, CHART_PNG))
    timings = dict(context.timings)
    timings["report_s"] = time.perf_counter() - tick
    timings["total_s"] = time.perf_counter() - started
    content = report_json(context, tables, chart, output_dir, timings)
    write_bytes(join(output_dir, REPORT_JSON), (json.dumps(content, indent=2) + "\n").encode("utf-8"))
    write_bytes(join(output_dir, REPORT_MD), report_markdown(context, content).encode("utf-8"))
    return content


# -- report.json -----------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, Event):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a release spec
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def release_parameters(release) -> dict[str, Any]:
    """A planned release's public parameters: every field of its plan (the spec flattened), plus noise stddev."""
    fields = {f.name: getattr(release, f.name) for f in dataclasses.fields(release)}
    spec = fields.pop("spec")
    out = {"name": spec.name, "kind": spec.kind, "spec": _jsonable(spec)}
    out.update({name: _jsonable(value) for name, value in fields.items()})
    if hasattr(release, "noise_stddev"):
        out["noise_stddev"] = release.noise_stddev
    return out


def report_json(context: RunContext, tables: dict[str, pa.Table], chart: str | None, output_dir: str, timings: dict) -> dict[str, Any]:
    job, plan, debit = context.job, context.plan, context.debit
    bounds = job.privacy.bounds
    explanation = plan.calibrated.explanation
    return {
        "dpstream_version": version(),
        "job": {"name": job.name, "file": job.source, "started_at": context.started_at},
        "runner": {"name": context.runner, "beam_args": list(context.beam_args), "seed": job.beam.seed},
        "input": {
            "format": job.input.format,
            "path": job.input.path,
            "columns": job.input.columns,
            "timestamp_format": job.input.timestamp_format,
            "timezone": job.input.timezone,
        },
        "window": {
            "size_s": None if job.window.calendar else job.window.size,
            "calendar": job.window.length_text if job.window.calendar else None,
            "period_s": job.window.period,
            "start": iso(job.window.start),
            "end": iso(job.window.end),
            "count": job.window.count,
        },
        "privacy": {
            "scope": job.privacy.scope,
            "unit": {"column": job.input.user,
                     **(job.privacy.unit_period.to_dict() if job.privacy.unit_period else {"period_s": None})},
            "epsilon": job.privacy.epsilon,
            "delta": job.privacy.delta,
            "bounds": {
                "max_partitions": bounds.max_partitions,
                "max_contributions": bounds.max_contributions,
                "max_windows": bounds.max_windows,
                "min_value": bounds.min_value,
                "max_value": bounds.max_value,
                "quantum": bounds.quantum,
                "quantised_range": list(bounds.quantised_range),
                "linf": bounds.linf,
                "l1": bounds.l1,
                "l2": bounds.l2,
            },
        },
        "plan": {
            "epsilon": plan.epsilon,
            "delta": plan.delta,
            "accountant": explanation.to_dict(),
            "releases": [release_parameters(r) for r in plan.releases],
        },
        "budget": budget_json(debit),
        "releases": {
            name: {"file": os.path.relpath(path, output_dir), "rows": tables[name].num_rows, "columns": tables[name].column_names}
            for name, path in context.files.items()
        },
        "chart": chart and os.path.relpath(chart, output_dir),
        "timings_s": {name: round(value, 3) for name, value in timings.items()},
        **({"streaming": {"complete": not context.pending, "windows_pending": dict(context.pending)}}
           if job.input.format == "pubsub" else {}),
        **({"stream": context.stream} if context.stream is not None else {}),
    }


def budget_json(debit: Debit) -> dict[str, Any]:
    """What a run's report says of its debit: the ledger (its masked URL and its id), scope, run, events,
    periods and the scope's view after it."""
    return {
        "ledger": debit.ledger,
        "ledger_id": debit.ledger_id,
        "scope": debit.scope,
        "run_id": debit.run_id,
        "label": debit.label,
        "debited": debit.event.to_dict(),
        "periods": None if debit.periods is None else debit.periods.to_dict(),
        "note": debit.note,
        "scope_after": _jsonable(debit.scope_after.to_dict()),
    }


# -- report.md -------------------------------------------------------------------------------------


def _grid_text(bounds) -> str:
    """How values are put on the value grid, when that can change a value (not for counts of a value on its grid)."""
    if bounds.counting and bounds.quantised_range == (bounds.min_value, bounds.max_value):
        return ""
    low, high = bounds.quantised_range
    return (f" and rounded to the nearest multiple of {bounds.quantum:.6g}, so that sums are exact (a kept event "
            f"adds between {low:.12g} and {high:.12g})")


def report_markdown(context: RunContext, content: dict[str, Any]) -> str:
    job, plan = context.job, context.plan
    bounds = job.privacy.bounds
    budget = content["budget"]
    lines = [
        f"# dpstream run: {job.name}",
        "",
        f"Job file `{job.source}`, run on {content['runner']['name']} starting {context.started_at}.",
        "",
        "## 1. Privacy unit and contribution bounds",
        "",
        _unit_text(job),
        "",
        f"Each privacy unit (column `{job.input.user}`) keeps, per window, at most {bounds.max_partitions} "
        f"partitions (column `{job.input.partition}`) and at most {bounds.max_contributions} events per partition, "
        f"chosen uniformly at random; values are clipped to [{bounds.min_value:g}, {bounds.max_value:g}]"
        f"{_grid_text(bounds)}. So one unit moves a window's sums by at most L1 = {bounds.l1:g}, L2 = {bounds.l2:.6g}, Linf = {bounds.linf:g}."
        + (f" Across windows, {cap}." if (cap := plan.window_cap_text()) else ""),
        "",
        f"Windows: {job.window.count} windows of {job.window.length_text}"
        + (f" every {duration_text(job.window.period)}" if job.window.period else "")
        + f" from {content['window']['start']} to {content['window']['end']} (the public range the budget covers).",
        "",
        "## 2. Releases",
        "",
    ]
    for number, (name, text) in enumerate(plan.describe().items(), 1):
        lines.append(f"{number}. {text}")
    lines += [
        "",
        "## 3. Privacy budget",
        "",
        (_stream_text(budget, content["stream"]) if "stream" in content else
           f"Scope `{budget['scope']}` in ledger `{budget['ledger']}` admitted this run (ledger run {budget['run_id']}) "
           f"before any event was read, and was debited once, with the composition of every event above, when the "
           f"outputs were complete, immediately before they were published. "
           + (f"Scope `{budget['scope']}` holds a budget per period, and this debit was charged to each period the "
              f"job's windows overlap: {_periods_text(budget['periods'])}. " if budget.get("periods") else ""))
        + (f"{budget['note'][0].upper()}{budget['note'][1:]}. " if budget.get("note") else "")
        + f"The accountant's tightest valid bound for the whole job is epsilon = {plan.epsilon:.6g} at "
        f"delta = {plan.delta:g} (target epsilon {job.privacy.epsilon:g}):",
        "",
        "```",
        str(plan.calibrated.explanation),
        "```",
        "",
    ]
    after = budget["scope_after"]
    if after:
        state = ", ".join(f"{k} = {v:.6g}" if isinstance(v, float) else f"{k} = {v}" for k, v in after["state"].items())
        lines += [f"Scope after this run's debit: {after['rule']} State: {state}.", ""]
    lines += ["## 4. Outputs", "", "| release | rows | file |", "| --- | --- | --- |"]
    for name, info in content["releases"].items():
        lines.append(f"| {name} | {info['rows']} | `{info['file']}` |")
    lines.append("")
    lines.append("Only the released rows are counted here; the number of input events is private and is not reported.")
    pending = content.get("streaming", {}).get("windows_pending")
    if pending:
        waiting = ", ".join(f"{name}: {count}" for name, count in pending.items())
        lines += ["", f"The streaming run stopped at its time bound before these windows were released ({waiting}); "
                      "they are not in the files above."]
    if content["chart"]:
        lines += ["", f"![released series]({content['chart']})", "", _chart_caption()]
    lines += ["", "## 5. Timings", "", "| step | seconds |", "| --- | --- |"]
    lines += [f"| {name.removesuffix('_s')} | {value:.3f} |" for name, value in content["timings_s"].items()]
    return "\n".join(lines) + "\n"


def _unit_text(job: Job) -> str:
    """The neighbouring relation in plain words."""
    column, period = job.input.user, job.privacy.unit_period
    if period is None:
        return (f"The privacy unit is one value of `{column}` over the whole range: two inputs are neighbours when "
                f"they differ in all records of one `{column}`, and the budget below covers all its windows together.")
    starts = (f"periods start at {iso(job.window.start)}" if period.seconds is not None
              else "periods run from local midnight to local midnight")
    return (f"The privacy unit is one value of `{column}` during one {period.text} period ({starts}): two inputs are neighbours when they differ in all records of one `{column}` "
            f"within one period, and the budget below holds per period, renewing each period. A `{column}` active in "
            f"d periods is protected for each period separately; for all its records together it is protected as a "
            f"group of d units (epsilon up to d times larger, delta larger still).")


def _stream_text(budget: dict[str, Any], stream: dict[str, Any]) -> str:
    """How a stream paid: per period, or per window on a plain scope, as its windows were released, or its whole
    plan once, when it opened (prepaid)."""
    if stream.get("prepaid") is not None:
        published = stream["windows_debited"]
        return (f"Scope `{budget['scope']}` in ledger `{budget['ledger']}` holds one budget, and this job is stream "
                f"{stream['stream']} (session {stream['session']}): its windows are not separate rounds the scope's "
                f"filter prices at no extra cost one at a time, so the stream paid its whole plan (the composition "
                f"of every event above) once, when it opened, and then published each window as it was released, "
                f"once, journaled in the ledger. Windows published so far: {len(published)}"
                + (f" ({published[0]} .. {published[-1]})" if published else "") + ". "
                + _skipped_text(stream))
    if stream.get("pays") == "window":
        debited, refused = stream["windows_debited"], stream["windows_refused"]
        monitors = stream.get("monitors") or []
        return (f"Scope `{budget['scope']}` in ledger `{budget['ledger']}` holds one budget, and this job is stream "
                f"{stream['stream']} (session {stream['session']}): its windows are independent rounds of the scope's "
                f"filter, so each window was debited once, with the events above (one window's mechanisms), when it "
                f"was about to be published, from inside the pipeline; a window is published only after its debit. Windows debited so far: "
                f"{len(debited)}" + (f" ({debited[0]} .. {debited[-1]})" if debited else "") + ". "
                + (f"Windows refused (not published): {_period_list(list(refused))}. " if refused else "")
                + (f"The budget of svt monitor(s) {', '.join(monitors)} was debited once, when the monitor was first "
                   f"opened on the scope (by this stream or an earlier run), never per window; its state is sealed "
                   f"in the ledger after each window, before that window's alert is published, so a resumed stream "
                   f"continues it. " if monitors else ""))
    debited, refused = stream["periods_debited"], stream["periods_refused"]
    return (f"Scope `{budget['scope']}` in ledger `{budget['ledger']}` holds a budget per period, and this job is "
            f"stream {stream['stream']} (session {stream['session']}): each period was debited once, with the "
            f"composition of every event above, when the first window overlapping it was about to be published, "
            f"from inside the pipeline; a window is published only after every period it overlaps was debited. "
            f"Periods debited so far: {_period_list(debited)}. "
            + (f"Periods refused (their windows were not published): {_period_list([int(k) for k in refused])}. "
               if refused else "")
            + _skipped_text(stream))


def _skipped_text(stream: dict[str, Any]) -> str:
    skipped = stream.get("windows_skipped") or []
    return (f"Windows not released because the stream resumed in the middle of a period whose cross-window bounds "
            f"or peaks it cannot continue: {', '.join(str(i + 1) for i in skipped)}. " if skipped else "")


def _period_list(starts: list[Any]) -> str:
    return ", ".join(str(s) for s in starts) if starts else "none"


def _periods_text(periods: dict[str, Any]) -> str:
    count, grid = periods["count"], PeriodGrid.from_dict(periods)
    return f"{periods['start']} to {periods['end']} ({count} period{'s' if count != 1 else ''} of {grid.text})"



def _chart_caption() -> str:
    return (
        f"Error bars and bands: released value +- {Z_95:.2f} noise standard deviations (95% of the noise alone); "
        "contribution bounding can also lower the values."
    )


# -- chart.png -------------------------------------------------------------------------------------


def chart_png(context: RunContext, tables: dict[str, pa.Table], path: str) -> str | None:
    """One panel per release that has a series to show; None when no release has one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(r, tables[r.name]) for r in context.plan.releases if tables[r.name].num_rows]
    drawers = [(r, t, _DRAWERS[r.spec.kind]) for r, t in panels if r.spec.kind in _DRAWERS]
    if not drawers:
        return None
    figure, axes = plt.subplots(len(drawers), 1, figsize=(11, 3.6 * len(drawers)), squeeze=False)
    for axis, (release, table, draw) in zip(axes[:, 0], drawers):
        draw(axis, release, table, context)
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=110)
    plt.close(figure)
    write_bytes(path, image.getvalue())
    return path


def _times(table: pa.Table, column: str) -> np.ndarray:
    """An ISO-string or timestamp column as numpy datetime64 (UTC)."""
    values = table.column(column)
    if pa.types.is_timestamp(values.type):
        return values.cast(pa.timestamp("us")).to_numpy(zero_copy_only=False)
    return np.array([np.datetime64(v.replace("+00:00", "")) for v in values.to_pylist()], dtype="datetime64[us]")


def _draw_histogram(axis, release, table: pa.Table, context: RunContext) -> None:
    """The three partitions with the largest released totals, each with 95% noise error bars."""
    times = _times(table, "window_start")
    partitions = np.asarray(table.column("partition").to_pylist(), dtype=object)
    values = table.column("value").to_numpy(zero_copy_only=False).astype(float)
    names, inverse = np.unique(partitions, return_inverse=True)
    totals = np.bincount(inverse, weights=values, minlength=names.size)
    half = Z_95 * release.noise_stddev
    for index in np.argsort(-totals, kind="stable")[:3]:
        chosen = inverse == index
        order = np.argsort(times[chosen])
        x, y = times[chosen][order], values[chosen][order]
        line = axis.plot(x, y, linewidth=0.9, alpha=0.85, label=str(names[index]))[0]
        axis.errorbar(x, y, yerr=half, fmt="o", markersize=3, color=line.get_color(), elinewidth=1.0,
                      errorevery=max(1, x.size // 24), capsize=3, markevery=max(1, x.size // 24))
    axis.set_title(f"{release.name}: released value per window, three largest partitions (bars: 95% noise interval)")
    axis.set_ylabel("noisy value")
    axis.legend(loc="upper left", ncol=3, fontsize="small")
    axis.grid(alpha=0.3)


def _draw_topk(axis, release, table: pa.Table, context: RunContext) -> None:
    """How many windows each partition was released in the top k."""
    partitions = np.asarray(table.column("partition").to_pylist(), dtype=object)
    names, counts = np.unique(partitions, return_counts=True)
    order = np.argsort(-counts, kind="stable")[:20]
    axis.bar([str(n) for n in names[order]], counts[order], color="tab:blue")
    windows = len(set(table.column("window_start").to_pylist()))
    axis.set_title(f"{release.name}: windows (of {windows}) in which each partition was in the released top {release.spec.k}")
    axis.set_ylabel("windows")
    axis.tick_params(axis="x", labelrotation=60, labelsize="small")
    axis.grid(alpha=0.3, axis="y")


def _draw_peak(axis, release, table: pa.Table, context: RunContext) -> None:
    """The window chosen in each period, as a timeline."""
    periods = _times(table, "period_start")
    chosen = _times(table, "window_start")
    offset_days = (chosen - periods) / np.timedelta64(1, "D")
    axis.stem(periods, offset_days + 1, basefmt=" ")
    axis.set_title(f"{release.name}: window released as the peak of each period (day within the period)")
    axis.set_ylabel("day of period")
    axis.grid(alpha=0.3)


def _draw_svt(axis, release, table: pa.Table, context: RunContext) -> None:
    """The monitor over time: alert windows as marks, and the window where it halted, if it did."""
    times = _times(table, "window_start")
    order = np.argsort(times)
    times = times[order]
    alerts = np.asarray(table.column("alert").to_pylist(), dtype=bool)[order]
    halted = np.asarray(table.column("halted").to_pylist(), dtype=bool)[order]
    axis.plot(times, np.zeros(times.size), color="lightgray", linewidth=6, solid_capstyle="butt",
              label=f"{times.size} windows answered")
    axis.scatter(times[alerts], np.zeros(int(alerts.sum())), marker="v", color="tab:red", s=60, zorder=3,
                 label=f"alert ({int(alerts.sum())})")
    if halted.any():
        axis.axvline(times[np.argmax(halted)], color="black", linestyle="--", label="halted: budget exhausted")
    axis.set_yticks([])
    axis.set_title(f"{release.name}: threshold alerts per window (threshold {release.spec.threshold:g} of the "
                   f"normalised {release.spec.metric})")
    axis.legend(loc="upper right", fontsize="small")
    axis.grid(alpha=0.3, axis="x")


def _draw_quantiles(axis, release, table: pa.Table, context: RunContext) -> None:
    """The three partitions released in the most windows: each quantile's released value over time."""
    times = _times(table, "window_start")
    partitions = np.asarray(table.column("partition").to_pylist(), dtype=object)
    levels = table.column("quantile").to_numpy(zero_copy_only=False).astype(float)
    values = table.column("value").to_numpy(zero_copy_only=False).astype(float)
    names, counts = np.unique(partitions, return_counts=True)
    styles = ("-", "--", ":", "-.")
    for index in np.argsort(-counts, kind="stable")[:3]:
        colour = None
        for position, level in enumerate(release.spec.quantiles):
            chosen = (partitions == names[index]) & (levels == level)
            order = np.argsort(times[chosen])
            line = axis.plot(times[chosen][order], values[chosen][order], styles[position % len(styles)], color=colour,
                             linewidth=1.0, marker="o", markersize=2.5, label=f"{names[index]} q={level:g}")[0]
            colour = line.get_color()
    axis.set_title(f"{release.name}: released quantiles per window, three partitions released most often "
                   f"(grid step {release.step:.4g})")
    axis.set_ylabel("value")
    axis.legend(loc="upper left", ncol=3, fontsize="small")
    axis.grid(alpha=0.3)


_DRAWERS = {"histogram": _draw_histogram, "topk": _draw_topk, "peak": _draw_peak, "svt": _draw_svt,
            "quantiles": _draw_quantiles}
