"""The `dpstream` command line.

Each subcommand lives in its own module exposing `register(subparsers)`, which
adds a parser whose `handler(args) -> int` returns the exit code.
"""
from __future__ import annotations

import argparse
import sys
from importlib import metadata

from pipelines import cli_account, cli_budget

SUBCOMMAND_MODULES = (cli_account, cli_budget)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpstream",
        description="Differentially private analytics for time-windowed event streams on Apache Beam.",
    )
    parser.add_argument("--version", action="version", version=f"dpstream {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMAND_MODULES:
        module.register(subparsers)
    return parser


def _version() -> str:
    try:
        return metadata.version("dpstream")
    except metadata.PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
