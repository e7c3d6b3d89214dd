"""`dpstream account`: compose events and print the tightest valid (epsilon, delta)."""
from __future__ import annotations

import argparse
import json
import sys

from dpstream.accounting import Accountant
from dpstream.accounting.accountant import UnsupportedEventError
from dpstream.accounting.event_spec import KINDS, parse_event
from dpstream.accounting.events import InvalidEventError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "account",
        help="compose privacy events and report epsilon at a delta",
        description=(
            "Compose privacy events and report the smallest valid epsilon at --delta, "
            "with every candidate bound. EVENT is KIND:NAME=VALUE,...; kinds: "
            + ", ".join(sorted(KINDS))
            + ". Append *N to repeat an event N times, e.g. gaussian:sigma=4*100."
        ),
    )
    parser.add_argument("events", nargs="+", metavar="EVENT")
    parser.add_argument("--delta", type=float, default=1e-6, help="target delta (default 1e-6)")
    parser.add_argument(
        "--nonadaptive",
        action="store_true",
        help="all mechanisms were fixed before any ran (admits non-adaptive-only bounds)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=run)


def _parse_repeated(spec: str):
    body, star, times = spec.rpartition("*")
    if star and times.strip().isdigit():
        return parse_event(body), int(times)
    return parse_event(spec), 1


def run(args: argparse.Namespace) -> int:
    accountant = Accountant(adaptive=not args.nonadaptive)
    try:
        for spec in args.events:
            event, count = _parse_repeated(spec)
            accountant.compose(event, count)
        explanation = accountant.explain(args.delta)
    except (InvalidEventError, UnsupportedEventError, ValueError) as err:
        print(f"dpstream account: {err}", file=sys.stderr)
        return 2
    print(json.dumps(explanation.to_dict(), indent=2) if args.json else explanation)
    return 0
