"""`dpstream budget`: create budget scopes, debit them and show what they spent.

Period scopes (`init --unit-period 1d`) hold the budget of each period
(period k covers [k P, (k+1) P) seconds since 1970-01-01T00:00:00Z); a spend on
one names the periods it touches (`spend --periods START..END`) and is charged
to every one of them (`accounting.ledger`, "Period scopes").

Exit codes: 0 done (spend: admitted), 3 spend refused by the scope's filter,
2 bad input or ledger error (one line on stderr, nothing written).
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from datetime import datetime
from zoneinfo import ZoneInfo

from dpstream.accounting.calendar import calendar_length
from dpstream.accounting.event_spec import KINDS, parse_event
from dpstream.accounting.events import InvalidEventError, SelfComposed
from dpstream.accounting.filters import SCOPE_FILTERS
from dpstream.accounting.filters.base import terms_text
from dpstream.accounting.ledger import (
    DEFAULT_URL,
    LEDGER_ENV,
    Ledger,
    LedgerError,
    MonitorView,
    PeriodGrid,
    Periods,
    PeriodsView,
    PrivacyUnit,
    ScopeView,
)
from dpstream.accounting.text import instant_text
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.config.jobfile import JobFileError
from dpstream.pipelines.config.times import duration_seconds  # the job file's duration grammar ("1d", "6h", ...)
from dpstream.pipelines.run.errors import EXIT_ERROR, EXIT_REFUSED

FILTER_HELP = (
    "admission rule of the scope (default: pure when --delta is 0, else approx). "
    "pure: epsilons of releases add up to at most EPSILON. "
    "approx: each release costs the epsilon the accountant computes for it at a per-release delta share "
    "(option release_delta, default DELTA/10; releases of pure and approx events cost their summed epsilon and delta instead); epsilons and deltas add up. "
    "zcdp, gdp, gdp-residue: releases' rho or GDP mu must fit the largest value that implies (EPSILON, DELTA); "
    "best for many Gaussian releases. whitehouse: every event priced in zCDP (option conversion_delta, "
    "default DELTA/2); halts for good at the first refusal. Options as KIND:NAME=VALUE, "
    "e.g. approx:release_delta=1e-8. Choices: " + ", ".join(SCOPE_FILTERS)
)


def register(subparsers) -> None:
    budget = subparsers.add_parser(
        "budget",
        help="manage privacy-budget scopes in the ledger",
        description=(
            "Manage privacy-budget scopes. Every release debits its scope; the scope's filter, a rule valid for "
            f"adaptively chosen releases, admits or refuses it. Ledger: --ledger, else ${LEDGER_ENV}, "
            f"else {DEFAULT_URL} (created owner-only). PostgreSQL: postgresql://USER@HOST/DB."
        ),
    )
    budget.set_defaults(handler=lambda args: _usage(budget))
    actions = budget.add_subparsers(dest="budget_command", metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--ledger", metavar="URL", help=f"ledger database URL (default: ${LEDGER_ENV} or {DEFAULT_URL})")
    common.add_argument("--scope", required=True, help="budget scope name")

    init = actions.add_parser(
        "init", parents=[common], help="create a scope with a total (epsilon, delta)",
        description="Create a budget scope: a dataset and privacy unit with a total (epsilon, delta) that every "
                    "release on it is debited from, under an admission rule (--filter). A scope is never reset or "
                    "replaced: init refuses a name that exists. With delta > 0 the default filter is approx, which "
                    "prices each run at release_delta (default a tenth of DELTA, so that ten runs fit); a job whose "
                    "own delta is larger costs more epsilon there: give --filter approx:release_delta=JOB_DELTA.")
    init.add_argument("--epsilon", type=float, required=True, help="total epsilon of the scope (> 0)")
    init.add_argument("--delta", type=float, required=True, help="total delta of the scope, in [0, 1)")
    init.add_argument("--filter", metavar="F", help=FILTER_HELP)
    init.add_argument(
        "--unit-period", metavar="LENGTH",
        help="make a period scope for jobs with [privacy] unit_period: EPSILON, DELTA and the filter are the budget "
             "of each period of this length: a duration (\"1d\", \"6h\", \"30m\" or seconds, a whole number of "
             "seconds; period k covers [k P, (k+1) P) seconds since 1970-01-01T00:00:00Z) or a calendar length "
             "(\"1day\", \"1week\", \"1month\", \"1year\": local days, ISO weeks, months or years in --timezone); "
             "a daily job's runs over new days spend new budgets and a re-run over the same days is charged to "
             "them again",
    )
    init.add_argument(
        "--timezone", metavar="ZONE", default="UTC",
        help="the IANA time zone of a calendar --unit-period, e.g. America/New_York (default UTC); it must be the "
             "jobs' [input] timezone",
    )
    init.add_argument(
        "--unit", choices=["user"],
        help="fix the privacy unit of a scope without --unit-period now: \"user\" (a user over all its records) "
             "refuses every user x period job. Without it the scope's first job fixes its unit (user, or user x "
             "its unit_period grid), and jobs of another unit or grid are refused; a scope with --unit-period "
             "serves user x its periods",
    )
    init.set_defaults(handler=_init)

    show = actions.add_parser(
        "show", parents=[common], help="show a scope's budget and what it has spent",
        description="Show a scope: its total (epsilon, delta), its filter's rule and state, what is left (in the "
                    "filter's units), its release count and its svt monitors (running or halted, and the run leasing "
                    "each). A period scope shows its period length and the most spent in any one period. Reads "
                    "without taking the ledger's write lock.")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_show)

    spend = actions.add_parser(
        "spend",
        parents=[common],
        help="debit a release; exit 0 when admitted, 3 when refused",
        description="Debit one release. EVENT is KIND:NAME=VALUE,...; kinds: " + ", ".join(sorted(KINDS)) + ".",
    )
    spend.add_argument("--event", required=True, metavar="KIND:PARAMS", help="the release's privacy event")
    spend.add_argument("--count", type=int, default=1, help="the event runs N times in this release (default 1)")
    spend.add_argument("--label", required=True, help="what the release is, e.g. the job and date")
    spend.add_argument(
        "--periods", metavar="START..END",
        help="period scopes only, and required there: the time range [START, END) of the records the release read, "
             "as ISO dates or date-times (UTC unless an offset is given), e.g. 2013-01-01..2013-01-08; the release "
             "is charged to every period that overlaps it. A single START names the period that contains it",
    )
    spend.set_defaults(handler=_spend)

    history = actions.add_parser(
        "history", parents=[common], help="list a scope's releases, runs and streams with their outcomes",
        description="List a scope's debits and runs, oldest first. A run's outcome is published (debited), "
                    "running (it holds a lease), failed, expired (killed: its lease ran out), refused or released; "
                    "only published runs and `budget spend` releases were debited. A stream (a streaming job that pays "
                    "as it releases) is listed with its state (streaming, stopped: resumable, finished) and the "
                    "periods (or windows, on a plain scope) it paid, one release each, as its windows were released.")
    history.add_argument("--json", action="store_true", help="print JSON")
    history.set_defaults(handler=_history)

    release = actions.add_parser(
        "release", parents=[common], help="end a dead run's lease on its monitors and output",
        description="End the lease of a run that died without ending it (its monitors and output are then free; "
                    "a killed run's lease also ends by itself after --lease-seconds). A running run's outputs were "
                    "never published, so its monitors keep their state from before it. A published run whose "
                    "monitors are still leased (a library pipeline that failed after its debit) needs --force, "
                    "which is right only if that pipeline published nothing.")
    target = release.add_mutually_exclusive_group(required=True)
    target.add_argument("--run", type=int, metavar="N", help="the run whose lease ends (see `budget history`)")
    target.add_argument("--monitor", metavar="NAME",
                        help="a monitor held by a run of a dpstream from before runs were recorded")
    release.add_argument("--force", action="store_true", help="release the monitors of a published run")
    release.set_defaults(handler=_release)

    unit = actions.add_parser(
        "unit", parents=[common], help="declare the privacy unit a plain scope serves",
        description="Declare the privacy unit of a scope without a unit period: a user (--user), or the unit of a job "
                    "file (--job: user, or user x its unit_period on its grid). Needed where the unit is unknown "
                    "(releases from before dpstream recorded units: read `budget history` first and declare the unit "
                    "those jobs used); allowed where it is not fixed yet or only fixed by jobs that never published. "
                    "A unit its releases used is never changed.")
    declared = unit.add_mutually_exclusive_group(required=True)
    declared.add_argument("--user", action="store_true", help="the unit is a user over all time")
    declared.add_argument("--job", metavar="JOB.toml", help="the unit of this job file")
    unit.set_defaults(handler=_unit)

    retire = actions.add_parser(
        "retire", parents=[common], help="end a scope for good: it refuses every later release and run",
        description="Retire a scope: from now on it refuses every release and run, with the date and reason in the "
                    "message. Its record and history stay, and its name cannot be used again, so a scope is never "
                    "silently reset; budget for new data goes in a new scope. Refused while a run holds a lease on "
                    "the scope.")
    retire.add_argument("--reason", required=True, help="why, e.g. 'dataset replaced by flights-2014'")
    retire.set_defaults(handler=_retire)


def _tell(message: str) -> None:
    print(f"dpstream budget: {message}", file=sys.stderr)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return EXIT_ERROR


def _reports(*errors: type[Exception]):
    """Handler decorator: one of `errors` becomes one line on stderr and exit EXIT_ERROR.

    Handlers print only after their last ledger call, so that line is all a failed command writes.
    """

    def decorate(handler):
        @functools.wraps(handler)
        def run(args: argparse.Namespace) -> int:
            try:
                return handler(args)
            except errors as err:
                print(f"dpstream budget {args.budget_command}: {err}", file=sys.stderr)
                return EXIT_ERROR

        return run

    return decorate


def parse_unit_period(text: str, timezone: str) -> PeriodGrid:
    """A period grid from "1d", "6h", "30m", "90s", "2w" (the job file's grammar), a number of seconds, or a
    calendar length ("1day", "1month", ...) in `timezone`."""
    if calendar_length(text) is not None:
        return PeriodGrid.of(text, timezone)
    seconds = duration_seconds(text)
    if math.isnan(seconds):
        try:
            seconds = float(text)
        except ValueError:
            seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise LedgerError(f"--unit-period must be a positive duration such as \"1d\", \"6h\", \"30m\" or seconds, "
                          f"or a calendar length such as \"1day\" or \"1month\", got {text!r}")
    if timezone != "UTC":
        raise LedgerError(f"--timezone applies to calendar periods (\"1day\", \"1month\", ...) only; a "
                          f"{text} period is a fixed number of seconds from 1970-01-01T00:00:00Z")
    return PeriodGrid.of(seconds)


def _instant(text: str, zone: str) -> float:
    """Seconds since the epoch from an ISO date or date-time; local time in `zone` unless the text has an offset."""
    try:
        moment = datetime.fromisoformat(text.strip())  # a date alone is its midnight
    except ValueError:
        raise LedgerError(f"--periods: expected an ISO date or date-time such as 2013-01-01 or "
                          f"2013-01-01T06:00:00Z, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(zone))
    return moment.timestamp()


def parse_periods(text: str, grid: PeriodGrid) -> Periods:
    """`START..END` -> the periods of `grid` overlapping [START, END); `START` -> the period holding it (times
    without an offset are in the grid's time zone)."""
    start_text, dots, end_text = text.partition("..")
    start = _instant(start_text, grid.timezone)
    if not dots:
        first = grid.index(start)
        return Periods(grid, first, first)
    end = _instant(end_text, grid.timezone)
    if not end > start:
        raise LedgerError(f"--periods {text!r}: END must be after START")
    return Periods.overlapping(start, end, grid)


@_reports(LedgerError)
def _init(args: argparse.Namespace) -> int:
    unit_period = None if args.unit_period is None else parse_unit_period(args.unit_period, args.timezone)
    if args.unit is not None and unit_period is not None:
        raise LedgerError("--unit user is for a scope without --unit-period; a period scope serves user x its periods")
    unit = None if args.unit is None else PrivacyUnit()
    with Ledger(args.ledger, create=True, on_wait=_tell) as ledger:
        view = ledger.init_scope(args.scope, args.epsilon, args.delta, args.filter, unit_period=unit_period,
                                 unit=unit)
    if view.unit_period is None:
        print(f"created scope {view.scope!r}: epsilon={view.epsilon:g}, delta={view.delta:g}; {view.rule}")
        release_delta = view.state.get("release_delta")
        if isinstance(release_delta, float) and release_delta < view.delta:
            print(f"  a job is priced at delta={release_delta:g}; a job with a larger delta costs more epsilon here: "
                  f"for jobs with delta D, create the scope with --filter approx:release_delta=D")
    else:
        print(f"created period scope {view.scope!r}: epsilon={view.epsilon:g}, delta={view.delta:g} "
              f"per {view.unit_period.text} period; {view.rule}")
    return 0


@_reports(LedgerError)
def _show(args: argparse.Namespace) -> int:
    with Ledger(args.ledger, on_wait=_tell) as ledger:
        view = ledger.show(args.scope)
        periods = None if view.unit_period is None else ledger.period_states(args.scope)
        left = None if view.unit_period is not None else terms_text(ledger.deciding_filters(args.scope)[0].left_terms())
    if args.json:
        content = view.to_dict()
        print(json.dumps(content if periods is None else {**content, "periods": periods}, indent=2))
        return 0
    if view.periods is not None and view.unit_period is not None:
        _show_periods(view, view.unit_period, view.periods)
        return 0
    print(f"scope {view.scope}: epsilon={view.epsilon:g}, delta={view.delta:g}, filter={view.filter}")
    print(f"  rule: {view.rule}")
    state = ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in view.state.items())
    print(f"  state: {state}")
    print(f"  left: {left}")
    print(f"  releases: {view.releases}{'  (halted)' if view.halted else ''}")
    print(f"  privacy unit: {_unit_text(view)}")
    if view.retired:
        print(f"  retired: {view.retired}")
    for monitor in view.monitors:
        print(f"  {_monitor_line(monitor)}")
    return 0


def _unit_text(view: ScopeView) -> str:
    """The privacy unit the scope serves, and how it was fixed (`accounting.ledger.units`)."""
    if view.unit is None and view.unit_fixed is not None:
        return (f"unknown: releases from before units were recorded (marked {view.unit_fixed}); declare it with "
                f"`dpstream budget unit`")
    if view.unit is None:
        return "not fixed yet (the first job fixes it; jobs of another unit or period grid are then refused)"
    return f"{view.unit.text} (fixed {view.unit_fixed})"


def _monitor_line(monitor: MonitorView) -> str:
    """One monitor of `show`: budget, instances admitted and the delta they used (FSRC), and its status."""
    status = "halted" if monitor.halted else "running"
    if monitor.checked_out is not None:
        until = ("until its pipeline checks it in" if monitor.lease_until is None or math.isinf(monitor.lease_until)
                 else f"until {instant_text(monitor.lease_until)}")
        status += f", leased to run {monitor.checked_out} {until}"
    if monitor.stream is not None:
        status += f", answered by live stream {monitor.stream} (sealed after each window it publishes)"
    if monitor.legacy_hold is not None:
        status += (f", held by release {monitor.legacy_hold} of an older dpstream (`dpstream budget release "
                   f"--monitor {monitor.name}` ends the hold)")
    used = ""
    if monitor.legacy is not None:
        used = f", {monitor.legacy}"
    elif monitor.delta_used is not None:
        used = f", {monitor.instances} instances admitted using delta={monitor.delta_used:.6g}"
    return f"monitor {monitor.name}: epsilon={monitor.epsilon:g}, delta={monitor.delta:g}{used}, {status}"


def _show_periods(view: ScopeView, grid: PeriodGrid, periods: PeriodsView) -> None:
    """The text of `show` on a period scope: only public figures (filter states, counts), per period at most."""
    each = grid.text if grid.seconds is None else f"{grid.text} ({grid.seconds} s)"
    print(f"scope {view.scope}: epsilon={view.epsilon:g}, delta={view.delta:g} per "
          f"{grid.text} period, filter={view.filter}")
    print(f"  rule: {view.rule}")
    if periods.spent:
        print(f"  periods: {each} each; spent on {periods.spent}, the first "
              f"starting {periods.first}, the last starting {periods.last}")
        largest = ", ".join(f"{k.split('_', 1)[1]}={v:.6g}" for k, v in periods.largest_spent.items())
        print(f"  largest spent in one period: {largest}")
    else:
        print(f"  periods: {each} each; none spent on yet")
    halted = f"; {periods.halted} period(s) halted" if periods.halted else ""
    print(f"  releases: {view.releases}{halted}")
    print(f"  privacy unit: {_unit_text(view)}")
    if view.retired:
        print(f"  retired: {view.retired}")


@_reports(LedgerError, InvalidEventError)
def _spend(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise LedgerError(f"--count must be a positive integer, got {args.count}")
    event = parse_event(args.event)
    if args.count > 1:
        event = SelfComposed(event, args.count)
    with Ledger(args.ledger, on_wait=_tell) as ledger:
        periods = None
        if args.periods is not None:
            grid = ledger.unit_period(args.scope)
            if grid is None:
                raise LedgerError(f"scope {args.scope!r} has one budget for all its releases (no unit period); "
                                  f"--periods applies to scopes created with --unit-period only")
            periods = parse_periods(args.periods, grid)
        result = ledger.spend(args.scope, event, args.label, periods)
    print(result.message)
    return 0 if result.admitted else EXIT_REFUSED


@_reports(LedgerError)
def _history(args: argparse.Namespace) -> int:
    with Ledger(args.ledger, on_wait=_tell) as ledger:
        releases = ledger.history(args.scope)
        runs = ledger.runs_of(args.scope)
        streams = ledger.streams_of(args.scope)
    by_release = {run.release_id: run for run in runs if run.release_id is not None}
    by_stream = {release_id: stream for stream in streams for release_id in stream.debited.values()}
    entries: list[tuple[str, dict, str]] = []  # (time, JSON, line)
    events = json.dumps
    for release in releases:
        run, stream = by_release.get(release.release_id), by_stream.get(release.release_id)
        source = (f"run {run.run_id}" if run is not None else f"stream {stream.stream_id}" if stream is not None
                  else "budget spend")
        charged = "" if release.periods is None else "  periods " + ", ".join(p.describe() for p in release.periods)
        line = (f"release {release.release_id:>5}  {release.time}  published ({source})  {release.label}{charged}  "
                f"{events(release.event.to_dict())}")
        entries.append((release.time, {**release.to_dict(), "outcome": "published",
                                       "run": None if run is None else run.run_id}, line))
    for run in runs:
        if run.release_id is None:
            reason = f": {run.reason}" if run.reason else ""
            line = f"run {run.run_id:>9}  {run.time}  {run.status}{reason}  {run.label}  (not debited)"
            entries.append((run.time, run.to_dict(), line))
    for stream in streams:
        refused = f", {len(stream.refused)} refused" if stream.refused else ""
        line = (f"stream {stream.stream_id:>6}  {stream.created_at}  {stream.status} (session {stream.session}; "
                f"{len(stream.debited)} {stream.pays}{'' if len(stream.debited) == 1 else 's'} debited{refused})  "
                f"{stream.label}  -> {stream.output}")
        entries.append((stream.created_at, stream.to_dict(), line))
    entries.sort(key=lambda entry: entry[0])
    if args.json:
        print(json.dumps([entry for _, entry, _ in entries], indent=2))
    else:
        print("\n".join(line for _, _, line in entries))
    return 0


@_reports(LedgerError)
def _retire(args: argparse.Namespace) -> int:
    with Ledger(args.ledger, on_wait=_tell) as ledger:
        print(ledger.retire_scope(args.scope, args.reason))
    return 0


@_reports(LedgerError, JobFileError)
def _unit(args: argparse.Namespace) -> int:
    if args.user:
        unit, label = PrivacyUnit(), "`dpstream budget unit --user`"
    else:
        job = jobfile.load(args.job)
        unit, label = PrivacyUnit.of(job.privacy.unit_period, job.window.start), f"`dpstream budget unit --job {args.job}`"
    with Ledger(args.ledger, on_wait=_tell) as ledger:
        print(ledger.declare_unit(args.scope, unit, label))
    return 0


@_reports(LedgerError)
def _release(args: argparse.Namespace) -> int:
    with Ledger(args.ledger, on_wait=_tell) as ledger:
        if args.run is not None:
            message = ledger.release_run(args.scope, args.run, args.force)
        else:
            message = ledger.release_monitor(args.scope, args.monitor)
    print(message)
    return 0
