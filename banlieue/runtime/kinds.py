"""Resource kinds: what the runtime needs to know to list, watch and write one kind.

The descriptor plays the part of client-go's GroupVersionResource plus the RESTMapper answer
(kind, namespaced) for one resource.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ResourceKind:
    """One API resource: ``group`` ("" for the core group), ``version``, ``kind``, ``plural``.

    ``namespaced`` is False for cluster-scoped kinds (VMClass, VMImage, Namespace).
    """

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``apiVersion`` as written in objects: ``v1`` for core, else ``<group>/<version>``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_kind(self) -> tuple[str, str]:
        """(group, kind): what EnqueueRequestForOwner matches owner references on."""
        return (self.group, self.kind)

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The REST path: ``/api/v1/...`` or ``/apis/<group>/<version>/...``.

        ``namespace`` is ignored for cluster-scoped kinds; ``namespace=None`` on a namespaced kind
        gives the all-namespaces collection path.
        """
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base

    def __str__(self) -> str:
        return f"{self.plural}.{self.group or 'core'}/{self.version}"


# Core kinds every controller may use.
NAMESPACE = ResourceKind("", "v1", "Namespace", "namespaces", namespaced=False)
SECRET = ResourceKind("", "v1", "Secret", "secrets")
CONFIG_MAP = ResourceKind("", "v1", "ConfigMap", "configmaps")
CORE_EVENT = ResourceKind("", "v1", "Event", "events")
EVENT = ResourceKind("events.k8s.io", "v1", "Event", "events")
LEASE = ResourceKind("coordination.k8s.io", "v1", "Lease", "leases")
CRD = ResourceKind("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False)
