"""Fault injection for the double: error responses, latency, watch drops/freezes, forced 410s.

Driven from Python (``server.faults``) or over HTTP at ``/debug/faults`` (GET shows, POST sets,
DELETE clears). A POST body is a JSON object with any of:

- ``errors``: list of rules ``{"status": 409|429|500, "rate": 0..1, "method": "PUT",
  "path": "<regex searched in the URL path>",
  "query": "<regex searched in the query string, e.g. watch=1>", "times": N, "retryAfter": seconds}`` (rate defaults to 1;
  without method/path a rule matches every API request; ``times`` limits how often it fires);
- ``latency``: seconds added before every API request;
- ``freezeWatches``: true to keep watch streams open but send nothing (not even bookmarks);
- ``expireNextWatches``: N watches answered with one ERROR 410 Expired event;
- ``dropWatches``: true to close every open watch stream now (one-shot action);
- ``compact``: true to drop the event history now (older resourceVersions become 410).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from . import errors
from .errors import ApiError

JSON = dict[str, Any]


@dataclass
class ErrorRule:
    """Answer matching requests with ``status`` (409, 429 or 500) with probability ``rate``."""

    status: int
    rate: float = 1.0
    method: str | None = None
    path: str | None = None
    times: int | None = None
    retry_after: int = 1
    query: str | None = None
    fired: int = 0
    _re: re.Pattern[str] | None = field(default=None, repr=False)
    _query_re: re.Pattern[str] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.status not in (409, 429, 500):
            raise ValueError(f"unsupported fault status {self.status} (409, 429 or 500)")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError("rate must be within 0..1")
        self._re = re.compile(self.path) if self.path else None
        self._query_re = re.compile(self.query) if self.query else None

    def matches(self, method: str, path: str, query: str = "") -> bool:
        """Whether this rule applies to ``method path?query`` (ignoring rate and times)."""
        if self.times is not None and self.fired >= self.times:
            return False
        if self.method and self.method.upper() != method.upper():
            return False
        if self._query_re is not None and not self._query_re.search(query):
            return False
        return not (self._re is not None and not self._re.search(path))

    def error(self, path: str) -> ApiError:
        """The Status error this rule answers with."""
        if self.status == 429:
            return errors.too_many_requests(self.retry_after)
        if self.status == 409:
            return errors.ApiError(
                409, "Conflict",
                f"Operation cannot be fulfilled on {path}: {errors.MODIFIED_MSG}",
            )
        return errors.internal_error("injected fault")

    def to_json(self) -> JSON:
        """The rule as the HTTP API shows it."""
        return {"status": self.status, "rate": self.rate, "method": self.method, "path": self.path,
                "query": self.query, "times": self.times, "retryAfter": self.retry_after, "fired": self.fired}


@dataclass
class Faults:
    """Current fault configuration (all off by default)."""

    rules: list[ErrorRule] = field(default_factory=list)
    latency: float = 0.0
    freeze_watches: bool = False
    expire_next_watches: int = 0
    rng: random.Random = field(default_factory=random.Random, repr=False)

    def add_error(self, status: int, *, rate: float = 1.0, method: str | None = None, path: str | None = None,
                  times: int | None = None, retry_after: int = 1, query: str | None = None) -> ErrorRule:
        """Add an error rule; returns it (its ``fired`` counts hits)."""
        rule = ErrorRule(status, rate, method, path, times, retry_after, query)
        self.rules.append(rule)
        return rule

    def pick_error(self, method: str, path: str, query: str = "") -> ApiError | None:
        """The injected error for this request, if any rule fires."""
        for rule in self.rules:
            if rule.matches(method, path, query) and (rule.rate >= 1.0 or self.rng.random() < rule.rate):
                rule.fired += 1
                return rule.error(path)
        return None

    def take_expired_watch(self) -> bool:
        """Consume one forced-410 watch, if any."""
        if self.expire_next_watches > 0:
            self.expire_next_watches -= 1
            return True
        return False

    def clear(self) -> None:
        """Turn every fault off."""
        self.rules.clear()
        self.latency = 0.0
        self.freeze_watches = False
        self.expire_next_watches = 0

    def to_json(self) -> JSON:
        """The configuration as ``GET /debug/faults`` returns it."""
        return {
            "errors": [r.to_json() for r in self.rules],
            "latency": self.latency,
            "freezeWatches": self.freeze_watches,
            "expireNextWatches": self.expire_next_watches,
        }

    def update_from_json(self, body: JSON) -> None:
        """Apply a ``POST /debug/faults`` body (actions dropWatches/compact are the caller's).

        Raises ValueError on a malformed body.
        """
        for r in body.get("errors") or []:
            self.add_error(int(r["status"]), rate=float(r.get("rate", 1.0)), method=r.get("method"),
                           path=r.get("path"), times=r.get("times"), retry_after=int(r.get("retryAfter", 1)),
                           query=r.get("query"))
        if "latency" in body:
            self.latency = float(body["latency"])
        if "freezeWatches" in body:
            self.freeze_watches = bool(body["freezeWatches"])
        if "expireNextWatches" in body:
            self.expire_next_watches = int(body["expireNextWatches"])
