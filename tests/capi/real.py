"""Harness of the real-CAPI acceptance tests: object builders for Cluster API v1beta2 kinds, and
``RealCapi``, which creates them through the API server only after the network rule check
(``banlieue.testing.capi.check_loopback``) and reads back what the real CAPI managers did.

Shapes follow Cluster API v1.14 (``cluster.x-k8s.io/v1beta2``; references are ``{apiGroup, kind,
name}``). Every object is created in the test's namespace.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from banlieue.reconcilers.kinds import (
    CAPI_CLUSTER,
    CAPI_MACHINE,
    VSPHERE_CLUSTER,
    VSPHERE_CLUSTER_TEMPLATE,
    VSPHERE_MACHINE,
    VSPHERE_MACHINE_TEMPLATE,
)
from banlieue.runtime.errors import NotFound
from banlieue.runtime.kinds import SECRET, ResourceKind
from banlieue.testing.capi import CapiEnvironment, check_loopback
from capi.env import CapiEnv, eventually

MACHINE_DEPLOYMENT = ResourceKind("cluster.x-k8s.io", "v1beta2", "MachineDeployment", "machinedeployments")
MACHINE_SET = ResourceKind("cluster.x-k8s.io", "v1beta2", "MachineSet", "machinesets")
KUBEADM_CONTROL_PLANE = ResourceKind("controlplane.cluster.x-k8s.io", "v1beta2", "KubeadmControlPlane", "kubeadmcontrolplanes")
KUBEADM_CONFIG = ResourceKind("bootstrap.cluster.x-k8s.io", "v1beta2", "KubeadmConfig", "kubeadmconfigs")
INFRA_GROUP = "infrastructure.banlieue.io"
CAPI_GROUP = "cluster.x-k8s.io"
LABEL_CLUSTER_NAME = "cluster.x-k8s.io/cluster-name"
LABEL_DEPLOYMENT_NAME = "cluster.x-k8s.io/deployment-name"
LABEL_CONTROL_PLANE = "cluster.x-k8s.io/control-plane"
KINDS: dict[str, ResourceKind] = {k.kind: k for k in (CAPI_CLUSTER, CAPI_MACHINE, MACHINE_DEPLOYMENT, MACHINE_SET, KUBEADM_CONTROL_PLANE,
                                                     KUBEADM_CONFIG, VSPHERE_CLUSTER, VSPHERE_MACHINE, VSPHERE_MACHINE_TEMPLATE, SECRET)}


def ref(kind: str, name: str, group: str = INFRA_GROUP) -> dict[str, str]:
    return {"apiGroup": group, "kind": kind, "name": name}


def cluster(name: str, namespace: str, *, control_plane_ref: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Cluster whose infrastructure is the VSphereCluster of the same name."""
    spec: dict[str, Any] = {"clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
                            "infrastructureRef": ref("VSphereCluster", name)}
    if control_plane_ref is not None:
        spec["controlPlaneRef"] = dict(control_plane_ref)
    return {"apiVersion": CAPI_CLUSTER.api_version, "kind": "Cluster", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def vsphere_cluster(name: str, namespace: str, providers: list[str], endpoint_host: str, endpoint_port: int = 6443) -> dict[str, Any]:
    """A VSphereCluster over ``providers`` with the control-plane endpoint ``host:port`` (a
    loopback address in tests: CAPI's cluster cache dials it)."""
    return {"apiVersion": VSPHERE_CLUSTER.api_version, "kind": "VSphereCluster", "metadata": {"name": name, "namespace": namespace},
            "spec": {"controlPlaneEndpoint": {"host": endpoint_host, "port": endpoint_port}, "providerRefs": [{"name": p} for p in providers]}}


def machine_template(name: str, namespace: str, *, memory_mib: int = 512, provider: str | None = None) -> dict[str, Any]:
    """A VSphereMachineTemplate with abstract storage/network classes (one template serves every
    failure domain of both vCenters); ``provider`` sets ``providerRef``."""
    spec: dict[str, Any] = {"template": "ubuntu-22.04", "numCPUs": 1, "memoryMiB": memory_mib,
                            "disks": [{"name": "os", "sizeGiB": 10, "storageClass": "standard"}],  # the template's size (vcsim 0.56)
                            "network": {"devices": [{"name": "eth0", "networkClass": "default", "dhcp4": True}]},
                            "powerOffMode": "hard"}
    if provider is not None:
        spec["providerRef"] = {"name": provider}
    return {"apiVersion": VSPHERE_MACHINE_TEMPLATE.api_version, "kind": "VSphereMachineTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"template": {"spec": spec}}}


def bootstrap_secret(name: str, namespace: str, cluster_name: str, user_data: str) -> dict[str, Any]:
    """A bootstrap data Secret as a user pre-creates it for ``bootstrap.dataSecretName``
    (CAPI bootstrap contract: keys ``value`` and ``format``)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_CLUSTER_NAME: cluster_name}},
            "data": {"value": base64.b64encode(user_data.encode()).decode(), "format": base64.b64encode(b"cloud-config").decode()}}


def machine_deployment(name: str, namespace: str, cluster_name: str, template: str, *, replicas: int,
                       failure_domain: str | None, data_secret: str) -> dict[str, Any]:
    """A MachineDeployment whose Machines use the pre-created bootstrap Secret ``data_secret``."""
    spec: dict[str, Any] = {"clusterName": cluster_name, "bootstrap": {"dataSecretName": data_secret},
                            "infrastructureRef": ref("VSphereMachineTemplate", template)}
    if failure_domain is not None:
        spec["failureDomain"] = failure_domain
    return {"apiVersion": MACHINE_DEPLOYMENT.api_version, "kind": "MachineDeployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterName": cluster_name, "replicas": replicas,
                     "selector": {"matchLabels": {LABEL_DEPLOYMENT_NAME: name}},
                     "template": {"metadata": {"labels": {LABEL_DEPLOYMENT_NAME: name}}, "spec": spec}}}


@dataclass
class RealCapi:
    """The test's view of the API server that the real CAPI managers and banlieue share."""

    env: CapiEnv
    managers: CapiEnvironment

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``obj`` after the network rule check (its endpoints must be on loopback)."""
        check_loopback([obj])
        return await self.env.client.create(KINDS[obj["kind"]], dict(obj))

    async def get(self, kind: ResourceKind, name: str) -> dict[str, Any]:
        return await self.env.client.get(kind, name, self.env.namespace)

    async def get_or_none(self, kind: ResourceKind, name: str) -> dict[str, Any] | None:
        try:
            return await self.get(kind, name)
        except NotFound:
            return None

    async def list(self, kind: ResourceKind, labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in (labels or {}).items()) or None
        body = await self.env.client.list(kind, self.env.namespace, label_selector=selector)
        return list(body.get("items") or [])

    async def patch(self, kind: ResourceKind, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.env.client.patch(kind, name, self.env.namespace, dict(body))

    async def delete(self, kind: ResourceKind, name: str) -> None:
        await self.env.client.delete(kind, name, self.env.namespace)

    async def delete_clusters(self, timeout: float) -> None:
        """Delete every Cluster of the namespace and wait until they are gone (CAPI deletes
        their MachineDeployments, Machines and infrastructure; banlieue destroys the VMs)."""
        for obj in await self.list(CAPI_CLUSTER):
            await self.env.client.delete(CAPI_CLUSTER, obj["metadata"]["name"], self.env.namespace, ignore_not_found=True)

        async def gone() -> bool:
            return not await self.list(CAPI_CLUSTER)

        await eventually(gone, timeout=timeout, what=f"Clusters of {self.env.namespace} deleted", interval=0.5)

    def logs(self) -> str:
        """The tails of banlieue's and the CAPI managers' logs (for assertion messages)."""
        return f"--- banlieue manager\n{self.env.log_tail(30)}\n{self.managers.log_tails(15)}"


def kubeadm_control_plane(name: str, namespace: str, template: str, *, replicas: int, version: str) -> dict[str, Any]:
    """A KubeadmControlPlane whose Machines clone ``template``; node names from the datasource's
    hostname (what a vSphere guest's cloud-init reads from guestinfo)."""
    node = {"nodeRegistration": {"name": "{{ ds.meta_data.hostname }}"}}
    return {"apiVersion": KUBEADM_CONTROL_PLANE.api_version, "kind": "KubeadmControlPlane", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "version": version,
                     "machineTemplate": {"spec": {"infrastructureRef": ref("VSphereMachineTemplate", template)}},
                     "kubeadmConfigSpec": {"initConfiguration": node, "joinConfiguration": node}}}


CLUSTER_CLASS = ResourceKind("cluster.x-k8s.io", "v1beta2", "ClusterClass", "clusterclasses")
KCP_TEMPLATE = ResourceKind("controlplane.cluster.x-k8s.io", "v1beta2", "KubeadmControlPlaneTemplate", "kubeadmcontrolplanetemplates")
KUBEADM_CONFIG_TEMPLATE = ResourceKind("bootstrap.cluster.x-k8s.io", "v1beta2", "KubeadmConfigTemplate", "kubeadmconfigtemplates")
KINDS.update({k.kind: k for k in (CLUSTER_CLASS, KCP_TEMPLATE, KUBEADM_CONFIG_TEMPLATE, VSPHERE_CLUSTER_TEMPLATE)})


def template_ref(kind: ResourceKind, name: str) -> dict[str, str]:
    """A ClusterClass ``templateRef`` ({apiVersion, kind, name})."""
    return {"apiVersion": kind.api_version, "kind": kind.kind, "name": name}


def cluster_class_objects(name: str, namespace: str, providers: list[str], endpoint_host: str) -> list[dict[str, Any]]:
    """A ClusterClass on banlieue's templates (VSphereClusterTemplate over ``providers`` with the
    control-plane endpoint ``endpoint_host:6443``, one VSphereMachineTemplate for the control
    plane and one for the ``default-worker`` MachineDeployment class), KCP and kubeadm config
    templates, in creation order (templates first)."""
    node = {"nodeRegistration": {"name": "{{ ds.meta_data.hostname }}"}}
    meta = {"namespace": namespace}
    return [
        {"apiVersion": VSPHERE_CLUSTER_TEMPLATE.api_version, "kind": "VSphereClusterTemplate", "metadata": {"name": name, **meta},
         "spec": {"template": {"spec": {"controlPlaneEndpoint": {"host": endpoint_host, "port": 6443},
                                        "providerRefs": [{"name": p} for p in providers]}}}},
        machine_template(f"{name}-control-plane", namespace),
        machine_template(f"{name}-worker", namespace),
        {"apiVersion": KCP_TEMPLATE.api_version, "kind": "KubeadmControlPlaneTemplate", "metadata": {"name": name, **meta},
         "spec": {"template": {"spec": {"kubeadmConfigSpec": {"initConfiguration": node, "joinConfiguration": node}}}}},
        {"apiVersion": KUBEADM_CONFIG_TEMPLATE.api_version, "kind": "KubeadmConfigTemplate", "metadata": {"name": f"{name}-worker", **meta},
         "spec": {"template": {"spec": {"joinConfiguration": node}}}},
        {"apiVersion": CLUSTER_CLASS.api_version, "kind": "ClusterClass", "metadata": {"name": name, **meta},
         "spec": {"infrastructure": {"templateRef": template_ref(VSPHERE_CLUSTER_TEMPLATE, name)},
                  "controlPlane": {"templateRef": template_ref(KCP_TEMPLATE, name),
                                   "machineInfrastructure": {"templateRef": template_ref(VSPHERE_MACHINE_TEMPLATE, f"{name}-control-plane")}},
                  "workers": {"machineDeployments": [{
                      "class": "default-worker",
                      "bootstrap": {"templateRef": template_ref(KUBEADM_CONFIG_TEMPLATE, f"{name}-worker")},
                      "infrastructure": {"templateRef": template_ref(VSPHERE_MACHINE_TEMPLATE, f"{name}-worker")}}]}}},
    ]


def topology_cluster(name: str, namespace: str, class_name: str, version: str, *, control_plane_replicas: int,
                     workers: int) -> dict[str, Any]:
    return {"apiVersion": CAPI_CLUSTER.api_version, "kind": "Cluster", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
                     "topology": {"classRef": {"name": class_name}, "version": version,
                                  "controlPlane": {"replicas": control_plane_replicas},
                                  "workers": {"machineDeployments": [{"class": "default-worker", "name": "md-0", "replicas": workers}]}}}}
