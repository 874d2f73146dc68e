"""``python -m banlieue.testing.apiserver --port PORT [--host 127.0.0.1] [--crd-dir DIR]``.

Prints the base URL on stdout (one line, flushed) once listening, then serves until SIGINT or
SIGTERM. Bad flags exit 2 with argparse's usage and one ``error:`` line; an address it cannot
listen on (port in use, host not local or unknown) exits 1 with one line
``python -m banlieue.testing.apiserver: error: cannot listen on HOST:PORT: <reason>``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

import structlog

from banlieue.testing.argtypes import at_least_one, port_number, positive_seconds

from .server import ApiServer

PROG = "python -m banlieue.testing.apiserver"


class ListenError(Exception):
    """The listener could not be opened; ``str(err)`` is ``cannot listen on HOST:PORT: <reason>``."""


def _reason(err: OSError) -> str:
    # asyncio wraps a bind failure as "[Errno 98] error while attempting to bind on address
    # ('127.0.0.1', 80): address already in use"; the errno's own text says it in one phrase.
    # getaddrinfo errors (unknown host) have negative codes: their strerror is the text.
    if err.errno is not None and err.errno > 0:
        return os.strerror(err.errno)
    return err.strerror or str(err)


async def _serve(args: argparse.Namespace) -> None:
    """Serve until SIGINT/SIGTERM. Raises ListenError when ``args.host:args.port`` cannot be bound."""
    server = ApiServer(bookmark_interval=args.bookmark_interval, request_log_size=args.request_log_size)
    if args.crd_dir:
        server.load_crd_dir(args.crd_dir)
    try:
        url = await server.start(args.host, args.port)
    except OSError as err:
        await server.stop()
        raise ListenError(f"cannot listen on {args.host}:{args.port}: {_reason(err)}") from None
    print(url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()


def existing_directory(text: str) -> Path:
    """A path naming an existing directory."""
    path = Path(text).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"must be an existing directory, got {text!r}")
    return path


def main(argv: list[str] | None = None) -> int:
    """Parse flags and serve; returns the exit code (1: cannot listen). Bad flags: SystemExit(2)."""
    p = argparse.ArgumentParser(prog=PROG, description=__doc__)
    p.add_argument("--port", type=port_number, default=0, help="TCP port 0-65535 (0 = pick a free one)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--crd-dir", type=existing_directory, default=None,
                   help="directory of CustomResourceDefinition YAML files to preload")
    p.add_argument("--bookmark-interval", type=positive_seconds, default=60.0,
                   help="seconds between watch bookmarks, > 0 (default 60)")
    p.add_argument("--request-log-size", type=at_least_one, default=100_000,
                   help="requests kept in the request log served at /debug/requests (default 100000)")
    args = p.parse_args(argv)
    # stdout carries only the URL line; logs go to stderr.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    try:
        asyncio.run(_serve(args))
    except ListenError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
