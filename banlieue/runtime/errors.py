"""API errors: the Kubernetes ``Status`` of a failed request as named exception types.

apimachinery ``pkg/api/errors``: the HTTP code plus ``Status.reason`` decide the type
(IsNotFound, IsAlreadyExists, IsConflict, IsInvalid, IsTooManyRequests, IsGone/IsResourceExpired).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class ApiError(Exception):
    """A non-2xx answer from the API server.

    ``status``: HTTP code (0 when no response arrived); ``reason``: ``Status.reason``
    (e.g. "NotFound", "Conflict", "Expired"); ``message``: ``Status.message``; ``body``: the
    decoded ``Status`` object when the server sent one.
    """

    def __init__(self, status: int, reason: str, message: str, body: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body

    @property
    def causes(self) -> list[Mapping[str, Any]]:
        """``Status.details.causes`` (field, reason, message), empty when absent."""
        details = (self.body or {}).get("details") or {}
        return list(details.get("causes") or [])


class NotFound(ApiError):
    """404 NotFound."""


class AlreadyExists(ApiError):
    """409 AlreadyExists (create of an existing name)."""


class Conflict(ApiError):
    """409 Conflict: the resourceVersion precondition failed (optimistic concurrency lost)."""


class Invalid(ApiError):
    """422 Invalid; ``causes`` name the offending fields."""


class TooManyRequests(ApiError):
    """429 TooManyRequests; ``retry_after`` in seconds from the Retry-After header (or
    ``Status.details.retryAfterSeconds``), None when the server gave none."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        body: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(status, reason, message, body)
        self.retry_after = retry_after


class Gone(ApiError):
    """410 Gone / reason Expired: the requested resourceVersion is too old (relist)."""


class ServerError(ApiError):
    """5xx (InternalError, ServiceUnavailable, Timeout) or no response at all (status 0)."""


def _retry_after(headers: Mapping[str, str] | None, body: Mapping[str, Any] | None) -> float | None:
    raw = (headers or {}).get("Retry-After") or (headers or {}).get("retry-after")
    if raw is not None:
        try:
            return max(0.0, float(raw))
        except ValueError:
            return None
    details = (body or {}).get("details") or {}
    seconds = details.get("retryAfterSeconds")
    return float(seconds) if isinstance(seconds, int | float) else None


def from_response(status: int, data: bytes | str | Mapping[str, Any] | None, headers: Mapping[str, str] | None = None) -> ApiError:
    """Build the matching ApiError subclass from an HTTP status, the body (a ``Status`` JSON
    document, raw bytes or already decoded) and the response headers (for Retry-After)."""
    body: Mapping[str, Any] | None = None
    if isinstance(data, Mapping):
        body = data
    elif data:
        try:
            decoded = json.loads(data)
            body = decoded if isinstance(decoded, dict) else None
        except ValueError:
            body = None
    reason = str((body or {}).get("reason") or "")
    message = str((body or {}).get("message") or (data if isinstance(data, str) else "") or "")
    if status == 404:
        return NotFound(status, reason or "NotFound", message, body)
    if status == 409:
        if reason == "AlreadyExists":
            return AlreadyExists(status, reason, message, body)
        return Conflict(status, reason or "Conflict", message, body)
    if status == 422:
        return Invalid(status, reason or "Invalid", message, body)
    if status == 429:
        return TooManyRequests(status, reason or "TooManyRequests", message, body, _retry_after(headers, body))
    if status == 410 or reason in ("Expired", "Gone"):
        return Gone(status, reason or "Gone", message, body)
    if status >= 500 or status == 0:
        return ServerError(status, reason or "InternalError", message, body)
    return ApiError(status, reason or "Unknown", message, body)


def from_status_object(obj: Mapping[str, Any]) -> ApiError:
    """The error carried by a watch ``ERROR`` event's ``Status`` object (apierrors.FromObject)."""
    code = obj.get("code")
    return from_response(int(code) if isinstance(code, int) else 500, obj)
