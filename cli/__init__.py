"""The ``specgen`` command: plan, build, doctor, bench, serve-bench, generate, draft-vocab.

Each subcommand lives in its own module with a ``register(sub)`` that adds
its parser; bad input is a one-line error and exit status 2, never a
traceback::

    $ specgen plan --boundary nope
    specgen: error: unknown boundary 'nope' ...

Output whose reader stops early (``specgen plan ... | head -1``) ends quietly,
with status 141.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import bench, build, doctor, draft_vocab, generate, plan, serve_bench
from .common import Parser, UsageError

COMMANDS = (plan, build, doctor, bench, serve_bench, generate, draft_vocab)
BROKEN_PIPE = 141  # the status of a command its reader stopped reading (128 + SIGPIPE, as a shell reports it)


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
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a reader that went away (``| head``) shows here, not at the interpreter's exit
        return code
    except BrokenPipeError:
        _stdout_to_devnull()
        return BROKEN_PIPE
    except (UsageError, LookupError) as e:
        print(f"specgen: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specgen: interrupted", file=sys.stderr)
        return 130


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null: what is still buffered for the reader that left is dropped quietly at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file descriptor (captured): nothing is flushed to a pipe
        pass


if __name__ == "__main__":
    sys.exit(main())
