"""argparse ``type=`` validators shared by the project's tools (the API-server double's
``python -m banlieue.testing.apiserver``, ``bench/e2e.py``).

Each raises ``argparse.ArgumentTypeError`` with a message naming the problem: argparse prints it
as ``argument --flag: <message>`` (for any other exception it prints "invalid <function name>
value"), on one line after the usage, and exits 2.
"""

from __future__ import annotations

import argparse
import math


def integer(text: str, what: str) -> int:
    """``text`` as an int; ArgumentTypeError "must be <what>, got '<text>'" otherwise."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def at_least_one(text: str) -> int:
    """An integer >= 1 (a count: VMs, hosts, log entries)."""
    value = integer(text, "an integer >= 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """A finite number of seconds > 0 (nan, inf, 0 and negatives are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text}")
    return value


def port_number(text: str) -> int:
    """A TCP port, 0-65535 (0 = pick a free one)."""
    value = integer(text, "a port number 0-65535")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535, got {value}")
    return value
