"""Helpers for API-server double tests: a raw HTTP client and a kubernetes-asyncio ApiClient."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest_asyncio
from kubernetes_asyncio import client as k8s

from banlieue.testing.apiserver.fixture import ApiServerHandle

JSON = dict[str, Any]

WIDGET_CRD: JSON = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"],
                  "categories": ["all-widgets"]},
        "versions": [{
            "name": "v1",
            "served": True,
            "storage": True,
            "subresources": {"status": {}},
            "additionalPrinterColumns": [
                {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
            ],
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer", "minimum": 1},
                        "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                        "tags": {"type": "array", "items": {"type": "string"}},
                    }},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string"},
                        "conditions": {"type": "array", "items": {"type": "object", "properties": {
                            "type": {"type": "string"}, "status": {"type": "string"},
                            "reason": {"type": "string"}, "message": {"type": "string"},
                            "lastTransitionTime": {"type": "string"},
                        }}},
                    }},
                },
            }},
        }],
    },
}

GADGET_CRD: JSON = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Cluster",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
        "versions": [{
            "name": "v1",
            "served": True,
            "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        }],
    },
}

WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"


def widget(name: str, size: int = 1, **extra: Any) -> JSON:
    """A Widget body."""
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name, **extra},
            "spec": {"size": size}}


class Http:
    """Raw HTTP to the double: returns (status, parsed JSON body, headers)."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url

    async def req(self, method: str, path: str, body: Any = None, *, ctype: str = "application/json",
                  headers: dict[str, str] | None = None, params: dict[str, str] | None = None) -> tuple[int, Any, Any]:
        data = None
        if body is not None:
            data = body if isinstance(body, str | bytes) else json.dumps(body)
        h = {"Content-Type": ctype, **(headers or {})}
        async with self.session.request(method, self.url + path, data=data, headers=h, params=params) as r:
            text = await r.text()
            try:
                parsed = json.loads(text) if text else None
            except ValueError:
                parsed = text
            return r.status, parsed, r.headers

    async def get(self, path: str, **kw: Any) -> tuple[int, Any, Any]:
        return await self.req("GET", path, **kw)

    async def post(self, path: str, body: Any, **kw: Any) -> tuple[int, Any, Any]:
        return await self.req("POST", path, body, **kw)

    async def put(self, path: str, body: Any, **kw: Any) -> tuple[int, Any, Any]:
        return await self.req("PUT", path, body, **kw)

    async def patch(self, path: str, body: Any, ctype: str, **kw: Any) -> tuple[int, Any, Any]:
        return await self.req("PATCH", path, body, ctype=ctype, **kw)

    async def delete(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any, Any]:
        return await self.req("DELETE", path, body, **kw)

    async def watch_lines(self, path: str, params: dict[str, str], *, max_events: int = 100,
                          stop_after: float = 5.0) -> list[JSON]:
        """Read watch events until the stream ends, ``max_events`` or ``stop_after`` seconds."""
        import asyncio

        out: list[JSON] = []
        async with self.session.get(self.url + path, params={"watch": "1", **params}) as r:
            assert r.status == 200
            try:
                async with asyncio.timeout(stop_after):
                    async for line in r.content:
                        if line.strip():
                            out.append(json.loads(line))
                            if len(out) >= max_events:
                                break
            except TimeoutError:
                pass
        return out


@pytest_asyncio.fixture
async def http(apiserver: ApiServerHandle) -> AsyncIterator[Http]:
    """Raw HTTP client bound to the double."""
    async with aiohttp.ClientSession() as s:
        yield Http(s, apiserver.url)


@pytest_asyncio.fixture
async def kapi(apiserver: ApiServerHandle) -> AsyncIterator[k8s.ApiClient]:
    """A kubernetes-asyncio ApiClient pointed at the double."""
    cfg = k8s.Configuration(host=apiserver.url)
    async with k8s.ApiClient(cfg) as api:
        yield api


@pytest_asyncio.fixture
async def widgets(http: Http) -> Http:
    """The double with the Widget and Gadget CRDs established."""
    for crd in (WIDGET_CRD, GADGET_CRD):
        status, body, _ = await http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        assert status == 201, body
    return http
