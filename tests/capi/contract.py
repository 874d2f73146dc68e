"""Checks that objects satisfy the Cluster API v1beta2 infrastructure provider contracts
(cluster-api book, "Contract rules for InfraMachine" / "InfraCluster"; SPEC §1 and §3 for the
condition rules). Each ``check_*`` raises AssertionError listing every violation as
``<Kind>/<name> (<step>): <field>: expected ..., got ...``; the acceptance tests call them after
every step.

* ``check_crd``: CRD name ``<plural>.<group>``, namespaced, status subresource, category
  ``cluster-api``, label ``cluster.x-k8s.io/v1beta2`` = underscore-delimited served versions.
* ``check_infra_machine``: ``spec.providerID`` (``vsphere://<BIOS UUID>``) string;
  ``spec.failureDomain``/``status.failureDomain`` strings; ``status.initialization`` only
  ``provisioned: bool`` and, when true, a providerID; ``status.addresses`` MachineAddress list;
  conditions metav1-shaped with ``Ready`` always present; no ``status.ready`` /
  ``failureReason`` / ``failureMessage``; on the CAPI path one controller owner, the Machine.
* ``check_infra_cluster``: ``spec.controlPlaneEndpoint`` {host, port 1..65535};
  ``status.initialization.provisioned`` bool; ``status.failureDomains`` a list (1..100, unique
  names) of ``{name, controlPlane: bool, attributes: map<string,string>}`` (not the v1beta1
  map); conditions as above.
* ``check_infra_machine_template``: ``spec.template.spec`` object; ``status.capacity``
  resource quantities as strings; ``status.nodeInfo`` {architecture, operatingSystem} strings.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

INFRA_GROUP = "infrastructure.banlieue.io"
CONTRACT_LABEL = "cluster.x-k8s.io/v1beta2"
ADDRESS_TYPES = frozenset({"Hostname", "ExternalIP", "InternalIP", "ExternalDNS", "InternalDNS"})
CONDITION_STATUSES = frozenset({"True", "False", "Unknown"})
DEPRECATED_STATUS_FIELDS = ("ready", "failureReason", "failureMessage")
# metav1.Condition's validation (k8s.io/apimachinery/pkg/apis/meta/v1/types.go).
CONDITION_TYPE = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
CONDITION_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
PROVIDER_ID = re.compile(r"^vsphere://(?P<uuid>[0-9a-fA-F-]{36})$")
QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[numkMGTPE]|[KMGTPE]i)?$")
CAPI_MACHINE_API_VERSION = "cluster.x-k8s.io/v1beta2"


class _Violations:
    def __init__(self, obj: Mapping[str, Any], step: str) -> None:
        meta = obj.get("metadata") or {}
        self.where = f"{obj.get('kind', '?')}/{meta.get('name', '?')} ({step})"
        self.items: list[str] = []

    def add(self, path: str, expected: str, got: Any) -> None:
        self.items.append(f"{path}: expected {expected}, got {got!r}")

    def raise_if_any(self) -> None:
        if self.items:
            raise AssertionError(f"{self.where} violates the CAPI v1beta2 contract:\n  " + "\n  ".join(self.items))


def _rfc3339(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _check_conditions(v: _Violations, obj: Mapping[str, Any]) -> None:
    status = obj.get("status") or {}
    conds = status.get("conditions")
    if not isinstance(conds, list):
        v.add("status.conditions", "a list with a Ready condition", conds)
        return
    generation = (obj.get("metadata") or {}).get("generation")
    seen: set[str] = set()
    for i, c in enumerate(conds):
        p = f"status.conditions[{i}]"
        if not isinstance(c, Mapping):
            v.add(p, "an object", c)
            continue
        t = c.get("type")
        if not isinstance(t, str) or not CONDITION_TYPE.match(t):
            v.add(f"{p}.type", "a metav1.Condition type", t)
        elif t in seen:
            v.add(f"{p}.type", "unique condition types", t)
        seen.add(str(t))
        if c.get("status") not in CONDITION_STATUSES:
            v.add(f"{p}.status", "True|False|Unknown", c.get("status"))
        if not isinstance(c.get("reason"), str) or not CONDITION_REASON.match(c["reason"]):
            v.add(f"{p}.reason", "a CamelCase reason", c.get("reason"))
        if not isinstance(c.get("message", ""), str):
            v.add(f"{p}.message", "a string", c.get("message"))
        if not _rfc3339(c.get("lastTransitionTime")):
            v.add(f"{p}.lastTransitionTime", "an RFC 3339 time", c.get("lastTransitionTime"))
        og = c.get("observedGeneration")
        if og is not None and (not isinstance(og, int) or og < 0 or (isinstance(generation, int) and og > generation)):
            v.add(f"{p}.observedGeneration", f"an int <= metadata.generation ({generation})", og)
    if "Ready" not in seen:
        v.add("status.conditions", "a Ready condition (always present)", sorted(seen))


def _check_common_status(v: _Violations, obj: Mapping[str, Any]) -> dict[str, Any]:
    status = obj.get("status")
    if not isinstance(status, Mapping):
        v.add("status", "an object written by the provider", status)
        return {}
    for name in DEPRECATED_STATUS_FIELDS:
        if name in status:
            v.add(f"status.{name}", "absent (deprecated v1beta1 field; v1beta2 uses conditions/initialization)", status[name])
    init = status.get("initialization")
    if init is not None:
        if not isinstance(init, Mapping) or set(init) - {"provisioned"} or not isinstance(init.get("provisioned"), bool):
            v.add("status.initialization", "{provisioned: bool}", init)
    og = status.get("observedGeneration")
    if og is not None and not isinstance(og, int):
        v.add("status.observedGeneration", "an int", og)
    _check_conditions(v, obj)
    return dict(status)


def provisioned(obj: Mapping[str, Any]) -> bool:
    """``status.initialization.provisioned`` is true."""
    return ((obj.get("status") or {}).get("initialization") or {}).get("provisioned") is True


def check_crd(crd: Mapping[str, Any], *, step: str = "installed") -> None:
    """CRD-level rules shared by InfraMachine, InfraMachineTemplate and InfraCluster."""
    v = _Violations(crd, step)
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    want_name = f"{names.get('plural')}.{spec.get('group')}"
    if (crd.get("metadata") or {}).get("name") != want_name:
        v.add("metadata.name", want_name, (crd.get("metadata") or {}).get("name"))
    if spec.get("scope") != "Namespaced":
        v.add("spec.scope", "Namespaced", spec.get("scope"))
    if "cluster-api" not in (names.get("categories") or []):
        v.add("spec.names.categories", "to include cluster-api", names.get("categories"))
    served = {ver["name"] for ver in spec.get("versions") or [] if ver.get("served")}
    label = ((crd.get("metadata") or {}).get("labels") or {}).get(CONTRACT_LABEL)
    if not label or not set(label.split("_")) <= served:
        v.add(f"metadata.labels[{CONTRACT_LABEL}]", f"underscore-delimited served versions {sorted(served)}", label)
    for ver in spec.get("versions") or []:
        if ver.get("served") and "status" not in (ver.get("subresources") or {}):
            v.add(f"spec.versions[{ver.get('name')}].subresources.status", "present", ver.get("subresources"))
    v.raise_if_any()


def check_infra_machine(obj: Mapping[str, Any], *, step: str, capi_owned: bool = True) -> None:
    """InfraMachine contract for a VSphereMachine the provider has reconciled at least once.

    ``capi_owned``: on the CAPI path, a single controller owner reference to a
    ``cluster.x-k8s.io/v1beta2`` Machine and the ``cluster.x-k8s.io/cluster-name`` label.
    """
    v = _Violations(obj, step)
    if obj.get("apiVersion") != f"{INFRA_GROUP}/v1alpha1" or obj.get("kind") != "VSphereMachine":
        v.add("apiVersion/kind", f"{INFRA_GROUP}/v1alpha1 VSphereMachine", (obj.get("apiVersion"), obj.get("kind")))
    meta = obj.get("metadata") or {}
    if not meta.get("namespace"):
        v.add("metadata.namespace", "set (namespace-scoped)", meta.get("namespace"))
    spec = obj.get("spec") or {}
    pid = spec.get("providerID")
    if pid is not None:
        match = PROVIDER_ID.match(pid) if isinstance(pid, str) else None
        if match is None:
            v.add("spec.providerID", "vsphere://<BIOS UUID>", pid)
        else:
            try:
                uuid.UUID(match["uuid"])
            except ValueError:
                v.add("spec.providerID", "a UUID after vsphere://", pid)
    for path, value in (("spec.failureDomain", spec.get("failureDomain")), ("status.failureDomain", (obj.get("status") or {}).get("failureDomain"))):
        if value is not None and (not isinstance(value, str) or not 1 <= len(value) <= 256):
            v.add(path, "a string of 1..256 characters", value)
    status = _check_common_status(v, obj)
    if provisioned(obj) and not pid:
        v.add("spec.providerID", "set once status.initialization.provisioned is true", pid)
    addrs = status.get("addresses")
    if addrs is not None:
        if not isinstance(addrs, list):
            v.add("status.addresses", "a list of MachineAddress", addrs)
        else:
            for i, a in enumerate(addrs):
                if not isinstance(a, Mapping) or a.get("type") not in ADDRESS_TYPES or not isinstance(a.get("address"), str) or not a["address"]:
                    v.add(f"status.addresses[{i}]", f"{{type in {sorted(ADDRESS_TYPES)}, address}}", a)
    if capi_owned:
        controllers = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
        if len(controllers) != 1 or controllers[0].get("kind") != "Machine" or controllers[0].get("apiVersion") != CAPI_MACHINE_API_VERSION:
            v.add("metadata.ownerReferences", "exactly one controller: a cluster.x-k8s.io/v1beta2 Machine", controllers)
        if not (meta.get("labels") or {}).get("cluster.x-k8s.io/cluster-name"):
            v.add("metadata.labels[cluster.x-k8s.io/cluster-name]", "set", meta.get("labels"))
    v.raise_if_any()


def check_infra_cluster(obj: Mapping[str, Any], *, step: str) -> None:
    """InfraCluster contract for a VSphereCluster the provider has reconciled at least once."""
    v = _Violations(obj, step)
    if obj.get("apiVersion") != f"{INFRA_GROUP}/v1alpha1" or obj.get("kind") != "VSphereCluster":
        v.add("apiVersion/kind", f"{INFRA_GROUP}/v1alpha1 VSphereCluster", (obj.get("apiVersion"), obj.get("kind")))
    endpoint = (obj.get("spec") or {}).get("controlPlaneEndpoint")
    if endpoint is not None and (not isinstance(endpoint, Mapping) or not isinstance(endpoint.get("host"), str)
                                 or not isinstance(endpoint.get("port"), int) or not 1 <= endpoint["port"] <= 65535):
        v.add("spec.controlPlaneEndpoint", "{host: string, port: 1..65535}", endpoint)
    status = _check_common_status(v, obj)
    fds = status.get("failureDomains")
    if fds is not None:
        if not isinstance(fds, list):
            v.add("status.failureDomains", "a v1beta2 list [{name, controlPlane, attributes}] (not the v1beta1 map)", type(fds).__name__)
        else:
            if not 1 <= len(fds) <= 100:
                v.add("status.failureDomains", "1..100 items when set", len(fds))
            names = [fd.get("name") for fd in fds if isinstance(fd, Mapping)]
            if len(set(names)) != len(names):
                v.add("status.failureDomains[].name", "unique (listMapKey name)", names)
            for i, fd in enumerate(fds):
                p = f"status.failureDomains[{i}]"
                if not isinstance(fd, Mapping) or set(fd) - {"name", "controlPlane", "attributes"}:
                    v.add(p, "only {name, controlPlane, attributes}", fd)
                    continue
                if not isinstance(fd.get("name"), str) or not 1 <= len(fd["name"]) <= 256:
                    v.add(f"{p}.name", "a string of 1..256 characters", fd.get("name"))
                if "controlPlane" in fd and not isinstance(fd["controlPlane"], bool):
                    v.add(f"{p}.controlPlane", "a bool", fd["controlPlane"])
                attrs = fd.get("attributes")
                if attrs is not None and (not isinstance(attrs, Mapping) or not all(isinstance(k, str) and isinstance(x, str) for k, x in attrs.items())):
                    v.add(f"{p}.attributes", "map<string,string>", attrs)
    v.raise_if_any()


def check_infra_machine_template(obj: Mapping[str, Any], *, step: str) -> None:
    """InfraMachineTemplate contract (and autoscaling-from-zero status when present)."""
    v = _Violations(obj, step)
    template = (obj.get("spec") or {}).get("template")
    if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
        v.add("spec.template.spec", "an object (the VSphereMachine spec to clone)", template)
    status = obj.get("status") or {}
    capacity = status.get("capacity")
    # A corev1.ResourceList as Go serialises it: every quantity a string. The cluster autoscaler
    # reads capacity and nodeInfo with unstructured.NestedStringMap, which rejects a JSON number
    # and then ignores the whole map (clusterapi_unstructured.go).
    if capacity is not None and (not isinstance(capacity, Mapping)
                                 or not all(isinstance(q, str) and QUANTITY.match(q) for q in capacity.values())):
        v.add("status.capacity", "map<resource name, quantity string>", capacity)
    node_info = status.get("nodeInfo")
    if node_info is not None and (not isinstance(node_info, Mapping) or set(node_info) - {"architecture", "operatingSystem"}
                                  or not all(isinstance(x, str) for x in node_info.values())):
        v.add("status.nodeInfo", "{architecture, operatingSystem} strings", node_info)
    v.raise_if_any()
