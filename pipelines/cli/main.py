"""The `dpstream` command line.

Each subcommand lives in its own module exposing `register(subparsers)`, which
adds a parser whose `handler(args) -> int` returns the exit code.
"""
from __future__ import annotations

import argparse
import sys

from dpstream.accounting.text import version
from dpstream.pipelines.cli import account as cli_account
from dpstream.pipelines.cli import budget as cli_budget
from dpstream.pipelines.cli import run as cli_run

SUBCOMMAND_MODULES = (cli_account, cli_budget, cli_run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpstream",
        description="Differentially private analytics for time-windowed event streams on Apache Beam.",
    )
    parser.add_argument("--version", action="version", version=f"dpstream {version()}")
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
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
