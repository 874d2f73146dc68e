"""Structured logging: structlog configured once per process, JSON or console.

Every line carries ``timestamp`` (ISO 8601, UTC), ``level``, ``logger`` and ``event``, plus the
values bound in ``structlog.contextvars`` (the controller binds ``controller``, ``namespace``,
``name`` and ``reconcileID`` around each reconcile). Standard-library logging (aiohttp,
kubernetes-asyncio) is rendered the same way. A redaction processor replaces the values of keys
that name credentials or user data (defence in depth: banlieue never logs them on purpose).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from typing import Any, Literal, TextIO, cast

import structlog
from structlog.typing import EventDict, FilteringBoundLogger, Processor, WrappedLogger

REDACTED = "[REDACTED]"

# Normalised key (lowercase, without "-", "_" and ".") contains one of these: redact.
_SENSITIVE_PARTS = ("password", "passwd", "token", "userdata", "privatekey", "apikey", "credential")
# Normalised key is or ends with "secret" (clientSecret, secret) but not secretName/secretRef.
_SENSITIVE_SUFFIX = "secret"
_NORMALISE = re.compile(r"[-_.]")
_MAX_DEPTH = 6


def is_sensitive_key(key: str) -> bool:
    """Whether a log key names a credential or user data (password, token, userData, user-data,
    a secret value). ``secretName``/``secretRef`` only name a Secret and are kept."""
    norm = _NORMALISE.sub("", key.lower())
    return norm.endswith(_SENSITIVE_SUFFIX) or any(part in norm for part in _SENSITIVE_PARTS)


def _redact_value(value: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        return value
    if isinstance(value, Mapping):
        return {
            k: (REDACTED if isinstance(k, str) and is_sensitive_key(k) else _redact_value(v, depth + 1))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact_value(v, depth + 1) for v in value]
    return value


def redact_sensitive(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """structlog processor: replace values of sensitive keys (see ``is_sensitive_key``) with
    ``[REDACTED]``, also inside nested mappings and lists (up to 6 levels)."""
    for key in list(event_dict):
        if key == "event":
            continue
        if is_sensitive_key(key):
            event_dict[key] = REDACTED
        else:
            value = event_dict[key]
            if isinstance(value, Mapping | list | tuple):
                event_dict[key] = _redact_value(value, 1)
    return event_dict


class NamedPrintLogger(structlog.PrintLogger):
    """A ``PrintLogger`` with a ``name``, so ``add_logger_name`` can write ``logger=<name>``."""

    def __init__(self, file: TextIO, name: str) -> None:
        super().__init__(file)
        self.name = name


class NamedPrintLoggerFactory:
    """structlog logger factory: ``get_logger(name)`` -> ``NamedPrintLogger(file, name)``."""

    def __init__(self, file: TextIO) -> None:
        self._file = file

    def __call__(self, *args: Any) -> NamedPrintLogger:
        return NamedPrintLogger(self._file, str(args[0]) if args else "")


def _shared_processors() -> list[Processor]:
    return [
        structlog.stdlib.add_logger_name,
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_sensitive,
    ]


def configure_logging(fmt: Literal["json", "console"] = "json", level: str = "info") -> None:
    """Configure structlog and the standard ``logging`` root for the process (stderr).

    ``fmt``: ``json`` (one JSON object per line) or ``console`` (human-readable). ``level``:
    ``debug``, ``info``, ``warning``, ``error`` or ``critical`` (case-insensitive). Raises
    ``ValueError`` for an unknown level or format. Loggers are not cached, so a later call (or
    ``structlog.testing.capture_logs``) applies to existing module-level loggers too.
    """
    levelno = logging.getLevelNamesMapping().get(level.upper())
    if levelno is None:
        raise ValueError(f"unknown log level {level!r}")
    renderer: Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    elif fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    else:
        raise ValueError(f"unknown log format {fmt!r}")
    shared = _shared_processors()
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(levelno),
        logger_factory=NamedPrintLoggerFactory(sys.stderr),
        context_class=dict,
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=shared,
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(levelno)


def get_logger(name: str, **initial: Any) -> FilteringBoundLogger:
    """A structlog logger whose lines carry ``logger=<name>`` (once ``configure_logging`` ran)
    and the ``initial`` key/values. Lazy: the configuration in force at each call applies."""
    return cast(FilteringBoundLogger, structlog.get_logger(name, **initial))
