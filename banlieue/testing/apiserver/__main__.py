"""``python -m banlieue.testing.apiserver --port PORT [--host 127.0.0.1] [--crd-dir DIR] [--state-file FILE]``.

Prints the base URL on stdout (one line, flushed) once listening, then serves until SIGINT or
SIGTERM. With ``--state-file`` the objects outlive the process (``banlieue dev --keep-state``):
loaded from FILE at start when it exists, written to it every ``--save-interval`` seconds when
something changed and at SIGINT/SIGTERM (atomically: a kill loses at most the last interval's
writes, never the file). An unreadable FILE exits 1 with one line. Bad flags exit 2 with argparse's usage and one ``error:`` line; an address it cannot
listen on (port in use, host not local or unknown) exits 1 with one line
``python -m banlieue.testing.apiserver: error: cannot listen on HOST:PORT: <reason>``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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


def _restore(server: ApiServer, state: Path) -> None:
    """Load ``state`` into ``server`` when the file exists (a line on stderr says how many
    objects). Raises ListenError (exit 1, one line) when it cannot be read or is not a snapshot."""
    if not state.exists():
        return
    try:
        restored = server.restore(state)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ListenError(f"cannot restore --state-file {state}: {err}") from None
    print(f"restored {restored} objects from {state}", file=sys.stderr, flush=True)


async def _serve(args: argparse.Namespace) -> None:
    """Serve until SIGINT/SIGTERM. Raises ListenError when ``args.host:args.port`` cannot be bound."""
    server = ApiServer(bookmark_interval=args.bookmark_interval, request_log_size=args.request_log_size)
    state: Path | None = args.state_file
    if state is not None:
        _restore(server, state)
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
    saved = -1
    try:
        while not stop.is_set():
            if state is not None and server.store.rv != saved:
                saved = server.store.rv
                server.save(state)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=args.save_interval)
    finally:
        await server.stop()
        if state is not None:
            server.save(state)


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
    p.add_argument("--state-file", type=Path, default=None,
                   help="keep the objects in this JSON file: loaded at start, saved while serving and at exit")
    p.add_argument("--save-interval", type=positive_seconds, default=2.0,
                   help="seconds between saves of --state-file when something changed, > 0 (default 2)")
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
