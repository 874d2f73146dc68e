"""Process-wide logging: structlog for banlieue, the standard library for third-party libraries.

Both go through one ``logging`` handler on stderr so every line has the same shape: one JSON
object per line (``--log-format json``, for log collectors) or a human-readable line
(``--log-format console``). Keys: ``timestamp`` (ISO 8601, UTC), ``level``, ``logger``,
``event``, plus the bound key/values. Never bind credentials or userData (project rule).
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

from banlieue.options import LogFormat, LogLevel

_LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

# Libraries that are chatty at INFO (one line per HTTP request); shown only at debug.
_NOISY = ("aiohttp.access", "urllib3", "asyncio")


class _BanlieueHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marker class so a second configure_logging() replaces its own handler only."""


def configure_logging(log_format: LogFormat, log_level: LogLevel, stream: TextIO | None = None) -> None:
    """Configure structlog and the root stdlib logger; idempotent (a second call replaces the first).

    ``stream`` defaults to ``sys.stderr`` (resolved at call time, so pytest capture works).
    """
    level = _LEVELS[log_level]
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: structlog.types.Processor
    if log_format == "json":
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.format_exc_info)
    else:
        out = stream or sys.stderr
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(level),
        cache_logger_on_first_use=False,
    )
    handler = _BanlieueHandler(stream or sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    ))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _BanlieueHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in _NOISY:
        logging.getLogger(name).setLevel(level if level <= logging.DEBUG else max(level, logging.WARNING))
