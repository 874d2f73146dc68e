"""Kubernetes ``Status`` errors as kube-apiserver writes them on the wire.

Source: apimachinery ``pkg/api/errors`` (NewNotFound, NewAlreadyExists, NewConflict, NewInvalid,
NewBadRequest, NewMethodNotSupported, NewGone/NewResourceExpired, NewTooManyRequests,
NewInternalError) and the API conventions document ("Response Status Kind").
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


class ApiError(Exception):
    """An error answered as a ``meta/v1 Status`` with ``code`` as the HTTP status.

    ``headers`` are extra response headers (e.g. ``Retry-After`` for 429).
    """

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: JSON | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> JSON:
        """The ``Status`` object (kind, apiVersion, status Failure, message, reason, details, code)."""
        out: JSON = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            out["details"] = self.details
        return out


def _details(name: str | None, group: str, kind: str) -> JSON:
    """StatusDetails with Go's omitempty: empty name/group are left out."""
    out: JSON = {}
    if name:
        out["name"] = name
    if group:
        out["group"] = group
    out["kind"] = kind
    return out


def qualified(group: str, plural: str) -> str:
    """``plural.group`` as kube names a GroupResource in messages (``configmaps`` for core)."""
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> ApiError:
    """404 NotFound: ``<resource> "<name>" not found``."""
    res = qualified(group, plural)
    return ApiError(
        404, "NotFound", f'{res} "{name}" not found', details=_details(name, group, plural)
    )


def already_exists(group: str, plural: str, name: str) -> ApiError:
    """409 AlreadyExists: ``<resource> "<name>" already exists``."""
    res = qualified(group, plural)
    return ApiError(
        409,
        "AlreadyExists",
        f'{res} "{name}" already exists',
        details=_details(name, group, plural),
    )


MODIFIED_MSG = "the object has been modified; please apply your changes to the latest version and try again"


def conflict(group: str, plural: str, name: str, why: str = MODIFIED_MSG) -> ApiError:
    """409 Conflict: ``Operation cannot be fulfilled on <resource> "<name>": <why>``."""
    res = qualified(group, plural)
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {res} "{name}": {why}',
        details=_details(name, group, plural),
    )


def invalid(group: str, kind: str, name: str, causes: list[JSON]) -> ApiError:
    """422 Invalid: ``<Kind>.<group> "<name>" is invalid: <field>: <message>, ...``.

    ``causes`` are StatusCause dicts (``reason``, ``message``, ``field``); the message joins them
    as apimachinery's ``field.ErrorList.ToAggregate()`` does.
    """
    gk = f"{kind}.{group}" if group else kind
    parts = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    if len(parts) == 1:
        summary = parts[0]
    else:
        summary = "[" + ", ".join(parts) + "]"
    return ApiError(
        422,
        "Invalid",
        f'{gk} "{name}" is invalid: {summary}',
        details={**_details(name, group, kind), "causes": causes},
    )


def bad_request(message: str, causes: list[JSON] | None = None) -> ApiError:
    """400 BadRequest with the message verbatim."""
    return ApiError(400, "BadRequest", message, details={"causes": causes} if causes else None)


def method_not_allowed(group: str, plural: str, method: str) -> ApiError:
    """405 MethodNotAllowed as kube's router answers a verb a path does not serve."""
    del group, plural, method  # kube's message names neither
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource",
                    details={})


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    """415 UnsupportedMediaType as kube's patch handler returns it."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: {', '.join(accepted)}",
    )


def expired(message: str) -> ApiError:
    """410 Expired (``too old resource version`` / stale continue token)."""
    return ApiError(410, "Expired", message)


def gone(message: str) -> ApiError:
    """410 Gone."""
    return ApiError(410, "Gone", message)


def too_many_requests(retry_after: int = 1) -> ApiError:
    """429 TooManyRequests with ``Retry-After`` (seconds), as the API priority and fairness filter."""
    return ApiError(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
        details={"retryAfterSeconds": retry_after},
        headers={"Retry-After": str(retry_after)},
    )


def internal_error(message: str) -> ApiError:
    """500 InternalError: ``Internal error occurred: <message>``."""
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        details={"causes": [{"message": message}]},
    )


def forbidden(group: str, plural: str, name: str, why: str) -> ApiError:
    """403 Forbidden: ``<resource> "<name>" is forbidden: <why>``."""
    res = qualified(group, plural)
    return ApiError(
        403,
        "Forbidden",
        f'{res} "{name}" is forbidden: {why}',
        details=_details(name, group, plural),
    )


def success_status(name: str, group: str, plural: str, uid: str) -> JSON:
    """The ``Status`` Success kube returns on an immediate delete of most builtin kinds."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {**_details(name, group, plural), "uid": uid},
    }


def too_large_resource_version(requested: int, current: int) -> ApiError:
    """504 Timeout for a resourceVersion newer than the server's (storage.NewTooLargeResourceVersionError).

    client-go reflectors relist on it (``apierrors.IsTooLargeResourceVersion``).
    """
    return ApiError(
        504,
        "Timeout",
        f"Too large resource version: {requested}, current: {current}",
        details={"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                 "retryAfterSeconds": 1},
    )
