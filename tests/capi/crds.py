"""Minimal CAPI core CRDs (``cluster.x-k8s.io/v1beta2`` Cluster and Machine) for tests.

Not CAPI's real schemas: ``spec`` and ``status`` preserve unknown fields, with a status
subresource, which is all a provider's tests need to create Clusters and Machines, set their
status and watch them. ``tests/capi/simulator.py`` drives objects of these kinds the way CAPI
core's Cluster and Machine controllers do.

``install(client)`` creates the CRDs over HTTP (``POST .../customresourcedefinitions``, as
``clusterctl init`` would) and waits until discovery serves both kinds.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from banlieue.runtime.client import Client
from banlieue.runtime.errors import AlreadyExists, ApiError
from banlieue.runtime.kinds import CRD

GROUP = "cluster.x-k8s.io"
VERSION = "v1beta2"


def _crd(kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [{
                "name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                }}},
            }],
        },
    }


CLUSTER_CRD = _crd("Cluster", "clusters")
MACHINE_CRD = _crd("Machine", "machines")
CAPI_CRDS = (CLUSTER_CRD, MACHINE_CRD)


async def install(client: Client, timeout: float = 10.0) -> None:
    """Create ``CAPI_CRDS`` (an existing one is kept) and wait until
    ``GET /apis/cluster.x-k8s.io/v1beta2`` lists ``clusters`` and ``machines``.

    Raises AssertionError when discovery does not serve them within ``timeout`` seconds.
    """
    for crd in CAPI_CRDS:
        try:
            await client.create(CRD, crd)
        except AlreadyExists:
            pass
    deadline = time.monotonic() + timeout
    served: set[str] = set()
    while time.monotonic() < deadline:
        try:
            doc = await client.request("GET", f"/apis/{GROUP}/{VERSION}")
            served = {str(r.get("name")) for r in doc.get("resources") or []}
        except ApiError:
            served = set()
        if {"clusters", "machines"} <= served:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{GROUP}/{VERSION} not served within {timeout} s (served: {sorted(served)})")
