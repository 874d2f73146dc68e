"""Minimal CAPI core CRDs (``cluster.x-k8s.io/v1beta2`` Cluster and Machine) for tests.

Not CAPI's real schemas: ``spec`` and ``status`` preserve unknown fields, with a status
subresource, which is all a provider's tests need to create Clusters and Machines, set their
status and watch them. A fuller CAPI-core simulator may replace this module.
"""

from __future__ import annotations

from typing import Any

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
