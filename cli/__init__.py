"""The ``specgen`` command: plan, build, doctor, bench.

Each subcommand lives in its own module with a ``register(sub)`` that adds
its parser; bad input is a one-line error and exit status 2, never a
traceback::

    $ specgen plan --boundary nope
    specgen: error: unknown boundary 'nope' ...
"""

from __future__ import annotations

import argparse
import sys

from . import bench, build, doctor, plan
from .common import Parser, UsageError

COMMANDS = (plan, build, doctor, bench)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand."""
    parser = Parser(prog="specgen", description="compile the host bubbles of speculative decoding away")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``specgen`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
        args.cli_argv = list(sys.argv[1:] if argv is None else argv)  # what was asked, for records
        return int(args.func(args) or 0)
    except (UsageError, LookupError) as e:
        print(f"specgen: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specgen: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
