"""What every subcommand shares: the usage error, the argument parser, number lists."""

from __future__ import annotations

import argparse


class UsageError(Exception):
    """Bad input from the command line: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse whose own errors are ``UsageError`` too (one line, status 2), not an exit."""

    def error(self, message):
        raise UsageError(message)


def int_list(text: str) -> list[int]:
    """``"4,5,6"`` -> [4, 5, 6]; ``"2-4,8"`` -> [2, 3, 4, 8]."""
    out = []
    for part in filter(None, text.split(",")):
        lo, sep, hi = part.partition("-")
        try:
            out += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
        except ValueError:
            raise UsageError(f"not a number list: '{text}' (use 4,5,6 or 2-16)") from None
    return out
