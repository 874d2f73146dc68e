"""Resource kinds, field managers, finalizers and labels the reconcilers use (SPEC §1-§4).

One place for the wire names every reconciler shares, so they are written byte-for-byte once.
"""

from __future__ import annotations

from banlieue.api.kinds import kind_info
from banlieue.runtime.kinds import CONFIG_MAP, SECRET, ResourceKind


def _kind(kind: str, group: str) -> ResourceKind:
    info = kind_info(kind, group)
    return ResourceKind(info.group, info.version, info.kind, info.plural, info.namespaced)


# banlieue.io
PROVIDER = _kind("Provider", "banlieue.io")
VM_CLASS = _kind("VMClass", "banlieue.io")
VM_IMAGE = _kind("VMImage", "banlieue.io")
VIRTUAL_MACHINE = _kind("VirtualMachine", "banlieue.io")
# infrastructure.banlieue.io (CAPI v1beta2 infrastructure provider)
VSPHERE_MACHINE = _kind("VSphereMachine", "infrastructure.banlieue.io")
VSPHERE_MACHINE_TEMPLATE = _kind("VSphereMachineTemplate", "infrastructure.banlieue.io")
VSPHERE_CLUSTER = _kind("VSphereCluster", "infrastructure.banlieue.io")
VSPHERE_CLUSTER_TEMPLATE = _kind("VSphereClusterTemplate", "infrastructure.banlieue.io")
# Cluster API core (read only; CAPI core owns them).
CAPI_CLUSTER = ResourceKind("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters")
CAPI_MACHINE = ResourceKind("cluster.x-k8s.io", "v1beta2", "Machine", "machines")

__all__ = [
    "CAPI_CLUSTER",
    "CAPI_MACHINE",
    "CONFIG_MAP",
    "PROVIDER",
    "SECRET",
    "VIRTUAL_MACHINE",
    "VM_CLASS",
    "VM_IMAGE",
    "VSPHERE_CLUSTER",
    "VSPHERE_CLUSTER_TEMPLATE",
    "VSPHERE_MACHINE",
    "VSPHERE_MACHINE_TEMPLATE",
]

# Field managers (SPEC §4): one per role.
FIELD_MANAGER_CONTROLLER = "banlieue.io/controller"
FIELD_MANAGER_PROVIDER_VSPHERE = "banlieue.io/provider-vsphere"

# Leases (SPEC §4).
LEASE_CONTROLLER = "banlieue-controller"
LEASE_PROVIDER_VSPHERE = "banlieue-provider-vsphere"

# Finalizers (SPEC §2, §3).
FINALIZER_VIRTUAL_MACHINE = "banlieue.io/virtualmachine"
FINALIZER_VSPHERE_MACHINE = "infrastructure.banlieue.io/vspheremachine"
FINALIZER_PROVIDER = "banlieue.io/provider"
"""Held on a Provider while VSphereMachines use it, so their VMs can still be destroyed."""

# Labels and annotations.
LABEL_OWNED_BY = "banlieue.io/owned-by"
LABEL_PROVIDER = "banlieue.io/provider"
ANNOTATION_MIGRATE = "banlieue.io/migrate"
ANNOTATION_CLONE_TASK = "infrastructure.banlieue.io/clone-task"
"""On a VSphereMachine: the managed object id of its latest clone's CloneVM task (``task-123``),
written by the vSphere provider once the task has run 5 s or its outcome became unknown (a
quicker clone costs no write), so
that a restarted manager resolves an in-flight clone by its task rather than by a timeout
(ADR 0012). Not for users."""
CAPI_LABEL_CLUSTER_NAME = "cluster.x-k8s.io/cluster-name"
CAPI_LABEL_WATCH_FILTER = "cluster.x-k8s.io/watch-filter"
CAPI_LABEL_CONTROL_PLANE = "cluster.x-k8s.io/control-plane"
CAPI_ANNOTATION_PAUSED = "cluster.x-k8s.io/paused"
CAPI_ANNOTATION_MANAGED_BY = "cluster.x-k8s.io/managed-by"
"""On an InfraCluster: its infrastructure is managed by another system, which writes its status
(CAPI v1beta2 InfraCluster contract, "externally managed infrastructure"); the provider does
not reconcile it."""

PROVIDER_CLASS_VSPHERE = "vsphere"
