"""How a stored object is shown through one served API version."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from . import events
from .resources import ResourceType

JSON = dict[str, Any]


def present(rt: ResourceType, obj: JSON) -> JSON:
    """``obj`` as served at ``rt``'s version.

    Custom resources use conversion strategy None (only apiVersion changes); events convert
    between the core/v1 and events.k8s.io/v1 shapes. Returns ``obj`` itself when nothing changes.
    """
    if rt.plural == "events" and rt.builtin:
        return events.convert(obj, rt.api_version)
    if obj.get("apiVersion") != rt.api_version:
        obj = dict(obj)
        obj["apiVersion"] = rt.api_version
    return obj


def wants_table(request: web.Request) -> bool:
    """Whether the Accept header asks for a meta.k8s.io Table."""
    accept = request.headers.get("Accept", "")
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def json_response(body: JSON, status: int = 200, headers: CIMultiDict[str] | None = None) -> web.Response:
    """Compact JSON with ``Content-Type: application/json``."""
    return web.Response(body=json.dumps(body, separators=(",", ":")).encode(), status=status,
                        content_type="application/json", headers=headers)


def wants_partial_metadata(request: web.Request) -> bool:
    """Whether the Accept header asks for meta.k8s.io PartialObjectMetadata(List)."""
    accept = request.headers.get("Accept", "")
    return "as=PartialObjectMetadata" in accept and "g=meta.k8s.io" in accept


def partial_metadata(obj: JSON) -> JSON:
    """``obj`` reduced to a meta.k8s.io/v1 PartialObjectMetadata (metadata only)."""
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}
