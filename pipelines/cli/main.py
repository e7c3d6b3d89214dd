"""The `dpstream` command line.

Each subcommand lives in its own module exposing `register(subparsers)`, which
adds a parser whose `handler(args) -> int` returns the exit code.
"""
from __future__ import annotations

import argparse
import logging
import sys

from dpstream.accounting.text import first_line, version
from dpstream.pipelines.cli import account as cli_account
from dpstream.pipelines.cli import budget as cli_budget
from dpstream.pipelines.cli import run as cli_run
from dpstream.pipelines.run.errors import EXIT_INTERNAL, EXIT_INTERRUPTED

SUBCOMMAND_MODULES = (cli_account, cli_budget, cli_run)
EXIT_CODES = """exit codes:
  0  done
  2  bad job file, input, output directory, runner options or ledger (one line on stderr)
  3  refused by the budget scope (nothing read, published or debited)
  4  a streaming run stopped at --max-seconds before every window of its range was released
  5  unexpected error: run again with --debug for the traceback
  130  interrupted (Ctrl-C)
A run that ends with any code but 0 and 4 published nothing and was not debited, except a stream on a period
scope, whose windows released before a failure stay published and paid (run the job again to resume it)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpstream",
        description="Differentially private analytics for time-windowed event streams on Apache Beam.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"dpstream {version()}")
    parser.add_argument("--debug", action="store_true",
                        help="show library logs (Apache Beam's) and the traceback of an unexpected error")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMAND_MODULES:
        module.register(subparsers)
    return parser



def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    own, beam_args = cli_run.split_beam_args(sys.argv[1:] if argv is None else list(argv))
    args = parser.parse_args(own)
    if beam_args and not getattr(args, "takes_beam_args", False):
        parser.error("arguments after -- are Apache Beam options, accepted by run and demo only")
    args.beam_args = beam_args
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    quiet_libraries(args.debug)
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print(f"dpstream {args.command}: interrupted; an unfinished run published nothing and was not debited",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:  # a bug or an unforeseen runner failure: one line, the traceback under --debug
        if args.debug:
            raise
        print(f"dpstream {args.command}: unexpected error: {type(err).__name__}: {first_line(err)}; run again with "
              f"--debug for the traceback", file=sys.stderr)
        return EXIT_INTERNAL


def quiet_libraries(debug: bool) -> None:
    """Library logs (Beam's start-up warnings, its worker-error lines) are dropped unless `debug`; dpstream's
    own messages are printed, not logged. Called before Beam is imported."""
    root = logging.getLogger()
    if debug:
        logging.basicConfig(level=logging.INFO)
    elif not root.handlers:
        root.addHandler(logging.NullHandler())


if __name__ == "__main__":
    sys.exit(main())
