"""How a stored object is shown through one served API version."""

from __future__ import annotations

from typing import Any

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
