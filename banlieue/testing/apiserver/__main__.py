"""``python -m banlieue.testing.apiserver --port PORT [--host 127.0.0.1] [--crd-dir DIR]``.

Prints the base URL on stdout (one line, flushed) once listening, then serves until SIGINT or
SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import structlog

from .server import ApiServer


async def _serve(args: argparse.Namespace) -> None:
    server = ApiServer(bookmark_interval=args.bookmark_interval, request_log_size=args.request_log_size)
    if args.crd_dir:
        server.load_crd_dir(args.crd_dir)
    url = await server.start(args.host, args.port)
    print(url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Parse flags and serve; returns the exit code."""
    p = argparse.ArgumentParser(prog="python -m banlieue.testing.apiserver", description=__doc__)
    p.add_argument("--port", type=int, default=0, help="TCP port (0 = pick a free one)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--crd-dir", default=None, help="directory of CustomResourceDefinition YAML files to preload")
    p.add_argument("--bookmark-interval", type=float, default=60.0, help="seconds between watch bookmarks")
    p.add_argument("--request-log-size", type=_positive, default=100_000,
                   help="requests kept in the request log served at /debug/requests (default 100000)")
    args = p.parse_args(argv)
    # stdout carries only the URL line; logs go to stderr.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
