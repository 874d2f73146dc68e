"""Helpers for runtime integration tests (imported by the test modules and conftest)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from banlieue.runtime.client import Client
from banlieue.runtime.config import Timeouts, config_for_url
from banlieue.runtime.kinds import ResourceKind
from banlieue.testing import apiservers
from banlieue.testing.realtier import skip_double_only

WIDGET = ResourceKind("test.banlieue.io", "v1", "Widget", "widgets")
WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.banlieue.io"},
    "spec": {
        "group": "test.banlieue.io",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [{
            "name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            }}},
        }],
    },
}


def api_url(apiserver: Any) -> str:
    """The double's base URL (the fixture object exposes ``url``)."""
    return str(getattr(apiserver, "url", apiserver)).rstrip("/")


def new_client(apiserver: Any, **kwargs: Any) -> Client:
    return Client(config_for_url(api_url(apiserver)), timeouts=Timeouts(connect=2.0, request=10.0, watch_margin=5.0), **kwargs)


def widget(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": WIDGET.api_version, "kind": "Widget", "metadata": {"name": name, "namespace": namespace},
            "spec": dict(spec)}


class Faults:
    """``/debug/faults`` of the double: ``set(**json)`` POSTs, ``clear()`` DELETEs."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def set(self, **body: Any) -> None:
        """POST ``body``; on the real API server, skip the test naming the faults it injects."""
        if apiservers.selected() == "real":
            skip_double_only(f"fault injection (/debug/faults: {', '.join(sorted(body))})")
        await self.client.request("POST", "/debug/faults", body=body)

    async def clear(self) -> None:
        if apiservers.selected() == "real":
            return
        await self.client.request("DELETE", "/debug/faults")



async def eventually(check: Callable[[], Awaitable[bool]] | Callable[[], bool], timeout: float = 10.0, interval: float = 0.05) -> None:
    """Poll ``check`` until it is true; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if isinstance(result, Awaitable):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)
