"""argparse for the plain subcommands (``review``, ``compare``): a user's mistake is one line, never a traceback."""

from __future__ import annotations

import argparse


class ArgumentParser(argparse.ArgumentParser):
    """argparse for the plain subcommands: a usage error is one line naming the problem (``prog: ...; see --help``), exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message}; see --help\n")


def positive_int(text: str) -> int:
    """An argparse type: an integer of 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value
